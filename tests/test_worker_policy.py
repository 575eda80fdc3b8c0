"""The worker's decisions, table-tested without a server (echomq/worker/policy.py, outcome_of, tasks)."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Callable

import pytest

from echomq import App, Backoff, ConfigurationError, Delay, IdlePolicy, Job, JobContext, LeasePolicy, Retry
from echomq.worker import policy
from echomq._protocol.keys import MAX_TRACEBACK_BYTES
from echomq.worker.config import WorkerConfig
from echomq.worker.outcomes import outcome_of
from echomq.worker import pool as pool_module
from echomq.worker.pool import QUICK_HANDLER_S, DaemonPool
from support.waiting import wait_until


# -- backoff ----------------------------------------------------------------------------

@pytest.mark.parametrize("attempt, expected", [(1, 1000), (2, 2000), (3, 4000), (4, 8000), (9, 256_000),
                                               (10, 300_000), (1000, 300_000), (0, 1000)])
def test_backoff_is_exponential_and_capped(attempt, expected):
    assert policy.backoff_ms(Backoff(jitter=0.0), attempt, rand=0.9) == expected
    assert policy.backoff_ms(Backoff(jitter=0.2), attempt, rand=0.5) == expected  # the middle of the spread


@pytest.mark.parametrize("rand, expected", [(0.0, 1600), (0.25, 1800), (0.5, 2000), (0.999999, 2400)])
def test_jitter_spreads_both_ways_within_its_fraction(rand, expected):
    assert policy.backoff_ms(Backoff(jitter=0.2), 2, rand) == expected


def test_jitter_never_passes_the_cap_or_goes_negative():
    spec = Backoff(base_ms=0, max_ms=10, jitter=1.0)
    assert policy.backoff_ms(spec, 1, 0.0) == 0
    capped = Backoff(base_ms=1000, max_ms=1000, jitter=0.5)
    assert policy.backoff_ms(capped, 50, 0.999) == 1000


@pytest.mark.parametrize("kwargs", [dict(base_ms=-1), dict(factor=0.5), dict(max_ms=10, base_ms=100),
                                    dict(jitter=1.5), dict(base_ms=1.5),
                                    dict(max_ms=policy.MAX_DELAY_MS + 1)])
def test_bad_backoff_is_refused(kwargs):
    with pytest.raises(ConfigurationError):
        Backoff(**kwargs)


# -- outcomes ---------------------------------------------------------------------------

B = Backoff(base_ms=100, jitter=0.0)
HALF = (lambda: 0.5)  # noqa: E731 -- decide_outcome's random source, drawn for a backoff


def never_drawn() -> float:
    raise AssertionError("no backoff here: nothing to draw")


@pytest.mark.parametrize("outcome, settle", [
    (policy.Returned(42), policy.COMPLETE),
    (policy.Raised(ValueError("bad")), policy.Fail("ValueError: bad", 5, 400)),
    (policy.Raised(KeyError()), policy.Fail("KeyError", 5, 400)),
    (policy.RetryAsked("later", None), policy.Fail("later", 5, 400)),
    (policy.RetryAsked("later", 7), policy.Fail("later", 5, 7)),
    (policy.DelayAsked(250), policy.Postpone(250)),
])
def test_each_outcome_becomes_its_settle(outcome, settle):
    assert policy.decide_outcome(outcome, lost=False, attempt=3, max_attempts=5, backoff=B, rand=HALF) == settle


@pytest.mark.parametrize("outcome, settle", [
    (policy.Returned(42), policy.COMPLETE),
    (policy.RetryAsked("later", 7), policy.Fail("later", 5, 7)),
    (policy.DelayAsked(250), policy.Postpone(250)),
    (policy.Undecodable(ValueError("bad")), policy.Fail("ValueError: bad", 1, 0)),
])
def test_only_a_backoff_draws_from_the_random_source(outcome, settle):
    assert policy.decide_outcome(outcome, lost=False, attempt=3, max_attempts=5, backoff=B, rand=never_drawn) == settle
    assert isinstance(policy.decide_outcome(policy.Raised(ValueError()), lost=True, attempt=3, max_attempts=5,
                                            backoff=B, rand=never_drawn), policy.Drop)


@pytest.mark.parametrize("outcome", [policy.Raised(ValueError("bad")), policy.RetryAsked("later", None)])
def test_a_backoff_draws_once_from_the_random_source(outcome):
    jittered, draws = Backoff(base_ms=100, jitter=0.5), []
    for rand in (0.0, 1.0):
        decision = policy.decide_outcome(outcome, lost=False, attempt=3, max_attempts=5, backoff=jittered,
                                         rand=lambda rand=rand: draws.append(rand) or rand)
        assert decision.backoff_ms == policy.backoff_ms(jittered, 3, rand)
    assert draws == [0.0, 1.0]


@pytest.mark.parametrize("outcome", [policy.Returned(), policy.Raised(ValueError()), policy.DelayAsked(1),
                                     policy.RetryAsked("x", 1)])
def test_a_lost_lease_is_never_settled(outcome):
    decision = policy.decide_outcome(outcome, lost=True, attempt=1, max_attempts=3, backoff=B, rand=HALF)
    assert isinstance(decision, policy.Drop)


def test_an_error_whose_message_fails_is_still_described():
    class Sulky(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert policy.describe_error(Sulky()) == "Sulky: (its message could not be read)"


def test_error_text_is_bounded():
    text = policy.describe_error(RuntimeError("x" * 5000), limit=100)
    assert len(text) == 100 and text.startswith("RuntimeError: xxx") and text.endswith("...")


def test_a_raised_exception_fails_with_its_traceback_as_format_exc_prints_it():
    try:
        try:
            {}["missing"]
        except KeyError as cause:
            raise ValueError("bad") from cause
    except ValueError as exc:
        error, printed = exc, traceback.format_exc()
    decision = policy.decide_outcome(policy.Raised(error), lost=False, attempt=3, max_attempts=5, backoff=B,
                                     rand=HALF)
    assert decision == policy.Fail("ValueError: bad", 5, 400, printed)
    assert "KeyError: 'missing'" in printed and printed.endswith("ValueError: bad\n")  # the cause too
    # never raised (a timeout the worker decided, say): no traceback to keep
    assert policy.describe_traceback(ValueError("bad")) == ""


@pytest.mark.parametrize("text, limit, want", [
    ("short", 100, "short"),
    ("x" * 100, 100, "x" * 100),
    ("a\n" * 30, 50, "[... the first 50 bytes were cut ...]\n" + "a\n" * 5),  # from a line start
    ("é" * 40, 50, "[... the first 68 bytes were cut ...]\n" + "é" * 6),  # never half a character
    ("\ud800 lone", 100, "\\ud800 lone"),  # text the wire cannot carry is escaped
])
def test_keep_tail_fits_the_limit_and_keeps_the_end(text, limit, want):
    kept = policy.keep_tail(text, limit)
    assert kept == want and len(kept.encode()) <= limit


def test_a_long_traceback_keeps_its_tail_within_8_kib():
    def chain(n):
        try:
            if n == 0:
                raise KeyError("the root")
            chain(n - 1)
        except Exception as exc:
            raise RuntimeError(f"level {n}") from exc

    with pytest.raises(RuntimeError) as raised:
        chain(60)
    whole = "".join(traceback.format_exception(raised.value))
    text = policy.describe_traceback(raised.value)
    assert len(whole.encode()) > MAX_TRACEBACK_BYTES >= len(text.encode())
    assert text.startswith("[... the first ") and whole.endswith(text.split("\n", 1)[1])
    assert text.endswith("RuntimeError: level 60\n")  # the end is what is kept


def _future(value=None, error=None, cancel=False) -> Future:
    future: Future = Future()
    if cancel:
        future.cancel()
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


@pytest.mark.parametrize("future, outcome", [
    (_future(7), policy.Returned(7)),
    (_future(error=Retry("busy", delay_ms=50)), policy.RetryAsked("busy", 50)),
    (_future(error=Retry()), policy.RetryAsked("retry requested", None)),
    (_future(error=Delay(30)), policy.DelayAsked(30)),
    (_future(Delay(30)), policy.DelayAsked(30)),  # returned instead of raised: the same
    (_future(Retry("r")), policy.RetryAsked("r", None)),
])
def test_outcome_of_a_finished_handler(future, outcome):
    assert outcome_of(future.result, 0) == outcome


def test_outcome_of_a_raising_or_cancelled_handler_is_raised():
    assert isinstance(outcome_of(_future(error=ZeroDivisionError()).result, 0), policy.Raised)
    assert isinstance(outcome_of(_future(cancel=True).result, 0), policy.Raised)


# -- idle back-off and claim batches -------------------------------------------------------

@pytest.mark.parametrize("empty, wait", [(0, 0), (1, 10), (2, 20), (3, 40), (7, 640), (8, 1000), (500, 1000)])
def test_idle_back_off_grows_to_its_cap(empty, wait):
    assert policy.idle_interval_ms(IdlePolicy(), empty) == wait


def test_an_idle_queue_costs_about_one_poll_a_second():
    spec = IdlePolicy()
    waited, polls = 0, 0
    while waited < 60_000:
        polls += 1
        waited += policy.idle_interval_ms(spec, polls)
    assert polls <= 68  # eight quick polls while it empties, then one a second


@pytest.mark.parametrize("capacity, empty, batch, expected", [
    (10, 0, 10, 10), (3, 0, 10, 3), (10, 0, 4, 4), (10, 1, 10, 1), (10, 9, 10, 1), (0, 0, 10, 0), (-1, 0, 10, 0),
])
def test_claim_batch(capacity, empty, batch, expected):
    assert policy.claim_batch(capacity, empty, batch) == expected


def _claimed(group: str | None = None) -> Job:
    return Job("q", "id", None, None, 1, group=group)


@pytest.mark.parametrize("before, flat, lanes, jobs, expected", [
    ((False, False), 10, 0, [_claimed()] * 3, (True, False)),  # flat jobs found; lanes not claimed: as before
    ((True, True), 10, 0, [], (False, True)),
    ((False, False), 5, 5, [_claimed("g"), _claimed()], (True, True)),
    ((True, False), 5, 5, [_claimed("g")], (False, True)),
    ((False, True), 0, 3, [], (False, False)),  # no lane jobs; flat not claimed: as before
])
def test_claims_found_says_which_kind_gave_jobs(before, flat, lanes, jobs, expected):
    assert policy.claims_found(before, flat, lanes, jobs) == expected


def test_bad_idle_policy_is_refused():
    with pytest.raises(ConfigurationError):
        IdlePolicy(min_ms=0)
    with pytest.raises(ConfigurationError):
        IdlePolicy(min_ms=100, max_ms=10)


# -- leases ------------------------------------------------------------------------------

def test_renewals_take_every_job_half_a_tick_old_oldest_first():
    spec = LeasePolicy(lease_ms=1000)  # tick 250 ms: due once 125 ms old
    renewed_at = {"fresh": 950.0, "half": 875.0, "old": 500.0, "older": 100.0}
    assert policy.select_renewals(renewed_at, 1000.0, spec) == ["older", "old", "half"]
    assert policy.select_renewals({}, 1000.0, spec) == []


def test_a_lease_is_renewed_with_more_than_half_of_it_left():
    """Ticks every quarter lease, renewing whatever is half a tick old: the oldest a lease gets is 1.5 ticks."""
    spec = LeasePolicy(lease_ms=1000)
    worst = 0.0
    for claimed_at in range(0, 250, 5):  # claimed anywhere between two ticks at 0 and 250
        ticks = [t for t in range(250, 2000, 250) if policy.select_renewals({"j": claimed_at}, t, spec)]
        worst = max(worst, ticks[0] - claimed_at)
    assert worst <= 375 < spec.lease_ms / 2


def test_expired_are_those_without_a_renewal_for_a_whole_lease():
    spec = LeasePolicy(lease_ms=1000)
    assert policy.select_expired({"a": 0.0, "b": 1.0, "c": 500.0}, 1000.0, spec) == ["a"]


def test_lost_from_extends_names_the_zero_answers():
    assert policy.lost_from_extends(["a", "b", "c"], [1700000000000, 0, 1700000000001]) == ["b"]


@pytest.mark.parametrize("kwargs", [dict(lease_ms=50), dict(lease_ms=1000, tick_ms=600), dict(lease_ms=True)])
def test_bad_lease_policy_is_refused(kwargs):
    with pytest.raises(ConfigurationError):
        LeasePolicy(**kwargs)


# -- timers ------------------------------------------------------------------------------

@pytest.mark.parametrize("last, now, saturated, expected", [(None, 50.0, False, 50.0), (100.0, 150.0, False, 1100.0),
                                                             (100.0, 150.0, True, 150.0)])
def test_next_timer(last, now, saturated, expected):
    assert policy.next_timer_ms(last, now, 1000, saturated) == expected


# -- tasks --------------------------------------------------------------------------------

# -- waiting when idle ---------------------------------------------------------------------

def test_wait_groups_one_waiter_on_a_single_node_one_per_queue_where_a_block_names_one():
    names = [f"q{i}" for i in range(20)]
    assert policy.wait_groups(names, one_per_queue=False) == [tuple(names)]  # one BZPOPMIN over 20 markers
    assert policy.wait_groups(names, one_per_queue=True) == [(name,) for name in names]  # BCLAIM
    assert policy.wait_groups([], one_per_queue=False) == []


def test_wait_groups_on_a_cluster_one_waiter_per_slot_on_wire_4():
    slots = {"a": 7, "b": 9000, "c": 7, "d": 16000}  # a and c: names that hash to one slot
    assert policy.wait_groups(list(slots), one_per_queue=False, slots=slots) == [("a", "c"), ("b",), ("d",)]
    assert policy.wait_groups(list(slots), one_per_queue=True, slots=slots) == [(n,) for n in slots]  # BCLAIM


@pytest.mark.parametrize("capacity, stopping, expected", [
    (3, False, ("a", "c")),  # the idle ones, in the group's order
    (0, False, ()),  # no free slot: nothing to wait for
    (3, True, ()),  # stopping: no more claims, so no more waiting
])
def test_a_waiter_waits_on_the_idle_queues_of_its_group(capacity, stopping, expected):
    assert policy.to_wait(("a", "b", "c"), {"c", "a", "z"}, capacity=capacity, stopping=stopping) == expected


@pytest.mark.parametrize("blocked_on, wanted, claims, expected", [
    (("a",), ("a",), False, False),  # blocked on what it should be
    (("a", "b"), ("a",), False, False),  # waiting on more than needed is harmless: a wake re-claims nothing
    (("a",), ("a", "b"), False, True),  # b went idle since: re-block to hear it
    (("a",), (), False, False),  # wire 4: a popped marker claims nothing by itself
    (("a",), (), True, True),  # wire 6: BCLAIM would lease a job nobody may run now
])
def test_when_a_block_is_ended_early(blocked_on, wanted, claims, expected):
    assert policy.interrupt_waiter(blocked_on, wanted, claims=claims) is expected


def test_a_block_is_long_unless_a_wire_4_queue_is_paused():
    assert policy.block_timeout_ms(paused=False) == policy.BLOCK_MAX_MS
    assert policy.block_timeout_ms(paused=True) == policy.PAUSED_RECHECK_MS <= 1000  # a plain resume, seen within 1 s


@pytest.mark.parametrize("due_in, expected", [(None, None), (250, 1251.0), (0, 1001.0), (-40, 1001.0)])
def test_the_next_promote_is_when_the_schedules_head_falls_due(due_in, expected):
    assert policy.promote_at_ms(1000.0, due_in) == expected  # overdue: at once (plus the slack)


def test_the_decorator_registers_one_handler_per_queue():
    app = App()

    @app.task
    def emails(payload):
        return payload

    @app.task(queue="thumbs", max_attempts=7)
    async def make_thumb(payload, ctx):
        return ctx.idempotency_key

    assert set(app.tasks) == {"emails", "thumbs"}
    assert emails.task.max_attempts == 3 and not emails.task.is_async
    assert make_thumb.task.is_async and make_thumb.task.max_attempts == 7
    with pytest.raises(ConfigurationError, match="already has a handler"):
        app.handler("emails", print)
    with pytest.raises(ConfigurationError, match="bad queue name"):
        app.handler("bad{name}", print)
    with pytest.raises(ConfigurationError, match="max_attempts"):
        app.handler("other", print, max_attempts=0)


def test_the_decorator_names_the_keyword_when_given_a_queue_positionally():
    app = App()
    with pytest.raises(ConfigurationError, match=r"@app.task\(queue='emails'\)"):
        app.task("emails")
    with pytest.raises(ConfigurationError, match="decorates a function, not int"):
        app.task(5)
    assert app.tasks == {}


def test_a_task_reads_how_many_arguments_its_handler_takes():
    app = App()
    none = app.handler("a", lambda: None)
    one = app.handler("b", lambda payload: None)
    two = app.handler("c", lambda payload, ctx: None)
    star = app.handler("d", lambda *args: None)
    assert [task.arity for task in (none, one, two, star)] == [0, 1, 2, 2]  # (payload, ctx)[:arity]


def test_the_context_carries_the_fencing_token_and_the_lost_flag():
    ctx = JobContext("job-1", "emails", 3)
    assert ctx.idempotency_key == "job-1:3"
    assert not ctx.lease_lost
    ctx.check_lease()
    ctx.lost.set()
    assert ctx.lease_lost
    with pytest.raises(Exception, match="lease lost"):
        ctx.check_lease()


def test_the_lost_event_is_set_whether_it_is_made_before_or_after_the_worker_marks_the_lease_lost():
    before, after = JobContext("a", "q", 1), JobContext("b", "q", 1)
    waiting_on = before.lost  # a handler waiting on it from the start
    before.mark_lost()
    after.mark_lost()  # no Event yet: the flag alone
    assert waiting_on.is_set() and before.lease_lost
    assert after.lease_lost and after.lost.is_set()


def test_bad_retry_delay_and_worker_config_are_refused():
    with pytest.raises(ConfigurationError):
        Retry(delay_ms=-1)
    with pytest.raises(ConfigurationError):
        Delay(1.5)
    with pytest.raises(ConfigurationError):
        Delay(policy.MAX_DELAY_MS + 1)
    with pytest.raises(ConfigurationError):
        Retry(delay_ms=True)
    with pytest.raises(ConfigurationError):
        WorkerConfig(concurrency=0)
    with pytest.raises(ConfigurationError):
        WorkerConfig(claim_batch=0)
    assert asyncio.iscoroutinefunction(App().task(queue="x")(_coro))


async def _coro(payload):
    return payload


# -- timeouts, undecodable payloads, payload limits (issue 13) -----------------------------

def test_timed_out_jobs_are_those_past_their_deadline_earliest_first():
    assert policy.select_timed_out({"a": 300.0, "b": 100.0, "c": 500.0}, 300.0) == ["b", "a"]
    assert policy.select_timed_out({"a": 300.0}, 299.9) == []


def test_an_undecodable_payload_fails_with_a_budget_of_one_whatever_the_task_says():
    from echomq import PayloadError

    decision = policy.decide_outcome(policy.Undecodable(PayloadError("cannot decode")), lost=False, attempt=1,
                                     max_attempts=5, backoff=Backoff(), rand=HALF)
    assert decision == policy.Fail("PayloadError: cannot decode", 1, 0)


def test_a_timeout_fails_like_a_raise_and_spends_one_attempt():
    from echomq import JobTimeout

    decision = policy.decide_outcome(policy.Raised(JobTimeout(2.5)), lost=False, attempt=2, max_attempts=3,
                                     backoff=Backoff(jitter=0.0), rand=HALF)
    assert decision == policy.Fail("JobTimeout: the handler ran past its timeout of 2.5 s", 3, 2000)


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), "5", True])
def test_a_bad_timeout_is_refused_on_the_task_and_the_worker(timeout):
    with pytest.raises(ConfigurationError, match="bad timeout"):
        App().handler("q", lambda payload: None, timeout=timeout)
    with pytest.raises(ConfigurationError, match="bad timeout"):
        WorkerConfig(timeout_s=timeout)


def test_the_default_timeout_is_documented_and_none_means_no_limit():
    from echomq.worker.tasks import DEFAULT_TIMEOUT_S

    assert App().handler("q", lambda payload: None).timeout == DEFAULT_TIMEOUT_S == 300.0
    assert App().handler("q", lambda payload: None, timeout=None).timeout is None


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"x": float("-inf")}])
def test_json_refuses_non_standard_numbers_both_ways(value):
    from echomq import JSON, PayloadError
    from echomq._core.core import encode_payload

    with pytest.raises(PayloadError, match="cannot be encoded"):
        encode_payload(JSON, value, None)
    for text in (b"NaN", b"[Infinity]", b'{"x": -Infinity}'):
        with pytest.raises(ValueError, match="is not standard JSON"):
            JSON.loads(text)


def test_a_payload_over_the_limit_is_refused_and_one_at_the_limit_is_not():
    from echomq import RAW, PayloadError
    from echomq._core.core import MAX_PAYLOAD_BYTES, encode_payload

    assert MAX_PAYLOAD_BYTES == 1 << 20
    assert encode_payload(RAW, b"x" * 10, 10) == b"x" * 10
    with pytest.raises(PayloadError, match="11 bytes, over the limit of 10"):
        encode_payload(RAW, b"x" * 11, 10)
    assert encode_payload(RAW, b"x" * 11, None) == b"x" * 11


@pytest.mark.parametrize("text, ms", [("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("12h", 43_200_000),
                                      ("7d", 604_800_000), (" 0s ", 0)])
def test_durations_for_purge(text, ms):
    from echomq.cli.queues import parse_duration_ms

    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "7", "d", "1.5h", "-1s", "7 days"])
def test_bad_durations_are_refused(text):
    import click

    from echomq.cli.queues import parse_duration_ms

    with pytest.raises(click.BadParameter, match="is not a duration"):
        parse_duration_ms(text)


# -- the handler threads -------------------------------------------------------------------

def test_the_handler_pool_runs_as_many_slow_handlers_at_once_as_it_has_threads():
    # woken one at a time (a thread that takes a job wakes the next): each waits here for all
    pool, everyone, started = DaemonPool(4), threading.Barrier(4, timeout=10), SimpleQueue()
    pool.submit_all(lambda: started.put(everyone.wait()), [()] * 4)  # a claim batch, queued at once
    assert sorted(started.get(timeout=10) for _ in range(4)) == [0, 1, 2, 3]
    pool.shutdown()


def test_a_replacement_thread_takes_the_place_of_an_abandoned_one():
    pool, release, both = DaemonPool(2), threading.Event(), threading.Barrier(2, timeout=10)
    pool.submit_all(release.wait, [()])  # a handler that runs on (abandoned: it timed out)
    pool.replace_one()
    met = SimpleQueue()
    for _ in range(2):
        pool.submit_all(lambda: met.put(both.wait()), [()])
    assert sorted(met.get(timeout=10) for _ in range(2)) == [0, 1]
    release.set()
    pool.shutdown()


def _asleep(pool: DaemonPool, threads: int) -> DaemonPool:
    """``pool`` once ``threads`` of its threads sleep (none is still awake to take work unasked)."""
    wait_until(lambda: len(pool._sleeping) == threads, what=f"{threads} sleeping handler threads")
    return pool


def test_a_spreading_pool_wakes_threads_only_for_work_held_up_behind_a_slow_handler():
    # the relaying worker's pool: taking a job wakes no other thread; spread() does, for work that waited
    pool, ran = _asleep(DaemonPool(3, spread_after_s=0), 3), SimpleQueue()
    release, started = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(10)

    pool.submit_all(lambda job: slow() if job == "slow" else ran.put(job), [("slow",), ("a",), ("b",)])
    assert started.wait(10)
    assert len(pool._sleeping) == 2 and pool.queued and ran.empty()  # a and b wait behind the slow one
    pool.spread()  # waited spread_after_s: a thread each
    assert sorted(ran.get(timeout=10) for _ in range(2)) == ["a", "b"]
    release.set()
    pool.shutdown()


def _waited(pool: DaemonPool, handlers: int) -> DaemonPool:
    """``pool`` once it ran ``handlers`` handlers that wait (on I/O, say: here a sleep) 5x
    QUICK_HANDLER_S each, one after another, and its threads sleep again."""
    done: SimpleQueue[int] = SimpleQueue()

    def wait() -> None:
        time.sleep(5 * QUICK_HANDLER_S)
        done.put(1)

    for _ in range(handlers):
        pool.submit_all(wait, [()])
        done.get(timeout=10)
    return _asleep(pool, len(pool._threads))


def test_a_spreading_pool_runs_a_batch_on_a_thread_each_once_its_handlers_wait():
    # handlers that wait get threads at once, without spread(): one after another, a batch of
    # 0.5 ms calls would run at a tenth of the pace ten threads give it
    pool, everyone, started = _waited(DaemonPool(4, spread_after_s=60), 4), threading.Barrier(4, timeout=10), SimpleQueue()
    pool.submit_all(lambda: started.put(everyone.wait()), [()] * 4)
    assert sorted(started.get(timeout=10) for _ in range(4)) == [0, 1, 2, 3]
    pool.shutdown()


def test_one_slow_handler_among_quick_ones_does_not_spread_the_next_batch():
    # each time counts at most twice the bound: one quick handler the OS preempted stays one sample
    pool, release, started = _waited(DaemonPool(3, spread_after_s=60), 1), threading.Event(), threading.Event()
    def run(job: str) -> None:
        if job == "slow":
            started.set()
            release.wait(10)

    pool.submit_all(run, [("slow",), ("a",), ("b",)])
    assert started.wait(10)
    assert len(pool._sleeping) == 2 and pool.queued  # a and b wait for spread()
    release.set()
    pool.shutdown()


class _Clock:
    """The pool's clock (pool.py reads ``time.monotonic`` only), moved by hand, its reads counted."""

    def __init__(self) -> None:
        self.now, self.reads = 0.0, 0

    def monotonic(self) -> float:
        self.reads += 1
        return self.now


