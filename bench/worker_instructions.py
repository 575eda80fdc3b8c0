"""The worker's own Python per job, counted (not timed): ``python -m bench.worker_instructions``.

    .venv/bin/python -m bench.worker_instructions [--modes worker,batch] [--jobs 2500] [--base 500]
                                                  [--wire 6] [--rounds 1] [--calls]

For each mode a fresh process drains a queue of no-op jobs the parent enqueued (so the enqueue
is not in the count) under valgrind's callgrind, with the server in another process:
``worker`` = :class:`echomq.Worker` in burst mode with a handler that returns nothing (its task
keeps results, the default: each job settles as a PUBLISH), ``worker-noresult`` = the same with
``result_ttl=0`` (each job settles as a COMPLETE, as the loop's do), ``worker-async`` = ``worker``
with an ``async def`` handler (on the worker's asyncio loop), ``batch`` = the bare batched
loop (``claim_many(10)`` / ``complete_many``, as bench/drive_echomq.py's), ``batch-kept`` = the
same loop keeping each no-op's result as the worker does (PUBLISHES, the worker's retention; as
bench/drive_echomq.py's ``batch-kept``: the loop ``worker`` is held to).
Per job = (the process's instructions draining ``--jobs`` jobs − draining ``--base``) / the
difference, so start-up and shutdown cancel out. On a shared, busy machine the timed ratios
(bench/e2e.py) spread widely; an instruction count does not move with the load, so it tells a
few percent from the noise. Instructions are not time: running the handlers on threads costs
wakes and GIL hand-offs that count few instructions (docs/benchmarks.md, issue 18).

valgrind runs ~50× slower and one thread at a time, so the worker's ``settle_wait_ms`` is
scaled to 50 ms, which gathers a claim batch's outcomes into one settle as the 1 ms bound
does natively (0.10 steps a job), and so is the handler pool's ``QUICK_HANDLER_S`` (5 ms), so
that a no-op handler's few µs (~100 µs under valgrind, about the native 0.1 ms bound) count as quick,
as they do natively. What still moves the count from run to run (±5 % on 2026-12-05, the same code
twice) is time: while relays run, the control thread looks in every ``settle_wait_ms`` of wall
time, so a run the machine's load slows counts more looks. So a worker's count is also given off
the main thread (each thread counted apart, ``--separate-threads``): the handler threads, which run
the jobs and the relays' exchanges, and whose count moved by ±0.5 % the same code twice; the main
thread is the control thread (its looks) and start-up. Compare rounds run side by side, best of a few.

``--calls``: Python calls per job instead (every thread's ``call`` and ``c_call`` profile
events, by function; no valgrind), the most frequent first. ``--native``: CPU per job instead, run
natively (no valgrind, the worker's own time bounds): the whole process's, the main thread's (a
worker's control thread) and, for a worker, its control thread's looks a job (its waits that ended
by their timeout: while relays go on it looks in every ``settle_wait_ms``, so looks a job grow with
the wall time a job). A look is a thread woken and the GIL taken from the relay's thread, which
instructions barely show: this is the figure that does. Timed, so it moves with the machine's load:
compare rounds run side by side. Needs valgrind otherwise (Debian: valgrind).
"""

from __future__ import annotations

import argparse
import collections
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from echomq import Queue, connect
from echomq._protocol.results import DEFAULT_RESULT_TTL_S, encode_result
from echomq._protocol.serializers import JSON

from .common import BenchServer, say, trafikey_module

QUEUE = "bench"
MODES = ("worker", "worker-noresult", "worker-async", "batch", "batch-kept")
#: how much slower the worker runs under valgrind: its time bounds are scaled by it (see the module's doc)
SLOWDOWN = 50
SETTLE_WAIT_MS = 1.0 * SLOWDOWN


