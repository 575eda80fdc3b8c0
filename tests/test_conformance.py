"""Conformance: the ordinary path of every verb, on both wires (SPEC §3), through both clients
(the sync ``echomq.Queue`` and ``echomq.aio.Queue``, driven through ``helpers.AwaitingQueue``).

Each test dumps the queue's keys before and after and asserts the whole after-state:
the reply, every key written, every field, every score. Time-valued scores are
bounded by the server clock read just before and just after the call. On wire 6
the native verbs add exactly what SPEC §5 allows on the ordinary path: ``lease_epoch``
(CLAIM, EXTEND, EXTENDS). ``failures`` (FAIL) is written on both wires (SPEC §9.1).
"""

from __future__ import annotations

import threading

import pytest

from echomq import (RAW, ConfigurationError, Counts, Enqueued, Job, JobFailed, JobNotFound, LeaseLost, PayloadError,
                    Queue, State, StateError, Status)
from echomq._client.connection import build_call
from echomq._protocol.keys import MAX_TRACEBACK_BYTES
from echomq._protocol.verbs import JOB_CORE_TOKENS, OPTIONAL, OPTIONAL_TOKENS, READS, VERBS
from support.dataset import KEEP_MS, TIME, H, K, R, Z, queue_unchanged, snap
from support.queues import AwaitingQueue
from support.waiting import server_ms, wait_server_past, wait_until

# --------------------------------------------------------------------------- expected-state builders


def epoch(q) -> bytes:
    return q.connection.client.info("server")["run_id"].encode()


def row(q, state: str, payload=b"p", attempts=0, *, claimed=False, failures=None, failed=None, **extra) -> tuple:
    """The row as the verb leaves it: ``failures`` on both wires (SPEC §9.1), the time fields
    (``created``; ``started`` once claimed; ``failed`` once failed, by default when ``failures``
    is written), the native extra ``lease_epoch`` only on wire 6 (SPEC §5, ordinary path)."""
    fields = {"state": state, "payload": payload, "attempts": attempts, "created": TIME, **extra}
    if claimed:
        fields["started"] = TIME
    if failed or (failed is None and failures is not None):
        fields["failed"] = TIME
    if failures is not None:
        fields["failures"] = failures
    if q.connection.wire == 6 and claimed:
        fields["lease_epoch"] = epoch(q)
    return H(fields)


class Clock:
    """The server's clock just before and just after a call: bounds for any time-valued score."""

    def __init__(self, q) -> None:
        self.client = q.connection.client

    def __enter__(self) -> "Clock":
        self.before = server_ms(self.client)
        return self

    def __exit__(self, *exc) -> None:
        self.after = server_ms(self.client)

    def check(self, value: float, offset: int) -> float:
        assert self.before + offset <= value <= self.after + offset, (value, self.before, self.after, offset)
        return value


def score_of(state: dict, key: bytes, member: str) -> float:
    kind, members = state[key]
    assert kind == "zset"
    return dict(members)[member.encode()]


@pytest.fixture(params=["sync", "async"])
def q(request, raw_queue, server, wire):
    """A fresh queue with the RAW serializer, so payloads are compared as the exact bytes stored;
    once as ``echomq.Queue``, once as ``echomq.aio.Queue`` (same name, same server)."""
    if request.param == "sync":
        yield raw_queue
        return
    awaiting = AwaitingQueue(server.url, wire, raw_queue)
    try:
        yield awaiting
    finally:
        awaiting.close()


def claimed(q, job_id="a", payload=b"p", priority=0, lease_ms=60_000):
    q.enqueue(payload, id=job_id, priority=priority)
    job = q.claim(lease_ms)
    assert job is not None and job.id == job_id
    return job


# --------------------------------------------------------------------------- ENQUEUE


def test_enqueue_writes_the_row_and_pending(q):
    assert snap(q) == {}
    assert q.enqueue(b"p", id="a") == Enqueued("a", True)
    assert snap(q) == {K(q, "pending"): Z(("a", 0)), R(q, "a"): row(q, "pending")}


def test_enqueue_with_priority_writes_the_field_and_the_score(q):
    assert q.enqueue(b"x", id="hi", priority=7).created
    assert q.enqueue(b"y", id="lo", priority=0).created
    assert snap(q) == {
        K(q, "pending"): Z(("lo", 0), ("hi", 7)),
        R(q, "hi"): row(q, "pending", b"x", priority=7),
        R(q, "lo"): row(q, "pending", b"y"),  # priority 0 writes no field
    }


def test_enqueue_default_id_is_generated(q):
    first, second = q.enqueue(b"1"), q.enqueue(b"2")
    assert first.created and second.created and first.id < second.id
    assert [m for m, _ in q.ids(State.PENDING)] == [first.id, second.id]


@pytest.mark.parametrize("where", ["pending", "active", "scheduled", "dead"])
def test_enqueue_of_an_existing_id_writes_nothing(q, where):
    if where == "scheduled":
        q.schedule(b"old", 60_000, id="a")
    else:
        q.enqueue(b"old", id="a")
    if where in ("active", "dead"):
        job = q.claim(60_000)
        if where == "dead":
            q.fail(job, "e", max_attempts=1)
    with queue_unchanged(q):
        assert q.enqueue(b"new", id="a", priority=5) == Enqueued("a", False)
        assert q.schedule(b"new", 5, id="a") == Enqueued("a", False)


