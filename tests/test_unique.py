"""Unique windows and debounce (EMQ.ENQUEUE.UNIQUE, docs/spec.md §14) on both wires, through
both clients: the whole after-state of each path, and every refusal with the dataset unchanged."""

from __future__ import annotations

import pytest

from echomq import Admission, ConfigurationError, CounterError, Enqueued, StateError, WrongType
from support.dataset import TIME, queue_unchanged, snap
from support.waiting import server_ms, wait_server_past
from test_conformance import K, R, Z, H, Clock, q, row, score_of  # noqa: F401  (q: the fixture)


def test_a_plain_enqueue_says_why(q):
    assert q.enqueue(b"p", id="a").reason is Admission.CREATED
    assert q.enqueue(b"p", id="a") == Enqueued("a", False, Admission.EXISTS)


def test_unique_enqueue_keeps_the_window_on_the_row(q):
    assert q.enqueue(b"p", id="a", unique_for=60) == Enqueued("a", True, Admission.CREATED)
    assert snap(q) == {K(q, "pending"): Z(("a", 0)), R(q, "a"): row(q, "pending", unique=60_000)}
    with queue_unchanged(q):
        assert q.enqueue(b"new", id="a", unique_for=60) == Enqueued("a", False, Admission.EXISTS)


@pytest.mark.parametrize("settle", ["complete", "publish"])
def test_a_completed_id_is_not_admitted_within_its_window_then_is(q, settle):
    window_ms = 60_000  # long enough that a loaded machine cannot expire it during the checks below
    q.enqueue(b"p", id="a", unique_for=window_ms / 1000)
    job = q.claim(60_000)
    with Clock(q) as clock:
        q.complete(job) if settle == "complete" else q.publish(job, b"r", retention_ms=0)
    client = q.connection.client
    marker = q.keys.unique("a").encode()
    expiry = client.pexpiretime(marker)
    clock.check(expiry, window_ms)
    assert snap(q)[marker] == H({"finished": TIME})
    with queue_unchanged(q):
        assert q.enqueue(b"again", id="a", unique_for=1) == Enqueued("a", False, Admission.UNIQUE)
        assert q.schedule(b"again", 5, id="a", replace=True) == Enqueued("a", False, Admission.UNIQUE)
    # the window is the marker's TTL (checked above): bring its end near instead of waiting a minute
    expiry = server_ms(client) + 50
    client.pexpireat(marker, expiry)
    wait_server_past(client, expiry)
    assert q.enqueue(b"again", id="a", unique_for=1) == Enqueued("a", True, Admission.CREATED)
    assert q.job("a")["payload"] == b"again"


def test_a_job_without_a_window_leaves_no_marker(q):
    q.enqueue(b"p", id="a", replace=True)
    q.complete(q.claim(60_000))
    assert snap(q) == {K(q, "metrics:completed"): H({"count": 1})}


def test_unique_schedule_writes_the_schedule(q):
    with Clock(q) as clock:
        assert q.schedule(b"p", 5_000, id="s", unique_for=1, priority=2).reason is Admission.CREATED
    after = snap(q)
    due = clock.check(score_of(after, K(q, "schedule"), "s"), 5_000)
    assert after == {K(q, "schedule"): Z(("s", due)), R(q, "s"): row(q, "scheduled", priority=2, unique=1000)}


def test_debounce_replaces_a_pending_payload(q):
    q.enqueue(b"old", id="a", priority=3)
    assert q.enqueue(b"new", id="a", replace=True) == Enqueued("a", False, Admission.REPLACED)
    assert snap(q) == {K(q, "pending"): Z(("a", 3)), R(q, "a"): row(q, "pending", b"new", priority=3)}


def test_debounce_with_a_delay_moves_a_pending_job_to_the_schedule(q):
    q.enqueue(b"old", id="a")
    with Clock(q) as clock:
        assert q.schedule(b"new", 7_000, id="a", replace=True).reason is Admission.REPLACED
    after = snap(q)
    due = clock.check(score_of(after, K(q, "schedule"), "a"), 7_000)
    assert after == {K(q, "schedule"): Z(("a", due)), R(q, "a"): row(q, "scheduled", b"new")}


