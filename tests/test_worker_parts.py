"""The worker's parts, each on its own (echomq/worker/: pacing, leases, shutdown, tallies, the pool's
asyncio runner, executor, settling, waiting; the thread pool's tests are test_worker_policy.py's).
The parts with no I/O are driven without a server; the others on a real one, both wires, with the
handlers and records built by hand. The whole worker's behaviour is test_worker.py's."""

from __future__ import annotations

import asyncio
import logging
import threading
from itertools import count

import pytest

from echomq import App, Claims, Job, JobContext, LeasePolicy, Queue, Timers, WorkerConfig
from echomq.errors import JobTimeout, LeaseLost
from echomq import hooks
from echomq.worker import policy, waiter
from echomq.worker.executor import Executor
from echomq.worker.held import Held
from echomq.worker.leases import Leases
from echomq.worker.pacing import Pacing
from echomq.worker.pool import AsyncRunner
from echomq.worker.settling import Settler
from echomq.worker.shutdown import Watchman
from echomq.worker.jobstats import JobStats
from echomq.worker.tallies import Events, Tally
from echomq.worker.waiting import Waiting
from echomq._protocol.keys import State
from echomq._protocol.results import encode_result
from echomq._protocol.serializers import JSON
from echomq._protocol.verbs import Sweep
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import QUIET_TIMERS

Q = "q"
_ids = count()


def job(queue: str = Q, *, attempt: int = 1, group: str | None = None) -> Job:
    return Job(queue, f"job-{next(_ids)}", {}, b"{}", attempt, group=group)


def held(task, queue=None, *, renewed_at: float = 0.0, deadline: float | None = None) -> Held:
    """A held job's record, as the executor makes one for a claim."""
    claimed = job(task.queue if queue is None else queue.name)
    stats = JobStats().of(claimed.queue, "task")
    return Held(queue, task, claimed, (claimed.queue, claimed.id), None, renewed_at, 0.0, stats, deadline,
                claimed_at=renewed_at)


def a_task(queue: str = Q, fn=lambda payload: None, **options):
    return App().handler(queue, fn, **options)


# -- pacing: when to claim, and how many (no I/O) ----------------------------------------------

def test_pacing_claims_a_busy_queue_in_batches_and_an_empty_one_once_after_its_back_off():
    pacing = Pacing([Q], WorkerConfig(claim_batch=5))
    assert pacing.plan(Q, 0, 8, watched=lambda name: False) == (3, 2)  # flat and lanes share a busy round
    pacing.claimed(Q, 0, 3, 2, Claims())
    assert pacing.plan(Q, 9, 8, watched=lambda name: False) == (0, 0)  # the idle back-off: 10 ms after one
    assert pacing.plan(Q, 10, 8, watched=lambda name: False) == (1, 1)  # then one claim of each kind
    assert pacing.came_back_empty(Q) and Q not in pacing.idle  # no waiter: polled, never idle


def test_pacing_leaves_a_waited_queue_to_its_waiter_and_a_wake_claims_it_afresh():
    pacing = Pacing([Q], WorkerConfig())
    pacing.blocking = True
    pacing.claimed(Q, 0, 1, 1, Claims(paused=True))
    assert Q in pacing.idle and Q in pacing.paused  # wire 4's pause read: its block is short (a resume)
    pacing.claimed(Q, 0, 0, 1, Claims())  # a lane claim alone reads no pause: the last read stands
    assert Q in pacing.idle and Q in pacing.paused
    pacing.claimed(Q, 0, 1, 0, Claims())  # a flat claim's read: not paused now
    assert Q in pacing.idle and Q not in pacing.paused
    assert pacing.plan(Q, 10_000, 8, watched=lambda name: True) == (0, 0)
    pacing.woken(Q)
    assert Q not in pacing.idle and pacing.next_poll[Q] == 0 and pacing.found[Q] == (True, True)
    assert pacing.plan(Q, 10_000, 8, watched=lambda name: True) != (0, 0)