def test_a_run_of_quick_handlers_reads_the_clock_twice_not_once_a_handler(monkeypatch):
    # a relaying pool times its handlers by the run (those one thread takes one after another): a read
    # when the run starts and one when it ends; it read one a handler (and one more as it went to sleep)
    clock = _Clock()
    monkeypatch.setattr(pool_module, "time", clock)
    pool, ran = _asleep(DaemonPool(2, spread_after_s=60), 2), SimpleQueue()
    clock.reads = 0
    pool.submit_all(ran.put, [(n,) for n in range(10)])  # a claim batch: one read, as it began to queue
    assert sorted(ran.get(timeout=10) for _ in range(10)) == list(range(10))
    _asleep(pool, 2)
    assert clock.reads == 1 + 2
    pool.shutdown()


def test_a_quick_run_takes_the_rest_of_its_batch_and_stops_at_a_shutdown():
    # quick handlers: the thread already awake runs the whole claim batch, taking each job without the
    # pool's mutex; a shutdown meanwhile still starts no queued job (its run looks before each take)
    pool, ran = _asleep(DaemonPool(2, spread_after_s=60), 2), SimpleQueue()
    pool.submit_all(ran.put, [(n,) for n in range(10)])
    assert [ran.get(timeout=10) for _ in range(10)] == list(range(10))  # one thread: in order
    _asleep(pool, 2)
    assert pool._taken == 10

    def first(n: int) -> None:
        ran.put(n)
        pool.shutdown()

    pool.submit_all(lambda n: first(n) if n == 0 else ran.put(n), [(n,) for n in range(5)])
    for thread in pool._threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in pool._threads)
    assert ran.get(timeout=1) == 0 and ran.empty() and len(pool._work) == 4  # the other four never started


