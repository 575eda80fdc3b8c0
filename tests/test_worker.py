"""The worker in this process, on real servers over both wires: outcomes, leases, timers, idling.

Most tests drive :meth:`Worker.step` by hand with a clock the test owns, so a stopped
heartbeat is simply a step not taken; the server's own clock is waited on where a
lease must really expire.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from echomq import (App, Backoff, Delay, Flow, IdlePolicy, LeasePolicy, Queue, Retry, TimerConfig, Timers, Worker,
                    WorkerConfig)
from echomq.worker.policy import CANCEL_CHECK_MS, NO_LANES_PROBE_EVERY
from echomq._protocol.serializers import RAW
from echomq.errors import ConfigurationError
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past, wait_until
from support.workers import commands_sent, running

FAST = Backoff(base_ms=10, max_ms=50, jitter=0.0)


class FakeClock:
    """The worker's local clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def settled(queue: Queue) -> bool:
    counts = queue.counts()
    return counts.pending + counts.active + counts.scheduled == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_every_job_is_processed_exactly_once(conn, kind):
    name, seen, lock = fresh_name("w"), [], threading.Lock()

    def handler(payload, ctx):
        with lock:
            seen.append((payload["n"], ctx.attempt))

    async def ahandler(payload, ctx):
        await asyncio.sleep(0)
        handler(payload, ctx)

    app = App()
    app.handler(name, handler if kind == "sync" else ahandler)
    queue = Queue(conn, name)
    queue.enqueue_many([{"n": n} for n in range(300)])
    with running(Worker(app, conn, config=WorkerConfig(concurrency=8))) as worker:
        wait_until(lambda: queue.metrics()["completed"] == 300, what="300 completions")
    assert sorted(seen) == [(n, 1) for n in range(300)]
    assert worker.tally.completed == 300 and worker.tally.claimed == 300
    assert queue.counts().total == 0


def test_each_handler_gets_the_arguments_it_takes(conn):
    got = {}
    names = {kind: fresh_name(f"args-{kind}") for kind in ("none", "one", "two", "star")}
    app = App()
    app.handler(names["none"], lambda: got.setdefault("none", ()))
    app.handler(names["one"], lambda payload: got.setdefault("one", (payload,)))
    app.handler(names["two"], lambda payload, ctx: got.setdefault("two", (payload, ctx.id)))
    app.handler(names["star"], lambda *args: got.setdefault("star", (args[0], args[1].id)))
    ids = {kind: Queue(conn, name).enqueue(kind).id for kind, name in names.items()}
    Worker(app, conn, config=WorkerConfig(burst=True)).run(install_signals=False)
    assert got == {"none": (), "one": ("one",), "two": ("two", ids["two"]), "star": ("star", ids["star"])}