def test_pacing_waits_out_a_rate_limit_then_claims_one():
    pacing = Pacing([Q], WorkerConfig())
    pacing.blocking = True
    pacing.claimed(Q, 0, 3, 2, Claims())
    assert Q in pacing.idle
    pacing.rate_wait(Q, 100, 1000)
    assert Q not in pacing.idle  # no write announces a window freeing: no waiter, a claim at its end
    assert pacing.plan(Q, 1099, 8, watched=lambda name: False) == (0, 0)
    assert sum(pacing.plan(Q, 1100, 8, watched=lambda name: False)) <= 2  # a lone claim (and a lane probe)


def test_pacing_probes_the_lanes_of_a_queue_that_never_had_any_one_round_in_eight():
    pacing = Pacing([Q], WorkerConfig(claim_batch=4))
    flat, lanes = pacing.plan(Q, 0, 8, watched=lambda name: False)
    pacing.claimed(Q, 0, flat, lanes, Claims([job()] * flat, no_lanes=True))
    rounds = [pacing.plan(Q, 0, 8, watched=lambda name: False) for _ in range(policy.NO_LANES_PROBE_EVERY)]
    assert sum(1 for _, lanes in rounds if lanes) == 1 and Q in pacing.no_lanes


def test_pacing_claims_nothing_once_stopping():
    pacing = Pacing([Q], WorkerConfig())
    pacing.stop_claiming(1234.0)
    assert (pacing.stopping, pacing.stop_at) == (True, 1234.0)
    assert pacing.plan(Q, 0, 8, watched=lambda name: False) == (0, 0)


def test_pacing_polls_the_flow_sets_by_what_the_last_flow_claim_said():
    pacing = Pacing([Q, "other"], WorkerConfig(flow_poll_max_ms=5000))
    pacing.flows_claimed(Q, 0, found=False, due_ms=None, slack_ms=5)  # no flow work: busy, looked at again later
    assert pacing.next_flow_poll[Q] == 5000 and not pacing.flows_due(Q, 4999)
    pacing.empty_flow_polls[Q] = 20  # long empty: its back-off is at its longest
    pacing.flows_claimed(Q, 0, found=False, due_ms=300, slack_ms=5)  # but a retry's backoff ends in 300 ms
    assert pacing.next_flow_poll[Q] == 305
    pacing.blocking, pacing.idle = True, {Q}
    pacing.flows_claimed(Q, 0, found=False, due_ms=None, slack_ms=5)  # idle: its waiter's block ends it
    assert pacing.next_flow_poll[Q] == float("inf")
    assert pacing.next_claim_ms(0.0) == 0.0 and pacing.next_claim_ms(7.0) == 0.0  # "other"'s flows are due
    pacing.poll_flows()  # a flow job settled: its parent may be ready
    assert pacing.next_flow_poll == {Q: 0.0, "other": 0.0}


# -- leases: renewal's bookkeeping, timeouts, expiry (the parts that need no server) -------------------

def test_leases_come_due_by_a_claim_batchs_lease_and_deadline():
    leases = Leases({}, {}, WorkerConfig(lease=LeasePolicy(1000)), clock_ms=lambda: 0.0)
    assert leases.next_due_ms() == float("inf")
    leases.claimed(100.0, None)
    assert (leases.scan_at, leases.cancel_check_at) == (1100.0, 100.0 + policy.CANCEL_CHECK_MS)
    leases.claimed(50.0, 300.0)  # a batch whose handlers time out first
    assert (leases.scan_at, leases.cancel_check_at, leases.next_due_ms()) == (300.0, 550.0, 300.0)