def test_a_run_is_averaged_in_as_that_many_handlers_of_its_mean():
    # ten handlers of one run, each waiting 5x QUICK_HANDLER_S, count as ten such (not as one): the next
    # batch gets a thread each at once, as after ten runs of one
    pool = _waited(DaemonPool(4, spread_after_s=60), 0)
    done: SimpleQueue[int] = SimpleQueue()
    pool.submit_all(lambda: (time.sleep(5 * QUICK_HANDLER_S), done.put(1)), [()] * 10)
    for _ in range(10):
        done.get(timeout=10)
    everyone, started = threading.Barrier(4, timeout=10), SimpleQueue()
    pool.submit_all(lambda: started.put(everyone.wait()), [()] * 4)
    assert sorted(started.get(timeout=10) for _ in range(4)) == [0, 1, 2, 3]
    pool.shutdown()


def test_work_held_up_is_spread_once_it_has_not_moved_for_spread_after_s_since_a_look_saw_it_move(monkeypatch):
    # spread() tells whether queued work moved by the count of callables taken, not by a clock read a
    # handler: work seen moving counts as held up from that look on
    clock = _Clock()
    monkeypatch.setattr(pool_module, "time", clock)
    pool, ran = _asleep(DaemonPool(3, spread_after_s=1.0), 3), SimpleQueue()
    release, started = threading.Event(), threading.Event()

    def run(job: str) -> None:
        if job == "slow":
            started.set()
            release.wait(10)
        else:
            ran.put(job)

    pool.submit_all(run, [("slow",), ("a",), ("b",)])  # queued at 0.0
    assert started.wait(10)
    clock.now = 5.0
    pool.spread()  # the slow one was taken since the last look: a and b held up from now, not from 0.0
    clock.now = 5.5
    pool.spread()
    assert len(pool._sleeping) == 2 and pool.queued and ran.empty()
    clock.now = 6.0
    pool.spread()  # no move for spread_after_s: a thread each
    assert sorted(ran.get(timeout=10) for _ in range(2)) == ["a", "b"]
    release.set()
    pool.shutdown()