# --------------------------------------------------------------------------- CLAIM


def test_claim_pops_the_head_and_leases_it(q):
    q.enqueue(b"p", id="a")
    with Clock(q) as clock:
        job = q.claim(5_000)
    assert (job.id, job.raw_payload, job.payload, job.attempt, job.token) == ("a", b"p", b"p", 1, "1")
    after = snap(q)
    deadline = clock.check(score_of(after, K(q, "active"), "a"), 5_000)
    assert after == {K(q, "active"): Z(("a", deadline)), R(q, "a"): row(q, "active", attempts=1, claimed=True)}


def test_claim_again_after_retry_adds_one_to_attempts(q):
    job = claimed(q)
    q.fail(job, "e", max_attempts=5)
    again = q.claim(60_000)
    assert again.id == "a" and again.attempt == 2 and again.token == "2"
    assert q.job("a")["attempts"] == "2"


def test_claim_on_empty_pending_answers_none_and_writes_nothing(q):
    with queue_unchanged(q):
        assert q.claim(1_000) is None


def test_claim_while_paused_answers_none_and_writes_nothing(q):
    q.enqueue(b"p", id="a")
    q.pause()
    with queue_unchanged(q):
        assert q.claim(1_000) is None
    q.resume()
    assert q.claim(1_000).id == "a"


def test_claim_of_a_ghost_head_pops_it_and_answers_empty(q):
    client = q.connection.client
    client.zadd(q.keys.pending, {"ghost": 0})
    q.enqueue(b"p", id="real", priority=1)
    before = snap(q)
    assert q.claim(1_000) is None
    expected = dict(before)
    expected[K(q, "pending")] = Z(("real", 1))
    assert snap(q) == expected  # popped, no row minted, the next job untouched
    assert q.claim(60_000).id == "real"


# --------------------------------------------------------------------------- EXTEND, EXTENDS


def test_extend_rescores_the_lease(q):
    job = claimed(q, lease_ms=1_000)
    before = snap(q)
    with Clock(q) as clock:
        deadline = q.extend(job, 9_000)
    clock.check(deadline, 9_000)
    expected = dict(before)
    expected[K(q, "active")] = Z(("a", deadline))
    assert snap(q) == expected


def test_extend_with_explicit_id_and_token(q):
    claimed(q)
    assert q.extend("a", 2_000, token=1) > 0
    assert q.extend("a", 2_000, token="1") > 0


@pytest.mark.parametrize("job_id,token", [("a", "2"), ("a", "0"), ("a", "01"), ("a", " 1"), ("nope", "1")])
def test_extend_without_the_token_is_lease_lost_and_writes_nothing(q, job_id, token):
    claimed(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost) as info:
            q.extend(job_id, 2_000, token=token)
    assert (info.value.verb, info.value.job_id, info.value.token) == ("extend", job_id, token)


def test_extends_answers_per_pair_with_one_deadline(q):
    a = claimed(q, "a")
    b = claimed(q, "b")
    before = snap(q)
    with Clock(q) as clock:
        answers = q.extend_many([a, b, ("ghost", "1"), ("a", "9")], 7_000)
    assert len(answers) == 4 and answers[2:] == [0, 0]
    assert answers[0] == answers[1]
    clock.check(answers[0], 7_000)
    expected = dict(before)
    expected[K(q, "active")] = Z(("a", answers[0]), ("b", answers[0]))
    assert snap(q) == expected


def test_extend_many_splits_past_the_extends_pair_limit(q):
    """EXTENDS takes at most 1000 pairs (SPEC §3); the API sends 1001 leases as two commands."""
    made = q.enqueue_many([b"p"] * 1001)
    jobs = [q.claim(60_000) for _ in made]
    answers = q.extend_many(jobs, 120_000)
    assert len(answers) == 1001 and all(a > 0 for a in answers)
    assert {s for _, s in q.ids(State.ACTIVE, count=2000)} == set(answers)
    assert len(set(answers)) <= 2  # one deadline per command
    assert all(q.complete_many(jobs))  # and leave the shared server small for the digests that follow
    assert q.counts().total == 0


# --------------------------------------------------------------------------- COMPLETE


def test_complete_deletes_the_row_and_counts(q):
    job = claimed(q)
    q.enqueue(b"other", id="b")
    q.complete(job)
    assert snap(q) == {
        K(q, "pending"): Z(("b", 0)),
        R(q, "b"): row(q, "pending", b"other"),
        K(q, "metrics:completed"): H({"count": 1}),
    }
    assert q.metrics() == {"completed": 1, "failed": 0}
    q.complete(q.claim(60_000))
    assert q.metrics() == {"completed": 2, "failed": 0}
    assert snap(q) == {K(q, "metrics:completed"): H({"count": 2})}