def test_leases_pick_out_the_handlers_past_their_timeout_and_give_up_leases_no_renewal_reached():
    task = a_task()
    records = {h.key: h for h in (held(task, deadline=500.0), held(task, deadline=900.0, renewed_at=800.0))}
    late, young = records.values()
    leases = Leases({}, records, WorkerConfig(lease=LeasePolicy(1000)), clock_ms=lambda: 0.0)
    assert leases.timed_out(600.0) == [late]
    late.outcome = policy.RETURNED_NOTHING  # it returned meanwhile: its own outcome stands
    assert leases.timed_out(600.0) == []
    leases.give_up_expired(1000.0)  # the first was renewed (claimed) at 0: a whole lease ago
    assert late.lease_lost and not young.lease_lost
    leases.rescan()
    assert leases.scan_at == 900.0  # the young one's deadline, before its lease's end


# -- shutdown: the stop and its grace ----------------------------------------------------------------

def test_the_watchman_gives_the_grace_once_and_a_retiring_worker_its_grace_at_a_stop():
    now, records, wake = [1000.0], {}, threading.Event()
    pacing = Pacing([Q], WorkerConfig())
    watchman = Watchman(config=WorkerConfig(grace_s=2.0), queues={}, held=records, tally=Tally(), events=None,
                        pacing=pacing, executor=None, leases=None, waiting=None, loop=None, heartbeat=None, wake=wake,
                        clock_ms=lambda: now[0])
    assert not watchman.grace_over()
    pacing.stop_claiming(float("inf"))  # max_jobs reached: its jobs run to their end
    records[Q, "a"] = held(a_task())
    now[0] = 5000.0
    assert not watchman.grace_over()
    watchman.stop("SIGTERM")  # a signal now: the grace from here
    assert pacing.stop_at == 7000.0 and wake.is_set()
    now[0] = 6000.0
    watchman.stop("SIGTERM")  # asked again: the grace stands
    assert pacing.stop_at == 7000.0 and not watchman.grace_over()
    now[0] = 7000.0
    assert watchman.grace_over()
    records.clear()
    now[0] = 6000.0
    assert watchman.grace_over()  # nothing held: no need to wait the grace out


# -- tallies: every event counted, told only when heard --------------------------------------------

def test_events_count_every_event_heard_or_not_and_tell_the_hooks_with_the_worker():
    tally, told = Tally(), []
    stats = JobStats()
    events = Events("the worker", tally, stats)
    claimed = job()
    task = a_task()
    unsubscribe = hooks.subscribe("job.requeued", lambda event, data: told.append((event, data)))
    try:
        assert "job.requeued" in hooks.heard and "job.abandoned" not in hooks.heard
        events.emit("job.requeued", claimed, task)
        events.emit("job.abandoned", claimed, task, reason="REQUEUE refused")  # nobody listens: counted all the same
        events.sweep(Q, Sweep(recovered=["r1", "r2"], exempt=["e"], dead=[]))
    finally:
        unsubscribe()
    assert (tally.requeued, tally.abandoned, tally.stalled, tally.recovered, tally.stalled_dead) == (1, 1, 2, 1, 0)
    assert str(tally) == "requeued 1, abandoned 1, stalled 2, recovered 1" and str(Tally()) == "nothing"
    assert told == [("job.requeued", {"worker": "the worker", "queue": Q, "id": claimed.id, "attempt": 1})]
    # and in the task's figures on its queue (a sweep's, which reads no payload, under no task)
    counts = stats.of(Q, "<lambda>").counts
    assert (counts["requeued"], counts["abandoned"]) == (1, 1) and stats.sweeps[Q]["stalled"] == 2


# -- the pool: the asyncio runner --------------------------------------------------------------------

def test_the_asyncio_runner_runs_coroutines_on_its_own_thread_until_shut_down():
    runner = AsyncRunner()

    async def where() -> str:
        return threading.current_thread().name

    assert runner.submit(where()).result(timeout=10) == "emq-asyncio"
    runner.shutdown()
    wait_until(lambda: not runner.loop.is_running(), what="the runner's loop to stop")
    runner.loop.close()