def test_what_a_pool_thread_submits_from_its_continuation_runs_on_that_thread():
    # a relay claims the next batch from the thread that ran the last handler: no other thread wakes
    pool, threads = _asleep(DaemonPool(2, spread_after_s=0), 2), SimpleQueue()

    def first() -> Callable[[], None]:
        threads.put(threading.current_thread())
        return lambda: pool.submit_all(lambda: threads.put(threading.current_thread()), [()])

    pool.submit_all(first, [()])
    assert threads.get(timeout=10) is threads.get(timeout=10)
    pool.shutdown()


def test_the_handler_pool_starts_no_queued_job_after_its_shutdown():
    pool, release, ran = DaemonPool(1), threading.Event(), []
    pool.submit_all(release.wait, [()])
    pool.submit_all(ran.append, [("late",)])  # queued behind the running one
    pool.shutdown()
    release.set()
    for thread in pool._threads:
        thread.join(10)
        assert not thread.is_alive()
    assert ran == []


FLOW_BACKOFF = IdlePolicy(min_ms=10, max_ms=5000)


@pytest.mark.parametrize("found, due, idle_blocking, empty, expected", [
    (False, None, True, 3, float("inf")),  # no flow work, idle: the waiter's marker says when
    (False, None, False, 1, 1000 + 5000),  # no flow work, busy: once per max_ms, not from 10 ms up
    (False, 0, False, 1, 1000 + 10),  # flows under way: the back-off
    (False, 0, True, 3, 1000 + 40),
    (True, 0, False, 0, 1000),  # it found jobs: again at once
    (False, 200, True, 9, 1000 + 200 + 5),  # a retry falls due before the back-off ends: then
    (False, 9000, False, 1, 1000 + 10),
])
def test_next_flow_poll(found, due, idle_blocking, empty, expected):
    assert policy.next_flow_poll_ms(1000, found=found, due_ms=due, idle_blocking=idle_blocking, empty_polls=empty,
                                    backoff=FLOW_BACKOFF, slack_ms=5) == expected