def drain(mode: str, url: str, wire: int, native: bool = False) -> None:
    """In the measured process: drain QUEUE with ``mode`` until it is empty (``native``: not under
    valgrind, so with the worker's own time bounds)."""
    connection = connect(url, wire=wire)
    if mode.startswith("worker"):
        from echomq import App, Worker, WorkerConfig
        from echomq.worker import pool

        app = App("bench")
        result_ttl = 0 if mode == "worker-noresult" else DEFAULT_RESULT_TTL_S
        app.task(queue=QUEUE, max_attempts=1, result_ttl=result_ttl)(async_noop if mode == "worker-async" else noop)
        config = WorkerConfig(burst=True)
        if not native:
            pool.QUICK_HANDLER_S *= SLOWDOWN
            config = WorkerConfig(burst=True, settle_wait_ms=SETTLE_WAIT_MS)
        worker = Worker(app, connection, config=config)
        step, steps, wait, looks = worker.step, [0], worker.loop.wake.wait, [0]

        def counted() -> float:
            steps[0] += 1
            return step()

        def looked(timeout: float | None = None) -> bool:
            woken = wait(timeout)
            looks[0] += not woken  # (only the control thread waits on the loop's wake)
            return woken

        worker.step = counted  # type: ignore[method-assign]
        if native:  # (not in the counts: a call more a wait)
            worker.loop.wake.wait = looked  # type: ignore[method-assign]
        worker.run(install_signals=False)
        # how the drain batched: the count depends on it
        print(f"steps {steps[0]} relays {worker.loop.relays} looks {looks[0]}")
        return
    q = Queue(connection, QUEUE)
    kept_ms = int(DEFAULT_RESULT_TTL_S * 1000) if mode == "batch-kept" else None
    nothing = encode_result(JSON, None, None)
    while jobs := q.claim_many(10, 30_000):
        for job in jobs:
            noop(job.payload)
        if kept_ms:
            q.settle_many(q.completion_calls([part for job in jobs for part in (job.id, job.token, nothing)], kept_ms))
        else:
            q.complete_many(jobs)


def timing_cpu(mode: str, url: str, wire: int) -> None:
    """In the measured process: drain natively; print its CPU seconds (every thread's, the main
    thread's) after the line :func:`drain` prints."""
    before, main_before = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    drain(mode, url, wire, native=True)
    after, main_after = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"cpu {total:.6f} main {main_after - main_before:.6f}")


def noop(payload: object) -> None:
    pass


async def async_noop(payload: object) -> None:
    pass