# -- the executor: handlers run, outcomes gathered (on a real connection, for the producers) -------------

@pytest.fixture
def executor(conn):
    tally = Tally()
    leases = Leases({}, {}, WorkerConfig(), clock_ms=lambda: 0.0)
    return Executor(App(), conn, {}, WorkerConfig(), leases.held, leases, tally, JobStats(),
                    Events(None, tally, JobStats()),
                    threading.Event(), clock_ms=lambda: 0.0)


def test_a_timeout_and_a_handlers_outcome_whichever_comes_first_wins(executor, conn, caplog):
    release = threading.Event()
    slow, quick = a_task(fn=lambda payload: release.wait(10)), a_task(fn=lambda payload: "done")
    queue = Queue(conn, fresh_name("parts"))
    executor.start(slow, queue, [job(queue.name)], 0.0)
    (timed,) = executor.held.values()
    executor.time_out(timed)
    assert isinstance(timed.verdict, policy.Raised) and isinstance(timed.verdict.error, JobTimeout)
    assert timed.lease_lost and executor.take_finished() == [timed]
    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        release.set()  # the abandoned handler returns after all: its outcome is dropped
        wait_until(lambda: "finished after all; its outcome is dropped" in caplog.text, what="the late outcome")
    assert timed.outcome is None and executor.take_finished() == []
    executor.start(quick, queue, [job(queue.name)], 0.0)
    returned = next(h for h in executor.held.values() if h is not timed)
    wait_until(lambda: returned.outcome is not None, what="the quick outcome")
    executor.time_out(returned)  # too late: it returned first
    assert returned.verdict is None and returned.outcome == policy.Returned("done") and not returned.lease_lost
    executor.close()


def test_the_last_handler_of_a_batch_runs_the_relay_on_its_own_thread(executor, conn):
    relayed = []
    executor.relay = lambda: relayed.append(threading.current_thread().name)
    queue = Queue(conn, fresh_name("parts"))
    executor.start(a_task(), queue, [job(queue.name), job(queue.name)], 0.0)
    wait_until(lambda: relayed, what="the relay")
    assert len(relayed) == 1 and relayed[0].startswith("emq-handler-")
    assert len(executor.take_finished()) == 2 and not executor.wake.is_set()  # the relay settles: no wake
    executor.relay = None  # relays off: the last outcome wakes the loop instead
    executor.start(a_task(), queue, [job(queue.name)], 0.0)
    wait_until(executor.wake.is_set, what="the wake")
    executor.close()


async def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_a_payload_its_task_cannot_decode_fails_that_job_alone_in_its_claim_batch(executor, conn):
    queue = Queue(conn, fresh_name("parts"))
    ran = []
    task = a_task(queue.name, fn=ran.append)
    good, bad, also = job(queue.name), Job(queue.name, "bad", None, b"{not json", 1), job(queue.name)
    executor.start(task, queue, [good, bad, also], 0.0)
    wait_until(lambda: len(ran) == 2, what="the two handlers' runs")
    (undecodable,) = [h for h in executor.held.values() if h.job is bad]
    assert isinstance(undecodable.verdict, policy.Undecodable) and ran == [{}, {}]
    executor.close()


def test_a_claim_batch_of_async_handlers_reaches_their_loop_in_one_call_and_ends_under_one_lock(executor, conn):
    """The async fast path: a claim batch's handlers are handed to the worker's loop in one call (its
    thread woken once a batch, not once a job), each runs there as a task of that loop, and the outcomes
    that end in one pass of it are recorded together, at one clock read. Before, each job took a
    ``run_coroutine_threadsafe`` of its own (a wake of the loop's thread, two Futures chained)."""
    loop = executor.run_on_loop(_running_loop())
    hops, hop = [], loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *args, **kwargs: (hops.append(args[0]), hop(*args, **kwargs))[1]

    async def where(payload):
        return threading.current_thread().name, asyncio.current_task().get_loop() is loop

    queue = Queue(conn, fresh_name("parts"))
    executor.start(a_task(fn=where), queue, [job(queue.name) for _ in range(10)], 0.0)
    finished = []
    wait_until(lambda: finished.extend(executor.take_finished()) or len(finished) == 10, what="ten outcomes")
    assert {h.outcome for h in finished} == {policy.Returned(("emq-asyncio", True))}
    assert len(hops) == 1, hops  # one call for the batch, not one a job
    assert len({h.ended_s for h in finished}) == 1  # ended in one pass: recorded together
    executor.close()