def test_debounce_replaces_a_scheduled_payload_and_due_time(q):
    q.schedule(b"old", 60_000, id="a")
    with Clock(q) as clock:
        assert q.schedule(b"new", 2_000, id="a", replace=True).reason is Admission.REPLACED
    after = snap(q)
    due = clock.check(score_of(after, K(q, "schedule"), "a"), 2_000)
    assert after == {K(q, "schedule"): Z(("a", due)), R(q, "a"): row(q, "scheduled", b"new")}
    # without a delay, the due time stays
    assert q.enqueue(b"newer", id="a", replace=True).reason is Admission.REPLACED
    assert score_of(snap(q), K(q, "schedule"), "a") == due and q.job("a")["payload"] == b"newer"


@pytest.mark.parametrize("where", ["active", "dead"])
def test_debounce_leaves_a_held_or_dead_job_alone(q, where):
    q.enqueue(b"old", id="a")
    job = q.claim(60_000)
    if where == "dead":
        q.fail(job, "e", max_attempts=1)
    with queue_unchanged(q):
        assert q.enqueue(b"new", id="a", replace=True) == Enqueued("a", False, Admission.EXISTS)
        assert q.schedule(b"new", 5, id="a", replace=True, unique_for=9) == Enqueued("a", False, Admission.EXISTS)


# --------------------------------------------------------------------------- refusals


def test_unique_and_replace_need_an_id_and_good_numbers(q):
    with queue_unchanged(q):
        for bad in ({"unique_for": 1}, {"replace": True}):
            with pytest.raises(ConfigurationError, match="need the job's id"):
                q.enqueue(b"p", **bad)
        for window in (-1, "1", True):
            with pytest.raises(ConfigurationError, match="unique_for"):
                q.enqueue(b"p", id="a", unique_for=window)


def test_replace_refuses_a_lane_row_and_a_row_without_a_set(q):
    client = q.connection.client
    client.hset(q.keys.job("lane"), mapping={"state": "pending", "payload": b"p", "attempts": 0, "group": "g"})
    client.hset(q.keys.job("ghost"), mapping={"state": "pending", "payload": b"p", "attempts": 0})
    client.hset(q.keys.job("odd"), mapping={"state": "weird", "payload": b"p", "attempts": 0})
    with queue_unchanged(q):
        with pytest.raises(StateError, match="lane row is not native"):
            q.enqueue(b"new", id="lane", replace=True)
        with pytest.raises(StateError, match="id is not in pending"):
            q.enqueue(b"new", id="ghost", replace=True)
        with pytest.raises(StateError, match="row is weird, not pending, scheduled, active or dead"):
            q.enqueue(b"new", id="odd", replace=True)
        assert q.enqueue(b"new", id="lane").reason is Admission.EXISTS  # without replace: no refusal


def test_a_wrong_typed_marker_or_set_is_refused(q):
    client = q.connection.client
    client.set(q.keys.unique("a"), "x")
    client.set(q.keys.schedule, "x")
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.enqueue(b"p", id="a", unique_for=1)
        with pytest.raises(WrongType):
            q.schedule(b"p", 5, id="b", unique_for=1)


@pytest.mark.parametrize("settle", ["complete", "publish"])
def test_completion_refuses_a_wrong_typed_marker_or_window(q, settle):
    client = q.connection.client
    q.enqueue(b"p", id="a", unique_for=1)
    q.enqueue(b"p", id="b", unique_for=1)
    ja, jb = q.claim(60_000), q.claim(60_000)
    client.set(q.keys.unique("a"), "x")
    client.hset(q.keys.job("b"), "unique", "soon")
    done = (lambda j: q.complete(j)) if settle == "complete" else (lambda j: q.publish(j, b"r", retention_ms=1000))
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            done(ja)
        with pytest.raises(CounterError, match="not an integer"):
            done(jb)