@pytest.mark.parametrize("token", ["2", "0", "", "1 "])
def test_complete_without_the_token_is_lease_lost_and_writes_nothing(q, token):
    claimed(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.complete("a", token=token)


def test_complete_of_no_row_is_lease_lost(q):
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.complete("nope", token=1)


def test_complete_many_reports_per_job(q):
    a, b = claimed(q, "a"), claimed(q, "b")
    q.complete(b)
    assert q.complete_many([a, b]) == [True, False]
    assert snap(q) == {K(q, "metrics:completed"): H({"count": 2})}


SETTLES = {
    "complete": lambda q, job: q.complete(job),
    "fail": lambda q, job: q.fail(job, "e", max_attempts=5),
    "delay": lambda q, job: q.delay(job, 1_000),
    "extend": lambda q, job: q.extend(job, 1_000),
}


@pytest.mark.parametrize("settle", sorted(SETTLES))
def test_a_settle_after_the_sweep_took_the_job_back_is_lease_lost(q, settle):
    """The sweep re-claimed the job for someone else: the old token no longer matches, 0 on both wires."""
    expire(q, "a")
    assert q.stalled_check(max_stalled=5).recovered == ["a"]
    old = claimed_again(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost) as info:
            SETTLES[settle](q, old)
    assert (info.value.verb, info.value.job_id, info.value.token, info.value.refusal) == (settle, "a", "1", None)


def claimed_again(q):
    job = q.claim(60_000)
    assert job.attempt == 2
    return Job(job.queue, job.id, job.payload, job.raw_payload, 1)  # the first claim's handle, now stale


@pytest.mark.parametrize("settle", sorted(SETTLES))
def test_a_settle_of_a_row_no_longer_active_is_lease_lost(q, settle):
    """The token matches but the sweep put the row back in pending: both wires refuse EMQSTATE
    (the scripts check the row's state too, SPEC §9.1), which the client raises as LeaseLost,
    keeping the refusal (``refusal``, and the cause)."""
    (job,) = expire(q, "a")
    assert q.stalled_check(max_stalled=5).recovered == ["a"]  # pending again, attempts still 1
    with queue_unchanged(q):
        with pytest.raises(LeaseLost) as info:
            SETTLES[settle](q, job)
    assert (info.value.verb, info.value.job_id, info.value.token) == (settle, "a", "1")
    assert isinstance(info.value.refusal, StateError) and info.value.__cause__ is info.value.refusal
    assert info.value.refusal.reply in str(info.value)


def test_the_batch_forms_pipeline_and_answer_per_job(q):
    made = q.enqueue_many([b"1", b"2", b"3"], priority=2)
    assert [e.created for e in made] == [True, True, True]
    jobs = q.claim_many(2, 60_000)
    assert [j.id for j in jobs] == [e.id for e in made[:2]] and [j.raw_payload for j in jobs] == [b"1", b"2"]
    answers = q.settle_many([q.complete_call(jobs[0]), q.fail_call(jobs[1], "x", max_attempts=1),
                             q.complete_call(jobs[0])])
    assert answers[:2] == [True, State.DEAD] and isinstance(answers[2], LeaseLost)
    settled, more = q.settle_and_claim([], 5, 60_000)
    assert settled == [] and [j.id for j in more] == [made[2].id]
    assert q.extend_many(more + [jobs[0]], 60_000)[1] == 0
    assert q.counts() == Counts(0, 1, 0, 1, False)


# --------------------------------------------------------------------------- SCHEDULE, PROMOTE


def test_schedule_writes_the_row_and_the_due_time(q):
    with Clock(q) as clock:
        assert q.schedule(b"s", 60_000, id="s", priority=3) == Enqueued("s", True)
    after = snap(q)
    due = clock.check(score_of(after, K(q, "schedule"), "s"), 60_000)
    assert after == {K(q, "schedule"): Z(("s", due)), R(q, "s"): row(q, "scheduled", b"s", priority=3)}


def test_promote_moves_due_rows_lowest_first_up_to_limit(q):
    q.schedule(b"1", 0, id="d1", priority=2)
    q.schedule(b"2", 0, id="d2")
    q.schedule(b"3", 600_000, id="later")
    wait_server_past(q.connection.client, score_of(snap(q), K(q, "schedule"), "d2"))
    before = snap(q)
    assert q.promote(limit=1) == 1
    after = snap(q)
    expected = dict(before)
    expected[K(q, "schedule")] = Z(*[(m, s) for m, s in before[K(q, "schedule")][1] if m != b"d1"])
    expected[K(q, "pending")] = Z(("d1", 2))
    expected[R(q, "d1")] = row(q, "pending", b"1", priority=2)
    assert after == expected
    assert q.promote(limit=10) == 1
    assert q.promote() == 0
    assert snap(q)[K(q, "pending")] == Z(("d2", 0), ("d1", 2))
    assert snap(q)[R(q, "d2")] == row(q, "pending", b"2")
    assert [m for m, _ in q.ids(State.SCHEDULED)] == ["later"]


def test_promote_with_nothing_due_writes_nothing(q):
    q.schedule(b"x", 600_000, id="later")
    with queue_unchanged(q):
        assert q.promote() == 0


# --------------------------------------------------------------------------- DELAY


def test_delay_moves_the_held_job_to_schedule(q):
    job = claimed(q)
    with Clock(q) as clock:
        due = q.delay(job, 30_000)
    clock.check(due, 30_000)
    assert snap(q) == {K(q, "schedule"): Z(("a", due)), R(q, "a"): row(q, "scheduled", attempts=1, claimed=True)}


def test_delay_without_the_token_writes_nothing(q):
    claimed(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.delay("a", 1_000, token=2)


# --------------------------------------------------------------------------- FAIL


def test_fail_without_backoff_returns_to_pending_at_its_priority(q):
    job = claimed(q, priority=4)
    assert q.fail(job, "boom", max_attempts=3) is State.PENDING
    assert snap(q) == {
        K(q, "pending"): Z(("a", 4)),
        R(q, "a"): row(q, "pending", attempts=1, claimed=True, failures=1, priority=4, last_error="boom"),
    }


def test_fail_with_backoff_schedules_the_retry(q):
    job = claimed(q)
    with Clock(q) as clock:
        assert q.fail(job, "later", max_attempts=3, backoff_ms=20_000) is State.SCHEDULED
    after = snap(q)
    due = clock.check(score_of(after, K(q, "schedule"), "a"), 20_000)
    assert after == {
        K(q, "schedule"): Z(("a", due)),
        R(q, "a"): row(q, "scheduled", attempts=1, claimed=True, failures=1, last_error="later"),
    }


def test_fail_out_of_budget_goes_dead_and_counts(q):
    job = claimed(q, priority=9)
    with Clock(q) as clock:
        assert q.fail(job, "fatal", max_attempts=1, backoff_ms=5_000) is State.DEAD
    died = clock.check(score_of(snap(q), K(q, "dead"), "a"), 0)  # the dead score is the time it died
    assert snap(q) == {
        K(q, "dead"): Z(("a", died)),
        R(q, "a"): row(q, "dead", attempts=1, claimed=True, failures=1, priority=9, last_error="fatal"),
        K(q, "metrics:failed"): H({"count": 1}),
    }
    assert q.metrics() == {"completed": 0, "failed": 1}


def test_fail_budget_on_the_ordinary_path(q):
    """Claim, fail, claim, fail with max_attempts=2: a retry, then dead, on both wires."""
    job = claimed(q)
    assert q.fail(job, "one", max_attempts=2) is State.PENDING
    job = q.claim(60_000)
    assert job.attempt == 2
    assert q.fail(job, "two", max_attempts=2) is State.DEAD
    assert snap(q)[R(q, "a")] == row(q, "dead", attempts=2, claimed=True, failures=2, last_error="two")


def test_fail_keeps_the_traceback_beside_last_error(q):
    """docs/spec.md §11.6: the traceback is written in the same step as the failure, on every path;
    a FAIL without one leaves the field as it is."""
    job = claimed(q)
    trace = "Traceback (most recent call last):\n  File \"jobs.py\", line 3, in send\nValueError: boom ü"
    assert q.fail(job, "ValueError: boom ü", max_attempts=3, traceback=trace) is State.PENDING
    assert snap(q)[R(q, "a")] == row(q, "pending", attempts=1, claimed=True, failures=1,
                                     last_error="ValueError: boom ü", traceback=trace)
    assert q.fail(q.claim(60_000), "two", max_attempts=3) is State.PENDING
    assert snap(q)[R(q, "a")] == row(q, "pending", attempts=2, claimed=True, failures=2, last_error="two",
                                     traceback=trace)
    longest = "é" * (MAX_TRACEBACK_BYTES // 2)
    assert q.fail(q.claim(60_000), "three", max_attempts=3, traceback=longest) is State.DEAD
    assert snap(q)[R(q, "a")] == row(q, "dead", attempts=3, claimed=True, failures=3, last_error="three",
                                     traceback=longest)


def test_a_traceback_over_8_kib_is_refused_before_sending(q):
    job = claimed(q)
    with queue_unchanged(q):
        with pytest.raises(ConfigurationError, match="bad traceback of 8193 bytes"):
            q.fail(job, "e", max_attempts=3, traceback="x" * (MAX_TRACEBACK_BYTES + 1))
        with pytest.raises(ConfigurationError, match="bad traceback"):
            q.fail(job, "e", max_attempts=3, traceback=b"bytes")


def test_a_wire_6_module_without_fail_traceback_gets_the_failure_without_it(q, wire):
    """SPEC §9.4: the late argument goes only to a module whose EMQ.VERSION lists its token; the
    failure itself is recorded either way."""
    codec = q.codec  # the connection the queue sends on (the asyncio one for an async queue)
    if wire == 4:
        assert codec.carries("fail", "traceback")  # the script reads it
        return
    assert "fail.traceback" in codec.tokens and codec.carries("fail", "traceback")
    codec.tokens = codec.tokens - {"fail.traceback"}  # a module that predates it
    assert not codec.carries("fail", "traceback")
    assert q.fail_call(claimed(q), "e", max_attempts=3, traceback="tb").argv == ("a", "1", "e", 3, 0)
    assert q.fail("a", "boom", max_attempts=3, token=1, traceback="Traceback ...") is State.PENDING
    assert snap(q)[R(q, "a")] == row(q, "pending", attempts=1, claimed=True, failures=1, last_error="boom")


def test_fail_without_the_token_writes_nothing(q):
    claimed(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.fail("a", "e", max_attempts=1, token=7)
        with pytest.raises(LeaseLost):
            q.fail("nope", "e", max_attempts=1, token=1)


# --------------------------------------------------------------------------- the bus (docs/spec.md §12)


def test_publish_completes_and_keeps_the_record_for_its_retention(q):
    """The record as PUBLISH writes it (docs/spec.md §12): the field `a` of `done`, the token, the
    row's times and its own, then the result; its own expiry (tests/test_results_layout.py reads
    each byte)."""
    job = claimed(q)
    assert q.publish(job, b"r", retention_ms=KEEP_MS) is None
    state = snap(q)
    assert state.keys() == {K(q, "done"), K(q, "metrics:completed")}
    assert state[K(q, "metrics:completed")] == H({"count": 1})
    assert state[K(q, "done")] == H(a=b"1,<time>,<time>,<time>,r")  # snap() checked and masked its times
    (ttl,) = q.connection.client.execute_command("HPTTL", K(q, "done"), "FIELDS", 1, "a")
    assert KEEP_MS - 60_000 < ttl <= KEEP_MS
    assert q.status("a") is Status.COMPLETED
    assert q.result("a", timeout=0) == b"r"


def test_publish_with_no_retention_keeps_no_record(q):
    q.publish(claimed(q), b"r", retention_ms=0)
    assert snap(q) == {K(q, "metrics:completed"): H({"count": 1})}
    assert q.status("a") is Status.UNKNOWN
    with pytest.raises(JobNotFound):
        q.result("a", timeout=0)


def test_progress_is_kept_in_the_row(q):
    job = claimed(q)
    assert q.progress(job, {"pct": 50}) is None
    assert snap(q) == {K(q, "active"): snap(q)[K(q, "active")],
                       R(q, "a"): row(q, "active", attempts=1, claimed=True, progress=b'{"pct":50}')}
    with queue_unchanged(q), pytest.raises(PayloadError, match="progress"):
        q.progress(job, "x" * (64 * 1024))  # over 64 KiB once encoded: refused before sending


def test_progress_of_reads_the_last_progress_reported_and_writes_nothing(q):
    """The documented read of a job's progress (the row's ``progress``, decoded), on both clients."""
    job = claimed(q)
    with queue_unchanged(q):
        assert q.progress_of("a") is None  # none reported yet
    q.progress(job, {"pct": 50})
    q.progress(job, {"pct": 75, "of": "pages"})
    with queue_unchanged(q):
        assert q.progress_of("a") == {"pct": 75, "of": "pages"}
        assert q.progress_of("no-such-job") is None
    q.fail(job, "boom", max_attempts=1)
    assert q.progress_of("a") == {"pct": 75, "of": "pages"}  # a dead job keeps the last word it reported
    with pytest.raises(ConfigurationError):
        q.progress_of("")


def test_failures_incr_is_fail_with_the_traceback_and_a_death_told(q):
    """FAIL's arguments and move (docs/spec.md §12, §11.6): the traceback in the same HSET, five
    ARGV leave it as it is; a death is what a result waiter reads."""
    job = claimed(q, priority=2)
    assert q.failures_incr(job, "boom", max_attempts=2, traceback="tb") is State.PENDING
    assert snap(q) == {
        K(q, "pending"): Z(("a", 2)),
        R(q, "a"): row(q, "pending", attempts=1, claimed=True, failures=1, priority=2, last_error="boom",
                       traceback="tb"),
    }
    assert q.failures_incr(q.claim(60_000), "fatal", max_attempts=2) is State.DEAD
    assert snap(q)[R(q, "a")] == row(q, "dead", attempts=2, claimed=True, failures=2, priority=2,
                                     last_error="fatal", traceback="tb")
    assert q.status("a") is Status.DEAD
    with pytest.raises(JobFailed) as failed:
        q.result("a", timeout=0)
    assert (failed.value.last_error, failed.value.traceback) == ("fatal", "tb")


def test_the_bus_verbs_without_the_lease_write_nothing(q):
    claimed(q)
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.publish("a", b"r", retention_ms=1, token=7)
        with pytest.raises(LeaseLost):
            q.progress("a", 1, token=7)
        with pytest.raises(LeaseLost):
            q.failures_incr("nope", "e", max_attempts=1, token=1)
        with pytest.raises(ConfigurationError, match="bad traceback of 8193 bytes"):
            q.failures_incr("a", "e", max_attempts=1, token=1, traceback="x" * (MAX_TRACEBACK_BYTES + 1))
        with pytest.raises(ConfigurationError, match="retention_ms"):
            q.publish("a", b"r", retention_ms=-1, token=1)


def test_result_is_woken_by_the_outcome_channel(q):
    """The waiter subscribes, reads (active), and waits; PUBLISH from another client wakes it long
    before its timeout: no polling."""
    job = claimed(q)
    client, channel = q.connection.client, q.keys.outcome("a")
    got = {}
    waiter = threading.Thread(target=lambda: got.update(value=q.result("a", timeout=60)))
    waiter.start()
    try:
        wait_until(lambda: client.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] == 1, what="the subscription")
        Queue(q.connection, q.name, serializer=RAW).publish(job, b"done", retention_ms=KEEP_MS)
    finally:
        waiter.join(30)
    assert not waiter.is_alive() and got == {"value": b"done"}


@pytest.mark.parametrize("settle", ["complete", "fail"])
def test_result_is_woken_by_a_plain_settle_while_counted(q, settle):
    """The waiter counts itself in ``meta waiters``; COMPLETE (no record: the result is None) and a
    killing FAIL then tell the outcome channel too, and the waiter returns long before its timeout.
    Once it is gone the count is back to 0 and the settles tell nothing."""
    job = claimed(q)
    client, meta = q.connection.client, q.keys.meta
    got = {}

    def wait():
        try:
            got["value"] = q.result("a", timeout=60)
        except JobFailed as failed:
            got["failed"] = failed.last_error

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        wait_until(lambda: client.hget(meta, "waiters") == b"1", what="the waiter counted")
        other = Queue(q.connection, q.name, serializer=RAW)
        if settle == "complete":
            other.complete(job)
        else:
            other.fail(job, "E: x", max_attempts=1)
    finally:
        waiter.join(30)
    assert not waiter.is_alive() and got == ({"value": None} if settle == "complete" else {"failed": "E: x"})
    assert client.hget(meta, "waiters") == b"0"


def test_result_times_out_while_the_job_is_live(q):
    q.enqueue(b"p", id="a")
    with pytest.raises(TimeoutError, match="still pending"):
        q.result("a", timeout=0.05)
    with pytest.raises(ConfigurationError, match="bad timeout"):
        q.result("a", timeout=-1)


def test_events_tell_each_move_in_order(q):
    q.enable_events(maxlen=100)
    job = claimed(q)
    q.progress(job, 7)
    q.failures_incr(job, "e", max_attempts=3)
    q.publish(q.claim(60_000), b"r", retention_ms=KEEP_MS)
    told = [(e.type, e.job_id, e.attempt, e.error, e.state, e.progress) for e in q.events()]
    assert told == [("enqueued", "a", 0, None, "pending", None), ("claimed", "a", 1, None, None, None),
                    ("progress", "a", 1, None, None, 7), ("failed", "a", 1, "e", None, None),
                    ("retried", "a", 1, None, "pending", None), ("claimed", "a", 2, None, None, None),
                    ("completed", "a", 2, None, None, None)]
    assert [e.job_id for e in q.events(since=list(q.events())[4].stream_id)] == ["a", "a"]
    q.disable_events()
    q.enqueue(b"p", id="b")
    assert len(list(q.events())) == 7 and K(q, "meta") not in snap(q)


def test_events_tell_the_moves_of_a_job_that_is_not_settled(q):
    """PROMOTE, RESCHEDULE, DELAY, REQUEUE and REPROCESS each tell their move (docs/spec.md §12)."""
    q.enable_events(maxlen=100)
    q.schedule(b"p", 60_000, id="a")
    q.reschedule("a", 0)
    wait_server_past(q.connection.client, server_ms(q.connection.client) + 1)
    assert q.promote() == 1
    held = q.claim(60_000)
    q.delay(held, 0)
    wait_server_past(q.connection.client, server_ms(q.connection.client) + 1)
    q.promote()
    q.requeue(q.claim(60_000))
    q.fail(q.claim(60_000), "fatal", max_attempts=1)
    q.reprocess("a")
    told = [(e.type, e.attempt, e.state) for e in q.events() if e.type not in ("claimed", "failed", "dead")]
    assert told == [("enqueued", 0, "scheduled"), ("rescheduled", 0, "scheduled"), ("promoted", 0, "pending"),
                    ("delayed", 1, "scheduled"), ("promoted", 1, "pending"), ("requeued", 2, "pending"),
                    ("reprocessed", 3, "pending")]


# --------------------------------------------------------------------------- REPROCESS


def test_reprocess_returns_a_dead_job_to_pending_with_both_budgets_refilled(q):
    job = claimed(q, priority=6)
    q.fail(job, "fatal", max_attempts=1)
    before = snap(q)
    assert q.reprocess("a") is True
    expected = dict(before)
    del expected[K(q, "dead")]
    expected[K(q, "pending")] = Z(("a", 6))
    expected[R(q, "a")] = row(q, "pending", attempts=1, claimed=True, failures=0, stalled=0, priority=6,
                              last_error="fatal")
    assert snap(q) == expected
    job = q.claim(60_000)
    assert job.attempt == 2  # the token goes on
    assert q.fail(job, "again", max_attempts=2) is State.PENDING  # a full budget: failures 1 of 2


def test_the_trial_sequence_ends_the_same_on_both_wires(q):
    """Issue 13's trial: two expired leases recovered by the sweep, then one real failure with
    max_attempts=3. One budget (SPEC §9.1): stalls spend none of it, so the job is retried."""
    q.enqueue(b"p", id="a")
    for _ in range(2):
        assert q.claim(1).id == "a"
        wait_server_past(q.connection.client, q.ids(State.ACTIVE)[0][1])
        assert q.stalled_check(max_stalled=3).recovered == ["a"]
    job = q.claim(60_000)
    assert job.attempt == 3
    assert q.fail(job, "real", max_attempts=3, backoff_ms=500) is State.SCHEDULED
    fields = q.job("a")
    assert (fields["attempts"], fields["failures"], fields["stalled"]) == ("3", "1", "2")


def test_reprocess_of_a_job_not_in_dead_writes_nothing(q):
    q.enqueue(b"p", id="a")
    with queue_unchanged(q):
        assert q.reprocess("a") is False
        assert q.reprocess("nope") is False


# --------------------------------------------------------------------------- REQUEUE, RESCHEDULE (both wires, SPEC §9.1)


def test_requeue_releases_without_spending_budget(q):
    job = claimed(q, priority=2)
    q.requeue(job)
    assert snap(q) == {K(q, "pending"): Z(("a", 2)), R(q, "a"): row(q, "pending", attempts=1, claimed=True, priority=2)}
    with queue_unchanged(q):
        with pytest.raises(LeaseLost):
            q.requeue("a", token=5)


def test_reschedule_moves_the_due_time(q):
    q.schedule(b"s", 600_000, id="s")
    before = snap(q)
    with Clock(q) as clock:
        due = q.reschedule("s", 1_000)
    clock.check(due, 1_000)
    expected = dict(before)
    expected[K(q, "schedule")] = Z(("s", due))
    assert snap(q) == expected
    with queue_unchanged(q):
        assert q.reschedule("nope", 1_000) is None


# --------------------------------------------------------------------------- STALLED.CHECK


def expire(q, *job_ids):
    """Claim each id under a 1 ms lease and wait on the server clock until every lease is past."""
    for job_id in job_ids:
        q.enqueue(b"p", id=job_id)
    jobs = [q.claim(1) for _ in job_ids]
    assert [j.id for j in jobs] == list(job_ids)
    wait_server_past(q.connection.client, max(s for _, s in q.ids(State.ACTIVE)))
    return jobs


def test_stalled_check_recovers_an_expired_lease(q):
    expire(q, "a")
    sweep = q.stalled_check(max_stalled=3)
    assert (sweep.recovered, sweep.exempt, sweep.dead, len(sweep)) == (["a"], [], [], 1)
    assert snap(q) == {K(q, "pending"): Z(("a", 0)), R(q, "a"): row(q, "pending", attempts=1, claimed=True, stalled=1)}


def test_stalled_check_kills_at_the_stall_budget(q):
    expire(q, "a")
    with Clock(q) as clock:
        sweep = q.stalled_check(max_stalled=1)
    assert (sweep.recovered, sweep.exempt, sweep.dead) == ([], [], ["a"])
    died = clock.check(score_of(snap(q), K(q, "dead"), "a"), 0)
    assert snap(q) == {
        K(q, "dead"): Z(("a", died)),
        R(q, "a"): row(q, "dead", attempts=1, claimed=True, failed=True, stalled=1, last_error="stalled"),
        K(q, "metrics:failed"): H({"count": 1}),
    }


def test_stalled_check_second_stall_reaches_the_budget(q):
    expire(q, "a")
    assert q.stalled_check(max_stalled=2).recovered == ["a"]
    job = q.claim(1)
    assert job.attempt == 2
    wait_server_past(q.connection.client, q.ids(State.ACTIVE)[0][1])
    assert q.stalled_check(max_stalled=2).dead == ["a"]
    assert q.job("a")["stalled"] == "2"


def test_stalled_check_takes_the_lowest_deadlines_up_to_limit(q):
    expire(q, "a", "b", "c")
    first = q.stalled_check(max_stalled=5, limit=2)
    assert first.recovered == ["a", "b"]  # deadlines are non-decreasing in claim order; ties by id
    assert [m for m, _ in q.ids(State.ACTIVE)] == ["c"]
    assert q.stalled_check(max_stalled=5, limit=2).recovered == ["c"]


def test_stalled_check_leaves_live_leases_alone(q):
    claimed(q, lease_ms=600_000)
    with queue_unchanged(q):
        assert len(q.stalled_check()) == 0


# --------------------------------------------------------------------------- the declared reads


def test_counts_and_state_read_every_set(q):
    q.enqueue(b"p", id="p1")
    q.enqueue(b"p", id="p2")
    claimed(q, "act")
    q.schedule(b"s", 600_000, id="sch")
    q.fail(claimed(q, "dd"), "x", max_attempts=1)
    with queue_unchanged(q):
        counts = q.counts()
        states = {i: q.state(i) for i in ("p1", "act", "sch", "dd", "none")}
    assert (counts.pending, counts.active, counts.scheduled, counts.dead, counts.paused, counts.total) == (2, 1, 1, 1, False, 5)
    assert states == {"p1": State.PENDING, "act": State.ACTIVE, "sch": State.SCHEDULED, "dd": State.DEAD, "none": None}
    q.pause()
    assert q.counts().paused is True


def test_a_full_lifecycle_leaves_only_the_metric(q):
    q.enqueue(b"p", id="a")
    job = q.claim(60_000)
    q.extend(job, 60_000)
    q.complete(job)
    assert snap(q) == {K(q, "metrics:completed"): H({"count": 1})}
    assert q.state("a") is None and q.job("a") is None


def test_scan_pattern_sees_only_this_queue(q, conn):
    from echomq import Queue

    other = Queue(conn, q.name + "x")
    sibling = Queue(conn, q.name + ":x")
    other.enqueue(1, id="a")
    sibling.enqueue(1, id="a")
    q.enqueue(b"p", id="a")
    assert set(snap(q)) == {K(q, "pending"), R(q, "a")}


# --------------------------------------------------------------------------- wire 6: the registration


def test_wire6_version_reads_the_registration_table(server6):
    with server6.client() as client:
        listed = client.execute_command("EMQ.VERSION").decode().split(" ")
    assert listed[: len(JOB_CORE_TOKENS)] == list(JOB_CORE_TOKENS)
    assert set(listed[len(JOB_CORE_TOKENS) :]) <= set(OPTIONAL_TOKENS)
    assert set(OPTIONAL_TOKENS) <= set(listed)  # §9.4: this build registers every optional verb
    # SPEC §6: the bus rows come right after the job core
    assert listed[len(JOB_CORE_TOKENS) : len(JOB_CORE_TOKENS) + 3] == ["append", "failures.incr", "publish"]


def _command_info(client, name: str) -> dict | None:
    try:
        info = client.execute_command("COMMAND", "INFO", name)
    except TypeError:  # valkey-py's parser chokes on the nil an unknown command answers
        return None
    return {k.upper(): v for k, v in info.items()}.get(name.upper())


def test_wire6_command_info_answers_for_every_verb(server6):
    """A linker problem would silently drop registrations: every verb must answer COMMAND INFO,
    with a key-spec (the ACL and the cluster see the declared KEYS through it)."""
    with server6.client() as client:
        for verb in VERBS + OPTIONAL:
            info = _command_info(client, verb.command)
            assert info is not None, f"{verb.command} is not registered"
            assert info["key_specifications"], f"{verb.command} declares no key-spec"
            assert "write" in info["flags"], f"{verb.command} writes: it must be flagged write"
        assert _command_info(client, "EMQ.VERSION") is not None
        assert _command_info(client, "EMQ.NOSUCHVERB") is None


@pytest.mark.parametrize("verb", VERBS + READS, ids=lambda v: v.name)
def test_verbs_travel_with_the_scripts_keys_and_argv(conn, wire, verb):
    """SPEC §7: on wire 6 each verb travels as its EMQ command with the script's numkeys, KEYS
    and ARGV unchanged; the declared reads stay scripts on both wires; on wire 4 every verb is its script
    (REQUEUE and RESCHEDULE too, SPEC §9.1)."""
    from echomq import Keyspace

    ks = Keyspace("shape")
    argv = [f"arg{i}" for i in range(len(verb.argv))]
    call = build_call(verb.name, ks, argv)
    assert call.keys == tuple(ks.key(s) for s in verb.keys)
    if verb.read_only:
        args = conn.command_args(call)
        assert args[0] in ("EVALSHA", "EVALSHA_RO")
        assert args[1:] == (conn.scripts[verb.name].sha, len(verb.keys), *call.keys, *argv)
    elif wire == 6:
        assert conn.command_args(call) == (verb.command, len(verb.keys), *call.keys, *argv)
    else:
        assert conn.command_args(call) == ("EVALSHA", conn.scripts[verb.name].sha, len(verb.keys), *call.keys, *argv)


# --------------------------------------------------------------------------- the row's times (SPEC §9)


def test_rows_carry_created_started_and_failed_on_the_server_clock(q):
    """created (ENQUEUE, SCHEDULE), started (every CLAIM), failed (every FAIL, a kill by the
    sweep, a CANCEL): each the server's time of the call that wrote it, on both wires."""

    def times(job_id):
        row = q.connection.client.hgetall(q.keys.job(job_id))
        return {k.decode(): int(v) for k, v in row.items() if k in (b"created", b"started", b"failed")}

    with Clock(q) as made:
        q.enqueue(b"p", id="a")
        q.schedule(b"p", 60_000, id="s")
    assert made.before <= times("a")["created"] <= made.after and made.before <= times("s")["created"] <= made.after
    with Clock(q) as first:
        job = q.claim(60_000)
    assert set(times("a")) == {"created", "started"}
    first.check(times("a")["started"], 0)
    with Clock(q) as failing:
        q.fail(job, "x", max_attempts=3)
    failing.check(times("a")["failed"], 0)
    with Clock(q) as second:
        job = q.claim(60_000)
    second.check(times("a")["started"], 0)  # the last claim
    with Clock(q) as cancelling:
        q.cancel("a")
    cancelling.check(times("a")["failed"], 0)
    q.enqueue(b"p", id="b")
    q.claim(1)
    wait_server_past(q.connection.client, q.ids(State.ACTIVE)[0][1])
    with Clock(q) as sweeping:
        assert q.stalled_check(max_stalled=1).dead == ["b"]
    sweeping.check(times("b")["failed"], 0)