def test_an_async_handlers_timeout_reaches_it_even_before_its_task_is_made(executor, conn, caplog):
    """A cancel asked while the loop has not yet made the batch's tasks (it is busy) runs there after
    them, and after the handler's first step: it is started and cancelled at its first ``await``, as
    one cancelled later is (not cancelled unstarted); the timeout's verdict stands."""
    loop, busy, told = executor.run_on_loop(_running_loop()), threading.Event(), []
    loop.call_soon_threadsafe(busy.wait, 10)  # the loop's thread held until the cancel is asked

    async def forever(payload):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            told.append(payload)
            raise

    queue = Queue(conn, fresh_name("parts"))
    executor.start(a_task(fn=forever), queue, [job(queue.name)], 0.0)
    (timed,) = executor.held.values()
    assert timed.future is None  # its task is not made yet
    executor.time_out(timed)
    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        busy.set()
        wait_until(lambda: timed.future is not None and timed.future.done(), what="the task's end")
    assert timed.future.cancelled() and told == [{}]  # it ran, and was cancelled at its await
    assert isinstance(timed.verdict.error, JobTimeout) and timed.outcome is None
    assert "finished after all" not in caplog.text  # a cancelled handler stopped, as told: nothing to say
    assert executor.take_finished() == [timed]  # the verdict alone: the cancelled run's outcome dropped
    executor.close()


# -- settling: outcomes into calls, answers recorded --------------------------------------------------

def test_the_settler_batches_completions_fails_what_raised_and_drops_what_was_lost(conn):
    queue = Queue(conn, fresh_name("parts"))
    task = a_task(queue.name)
    records = {}
    done, fresh_error, lost = (held(task, queue) for _ in range(3))
    done.outcome = policy.RETURNED_NOTHING
    try:
        raise ValueError("boom")
    except ValueError as error:
        fresh_error.outcome = policy.Raised(error)
    lost.outcome = policy.RETURNED_NOTHING
    lost.mark_lost()
    also = held(task, queue)
    also.outcome = policy.RETURNED_NOTHING
    for record in (done, fresh_error, lost, also):
        records[record.key] = record
    tally = Tally()
    settler = Settler({queue.name: queue}, records, bus=False, rand=lambda: 0.5, tally=tally, stats=JobStats(),
                      events=Events(None, tally, JobStats()), timers=Timers([queue], QUIET_TIMERS),
                      pacing=Pacing([queue.name], WorkerConfig()), clock_ms=lambda: 0.0)
    batches = settler.decide([done, fresh_error, lost, also])
    (batch, calls), = batches.values()
    assert [h for h, _ in batch] == [done, also, fresh_error]  # the completions first, batched; the lost one dropped
    assert tally.lost == 1 and lost.key not in records
    batched = queue.codec.supports("completes")
    assert [c.verb.name for c in calls] == (["completes"] if batched else ["complete", "complete"]) + ["fail"]
    assert calls[-1].argv[2] == "ValueError: boom" and "raise ValueError" in calls[-1].argv[-1]  # the traceback
    settler.again([fresh_error])  # its settle was sent when the link failed: decided again next time
    (again_batch, _), = settler.decide([]).values()
    assert [h for h, _ in again_batch] == [fresh_error]


