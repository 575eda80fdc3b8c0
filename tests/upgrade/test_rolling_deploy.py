"""A rolling deploy from 0.1.0 completes every job once (issue 40 item 4), on both wires: 0.1.0's
worker and producer (old_worker.py: 0.1.0's scripts and commands as it sent them) beside this
release's, on one queue of this release's node (wire 6: its trafikey).

In three steps, as a deploy goes: only old workers, while old and new producers enqueue (the old
worker runs the new producers' rows); old and new workers at once; only new workers (they run
what old producers still enqueue: UUIDv7 ids, rows without times). A job of each producer fails
its first attempt, on whichever worker claims it: 0.1.0's FAIL and this release's take turns."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from echomq import App, Backoff, Queue, Worker, WorkerConfig, connect
from support.queues import fresh_name
from support.waiting import wait_until
from old_worker import OldRelease
from test_worker import running


class Ledger:
    """Each completion, by job id and by which worker completed it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed: Counter[str] = Counter()
        self.by: dict[str, Counter[str]] = {}

    def done(self, job_id: str, worker: str, step: str) -> None:
        with self.lock:
            self.completed[job_id] += 1
            self.by.setdefault(step, Counter())[worker] += 1


def fails_first(payload: dict, attempt: int) -> bool:
    return bool(payload.get("fail_first")) and attempt == 1


def old_worker(old: OldRelease, ledger: Ledger, step: list[str], stop: threading.Event) -> None:
    """0.1.0's loop: claim one, run it, complete it (or FAIL it as 0.1.0 did, budget 3, no backoff)."""
    while not stop.is_set():
        job = old.claim(30_000)
        if job is None:
            stop.wait(0.005)  # 0.1.0's idle poll
            continue
        if fails_first(json.loads(job.payload), int(job.token)):
            old.fail(job, "RuntimeError: first attempt", max_attempts=3)
        elif old.complete(job):
            ledger.done(job.id, "old", step[0])


@pytest.mark.parametrize("wire", [4, 6])
def test_old_and_new_workers_and_producers_complete_every_job_once(wire, request):
    server = request.getfixturevalue(f"server{wire}")
    name, ledger, step = fresh_name("rolling"), Ledger(), ["old workers"]
    old = OldRelease(server.url, wire, name)
    conn = connect(server.url, wire=wire)
    queue = Queue(conn, name)

    def new_handler(payload, ctx):
        if fails_first(payload, ctx.attempt):
            raise RuntimeError("first attempt")
        ledger.done(ctx.id, "new", step[0])

    app = App("new release")
    app.handler(name, new_handler, max_attempts=3, backoff=Backoff(base_ms=1, max_ms=1, jitter=0.0))
    enqueued: list[str] = []

    def produce(count: int) -> None:
        """Both producers, in turn: the new one last, so on wire 4 its wake marker (0.1.0's enqueue
        writes none) wakes a blocked new worker after every old job is in."""
        for i in range(count):
            enqueued.append(old.enqueue(json.dumps({"i": i, "by": "old", "fail_first": i == 0}).encode()))
            enqueued.append(queue.enqueue({"i": i, "by": "new", "fail_first": i == 0}).id)

    def all_done() -> bool:
        return set(ledger.completed) == set(enqueued)

    stop = threading.Event()
    thread = threading.Thread(target=old_worker, args=(old, ledger, step, stop), daemon=True)
    thread.start()
    try:
        produce(20)
        wait_until(all_done, timeout=30, what="the old worker running both producers' jobs")
        step[0] = "both"
        with running(Worker(app, conn, queues=[name], config=WorkerConfig(concurrency=4))):
            produce(100)
            wait_until(all_done, timeout=60, what="old and new workers running every job")
            stop.set()
            thread.join(10)
            step[0] = "new workers"
            produce(20)
            wait_until(all_done, timeout=60, what="the new worker running both producers' jobs")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()

    assert len(enqueued) == 280 and set(ledger.completed.values()) == {1}  # every job once
    assert ledger.by["old workers"] == {"old": 40} and ledger.by["new workers"] == {"new": 40}
    assert sum(ledger.by["both"].values()) == 200
    counts = queue.counts()
    assert (counts.pending, counts.active, counts.scheduled, counts.dead) == (0, 0, 0, 0)
    assert queue.metrics()["completed"] == 280 and queue.metrics()["failed"] == 0
    conn.close()