# -- settling in fuller batches ---------------------------------------------------------

@pytest.mark.parametrize("now, running, youngest, wait, expected", [
    (100.0, 0, 99.5, 1.0, 100.0),  # nothing else runs: settle now
    (100.0, 0, None, 1.0, 100.0),  # nothing ever started (a timeout's or a bad payload's verdict)
    (100.0, 3, 99.8, 1.0, 100.8),  # a batch just started: wait for it, until its youngest has run 1 ms
    (100.0, 3, 99.0, 1.0, 100.0),  # the youngest has run the bound: slow ones, settle now
    (100.0, 3, 90.0, 1.0, 100.0),  # all running long: never later than now
    (100.0, 3, 99.8, 0.0, 100.0),  # 0: settle at once, as without the bound
    (100.0, 1, 100.0, 5.0, 105.0),  # a longer bound waits longer, never more than it
])
def test_settle_at_waits_for_a_young_batch_at_most_the_bound(now, running, youngest, wait, expected):
    assert policy.settle_at_ms(now, running=running, youngest_start_ms=youngest, wait_ms=wait) == expected


@pytest.mark.parametrize("settle_wait, look", [
    (1.0, policy.RELAY_LOOK_MS),  # the default: no more often than RELAY_LOOK_MS, not every 1 ms
    (0.5, policy.RELAY_LOOK_MS),
    (20.0, 20.0),  # a longer settle wait looks in as often as it waits, as before
])
def test_relays_are_looked_in_on_no_more_often_than_relay_look_ms(settle_wait, look):
    assert policy.relay_look_ms(settle_wait) == look


