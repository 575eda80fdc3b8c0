"""A burst reaches every idle worker, and a burst's crash is swept on the busy interval.

One wake marker wakes one waiter however many jobs came (docs/spec.md §10): the worker it woke
passes the wake on while its claims come back full, so the next idle worker looks too
(``policy.pass_wake_on``). And a queue that leaves idle keeps its sweep on the busy interval, so
leases another worker took in a short burst are not left to the idle backstop (30 s) when it
crashes (``Timers.busy_again``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from echomq import EmbeddedServer, Queue, TimerConfig, WorkerConfig, connect, module_path
from echomq._core.claims import Claims
from echomq._client.queue import Job
from echomq.worker import policy
from echomq.worker.pacing import Pacing
from echomq.worker.timers import Timers
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import WorkerProcess, blocked_waiters

Q = "q"


def jobs(flat: int, lanes: int = 0) -> Claims:
    return Claims([Job(Q, f"f{n}", {}, b"{}", 1) for n in range(flat)] +
                  [Job(Q, f"l{n}", {}, b"{}", 1, group="g") for n in range(lanes)])


# -- the decision (no I/O) -----------------------------------------------------------------------

@pytest.mark.parametrize("flat, lanes, found, capacity, passes", [
    (2, 2, jobs(2), 10, True),  # both flat claims came back: more may wait
    (2, 2, jobs(0, 2), 10, True),  # both lane claims did
    (2, 2, jobs(1, 1), 10, False),  # one of each kind: pending ran out of both
    (2, 0, jobs(1), 10, False),  # the single job a wake is usually for
    (1, 0, jobs(1), 1, True),  # a worker of one slot, filled: the next worker takes the next job
    (1, 1, jobs(1), 2, False),  # two slots, one job: room left, pending looked empty
    (1, 1, jobs(2), 2, True),  # the round filled the worker
    (0, 0, jobs(0), 10, False),
])
def test_a_wake_is_passed_on_when_the_round_after_it_came_back_full(flat, lanes, found, capacity, passes):
    assert policy.pass_wake_on(flat, lanes, found, capacity) is passes


def test_the_round_after_a_wake_asks_each_kind_for_two_where_the_slots_hold_them():
    assert policy.woken_claims(1, 1, 10) == (policy.WOKEN_CLAIMS, policy.WOKEN_CLAIMS)
    assert policy.woken_claims(1, 0, 10) == (policy.WOKEN_CLAIMS, 0)
    assert policy.woken_claims(1, 1, 3) == (1, 1)  # no room for both kinds' two: the round as it was
    assert policy.woken_claims(1, 0, 1) == (1, 0)


def test_pacing_passes_a_markers_wake_on_once_and_a_timeouts_never():
    pacing = Pacing([Q], WorkerConfig())
    pacing.blocking = True
    pacing.claimed(Q, 0, 1, 1, Claims())  # empty: idle, a waiter watches it
    pacing.woken(Q, marker=True)
    flat, lanes = pacing.plan(Q, 0, 10, watched=lambda name: True)
    assert (flat, lanes) == (2, 2)
    assert pacing.claimed(Q, 0, flat, lanes, jobs(2)) is True
    flat, lanes = pacing.plan(Q, 0, 10, watched=lambda name: True)  # busy now: a batch, no wake of its own
    assert flat + lanes == WorkerConfig().claim_batch and pacing.claimed(Q, 0, flat, lanes, jobs(flat)) is False
    pacing.claimed(Q, 0, 1, 1, Claims())
    pacing.woken(Q)  # a block's timeout: no marker popped, nothing to pass on
    flat, lanes = pacing.plan(Q, 0, 10, watched=lambda name: True)
    assert (flat, lanes) == (1, 1) and pacing.claimed(Q, 0, flat, lanes, jobs(1, 1)) is False


def test_a_queue_that_leaves_idle_is_swept_on_the_busy_interval_though_idle_again():
    config = TimerConfig(promote_interval_ms=60_000, sweep_interval_ms=5_000, idle_sweep_interval_ms=30_000)
    timers = Timers([SimpleNamespace(name=Q)], config)  # the clocks alone: nothing here reads the server
    timers._sweep[Q].ran(1_000, config.idle_sweep_interval_ms, False)  # an idle sweep: no lease seen
    sweeps = lambda: timers._sweep[Q].due_ms(2_000, timers._sweep_interval_ms(Q, {Q}))  # noqa: E731
    assert sweeps() == 31_000  # idle: the backstop alone
    timers.busy_again(Q, 2_000)
    assert sweeps() == 6_000  # idle again, yet swept on the busy interval from its last run


# -- on a server ---------------------------------------------------------------------------------

@pytest.fixture
def own_server(wire):
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
        yield server


def test_a_burst_reaches_both_idle_workers(own_server, wire, out):
    """Two workers blocked on an empty queue, then 40 jobs that hold until released: both take some
    (more active than one worker's concurrency of 4). Without the pass, wire 4's one marker woke
    one worker, which then ran the burst alone."""
    name = fresh_name("burst")
    with connect(own_server.url, wire=wire) as conn:
        queue = Queue(conn, name)
        workers = [WorkerProcess(own_server.url, wire, name, out, "--concurrency", "4") for _ in range(2)]
        try:
            wait_until(lambda: blocked_waiters(conn.client) == 2, 60, "both workers blocked")
            queue.enqueue_many([{"hold": True}] * 40)
            wait_until(lambda: conn.client.zcard(queue.keys.active) == 8, 30, "both workers holding four jobs")
        finally:
            (out / "release").touch()
            for worker in workers:
                worker.kill()
