"""The process pool against the thread pool (issue 38 item 6), side by side, and the kill of a
handler past its timeout.

* **per-job overhead** -- one in-process worker (concurrency ``-c``) drains ``--jobs`` no-op jobs
  queued beforehand, once with ``pool="thread"`` and once with ``pool="process"``, rounds
  interleaved (thread, process, thread, ...), the children started before the clock starts; each
  run's wall time and CPU time (the worker's process and the pool's children, from /proc) per job,
  and the process pool's extra µs a job over the thread pool's, paired per round. On a shared
  machine the wall time swings with the load; the CPU a job costs barely does;
* **the kill** -- a handler that loops forever with ``timeout=1``: the time from its start (read in
  the child) until its child process is gone, and that a job enqueued next completes.

    .venv/bin/python -m bench.process_pool --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from echomq import App, EmbeddedServer, Queue, Worker, WorkerConfig, connect, module_path

from .common import say

app = App("bench-pool")  # at the module's top level: each child loads it as bench.process_pool:app


@app.task(queue="pool-noop-thread", pool="thread")
def noop_thread(payload: Any) -> None:
    return None


@app.task(queue="pool-noop-process", pool="process")
def noop_process(payload: Any) -> None:
    return None


@app.task(queue="pool-spin", timeout=1, max_attempts=1, pool="process")
def spin(payload: dict[str, str]) -> None:
    Path(payload["out"], f"{os.getpid()} {time.time()}").touch()
    while True:  # only a kill ends it
        pass


@app.task(queue="pool-after", pool="process")
def after(payload: Any) -> int:
    return os.getpid()


def alive(pid: int) -> bool:
    """``pid`` is a live process (a zombie nobody reaped yet is not), read from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return False


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) this process and ``pids`` (the pool's children) have spent."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return own.ru_utime + own.ru_stime + ticks / os.sysconf("SC_CLK_TCK")


def drain(url: str, wire: int, pool: str, jobs: int, concurrency: int) -> tuple[float, float]:
    """Wall seconds and CPU seconds (this process and the pool's children) one worker takes to run
    ``jobs`` queued no-op jobs on ``pool``, from the moment its children (if any) are ready to the last
    completion (polled every 2 ms, the same for both pools)."""
    name = f"pool-noop-{pool}"
    with connect(url, wire=wire) as conn:
        queue = Queue(conn, name)
        done_before = queue.metrics().get("completed", 0)
        queue.enqueue_many([None] * jobs)
        worker = Worker(app, conn, queues=[name], config=WorkerConfig(concurrency=concurrency))
        real_start, ready = worker.executor.start_children, threading.Event()

        def start_children(tasks: Any) -> None:  # the clock starts once the children are up
            real_start(tasks)
            ready.set()

        setattr(worker.executor, "start_children", start_children)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        ready.wait(60)
        pool_of = worker.executor.children
        pids = [child.pid for child in pool_of._idle] if pool_of is not None else []
        began, cpu_began = time.perf_counter(), cpu_s(pids)
        while queue.metrics().get("completed", 0) < done_before + jobs:
            time.sleep(0.002)
        took, cpu = time.perf_counter() - began, cpu_s(pids) - cpu_began
        worker.stop("bench over")
        thread.join(30)
        return took, cpu


def kill_s(url: str, wire: int) -> tuple[float, bool]:
    """Seconds from a looping handler's start to its child's end, and whether the next job completed."""
    with connect(url, wire=wire) as conn, tempfile.TemporaryDirectory() as out:
        worker = Worker(app, conn, queues=["pool-spin", "pool-after"], config=WorkerConfig(concurrency=1))
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        Queue(conn, "pool-spin").enqueue({"out": out})
        while not os.listdir(out):
            time.sleep(0.001)
        pid, began = os.listdir(out)[0].split()
        while alive(int(pid)):
            time.sleep(0.001)
        gone = time.time() - float(began)
        served = Queue(conn, "pool-after").result(Queue(conn, "pool-after").enqueue(None).id, timeout=30) != int(pid)
        worker.stop("bench over")
        thread.join(30)
        return gone, served


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--jobs", type=int, default=3000)
    p.add_argument("-c", "--concurrency", type=int, default=4)
    p.add_argument("--wires", default="6,4")
    args = p.parse_args()
    for wire in map(int, args.wires.split(",")):
        with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
            pairs, kills = [], []
            for round_no in range(args.rounds):
                thread = drain(server.url, wire, "thread", args.jobs, args.concurrency)
                process = drain(server.url, wire, "process", args.jobs, args.concurrency)
                pairs.append((thread, process))
                kills.append(kill_s(server.url, wire))
                say(f"wire {wire} round {round_no + 1}: thread {args.jobs / thread[0]:,.0f} jobs/s "
                    f"{thread[1] / args.jobs * 1e6:.0f} CPU us/job, process {args.jobs / process[0]:,.0f} jobs/s "
                    f"{process[1] / args.jobs * 1e6:.0f} CPU us/job; kill {kills[-1][0]:.2f} s, served after: "
                    f"{kills[-1][1]}")
            print(f"wire {wire}, concurrency {args.concurrency}, {args.jobs} no-op jobs, {args.rounds} rounds "
                  "(median, range), paired round by round:")
            for what, index in (("wall", 0), ("CPU (worker + children)", 1)):
                per_job = [((t[index]) / args.jobs * 1e6, (p[index]) / args.jobs * 1e6) for t, p in pairs]
                extra = [p - t for t, p in per_job]
                ratio = [p / t for t, p in per_job]
                print(f"  {what} us/job: thread {statistics.median(t for t, _ in per_job):.0f}, process "
                      f"{statistics.median(p for _, p in per_job):.0f}; process / thread {statistics.median(ratio):.2f}x "
                      f"({min(ratio):.2f}-{max(ratio):.2f}); extra {statistics.median(extra):.0f} us "
                      f"({min(extra):.0f}-{max(extra):.0f})")
            seconds = [k for k, _ in kills]
            print(f"  looping handler, timeout=1: its child gone {statistics.median(seconds):.2f} s after its start "
                  f"({min(seconds):.2f}-{max(seconds):.2f}); the next job served every round: {all(s for _, s in kills)}")


if __name__ == "__main__":  # run as bench.process_pool, so that the children find its app by that name
    from bench.process_pool import main as run_by_name

    run_by_name()
