"""The benchmark harness still runs end to end (tiny, no peers): never a timed assertion.

`python -m bench --smoke` runs every section once on a few jobs and writes its results
file and page; this checks that both come out whole, not how fast anything was.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmarks' short runs

ROOT = Path(__file__).resolve().parent.parent


def test_bench_smoke(tmp_path):
    results, page = tmp_path / "results.json", tmp_path / "benchmarks.md"
    done = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--json", str(results), "--out", str(page)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(results.read_text())
    executors = set(data["cost"]["table"])
    assert {"scripts", "floor"} <= executors
    for name in executors:
        assert data["cost"]["table"][name]["lifecycle"]["usec"]["median"] > 0
    assert "scripts/floor:usec" in data["cost"]["ratios"]
    assert data["growth"]["table"]["scripts"]["1000"]["memory_per_job_bytes"] > 0
    systems = data["e2e"]["table"]
    assert systems and all("failed" not in row for row in systems.values()), systems
    assert any(name.endswith("(bare loop, batched, results kept)") for name in systems), systems
    assert all(row["throughput:1"]["median"] > 0 and row["latency"]["n"] == 3 for row in systems.values())
    assert all(row["worker_cpu_us_per_job:1"]["median"] > 0 for row in systems.values())  # read from /proc
    idle = data["idle"]["table"]
    assert idle and all("failed" not in row and row["pickup"]["n"] == 3 and row["lateness"]["n"] == 3
                        and row["idle_commands_per_s"] >= 0 for row in idle.values()), idle
    bus = data["bus"]
    assert bus["table"]["4:off"]["lifecycle"]["median"] > 0 and "4:both/off" in bus["ratios"]
    assert bus["wake"]["4"]["n"] == 5 and bus["wake"]["4"]["p99_ms"] > 0
    text = page.read_text()
    assert "## Server cost per job lifecycle" in text and "## Following a job" in text and "## End to end" in text
    assert "--smoke" in text and "## An idle worker" in text
    producers = data["producers"]["table"]
    assert producers and all(row["async_tasks"]["median"] > 0 and row["sync/async_tasks"]["median"] > 0
                             for row in producers.values())
    assert "## Producers: asyncio next to sync" in text


def test_a_worker_before_revision_that_cannot_run_is_refused_before_the_run(tmp_path):
    # HEAD's echomq runs this bench's tasks; an unknown revision is refused in a second, with its
    # reason, instead of failing the worker sections half an hour into a full run
    from bench.systems import check_revision

    assert check_revision("HEAD") is None
    done = subprocess.run([sys.executable, "-m", "bench", "--smoke", "--only", "e2e", "--worker-before", "no-such-rev",
                           "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "p.md")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--worker-before no-such-rev: git cannot extract" in done.stderr
    assert not (tmp_path / "r.json").exists()  # nothing ran


def test_the_waiting_handlers_bench_runs_now_the_bare_threads_and_a_revision(tmp_path):
    results = tmp_path / "io.json"
    done = subprocess.run([sys.executable, "-m", "bench.io_handlers", "--before", "HEAD", "--rounds", "1",
                           "--jobs", "40", "--waits-ms", "0.5", "--json", str(results)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = json.loads(results.read_text())["runs"]
    assert set(runs) == {"now", "bare threads", f"@ {head_short()}"}
    assert all(len(rates["0.5"]) == 1 and rates["0.5"][0] > 0 for rates in runs.values())
    assert "| 0.5 ms |" in done.stdout and "now / bare threads" in done.stdout


def test_the_recovery_bench_kills_a_worker_and_times_its_jobs_run_again(tmp_path):
    results = tmp_path / "recovery.json"
    done = subprocess.run([sys.executable, "-m", "bench.recovery", "--rounds", "1", "--jobs", "300", "--wires", "4",
                           "--loads-ms", "20", "--idle-s", "0", "--json", str(results)],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(results.read_text())
    (took,) = found["runs"]["4/20/now"]
    assert took > 0 and found["orphans"]["4/20/now"][0] > 0  # the dead worker held jobs, and they ran again
    assert "| 4 | busy throughout (jobs of 20 ms) |" in done.stdout


def head_short() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_wire_ratio_bench_runs_and_says_where_the_time_goes(tmp_path):
    """bench/wire_ratio.py (issue 42's figure), tiny: both wires' runs, their ratio, each phase's commands."""
    out = tmp_path / "ratio.json"
    done = subprocess.run([sys.executable, "-m", "bench.wire_ratio", "--rounds", "1", "--jobs", "300",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    (ratio,) = data["ratios"].values()
    assert ratio["median"] > 0 and len(data["cpu_us_per_job"]) == 2
    for name, phases in data["attribution"].items():
        assert set(phases) == {"enqueue", "claim", "settle"}, name
        wire4 = "wire 4" in name
        scripts = {c for phase in phases.values() for c in phase["commands"] if c.startswith("script ")}
        assert scripts == ({"script enqueues", "script claims", "script publishes"} if wire4 else set()), name


def test_the_bulk_enqueue_and_result_layout_benches_run(tmp_path):
    """bench/bulk_enqueue.py (every shape, both wires, each row's ratio to the default shape) and
    bench/result_layout.py (both layouts, both ways of writing them), tiny."""
    bulk, layout = tmp_path / "bulk.json", tmp_path / "layout.json"
    for argv in (["bench.bulk_enqueue", "--jobs", "300", "--rounds", "1", "--batches", "100,500", "--depths", "1,0",
                  "--json", str(bulk)],
                 ["bench.result_layout", "--records", "200", "--rounds", "1", "--json", str(layout)]):
        done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
    shapes = json.loads(bulk.read_text())["table"]
    assert {(row["batch"], row["depth"]) for row in shapes.values()} >= {(100, 1), (100, 0), (500, 1), (500, 0)}
    assert all(row["jobs_per_s"]["median"] > 0 for row in shapes.values())
    ways = json.loads(layout.read_text())["table"]
    assert len(ways) == 4 and all(row[m]["n"] == 1 for row in ways.values() for m in ("cpu_us", "usec", "bytes"))


def test_a_built_peer_program_takes_its_command_first():
    """asynq's driver is a Go program (bench/peers/asynq): argv is the program, then the command."""
    from bench.systems import System

    system = System("asynq (Go), concurrency 10", "peer", None, ["/peers/asynq-bench"])
    assert system.argv("enqueue", "redis://h:1", "bench", 5) == ["/peers/asynq-bench", "enqueue", "redis://h:1",
                                                                "bench", "5"]


def test_the_canvas_cost_bench_runs_a_chain_and_jobs_alone_on_both_wires():
    """bench/canvas_cost.py (docs/lanes-and-flows.md "Chains and groups", its cost), tiny."""
    done = subprocess.run([sys.executable, "-m", "bench.canvas_cost", "--steps", "5", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if "calls," in line]
    assert len(said) == 4 and all(" a step " in line for line in said), said


def test_the_worker_instructions_bench_reads_cpu_and_looks_natively_on_both_wires():
    """bench/worker_instructions.py --native (no valgrind), tiny: each mode's CPU a job and, for the
    worker, its control thread's looks a job (a figure of wall time that instructions do not show)."""
    figure = r"(-?[\d.]+)"
    for wire in (4, 6):
        done = subprocess.run([sys.executable, "-m", "bench.worker_instructions", "--native", "--modes", "worker,batch-kept",
                               "--jobs", "400", "--base", "100", "--wire", str(wire)],
                              cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        worker = re.search(rf"^worker: {figure} µs CPU a job natively \(wire {wire}\), {figure} of them on the main "
                           rf"thread, {figure} looks a job$", done.stdout, re.M)
        loop = re.search(rf"^batch-kept: {figure} µs CPU a job natively \(wire {wire}\), {figure} of them on the main "
                         r"thread$", done.stdout, re.M)
        assert worker and loop, done.stdout  # (figures, not bounds: a tiny run's differences may read below 0)