@pytest.mark.parametrize("settle_at, due, timer, settle_wait, expected", [
    (101.0, False, 500.0, 1.0, 100.0 + policy.RELAY_LOOK_MS),  # the batch started at 100: looked at 5 ms on
    (101.0, False, 102.0, 1.0, 102.0),  # a timer (a renewal, a heartbeat) due sooner comes first
    (101.0, True, 500.0, 1.0, 500.0),  # due already: an outcome wakes the loop, the look waits for the timers
    (120.0, False, 500.0, 20.0, 120.0),  # a settle wait above RELAY_LOOK_MS: looked at its settle, as before
])
def test_a_relayed_batch_is_looked_at_relay_look_ms_after_it_started(settle_at, due, timer, settle_wait, expected):
    assert policy.relay_look_at_ms(settle_at, due, timer, settle_wait) == expected


@pytest.mark.parametrize("wait", [-1, 1001, float("nan")])
def test_a_settle_wait_out_of_range_is_refused(wait):
    with pytest.raises(ConfigurationError, match="settle_wait_ms"):
        WorkerConfig(settle_wait_ms=wait)


# -- looking for cancels (issue 37 item 7) ------------------------------------------------------

@pytest.mark.parametrize("claimed_at, now, looked, next_look", [
    ({}, 1000, [], float("inf")),  # nothing held: no look, ever
    ({"a": 900}, 1000, [], 1400),  # held 100 ms: looked at once it has run CANCEL_CHECK_MS
    ({"a": 500}, 1000, ["a"], 1500),  # held 500 ms: looked at now, and every 500 ms while it runs
    ({"a": 0, "b": 800}, 1000, ["a"], 1300),  # the younger one comes of age before the next look
    ({"a": 0, "b": 100}, 1000, ["a", "b"], 1500),
])
def test_select_cancel_checks(claimed_at, now, looked, next_look):
    assert policy.CANCEL_CHECK_MS == 500
    assert policy.select_cancel_checks(claimed_at, now) == (looked, next_look)