class _RefusesNone:
    """A serializer that cannot encode None (what a task keeps for a handler that returned nothing)."""

    def dumps(self, obj):
        if obj is None:
            raise TypeError("no None here")
        return JSON.dumps(obj)

    def loads(self, data):
        return JSON.loads(data)


def test_the_settler_completes_what_returned_nothing_by_its_task_beside_the_rest(conn):
    """decide's common case (a flat job whose handler returned nothing, its lease held) completes with the
    result its task keeps for nothing; beside it, in one batch, a task that keeps no results, a returned
    value, and a task whose serializer refuses None (its job completes, marked not kept) settle as they did."""
    queue, other = Queue(conn, fresh_name("parts")), Queue(conn, fresh_name("parts"))
    keeps, keeps_none, refuses = a_task(queue.name), a_task(queue.name, result_ttl=0), \
        a_task(other.name, serializer=_RefusesNone())
    first, no_result, valued, second = held(keeps, queue), held(keeps_none, queue), held(keeps, queue), held(keeps, queue)
    refused = held(refuses, other)
    for record in (first, no_result, second, refused):
        record.outcome = policy.RETURNED_NOTHING
    valued.outcome = policy.Returned(5)
    records = {h.key: h for h in (first, no_result, valued, second, refused)}
    tally = Tally()
    settler = Settler({queue.name: queue, other.name: other}, records, bus=True, rand=lambda: 0.5, tally=tally,
                      stats=JobStats(), events=Events(None, tally, JobStats()),
                      timers=Timers([queue, other], QUIET_TIMERS), pacing=Pacing([queue.name, other.name], WorkerConfig()),
                      clock_ms=lambda: 0.0)
    batches = settler.decide([first, no_result, valued, second, refused])
    nothing, five = encode_result(JSON, None, None), encode_result(JSON, 5, None)
    batch, calls = batches[queue.name]
    assert batch == [(first, policy.COMPLETE), (valued, policy.COMPLETE), (second, policy.COMPLETE),
                     (no_result, policy.COMPLETE)]  # by retention, each group in the order its jobs came
    ids = [record.job.id for record in (first, valued, second)]
    assert calls == queue.completion_calls([ids[0], "1", nothing, ids[1], "1", five, ids[2], "1", nothing],
                                           keeps.result_ttl_ms) + queue.completion_calls([no_result.job.id, "1"], None)
    (marked, marked_calls), = [batches[other.name]]
    assert marked == [(refused, policy.COMPLETE)] and refused.not_kept is not None and first.not_kept is None
    assert marked_calls == other.completion_calls([refused.job.id, "1", refused.not_kept.encode()], refuses.result_ttl_ms)


def test_the_settler_records_each_answer(conn):
    queue = Queue(conn, fresh_name("parts"))
    task = a_task(queue.name)
    completed, retried, refused = (held(task, queue) for _ in range(3))
    records = {h.key: h for h in (completed, retried, refused)}
    for h in records.values():
        h.ended_s = 0.5
    tally, timers = Tally(), Timers([queue], QUIET_TIMERS)
    timers.run_due(0.0)  # the timers have run: they are next due a whole interval on, unless told sooner
    settler = Settler({queue.name: queue}, records, bus=False, rand=lambda: 0.5, tally=tally, stats=JobStats(),
                      events=Events(None, tally, JobStats()), timers=timers, pacing=Pacing([queue.name], WorkerConfig()),
                      clock_ms=lambda: 1000.0)
    settler.settled(queue.name, [(completed, policy.COMPLETE), (retried, policy.Fail("boom", 3, 2000)),
                                 (refused, policy.COMPLETE)],
                    [True, State.SCHEDULED, LeaseLost("complete", refused.job.id, "1")])
    assert (tally.completed, tally.retried, tally.lost) == (1, 1, 1) and not records
    assert timers.next_due_ms(0.0) == 1000.0 + 2000 + policy.PROMOTE_SLACK_MS  # the retry is promoted when due


