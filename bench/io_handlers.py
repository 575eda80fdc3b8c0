"""Handlers that wait: `emq worker` jobs/s when each handler sleeps D ms (a stand-in for a call to a
database or a web service), beside the worker at earlier revisions, in interleaved rounds.

    .venv/bin/python -m bench.io_handlers [--before REV ...] [--jobs 3000] [--rounds 3]
                                          [--waits-ms 0.1,0.5,2,5] [--wire 6] [--json FILE]

The no-op benchmarks reward running a claim batch on one thread (no wake, no GIL hand-off);
handlers that wait need the batch on many threads at once. One worker process, concurrency 10
(its default), drains N pre-filled jobs; jobs/s is counted from its start to its last settle.
"ideal" is concurrency / D, what ten threads could do if nothing else cost time. Beside it, a
bare threaded loop (not the worker): ten threads, each with its own connection, each claiming
one job, running it and completing it, two round trips a job and nothing else (no renewals, no
timers, no results kept). Figures, not assertions: read them as ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import BenchServer, say, trafikey_module
from .report import table
from .systems import child_env, echomq_tree

QUEUE = "io"
CONCURRENCY = 10


def child(url: str, wire: int, n: int) -> None:
    """In the measured process: drain QUEUE with a worker whose handler sleeps the job's ``ms``."""
    from echomq import App, Worker, WorkerConfig, connect

    app = App("io")

    @app.task(queue=QUEUE, max_attempts=1)
    def wait(payload):
        time.sleep(payload["ms"] / 1000)

    worker = Worker(app, connect(url, wire=wire), config=WorkerConfig(burst=True, concurrency=CONCURRENCY))
    started = time.perf_counter()
    worker.run(install_signals=False)
    print(json.dumps({"jobs_per_s": n / (time.perf_counter() - started)}))


def bare_threads(url: str, wire: int, n: int) -> None:
    """In the measured process: CONCURRENCY threads, each claim one -> run -> complete it."""
    import threading

    from echomq import Queue, connect

    def slot() -> None:
        queue = Queue(connect(url, wire=wire), QUEUE)
        while jobs := queue.claim_many(1, 30_000):
            time.sleep(jobs[0].payload["ms"] / 1000)
            queue.complete_many(jobs)

    threads = [threading.Thread(target=slot) for _ in range(CONCURRENCY)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"jobs_per_s": n / (time.perf_counter() - started)}))


def drain(server: BenchServer, wire: int, n: int, wait_ms: float, cwd: Path | None, mode: str = "worker") -> float:
    from echomq import Queue, connect

    server.use(wire)
    with connect(server.url, wire=wire) as connection:
        queue = Queue(connection, QUEUE)
        for at in range(0, n, 1000):
            queue.enqueue_many([{"ms": wait_ms}] * min(1000, n - at))
        out = subprocess.run([sys.executable, "-m", "bench.io_handlers", "--child", mode, server.url, str(wire),
                              str(n)], cwd=cwd, env=child_env(server.url, QUEUE), capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"the worker failed: {out.stderr.strip()}")
        left = queue.counts()
    if left.pending or left.active:
        raise SystemExit(f"the worker left jobs behind: {left}")
    return json.loads(out.stdout.strip().splitlines()[-1])["jobs_per_s"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=4, metavar=("MODE", "URL", "WIRE", "N"), help=argparse.SUPPRESS)
    p.add_argument("--before", metavar="REV", action="append", default=[],
                   help="also run the worker as of this git revision (repeatable)")
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--waits-ms", default="0.1,0.5,2,5", help="each handler's sleep, ms (comma-separated)")
    p.add_argument("--wire", type=int, choices=(4, 6), default=6)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.child:
        mode, url, wire, n = args.child
        (child if mode == "worker" else bare_threads)(url, int(wire), int(n))
        return 0
    waits = [float(w) for w in args.waits_ms.split(",")]
    # each runner by its label: where its process starts (an older echomq tree) and what it runs
    runners: dict[str, tuple[Path | None, str]] = {"now": (None, "worker"), "bare threads": (None, "bare")}
    for rev in args.before:
        where, short = echomq_tree(rev)
        runners[f"@ {short}"] = (where, "worker")
    module = trafikey_module()[0] if args.wire == 6 else None
    runs: dict[str, dict[str, list[float]]] = {label: {str(w): [] for w in waits} for label in runners}
    with BenchServer(module) as server:
        for rnd in range(args.rounds):
            for wait_ms in waits:
                for label, (cwd, mode) in runners.items():
                    rate = drain(server, args.wire, args.jobs, wait_ms, cwd, mode)
                    runs[label][str(wait_ms)].append(rate)
                    say(f"round {rnd + 1}: {label:>10}, handlers waiting {wait_ms} ms: {rate:,.0f} jobs/s")
    print(f"\nemq worker, wire {args.wire}, concurrency {CONCURRENCY}, {args.jobs} jobs, median of {args.rounds} rounds")
    others = list(runners)[1:]  # the bare threads, then the revisions
    header = ["handler waits", *(f"{label} jobs/s (of ideal)" for label in runners),
              *(f"now / {label}" for label in others)]
    rows = []
    for wait_ms in waits:
        ideal = CONCURRENCY / (wait_ms / 1000)
        medians = [statistics.median(runs[label][str(wait_ms)]) for label in runners]
        rows.append([f"{wait_ms} ms", *(f"{m:,.0f} ({m / ideal:.2f})" for m in medians),
                     *(f"{medians[0] / m:.2f}" for m in medians[1:])])
    print("\n".join(table(header, rows)))
    if args.json:
        args.json.write_text(json.dumps({"wire": args.wire, "jobs": args.jobs, "rounds": args.rounds,
                                         "concurrency": CONCURRENCY, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