def counting_calls(mode: str, url: str, wire: int) -> None:
    """In the measured process: drain with every thread's calls counted; print them as JSON lines."""
    import json

    calls: collections.Counter[str] = collections.Counter()

    def profile(frame, event, arg):  # noqa: ANN001 -- sys.setprofile's signature
        if event == "call":
            code = frame.f_code
            calls[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        elif event == "c_call":
            calls[f"<{getattr(arg, '__qualname__', arg)}>"] += 1

    threading.setprofile(profile)
    sys.setprofile(profile)
    drain(mode, url, wire)
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    print(json.dumps(dict(calls)))


def drained_as(out: str) -> dict[str, float]:
    """What a child's :func:`drain` printed of its batching (a worker's), and :func:`timing_cpu` of its CPU."""
    steps = re.search(r"^steps (\d+) relays (\d+) looks (\d+)", out, re.M)
    cpu = re.search(r"^cpu ([\d.]+) main ([\d.]+)", out, re.M)
    return {**({"steps": int(steps.group(1)), "relays": int(steps.group(2)), "looks": int(steps.group(3))} if steps
               else {"steps": 0, "relays": 0, "looks": 0}),
            **({"cpu": float(cpu.group(1)), "main": float(cpu.group(2))} if cpu else {})}


def measured(server: BenchServer, mode: str, wire: int, n: int, out_dir: Path, calls: bool,
             native: bool = False) -> dict[str, float]:
    """Enqueue ``n`` jobs, drain them in a child process; its instruction total (or its calls, or
    its native CPU)."""
    server.use(wire)
    producer = Queue(connect(server.url, wire=wire), QUEUE)
    for start in range(0, n, 1000):
        producer.enqueue_many([{}] * min(1000, n - start))
    child = [sys.executable, "-m", "bench.worker_instructions", "--child", mode, "--url", server.url,
             "--wire", str(wire)]
    if calls:
        import json

        out = subprocess.run(child + ["--calls"], capture_output=True, text=True, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    if native:
        return drained_as(subprocess.run(child + ["--native"], capture_output=True, text=True, check=True).stdout)
    dump = out_dir / f"callgrind.{mode}.{n}"
    out = subprocess.run(["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={dump}",
                          *child], check=True, capture_output=True, text=True).stdout
    left = producer.counts()
    if left.pending or left.active:
        raise RuntimeError(f"{mode} left jobs undone: {left}")
    by_thread = {}  # valgrind's thread number (1: the main thread, the worker's control thread) -> its total
    for part in out_dir.glob(f"{dump.name}-*"):
        totals = re.search(r"^(?:summary|totals):\s+(\d+)", part.read_text(errors="replace"), re.M)
        if totals:
            by_thread[int(part.name.rsplit("-", 1)[1])] = int(totals.group(1))
    return {"total": sum(by_thread.values()), "others": sum(v for t, v in by_thread.items() if t != 1),
            **drained_as(out)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--jobs", type=int, default=2500)
    p.add_argument("--base", type=int, default=500)
    p.add_argument("--wire", type=int, default=6, choices=(4, 6))
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--calls", action="store_true", help="Python calls per job by function, not instructions")
    p.add_argument("--native", action="store_true",
                   help="CPU per job run natively (every thread, the main thread) and a worker's looks a job")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        (counting_calls if args.calls else timing_cpu if args.native else drain)(args.child, args.url, args.wire)
        return 0
    if not (args.calls or args.native) and not shutil.which("valgrind"):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    module = None
    if args.wire == 6:
        module, why = trafikey_module()
        if module is None:
            print(f"no trafikey: {why}", file=sys.stderr)
            return 2
    modes = args.modes.split(",")
    out_dir = Path(tempfile.mkdtemp(prefix="emq-worker-callgrind-"))
    jobs = args.jobs - args.base
    with BenchServer(module) as server:
        for round_ in range(args.rounds):
            for mode in modes:
                say(f"round {round_ + 1}: {mode}, {args.base} and {args.jobs} jobs")
                small, large = (measured(server, mode, args.wire, n, out_dir, args.calls, args.native)
                                for n in (args.base, args.jobs))
                if args.native:
                    def per_job(key: str) -> float:
                        return (large[key] - small[key]) / jobs

                    looks = f", {per_job('looks'):.4f} looks a job" if mode.startswith("worker") else ""
                    print(f"{mode}: {per_job('cpu') * 1e6:.1f} µs CPU a job natively (wire {args.wire}), "
                          f"{per_job('main') * 1e6:.1f} of them on the main thread{looks}", flush=True)
                elif args.calls:
                    per_job = {name: (large.get(name, 0) - small.get(name, 0)) / jobs for name in large}
                    rows = sorted(per_job.items(), key=lambda kv: -kv[1])
                    print(f"{mode}: {sum(per_job.values()):.1f} calls a job (wire {args.wire})")
                    for name, count in rows[: args.top]:
                        print(f"  {count:7.2f}  {name}")
                else:
                    steps = (f", {(large['steps'] - small['steps']) / jobs:.3f} steps and "
                             f"{(large['relays'] - small['relays']) / jobs:.3f} relays a job" if mode.startswith("worker") else "")
                    others = ((large["others"] - small["others"]) / jobs / 1000 if mode.startswith("worker") else None)
                    print(f"{mode}: {(large['total'] - small['total']) / jobs / 1000:.1f} k instructions a job "
                          f"(wire {args.wire}{steps})" + ("" if others is None else
                                                          f"; {others:.1f} k of them off the main thread"), flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
