"""Idle command rate of one `emq worker`, and no-op job throughput with 1 and 2 worker processes.

    .venv/bin/python bench/worker_idle_and_throughput.py [--jobs 20000] [--idle-seconds 5] [--wire 4 --wire 6]

Each wire gets its own embedded Valkey (wire 6 with trafikey; skipped with a note if the
module is unusable). Figures, not assertions:

* **idle**: one worker on an empty queue, after its back-off has settled, for a few
  seconds: INFO commandstats delta. "sent" counts the commands a client sends (EVALSHA
  and the pause read HGET on wire 4, EMQ.* on wire 6); "in server" adds the calls a
  script or module verb makes inside the server (both count in commandstats).
* **throughput**: N jobs enqueued while the queue is paused, the workers started and
  idling, then RESUME; jobs/s from resume until the completed metric reaches N.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from echomq import App, EmbeddedServer, EchoMQError, Queue, connect, module_path  # noqa: E402

app = App("bench")
IDLE_QUEUE = "idle"


def noop(payload):
    """The job does nothing: what is measured is the queue's own cost per job."""


app.handler(IDLE_QUEUE, noop)

SENT_PREFIXES = ("cmdstat_EMQ.",)
SENT_NAMES = ("cmdstat_evalsha", "cmdstat_hget")


def commandstats(client) -> tuple[int, int]:
    """(commands clients sent, all calls in the server) so far, leaving out INFO itself."""
    stats = client.info("commandstats")
    sent = sum(v["calls"] for k, v in stats.items() if k in SENT_NAMES or k.startswith(SENT_PREFIXES))
    total = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config|resetstat"))
    return sent, total


def start_workers(url: str, wire: int, queue: str, count: int, *args: str) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return [subprocess.Popen([sys.executable, "-m", "echomq.cli", "worker", "bench.worker_idle_and_throughput:app",
                              "--url", url, "--wire", str(wire), "-q", queue, "--log-level", "warning", *args],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            for _ in range(count)]


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.returncode != 0:
            raise SystemExit(f"a worker exited with {proc.returncode}: {proc.stderr.read().decode()}")
        proc.stderr.close()


def wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def connected_workers(client, before: int, count: int) -> bool:
    """True once ``count`` more clients than ``before`` are connected (the workers are up)."""
    return len(client.client_list()) >= before + count


def measure_idle(server: EmbeddedServer, wire: int, seconds: float) -> dict:
    with server.client() as client:
        base = len(client.client_list())
        procs = start_workers(server.url, wire, IDLE_QUEUE, 1)
        wait_for(lambda: connected_workers(client, base, 1), 20, "the worker to connect")
        time.sleep(3.0)  # the bench's own settling time: let the idle back-off reach its cap
        sent0, total0 = commandstats(client)
        start = time.monotonic()
        time.sleep(seconds)
        sent1, total1 = commandstats(client)
        elapsed = time.monotonic() - start
        stop_workers(procs)
    return {"sent_per_s": (sent1 - sent0) / elapsed, "in_server_per_s": (total1 - total0) / elapsed}


# The worker processes import this module and serve every queue its app names; a throughput
# run's queue is added from the environment so each run has a fresh queue.
if os.environ.get("EMQ_BENCH_QUEUE"):
    app.handler(os.environ["EMQ_BENCH_QUEUE"], noop)


def start_server(wire: int) -> EmbeddedServer | None:
    if wire == 4:
        return EmbeddedServer(brand=4).start()
    try:
        server = EmbeddedServer(module=module_path(), brand=6).start()
    except EchoMQError as exc:
        print(f"wire 6 skipped: {exc}", file=sys.stderr)
        return None
    try:
        connect(server.url, wire=6).close()
    except EchoMQError as exc:
        server.cleanup()
        print(f"wire 6 skipped: {exc}", file=sys.stderr)
        return None
    return server


@click.command()
@click.option("--wire", "wires", type=click.Choice(["4", "6"]), multiple=True, help="default: both")
@click.option("--jobs", type=click.IntRange(100), default=20_000, show_default=True)
@click.option("--idle-seconds", type=click.FloatRange(1), default=5.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(1), default=32, show_default=True)
@click.option("--rounds", type=click.IntRange(1), default=3, show_default=True,
              help="throughput runs per case, interleaved; the median and the best are reported")
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
def main(wires: tuple[str, ...], jobs: int, idle_seconds: float, concurrency: int, rounds: int,
         as_json: bool) -> None:
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "wires": {}}
    for wire in [int(w) for w in (wires or ("4", "6"))]:
        server = start_server(wire)
        if server is None:
            continue
        with server:
            idle = measure_idle(server, wire, idle_seconds)
            rates: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(rounds):  # interleaved, so a busy moment of the machine falls on both cases
                for processes in (1, 2):
                    os.environ["EMQ_BENCH_QUEUE"] = f"noop-{processes}-{time.monotonic_ns()}"
                    rates[processes].append(measure_throughput(server, wire, processes, jobs, concurrency)["jobs_per_s"])
            runs = [{"processes": p, "jobs": jobs, "jobs_per_s": sorted(r), "median": statistics.median(r),
                     "best": max(r)} for p, r in rates.items()]
            results["wires"][wire] = {"idle": idle, "throughput": runs}
        if not as_json:
            print(f"wire {wire}: idle worker sends {idle['sent_per_s']:.2f} commands/s "
                  f"({idle['in_server_per_s']:.2f} calls/s inside the server)")
            for run in runs:
                print(f"wire {wire}: {run['processes']} worker process(es) x {concurrency}, {jobs} no-op jobs: "
                      f"median {run['median']:.0f} jobs/s, best {run['best']:.0f} "
                      f"(runs: {', '.join(f'{r:.0f}' for r in run['jobs_per_s'])})")
    if as_json:
        print(json.dumps(results, indent=2))
    else:
        print(results["machine"], f"(load average {os.getloadavg()[0]:.1f} at the end)")


def measure_throughput(server: EmbeddedServer, wire: int, processes: int, jobs: int, concurrency: int) -> dict:
    """One throughput run on the queue named by EMQ_BENCH_QUEUE (the workers inherit it)."""
    name = os.environ["EMQ_BENCH_QUEUE"]
    with connect(server.url, wire=wire) as conn, server.client() as client:
        queue = Queue(conn, name)
        queue.pause()
        for start in range(0, jobs, 5000):
            queue.enqueue_many([{"n": n} for n in range(start, min(jobs, start + 5000))])
        base = len(client.client_list())
        procs = start_workers(server.url, wire, name, processes, "-c", str(concurrency), "--claim-batch", "16",
                              "--idle-max-ms", "10")
        wait_for(lambda: connected_workers(client, base, processes), 20, "the workers to connect")
        began = time.monotonic()
        queue.resume()
        wait_for(lambda: queue.metrics()["completed"] >= jobs, 300, f"{jobs} completions")
        elapsed = time.monotonic() - began
        stop_workers(procs)
        assert queue.counts().total == 0, queue.counts()
    return {"processes": processes, "jobs": jobs, "seconds": elapsed, "jobs_per_s": jobs / elapsed}


if __name__ == "__main__":
    main()