def test_retry_then_success(conn):
    name, attempts = fresh_name("w"), []

    def flaky(payload, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("upstream down")
        return "ok"

    app = App()
    app.handler(name, flaky, max_attempts=3, backoff=FAST)
    queue = Queue(conn, name)
    job = queue.enqueue({})
    with running(Worker(app, conn)) as worker:
        wait_until(lambda: queue.metrics()["completed"] == 1, what="the completion")
    assert attempts == [1, 2, 3]
    assert queue.job(job.id) is None and queue.metrics() == {"completed": 1, "failed": 0}
    assert (worker.tally.retried, worker.tally.completed, worker.tally.dead) == (2, 1, 0)


def test_dead_after_max_attempts(conn):
    name, attempts = fresh_name("w"), []

    def broken(payload, ctx):
        attempts.append(ctx.attempt)
        raise ValueError(f"cannot parse {payload['order']}")

    app = App()
    app.handler(name, broken, max_attempts=2, backoff=FAST)
    queue = Queue(conn, name)
    job = queue.enqueue({"order": 7})
    with running(Worker(app, conn)) as worker:
        wait_until(lambda: queue.counts().dead == 1, what="the job to go dead")
    assert attempts == [1, 2]
    row = queue.job(job.id)
    assert row["state"] == "dead" and row["last_error"] == "ValueError: cannot parse 7" and row["attempts"] == "2"
    # the raise's traceback beside it, written by the same FAIL (as traceback.format_exc() prints it)
    assert row["traceback"].startswith("Traceback (most recent call last):\n")
    assert "in broken\n    raise ValueError(f\"cannot parse {payload['order']}\")" in row["traceback"]
    assert row["traceback"].endswith("ValueError: cannot parse 7\n")
    assert queue.metrics() == {"completed": 0, "failed": 1} and worker.tally.dead == 1


def test_retry_with_its_own_delay_then_a_plain_delay(conn):
    name, attempts = fresh_name("w"), []

    def handler(payload, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise Retry("rate limited", delay_ms=20)
        if ctx.attempt == 2:
            return Delay(20)  # returned or raised: the same
        return "done"

    app = App()
    app.handler(name, handler, max_attempts=5)
    queue = Queue(conn, name)
    queue.enqueue({})
    with running(Worker(app, conn)) as worker:
        wait_until(lambda: queue.metrics()["completed"] == 1, what="the completion")
    assert attempts == [1, 2, 3]
    assert (worker.tally.retried, worker.tally.delayed, worker.tally.completed) == (1, 1, 1)


def test_a_payload_the_task_cannot_read_fails_that_job_only(conn):
    name, seen = fresh_name("w"), []
    app = App()
    app.handler(name, lambda payload: seen.append(payload), max_attempts=1)
    Queue(conn, name, serializer=RAW).enqueue(b"\xff not json")
    queue = Queue(conn, name)
    queue.enqueue({"fine": True})
    with running(Worker(app, conn)):
        wait_until(lambda: queue.counts().dead == 1 and queue.metrics()["completed"] == 1, what="both settled")
    (dead_id, _), = queue.ids("dead")
    assert "Error" in Queue(conn, name, serializer=RAW).job(dead_id)["last_error"]
    assert seen == [{"fine": True}]


def test_an_async_handler_that_cannot_even_start_fails_its_job_not_the_worker(conn):
    name = fresh_name("w")

    async def three(payload, ctx, missing):  # called with two: TypeError before the first await
        return None

    app = App()
    app.handler(name, three, max_attempts=1)
    queue = Queue(conn, name)
    job = queue.enqueue({})
    with running(Worker(app, conn)) as worker:
        wait_until(lambda: queue.counts().dead == 1, what="the job to go dead")
    assert "TypeError" in queue.job(job.id)["last_error"] and worker.tally.dead == 1


def test_a_busy_queue_does_not_starve_another(conn):
    busy, quiet, order, lock = fresh_name("w"), fresh_name("w"), [], threading.Lock()

    def record(payload, ctx):
        with lock:
            order.append(ctx.queue)

    app = App()
    app.handler(busy, record)
    app.handler(quiet, record)
    Queue(conn, busy).enqueue_many([{}] * 200)
    Queue(conn, quiet).enqueue({})
    with running(Worker(app, conn, config=WorkerConfig(concurrency=4, claim_batch=4))):
        wait_until(lambda: len(order) == 201, what="every job")
    assert order.index(quiet) < 20, order.index(quiet)


def test_a_paused_queue_is_not_claimed_until_resumed(conn):
    name, clock = fresh_name("w"), FakeClock()
    app = App()
    app.handler(name, lambda payload: None)
    queue = Queue(conn, name)
    queue.pause()
    queue.enqueue({})
    worker = Worker(app, conn, clock_ms=clock)
    for _ in range(5):
        clock.now = max(clock.now, worker.step())
    assert worker.tally.claimed == 0 and queue.counts().pending == 1
    queue.resume()
    clock.now += 1000  # past the idle back-off
    worker.step()
    assert worker.tally.claimed == 1
    wait_until(lambda: worker.step() and worker.tally.completed == 1, what="the completion")


# -- lost leases ---------------------------------------------------------------------------

def _held_worker(conn, name, handler, clock):
    """A worker holding the one job, renewing every 50 ms of its (fake) clock. Its lease is long:
    its own first sweep, in this very step, must not find it run out (a 200 ms lease did once,
    on a loaded CI machine); the test ends it when it wants (_expire_and_reclaim)."""
    app = App()
    app.handler(name, handler)
    worker = Worker(app, conn, clock_ms=clock, config=WorkerConfig(lease=LeasePolicy(30_000, tick_ms=50)))
    worker.step()  # claims the one job and starts its handler
    (held,) = worker.held.values()
    return worker, held


def _expire_and_reclaim(conn, queue, job_id):
    """The worker's heartbeats have stopped: its lease runs out (the deadline moved into the past),
    the sweep puts it back in pending, and someone else claims it."""
    assert conn.client.zadd(queue.keys.active, {job_id: 1}, xx=True, ch=True) == 1
    assert queue.stalled_check(max_stalled=5).recovered == [job_id]
    other = queue.claim(10_000)
    assert other.id == job_id and other.attempt == 2
    return other


def test_a_stale_settle_is_refused_and_the_job_is_settled_once(conn, caplog):
    name, clock, release = fresh_name("w"), FakeClock(), threading.Event()
    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker, held = _held_worker(conn, name, lambda payload: release.wait(10), clock)
    other = _expire_and_reclaim(conn, queue, job.id)

    release.set()  # the stalled worker wakes up with its handler done: it tries to complete attempt 1
    wait_until(lambda: held.outcome is not None, what="the handler to return")
    with caplog.at_level(logging.WARNING, logger="echomq.worker"):
        worker.step()
    assert "settle refused" in caplog.text
    assert worker.tally.lost == 1 and worker.tally.completed == 0 and not worker.held
    assert queue.state(job.id).value == "active"  # still the other holder's
    assert queue.metrics()["completed"] == 0
    queue.complete(other)
    assert queue.metrics()["completed"] == 1 and queue.job(job.id) is None


def test_a_lease_found_lost_at_renewal_tells_the_handler_and_is_never_settled(conn):
    name, clock, saw_lost = fresh_name("w"), FakeClock(), threading.Event()

    def careful(payload, ctx):
        wait_until(lambda: ctx.lease_lost, what="the lost flag")
        saw_lost.set()
        return "finished anyway"

    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker, held = _held_worker(conn, name, careful, clock)
    other = _expire_and_reclaim(conn, queue, job.id)

    clock.now += 100  # the next renewal tick: EXTENDS answers 0
    worker.step()
    assert held.ctx.lease_lost
    wait_until(saw_lost.is_set, what="the handler to see the flag")
    wait_until(lambda: held.outcome is not None, what="the handler to return")
    worker.step()
    assert worker.tally.lost == 1 and worker.tally.completed == 0 and not worker.held
    assert queue.metrics()["completed"] == 0
    queue.complete(other)
    assert queue.metrics()["completed"] == 1


def test_a_handler_without_a_context_has_its_lost_lease_kept_by_the_worker_and_is_never_settled(conn, caplog):
    name, clock, release = fresh_name("w"), FakeClock(), threading.Event()
    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker, held = _held_worker(conn, name, lambda payload: release.wait(10), clock)
    assert held.ctx is None and not held.lease_lost  # nothing could read a context: none is built
    other = _expire_and_reclaim(conn, queue, job.id)

    clock.now += 100  # the next renewal tick: EXTENDS answers 0
    worker.step()
    assert held.lease_lost
    release.set()
    wait_until(lambda: held.outcome is not None, what="the handler to return")
    with caplog.at_level(logging.WARNING, logger="echomq.worker"):
        worker.step()
    assert worker.tally.lost == 1 and worker.tally.completed == 0 and not worker.held
    assert "lease lost while the handler ran; its outcome is not settled" in caplog.text  # dropped, not sent
    assert queue.metrics()["completed"] == 0
    queue.complete(other)
    assert queue.metrics()["completed"] == 1


def cancelled_by_the_worker(told: threading.Event):
    """An async handler that runs until the worker cancels it, and sets ``told`` then."""

    async def forever(payload, ctx):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            told.set()
            raise

    return forever


def test_an_async_handler_is_cancelled_when_its_lease_is_lost(conn):
    name, clock, cancelled = fresh_name("w"), FakeClock(), threading.Event()
    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker, held = _held_worker(conn, name, cancelled_by_the_worker(cancelled), clock)
    _expire_and_reclaim(conn, queue, job.id)
    clock.now += 100
    worker.step()
    wait_until(cancelled.is_set, what="the cancellation")
    wait_until(lambda: worker.step() and not worker.held, what="the drop")
    assert worker.tally.lost == 1 and queue.state(job.id).value == "active"


@pytest.mark.parametrize("kind", ["sync", "async", "lane", "flow"])
def test_a_cancel_reaches_a_running_handler_at_the_next_look_not_the_next_renewal(conn, caplog, kind):
    """A job cancelled while it runs is told to its handler (ctx.lost; an async one is cancelled) at
    the worker's next look, CANCEL_CHECK_MS into its run, and logged as cancelled. It waited for the
    next renewal (a quarter lease: 7.5 s by default, 6.1 s measured) and was logged as "lease lost
    (EXTENDS answered 0)". Driven by the worker's own clock: the loop is due by then, and one step
    there tells the handler; no time is measured."""
    name, clock, told = fresh_name("w"), FakeClock(), threading.Event()

    def handler(payload, ctx):
        if ctx.lost.wait(30):
            told.set()

    app = App()
    app.handler(name, cancelled_by_the_worker(told) if kind == "async" else handler)
    queue = Queue(conn, name)
    if kind == "flow":
        queue.enqueue_flow("parent", children=[Flow(name, "child", id="job")], id="parent")
    else:
        queue.enqueue({}, id="job", group="tenant" if kind == "lane" else None)
    worker = Worker(app, conn, clock_ms=clock)  # the default lease: renewed 7.5 s after the claim
    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        next_due = worker.step()
        assert ("job" in {job_id for _, job_id in worker.held}) and next_due <= clock.now + CANCEL_CHECK_MS
        assert queue.cancel("job")
        clock.now += CANCEL_CHECK_MS - 1
        worker.step()
        assert not told.is_set()  # a job held under CANCEL_CHECK_MS is not looked at: quick jobs cost no read
        clock.now += 1
        worker.step()
        wait_until(told.is_set, what="the handler to be told")
        wait_until(lambda: worker.step() and not worker.held, what="the outcome dropped")
    assert worker.tally.lost == 1 and worker.tally.completed == 0
    assert "attempt 1: cancelled (Queue.cancel, emq cancel or the dashboard) while it ran" in caplog.text
    assert "cancelled while the handler ran; its outcome is not settled" in caplog.text
    assert "lease lost" not in caplog.text and "finished after all" not in caplog.text
    assert (queue.job("job")["state"], queue.job("job")["last_error"]) == ("dead", "cancelled")


def test_heartbeats_keep_a_long_job_held_past_its_lease(conn):
    name, release = fresh_name("w"), threading.Event()
    app = App()
    app.handler(name, lambda payload: release.wait(10))
    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker = Worker(app, conn, config=WorkerConfig(lease=LeasePolicy(500)))  # renewed every 125 ms
    with running(worker):
        wait_until(lambda: queue.counts().active == 1, what="the claim")
        first = conn.client.zscore(queue.keys.active, job.id)
        wait_server_past(conn.client, first + 100)  # the first lease has run out on the server clock
        assert queue.stalled_check(max_stalled=1).recovered == []  # renewed: nothing expired
        assert conn.client.zscore(queue.keys.active, job.id) > first
        release.set()
        wait_until(lambda: queue.metrics()["completed"] == 1, what="the completion")
    assert worker.tally.lost == 0


def test_a_quick_job_settles_while_a_slow_one_of_its_batch_runs(conn):
    """Outcomes wait for the rest of their claim batch (settle_wait_ms) only that long: the quick
    job's completion is seen while the slow one still runs, and both settle."""
    name, release = fresh_name("w"), threading.Event()
    app = App()
    app.handler(name, lambda payload: payload["slow"] and release.wait(10))
    queue = Queue(conn, name)
    queue.enqueue_many([{"slow": True}, {"slow": False}])
    worker = Worker(app, conn, config=WorkerConfig(settle_wait_ms=50))
    with running(worker):
        wait_until(lambda: queue.metrics()["completed"] == 1, what="the quick job's completion")
        assert queue.counts().active == 1 and not release.is_set()  # the slow one still runs
        release.set()
        wait_until(lambda: queue.metrics()["completed"] == 2, what="the slow job's completion")
    assert worker.tally.completed == 2


def test_a_relayed_batch_with_a_slow_handler_runs_and_settles_the_rest_meanwhile(conn):
    """Batches after the first are claimed by the handler thread that ended the last one (the relay).
    A slow handler in such a batch holds up neither the jobs queued behind it on its thread (they
    get threads of their own) nor the settles of the quick ones (the control thread looks in)."""
    name, release = fresh_name("w"), threading.Event()
    app = App()
    app.handler(name, lambda payload: payload["slow"] and release.wait(10))
    queue = Queue(conn, name)
    queue.enqueue_many([{"slow": False}] * 40 + [{"slow": True}] + [{"slow": False}] * 40)  # FIFO: batch 5
    worker = Worker(app, conn)
    with running(worker):
        wait_until(lambda: queue.metrics()["completed"] == 80, what="every quick job's completion")
        assert queue.counts().active == 1 and not release.is_set()  # the slow one still runs
        assert worker.loop.relays > 0  # the slow job came in a relayed batch (the first four were quick)
        release.set()
        wait_until(lambda: queue.metrics()["completed"] == 81, what="the slow job's completion")


@pytest.mark.parametrize("looking, claimed, woken", [
    (True, 10, False),  # looking in every settle_wait_ms: it sees the relayed batch by itself
    (False, 10, True),  # asleep until its timers (a lone slow handler ended): woken to look in again
    (True, 0, True),  # the claim found nothing: the step arms the waiter
])
def test_a_relay_wakes_the_control_thread_only_for_what_it_would_not_see(conn, looking, claimed, woken):
    app = App()
    app.handler(fresh_name("w"), lambda payload: None)
    loop = Worker(app, conn).loop
    loop.relaying, loop.looking = True, looking
    loop.exchange = lambda now: claimed  # what the relay does is the step's exchange, tested above
    loop.relay()
    assert loop.wake.is_set() is woken and loop.relays == 1


def test_a_queue_found_empty_by_a_relay_is_waited_on_at_once(conn):
    """A relay that finds a queue empty while another keeps it busy wakes the control thread, which
    arms that queue's waiter: a job enqueued there is run long before the busy queue drains."""
    busy, quiet = fresh_name("busy"), fresh_name("quiet")
    done_quiet = threading.Event()
    app = App()
    app.handler(busy, lambda payload: None)
    app.handler(quiet, lambda payload: payload["second"] and done_quiet.set())
    busy_queue, quiet_queue = Queue(conn, busy), Queue(conn, quiet)
    quiet_queue.enqueue({"second": False})
    for _ in range(10):
        busy_queue.enqueue_many([{}] * 1000)
    worker = Worker(app, conn)
    with running(worker):
        wait_until(lambda: quiet_queue.metrics()["completed"] == 1 and quiet in worker.pacing.idle,
                   what="the quiet queue's first job, then the claim that found it empty")
        quiet_queue.enqueue({"second": True})
        assert done_quiet.wait(10)
        assert busy_queue.counts().pending > 0  # not picked up by a step the busy queue's end brought
        wait_until(lambda: settled(busy_queue), what="the busy queue's drain")


def test_a_finished_handler_wakes_the_loop_only_once_the_settle_is_due(conn):
    """A young batch's outcome does not wake the loop: the wait the step returns ends when the settle
    falls due (settle_wait_ms on the worker's clock). Once a step has seen it due, an outcome wakes it."""
    name, clock, release = fresh_name("w"), FakeClock(), threading.Event()
    app = App()
    app.handler(name, lambda payload: payload["slow"] and release.wait(10))
    queue = Queue(conn, name)
    queue.enqueue_many([{"slow": True}, {"slow": False}, {"slow": True}])
    worker = Worker(app, conn, clock_ms=clock, config=WorkerConfig(settle_wait_ms=50))
    started = clock.now
    assert worker.step() <= started + 50  # claims all three; the loop wakes by itself by the settle's time
    wait_until(lambda: worker.executor.finished, what="the quick handler's outcome")
    assert not worker.loop.wake.is_set()  # young: it waits for the rest of its batch (two still run)
    clock.now += 50
    assert worker.step() > clock.now and worker.tally.completed == 1  # due: settled, the slow ones run on
    assert not worker.loop.wake.is_set()  # the loop would sleep: only an outcome can wake it now
    release.set()
    wait_until(lambda: worker.loop.wake.is_set(), what="the wake by a slow handler's outcome")
    wait_until(lambda: worker.step() and worker.tally.completed == 3, what="the slow jobs' completions")


def test_stop_releases_what_is_still_held_by_requeue_on_both_wires(conn):
    name, release = fresh_name("w"), threading.Event()
    app = App()
    app.handler(name, lambda payload, ctx: release.wait(10) and not ctx.lease_lost)
    queue = Queue(conn, name)
    job = queue.enqueue({})
    worker = Worker(app, conn, config=WorkerConfig(grace_s=0.05))
    with running(worker):
        wait_until(lambda: queue.counts().active == 1, what="the claim")
    release.set()
    assert worker.tally.requeued == 1 and queue.state(job.id).value == "pending"
    assert "failures" not in queue.job(job.id) and "stalled" not in queue.job(job.id)
    assert queue.metrics()["completed"] == 0  # the handler returned after the stop: nothing settled


# -- idling and timers ------------------------------------------------------------------------

def test_an_idle_worker_sends_few_commands(conn, wire):
    """A simulated idle minute (the worker's clock, jumped to each next wake-up) against the real server."""
    name, clock = fresh_name("w"), FakeClock()
    app = App()
    app.handler(name, lambda payload: None)
    worker = Worker(app, conn, clock_ms=clock, config=WorkerConfig(idle=IdlePolicy(max_ms=1000)))
    worker.step()
    before, start, steps = commands_sent(conn.client), clock.now, 0
    while clock.now - start < 60_000:
        clock.now = max(clock.now + 1, worker.step())
        steps += 1
    sent = commands_sent(conn.client) - before
    # wire 4 reads the pause flag before its claim script; and commandstats counts the HGET of the
    # event switch (meta events) inside the claim and sweep scripts as an HGET too
    per_poll, per_sweep = (3, 2) if wire == 4 else (1, 1)
    # and one poll in eight probes the lanes too (LANE_CLAIM: its EVALSHA and the EXISTS that finds
    # the queue never had a lane job); the reaper then passes over the queue (docs/lanes-and-flows.md)
    lane_probes = (68 // NO_LANES_PROBE_EVERY + 1) * 2
    # about 68 polls (eight quick ones while it empties, then one a second), 60 promotes, 12 sweeps
    # (each with the reaper's flow part: one EVALSHA), and about 22 polls of the flow sets (nine quick
    # ones, then one per flow_poll_max_ms, 5 s), each an EVALSHA and its script's pause HGET
    flow_polls = 22
    assert sent <= 68 * per_poll + 60 + 12 * (per_sweep + 1) + flow_polls * 2 + lane_probes, sent
    assert steps < 200, steps


def test_timers_promote_and_sweep_and_say_what_they_moved(conn, caplog):
    name, clock = fresh_name("w"), 0.0
    queue = Queue(conn, name)
    timers = Timers([queue], TimerConfig(promote_interval_ms=1000, sweep_interval_ms=5000, max_stalled=2))
    due = queue.schedule({"later": True}, 0)
    held = [queue.enqueue({}) for _ in range(2)]
    claims = [queue.claim(1) for _ in held]
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    with caplog.at_level(logging.INFO, logger="echomq.timers"):
        (run,) = timers.run_due(clock)
    assert run.promoted == 1 and sorted(run.sweep.recovered) == sorted(c.id for c in claims)
    assert "1 due job(s) moved" in caplog.text and "2 expired lease(s) recovered" in caplog.text
    assert queue.state(due.id).value == "pending"
    assert timers.next_due_ms(clock) == 1000.0
    timers.expect_due(name, 300.0)  # a retry falls due sooner than the interval
    assert timers.next_due_ms(clock) == 300.0
    (run,) = timers.run_due(300.0)
    # a run the hint brought forward keeps the interval's rhythm (promote and sweep backstops stay together)
    assert run.promoted == 0 and run.sweep is None and timers.next_due_ms(300.0) == 1000.0


def test_a_promote_reads_the_schedules_head_and_runs_again_when_it_falls_due(conn):
    name = fresh_name("w")
    queue = Queue(conn, name)
    timers = Timers([queue], TimerConfig(promote_interval_ms=60_000, sweep_interval_ms=60_000))
    assert timers.run_due(0.0)[0].promoted == 0
    assert timers.next_due_ms(0.0) == 60_000.0  # an empty schedule: only the backstop
    later = queue.schedule({}, 5_000)
    timers.recheck(name, 10.0)  # what a wake does: promote (and read the head) now
    assert timers.next_due_ms(10.0) == 10.0
    assert timers.run_due(10.0)[0].promoted == 0
    due = timers.next_due_ms(10.0)
    assert 10.0 + 4_900 <= due <= 10.0 + 5_001, due  # the head's due time, on the local clock
    wait_server_past(conn.client, int(conn.client.zscore(queue.keys.schedule, later.id)))
    assert timers.run_due(due)[0].promoted == 1 and queue.state(later.id).value == "pending"
    assert timers.next_due_ms(due) == 60_000.0


def test_a_busy_sweep_reads_the_earliest_lease_and_the_queue_gone_idle_is_swept_when_it_expires(conn):
    """Issue 37: a crashed worker's jobs ran again only at the idle backstop (30 s) when the survivor
    went from busy to idle, because a busy sweep dropped the lease deadline it read."""
    name, never = fresh_name("w"), 600_000
    queue = Queue(conn, name)
    timers = Timers([queue], TimerConfig(promote_interval_ms=never, sweep_interval_ms=never,
                                         idle_sweep_interval_ms=never))
    queue.enqueue({})
    queue.claim(3_000)  # held by a worker that then dies: its lease runs out in 3 s (server clock)
    (run,) = timers.run_due(0.0)  # busy (no idle queue): nothing expired yet
    assert run.sweep is not None and not run.sweep
    for idle in (frozenset(), frozenset({name})):  # busy on, or gone idle: swept as the lease runs out
        assert 2_000 <= timers.next_due_ms(1.0, idle) <= 3_001, (idle, timers.next_due_ms(1.0, idle))


def test_a_busy_worker_recovers_an_orphaned_lease_as_it_expires(conn):
    """Swept at the lease's deadline, not at the busy interval (here ten minutes), so a crashed
    worker's jobs run again within a lease of the crash while the survivor stays busy."""
    name, clock, release, never = fresh_name("w"), FakeClock(), threading.Event(), 600_000
    queue = Queue(conn, name)
    orphan = queue.enqueue({"orphan": True})
    queue.claim(1_000)  # by a worker that then died holding it
    queue.enqueue({"hold": True})
    app = App()
    app.handler(name, lambda payload: release.wait(10))
    worker = Worker(app, conn, clock_ms=clock, config=WorkerConfig(
        concurrency=1, timers=TimerConfig(promote_interval_ms=never, sweep_interval_ms=never,
                                          idle_sweep_interval_ms=never)))
    start = clock.now
    try:
        due = worker.step()
        while not worker.held:  # claims the held job (busy from here on) and sweeps: nothing expired yet
            clock.now = max(clock.now, due)
            due = worker.step()
        assert queue.state(orphan.id).value == "active"
        wait_server_past(conn.client, int(conn.client.zscore(queue.keys.active, orphan.id)))
        while queue.state(orphan.id).value == "active" and clock.now - start < never:
            clock.now = max(clock.now + 1, due)
            due = worker.step()
        assert clock.now - start <= 1_000 + 100, clock.now - start  # at its deadline, not the backstop
        assert queue.job(orphan.id)["stalled"] == "1" and len(worker.held) == 1  # swept while busy
    finally:
        release.set()
        worker.stop("test over")


def test_a_saturated_timer_runs_again_at_once(conn):
    name = fresh_name("w")
    queue = Queue(conn, name)
    for _ in range(3):
        queue.schedule({}, 0)
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    timers = Timers([queue], TimerConfig(limit=2, promote_interval_ms=1000))
    assert timers.run_due(0.0)[0].promoted == 2
    assert timers.next_due_ms(1.0) == 1.0  # hit its limit: there is more
    assert timers.run_due(1.0)[0].promoted == 1
    assert timers.next_due_ms(2.0) == 1001.0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_enqueues_follow_ups_through_its_context(conn, kind):
    """ctx.producer(name): an echomq.Queue in a sync handler, an echomq.aio.Queue (awaited, on the
    worker's asyncio loop) in an async one; both on the worker's node, with the app's serializer."""
    from echomq import aio

    first, second = fresh_name("w"), fresh_name("w")
    kinds, done = [], []

    def forward(payload, ctx):
        producer = ctx.producer(second)
        kinds.append(type(producer))
        producer.enqueue({"from": payload["n"]}, id=f"f{payload['n']}")

    async def aforward(payload, ctx):
        producer = ctx.producer(second)
        kinds.append(type(producer))
        await producer.enqueue({"from": payload["n"]}, id=f"f{payload['n']}")
        assert (await ctx.producer().counts()).active >= 1  # its own queue by default

    def sink(payload, ctx):
        done.append(payload["from"])

    app = App()
    app.handler(first, forward if kind == "sync" else aforward)
    app.handler(second, sink)
    Queue(conn, first).enqueue_many([{"n": n} for n in range(20)])
    with running(Worker(app, conn, config=WorkerConfig(concurrency=4))):
        wait_until(lambda: Queue(conn, second).metrics()["completed"] == 20, what="20 follow-ups completed")
    assert sorted(done) == list(range(20))
    assert set(kinds) == {Queue if kind == "sync" else aio.Queue}


def test_a_context_outside_a_worker_has_no_producer():
    from echomq import ConfigurationError, JobContext

    with pytest.raises(ConfigurationError, match="producer"):
        JobContext("a", "q", 1).producer()


def test_max_jobs_claims_that_many_lets_them_run_to_their_end_then_stops(conn):
    """No grace cuts a retirement short: grace 0 here, and the held jobs still complete."""
    name = fresh_name("w-max")
    queue = Queue(conn, name)
    queue.enqueue_many([{"n": n} for n in range(12)])
    release, app = threading.Event(), App()

    @app.task(queue=name)
    def handler(payload):
        release.wait(30)  # the handler's work, until the test lets it end

    worker = Worker(app, conn, config=WorkerConfig(concurrency=5, max_jobs=5, grace_s=0))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    wait_until(lambda: worker.stopping, what="the worker to retire with 5 claimed")
    assert (worker.tally.claimed, len(worker.held), queue.counts().active) == (5, 5, 5)
    release.set()
    thread.join(30)
    assert not thread.is_alive()
    assert (worker.tally.claimed, worker.tally.completed, worker.tally.requeued) == (5, 5, 0)
    assert queue.counts().pending == 7
    with pytest.raises(ConfigurationError, match="bad max_jobs 0"):
        WorkerConfig(max_jobs=0)