def test_a_cancel_is_seen_within_one_look_of_it_whenever_it_comes():
    """Simulated: a job claimed at 0, cancelled at any ms c; the looks select_cancel_checks schedules
    see it (the job looked at, after c) by c + CANCEL_CHECK_MS."""
    every = policy.CANCEL_CHECK_MS
    for cancel_at in range(0, 3 * every, 37):
        now, seen = 0.0, None
        while seen is None:
            looked, next_look = policy.select_cancel_checks({"a": 0.0}, now)
            if "a" in looked and now >= cancel_at:
                seen = now
            now = next_look
        assert cancel_at <= seen <= cancel_at + every


@pytest.mark.parametrize("state, last_error, cancelled, said", [
    ("dead", "cancelled", True, "cancelled (Queue.cancel, emq cancel or the dashboard) while it ran"),
    ("dead", "stalled", False, "lease lost: it is dead now (stalled)"),
    ("pending", None, False, "lease lost: it is pending again (its lease ran out, and the sweep took it back)"),
    ("active", None, False, "lease lost: it is active again"),
    (None, None, False, "lease lost: its row is gone"),
])
def test_why_a_held_job_is_gone(state, last_error, cancelled, said):
    gone = policy.why_gone(state, last_error)
    assert gone.cancelled is cancelled and gone.reason.startswith(said)
