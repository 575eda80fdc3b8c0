"""EchoMQ's benchmarks, one command: ``.venv/bin/python -m bench``.

    .venv/bin/python -m bench                         the documented run: writes docs/benchmarks.md
                                                      and bench/results/latest.json
    .venv/bin/python -m bench --only e2e              some sections: bench/results/partial.{json,md}
    .venv/bin/python -m bench --max-jobs 1000000      the growth table up to 10⁶ queued jobs
    .venv/bin/python -m bench --peers none            EchoMQ only (peers are optional extras)
    .venv/bin/python -m bench --smoke                 seconds: every part once, tiny (the test suite's smoke)

Sections: ``cost`` (server µs per verb and lifecycle: wire 6, wire 4, the primitive
floor), ``growth`` (cost and memory at 10³ … --max-jobs queued jobs), ``memory`` (bytes per
queued job for each candidate id format, and BullMQ (Node)'s when it is among --peers), ``e2e``
(throughput with 1, 2, 4 worker processes, bulk enqueue, idle pick-up latency, for
EchoMQ on each wire and for every peer), ``idle`` (one idle ``emq worker`` per wire, and at
--worker-before: pick-up, delayed-job lateness, idle commands/s; bench/idle.py), ``producers`` (the
asyncio client's enqueue throughput, 50 concurrent tasks, next to the sync ``enqueue_many``).
Everything runs on one embedded
valkey-server (with trafikey loaded when it is built); see bench/common.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

from . import bus, cost, dashboard_cost, e2e, growth, idle, memory, producers, report
from .common import ROOT, TRAFIKEY_SOURCE, BenchServer, client_versions, machine, say, trafikey_module
from .systems import ALL_PEERS, check_revision, echomq_at, echomq_system, echomq_tree, emq_worker_available, peers

SECTIONS = ("cost", "bus", "growth", "memory", "e2e", "idle", "dashboard", "producers")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(SECTIONS), help="sections to run, comma-separated: " + ",".join(SECTIONS))
    p.add_argument("--rounds", type=int, default=9, help="rounds of the cost section")
    p.add_argument("--jobs", type=int, default=5000, help="calls per verb phase in the cost section")
    p.add_argument("--aof-rounds", type=int, default=5,
                   help="rounds of the cost section again with the append-only file on (0: skip)")
    p.add_argument("--bus-rounds", type=int, default=5, help="rounds of the bus section (results and events)")
    p.add_argument("--bus-wake", type=int, default=200, help="result waits timed in the bus section")
    p.add_argument("--bus-before", default="", metavar="REV",
                   help="a git revision before the bus: wire 4 also runs the lifecycle with its scripts")
    p.add_argument("--bus-before-module", default="", metavar="SO",
                   help="a trafikey .so built before the bus: wire 6 also runs the lifecycle on it")
    p.add_argument("--max-jobs", type=int, default=100_000, help="largest queue depth in the growth section")
    p.add_argument("--growth-rounds", type=int, default=3)
    p.add_argument("--memory-jobs", type=int, default=100_000, help="queued jobs per reading in the memory section")
    p.add_argument("--growth-m", type=int, default=2000, help="lifecycles measured at each depth")
    p.add_argument("--e2e-jobs", type=int, default=20_000, help="jobs per throughput run (at most)")
    p.add_argument("--e2e-rounds", type=int, default=2)
    p.add_argument("--bulk-jobs", type=int, default=50_000)
    p.add_argument("--window", type=float, default=8.0, help="seconds a throughput run may take before it is "
                                                               "timed on what it did")
    p.add_argument("--processes", default="1,2,4", help="worker process counts")
    p.add_argument("--producer-jobs", type=int, default=20_000, help="jobs per producers run (sync and asyncio)")
    p.add_argument("--producer-rounds", type=int, default=3)
    p.add_argument("--producers-before", default="", metavar="REV",
                   help="a git revision: the asyncio producers also run with the echomq package as of it")
    p.add_argument("--latency-jobs", type=int, default=40)
    p.add_argument("--latency-gap-ms", default="20,300", help="idle gaps between latency jobs, LO,HI ms")
    p.add_argument("--peers", default=",".join(ALL_PEERS), help="comma-separated, or 'none'")
    p.add_argument("--modes", default="emq,batch,batch-kept,fused",
                   help="how EchoMQ's workers run: emq (the worker), emq-noresult, emq-record, loop, batch, batch-kept, fused "
                        "(see bench/drive_echomq.py)")
    p.add_argument("--latency-modes", default="emq-idle50",
                   help="extra EchoMQ worker modes measured for pick-up latency only (emq-idleN: --idle-max-ms N)")
    p.add_argument("--worker-before", default="",
                   help="a git revision: also run emq worker with the echomq package as of it (a before/after)")
    p.add_argument("--delay-ms", type=int, default=200, help="how far ahead the idle section schedules its jobs")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="how long the idle section counts commands")
    p.add_argument("--wires", default="6,4")
    p.add_argument("--watch-seconds", type=float, default=20.0,
                   help="seconds of each dashboard-cost window (two queue discoveries at the default 20)")
    p.add_argument("--watch-rounds", type=int, default=2)
    p.add_argument("--watch-depth", type=int, default=10_000, help="pending jobs on the node the dashboard watches")
    p.add_argument("--watch-queues", default="1,10", help="queue counts the dashboard watches")
    p.add_argument("--json", help="the results file (default: bench/results/latest.json; "
                   "a run of some sections only: bench/results/partial.json)")
    p.add_argument("--out", help="the page (default: docs/benchmarks.md; a run of some sections only: "
                   "bench/results/partial.md, so it never replaces the documented page)")
    p.add_argument("--baseline", help="an earlier results file: adds a before/after table")
    p.add_argument("--smoke", action="store_true", help="tiny everything, for the test suite (seconds)")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.jobs, args.max_jobs, args.growth_rounds, args.growth_m = 1, 50, 1000, 1, 50
        args.memory_jobs = 200
        args.aof_rounds = 1
        args.bus_rounds, args.bus_wake = 1, 5
        args.e2e_jobs, args.e2e_rounds, args.bulk_jobs, args.processes = 200, 1, 200, "1"
        args.producer_jobs, args.producer_rounds = 200, 1
        args.latency_jobs, args.latency_gap_ms, args.window = 3, "5,20", 20.0
        args.delay_ms, args.idle_seconds = 20, 0.5
        args.watch_seconds, args.watch_rounds, args.watch_depth, args.watch_queues = 1.0, 1, 100, "2"
        given = " ".join(argv if argv is not None else sys.argv[1:])
        if "--peers" not in given:
            args.peers = "none"
        if "--modes" not in given:
            args.modes = "batch,batch-kept"
        if "--latency-modes" not in given:
            args.latency_modes = ""
    partial = set(args.only.split(",")) != set(SECTIONS)
    results_dir = ROOT / "bench" / "results"
    args.json = args.json or str(results_dir / ("partial.json" if partial else "latest.json"))
    args.out = args.out or str(results_dir / "partial.md" if partial else ROOT / "docs" / "benchmarks.md")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    args.json, args.out = str(Path(args.json).resolve()), str(Path(args.out).resolve())
    started = time.time()
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    command = "cd /work/main && .venv/bin/python -m bench " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.worker_before and {"e2e", "idle"} & set(sections):
        if (why := check_revision(args.worker_before)) is not None:
            print(f"--worker-before {args.worker_before}: {why}", file=sys.stderr)
            return 2
    module, why_not = trafikey_module()
    wires = [int(w) for w in args.wires.split(",") if w]
    if module is None and 6 in wires:
        say(f"wire 6 skipped: {why_not}")
        wires.remove(6)
    executors = [{6: "native", 4: "scripts"}[w] for w in wires] + ["floor"]
    results: dict = {"meta": {
        "command": command.strip(), "args": vars(args), "machine": machine(), "clients": client_versions(),
        "trafikey": module, "trafikey_skipped": why_not,
        "trafikey_source": str(Path(TRAFIKEY_SOURCE[0]).relative_to(ROOT)) if module and
        Path(TRAFIKEY_SOURCE[0]).is_relative_to(ROOT) else TRAFIKEY_SOURCE[0],
        "trafikey_sha256": hashlib.sha256(Path(module).read_bytes()).hexdigest()[:16] if module else "", "results_path": str(Path(args.json).relative_to(ROOT))
        if Path(args.json).is_relative_to(ROOT) else args.json}}

    with BenchServer(module) as server:
        results["meta"]["valkey"] = server.version()
        if "cost" in sections:
            results["cost"] = cost.run(server, executors=executors, n=args.jobs, rounds=args.rounds)
            if args.aof_rounds:
                # with persistence on, every executor's writes are really propagated (without a replica
                # or an AOF the server drops them, which flatters whoever prepares the least)
                server.set_aof(True)
                try:
                    results["cost_aof"] = cost.run(server, executors=executors, n=args.jobs, rounds=args.aof_rounds)
                finally:
                    server.set_aof(False)
        if "bus" in sections:
            results["bus"] = bus.run(server, wires=wires, n=args.jobs, rounds=args.bus_rounds, wake_m=args.bus_wake,
                                     before_rev=args.bus_before, before_module=args.bus_before_module)
        if "growth" in sections:
            sizes = [s for s in (1_000, 10_000, 100_000, 1_000_000) if s <= args.max_jobs] or [args.max_jobs]
            results["growth"] = growth.run(server, executors=executors, sizes=sizes, m=args.growth_m,
                                           rounds=args.growth_rounds)
        if "memory" in sections:
            results["memory"] = memory.run(server, wires=wires, n=args.memory_jobs,
                                           with_bullmq=any(p.startswith("bullmq-node") for p in args.peers.split(",")))
        if "e2e" in sections:
            modes = [m for m in args.modes.split(",") if m]
            have_worker, why = emq_worker_available()
            if not have_worker and "emq" in modes:
                say(f"emq worker not available ({why}): measuring the bare loop instead, labelled so")
                modes = [m if m != "emq" else "loop" for m in modes]
            systems = [echomq_system(w, mode) for w in wires for mode in dict.fromkeys(modes)]
            if args.worker_before and have_worker:
                systems += [echomq_at(args.worker_before, w) for w in wires]
            wanted = [] if args.peers == "none" else [p for p in args.peers.split(",") if p]
            peer_systems, skipped = peers(wanted)
            results["peers_skipped"] = skipped
            lo, hi = (int(x) for x in args.latency_gap_ms.split(","))
            lat_modes = [m for m in args.latency_modes.split(",") if m and have_worker]
            results["e2e"] = e2e.run(server, systems + peer_systems,
                                     processes=[int(k) for k in args.processes.split(",")], n=args.e2e_jobs,
                                     bulk_n=args.bulk_jobs, rounds=args.e2e_rounds, lat_m=args.latency_jobs,
                                     lat_lo=lo, lat_hi=hi, window_s=args.window,
                                     latency_only=[echomq_system(w, m) for w in wires for m in lat_modes])
        if "idle" in sections:
            have_worker, why = emq_worker_available()
            if have_worker:
                lo, hi = (int(x) for x in args.latency_gap_ms.split(","))
                systems = [echomq_system(w, "emq") for w in wires]
                if args.worker_before:
                    systems += [echomq_at(args.worker_before, w) for w in wires]
                results["idle"] = idle.run(server, systems, m=args.latency_jobs, lo=lo, hi=hi,
                                           delay_ms=args.delay_ms, idle_s=args.idle_seconds)
            else:
                say(f"idle section skipped: {why}")
        if "dashboard" in sections:
            results["dashboard"] = dashboard_cost.run(
                server, wires=wires, queue_counts=[int(q) for q in args.watch_queues.split(",") if q],
                depth=args.watch_depth, seconds=args.watch_seconds, rounds=args.watch_rounds)
        if "producers" in sections:
            before, short = echomq_tree(args.producers_before) if args.producers_before else (None, "")
            results["producers"] = producers.run(server, wires=wires, n=args.producer_jobs,
                                                 rounds=args.producer_rounds, before=before, before_label=short)
    results["elapsed_s"] = time.time() - started
    results["headline"] = report.headline(results)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    baseline = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report.render(results, baseline))
    say(f"wrote {args.out} and {args.json} in {results['elapsed_s']:.0f}s")
    for key, value in results["headline"].items():
        say(f"  {key}: {value if not isinstance(value, float) else round(value, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