def test_a_lost_lease_among_plain_completions_drops_that_job_alone(conn):
    queue = Queue(conn, fresh_name("parts"))
    plain, with_ctx = a_task(queue.name), a_task(queue.name, fn=lambda payload, ctx: None)
    for task in (plain, with_ctx):
        kept, lost = held(task, queue), held(task, queue)
        if task is with_ctx:  # a handler that takes a context: its lost flag is the context's
            kept.ctx, lost.ctx = (JobContext(h.job.id, queue.name, 1, None) for h in (kept, lost))
        kept.outcome = lost.outcome = policy.RETURNED_NOTHING
        lost.mark_lost()
        records, tally = {h.key: h for h in (kept, lost)}, Tally()
        batches = _settler_of(queue, records, tally).decide([kept, lost])
        assert batches == {queue.name: ([(kept, policy.COMPLETE)], queue.completion_calls([kept.job.id, "1"], None))}
        assert tally.lost == 1 and lost.key not in records


def _settler_of(queue, records, tally):
    return Settler({queue.name: queue}, records, bus=False, rand=lambda: 0.5, tally=tally, stats=JobStats(),
                   events=Events(None, tally, JobStats()), timers=Timers([queue], QUIET_TIMERS),
                   pacing=Pacing([queue.name], WorkerConfig()), clock_ms=lambda: 0.0)


def test_a_refused_settle_among_completions_is_recorded_as_lost_the_rest_completed(conn):
    queue = Queue(conn, fresh_name("parts"))
    task = a_task(queue.name)
    completed, refused = held(task, queue), held(task, queue)
    refused.stats = completed.stats
    records, tally = {h.key: h for h in (completed, refused)}, Tally()
    for record in records.values():
        record.ended_s = 0.5
    _settler_of(queue, records, tally).settled(queue.name, [(completed, policy.COMPLETE), (refused, policy.COMPLETE)],
                                               [True, LeaseLost("complete", refused.job.id, "1")])
    assert (tally.completed, tally.lost) == (1, 1) and not records
    assert completed.stats.counts["completed"] == 1  # (the lost one counted as its event: Events)


# -- waiting: the waiters' reports read --------------------------------------------------------------

def test_the_waiters_reports_claim_a_woken_queue_and_wait_out_a_rate_limit(conn):
    queue = Queue(conn, fresh_name("parts"))
    pacing, timers = Pacing([queue.name], WorkerConfig()), Timers([queue], QUIET_TIMERS)
    timers.run_due(0.0)  # the timers have run: they are next due a whole interval on, unless told sooner
    pacing.blocking, pacing.idle, pacing.paused = True, {queue.name}, {queue.name}
    tally = Tally()
    waiting = Waiting(conn, {queue.name: queue}, {}, WorkerConfig(), pacing, None, Events(None, tally, JobStats()), timers,
                      threading.Event(), clock_ms=lambda: 0.0)
    waiting.report(waiter.HeadRead(queue.name, 50))  # wire 6: the schedule's head, read before a block
    waiting.read(100.0)
    assert timers.next_due_ms(100.0) == 100.0 + 50 + policy.PROMOTE_SLACK_MS and waiting.wake.is_set()
    waiting.report(waiter.TimedOut((queue.name,), interrupted=True))  # ended by the worker: just re-armed
    waiting.read(100.0)
    assert queue.name in pacing.idle
    waiting.report(waiter.Woken((queue.name,)))  # a marker: claim it, and read the head again now
    waiting.read(120.0)
    assert queue.name not in pacing.idle and queue.name not in pacing.paused
    assert pacing.next_flow_poll[queue.name] == 120.0 and timers.next_due_ms(120.0) == 120.0
    waiting.report(waiter.RateWait(queue.name, 700))
    waiting.read(200.0)
    assert pacing.next_poll[queue.name] == 900.0 and queue.name not in pacing.idle
