"""The rate limit across worker processes (issue 15): ``rate_limit="50/s"``, 4 `emq worker`
processes, 400 queued jobs (1,000 with EMQ_FULL_SIZE=1, the issue's size), on both wires. Every start time is the server's (the completed
record's ``started``, the time the claim that started the run wrote): no sliding 1-second
window holds more than 50 starts, and the achieved rate is at least 90% of the limit."""

from __future__ import annotations

import bisect
import os
import signal

from echomq import Queue
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import commands_sent
from test_results_layout import records_started

LIMIT, WINDOW_MS, WORKERS = 50, 1000, 4
JOBS = 1000 if os.environ.get("EMQ_FULL_SIZE") == "1" else 400  # 20 s or 8 s of starts per wire


def most_in_any_window(starts: list[int], window_ms: int) -> int:
    """The most starts in any half-open window [t, t + window_ms): the densest window begins at a start."""
    starts = sorted(starts)
    return max(bisect.bisect_left(starts, t + window_ms) - i for i, t in enumerate(starts))


def test_most_in_any_window():
    assert most_in_any_window([0, 999, 1000, 1999], 1000) == 2
    assert most_in_any_window([0, 1, 2, 1001], 1000) == 3
    assert most_in_any_window([5], 1000) == 1


def test_fifty_per_second_across_four_worker_processes(conn, wire, spawn):
    name = fresh_name("rate")
    queue = Queue(conn, name)
    ids = [job.id for job in queue.enqueue_many([{"n": n} for n in range(JOBS)])]
    sent_before = commands_sent(conn.client)
    workers = [spawn(name, "-c", "10", env={"EMQ_TEST_RATE": f"{LIMIT}/s"}) for _ in range(WORKERS)]
    wait_until(lambda: queue.metrics()["completed"] == JOBS, 60, f"{JOBS} completions")
    claims = commands_sent(conn.client) - sent_before
    starts = sorted(records_started(conn.client, queue.keys, ids))
    densest = most_in_any_window(starts, WINDOW_MS)
    span_s = (starts[-1] - starts[0] + WINDOW_MS) / 1000  # the last start's window included
    rate = JOBS / span_s
    print(f"\nwire {wire}: {JOBS} starts by {WORKERS} workers at {LIMIT}/s in {span_s:.2f} s: {rate:.2f} starts/s "
          f"({rate / LIMIT:.1%} of the limit); densest 1 s window {densest}; "
          f"{claims / JOBS:.1f} claim commands (and pause reads) per start")
    assert densest <= LIMIT
    assert rate >= 0.9 * LIMIT
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0
    assert queue.counts().total == 0
    conn.client.delete(queue.keys.rate)  # not left to expire under a later test's digest
