"""The control verbs on both wires: REMOVE, CANCEL, PURGE, DRAIN (docs/spec.md "Control verbs").

Each ordinary path asserts the whole after-state; each refusal asserts the error reply and
that the dataset did not change.
"""

from __future__ import annotations

import pytest

from echomq import (ArgumentError, ConfigurationError, LeaseLost, Queue, State, StateError, UnsupportedOnWire,
                    WrongType)
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import BY_NAME
from support.dataset import TIME, K, R, queue_unchanged, snap
from support.queues import fresh_name, raw
from support.waiting import server_ms, wait_server_past


@pytest.fixture
def q(conn):
    return Queue(conn, fresh_name("c"), serializer=RAW)


def dead(q, job_id, priority=0):
    q.enqueue(b"p", id=job_id, priority=priority)
    job = q.claim(60_000)
    assert job.id == job_id
    assert q.fail(job, "fatal", max_attempts=1) is State.DEAD
    return job


# --------------------------------------------------------------------------- REMOVE


def test_remove_deletes_a_pending_a_scheduled_and_a_dead_job_with_its_membership(q):
    dead(q, "c")
    q.enqueue(b"p", id="a")
    q.schedule(b"s", 60_000, id="b")
    q.enqueue(b"keep", id="k")
    assert q.remove("a") is State.PENDING
    assert q.remove("b") is State.SCHEDULED
    assert q.remove("c") is State.DEAD
    assert snap(q) == {
        K(q, "pending"): ("zset", [(b"k", 0.0)]),
        R(q, "k"): ("hash", {b"attempts": b"0", b"created": TIME, b"payload": b"keep", b"state": b"pending"}),
        K(q, "metrics:failed"): ("hash", {b"count": b"1"}),
    }
    with queue_unchanged(q):
        assert q.remove("a") is None  # no row: 0, nothing written


def test_remove_refuses_an_active_job_and_rows_out_of_place(q):
    q.enqueue(b"p", id="a")
    q.claim(60_000)
    with queue_unchanged(q):
        with pytest.raises(StateError, match="EMQSTATE EMQ.REMOVE row is active: cancel it instead"):
            q.remove("a")
    q.enqueue(b"p", id="b")
    q.connection.client.zrem(q.keys.pending, "b")
    with queue_unchanged(q):
        with pytest.raises(StateError, match="EMQSTATE EMQ.REMOVE id is not in pending"):
            q.remove("b")
    q.enqueue(b"p", id="g")
    q.connection.client.hset(q.keys.job("g"), "group", "g1")
    with queue_unchanged(q):
        with pytest.raises(StateError, match="^EMQSTATE lane row is not native$"):
            raw(q, "remove", "g")  # REMOVE itself refuses a lane row ...
        with pytest.raises(StateError, match="^EMQSTATE EMQ.LANE.REMOVE id is not in lane:g1$"):
            q.remove("g")  # ... so Queue.remove asks lane_remove, which finds this one out of its lane
    q.connection.client.hset(q.keys.job("w"), "state", "elsewhere")
    with queue_unchanged(q):
        with pytest.raises(StateError, match="row is elsewhere, not pending, scheduled or dead"):
            q.remove("w")


def test_remove_refuses_a_bad_id_and_a_wrong_typed_row(q):
    with pytest.raises(ConfigurationError):
        q.remove("x" * 513)  # client-side, before any send
    with queue_unchanged(q):
        if q.connection.wire == 6:
            with pytest.raises(ArgumentError, match="EMQARG id"):
                raw(q, "remove", "x" * 513)
        else:
            assert raw(q, "remove", "x" * 513) == 0  # the script has no grammar: no such row (§5.6)
    q.connection.client.set(q.keys.job("s"), "x")
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.remove("s")


# --------------------------------------------------------------------------- CANCEL


def test_cancel_revokes_the_lease_the_holder_is_refused(q):
    q.enqueue(b"p", id="a", priority=3)
    job = q.claim(60_000)
    before = server_ms(q.connection.client)
    assert q.cancel("a") is True
    after = server_ms(q.connection.client)
    state = snap(q)
    (member, died), = state[K(q, "dead")][1]
    assert member == b"a" and before <= died <= after  # dead, scored the time it was cancelled
    row = state[R(q, "a")][1]
    assert (row[b"state"], row[b"last_error"], row[b"attempts"]) == (b"dead", b"cancelled", b"1")
    assert K(q, "active") not in state and state[K(q, "metrics:failed")] == ("hash", {b"count": b"1"})
    # the holder: its renewal answers 0 (it marks the job lost), its settle is refused
    with queue_unchanged(q):
        assert q.extend_many([job], 60_000) == [0]
        with pytest.raises(LeaseLost, match="row is dead, not active"):
            q.complete(job)
        with pytest.raises(LeaseLost, match="row is dead, not active"):
            q.fail(job, "late", max_attempts=3)
    assert q.reprocess("a") is True and q.claim(60_000).attempt == 2  # the operator may run it again


def test_cancel_refuses_a_job_that_is_not_running(q):
    q.enqueue(b"p", id="a")
    with queue_unchanged(q):
        with pytest.raises(StateError, match="EMQSTATE EMQ.CANCEL row is pending, not active"):
            q.cancel("a")
        assert q.cancel("nope") is False
    q.claim(60_000)
    q.connection.client.zrem(q.keys.active, "a")
    with queue_unchanged(q):
        with pytest.raises(StateError, match="EMQSTATE EMQ.CANCEL id is not in active"):
            q.cancel("a")


# --------------------------------------------------------------------------- PURGE


def test_purge_deletes_dead_jobs_oldest_first_in_bounded_batches(q):
    for job_id in ("a", "b", "c"):
        dead(q, job_id)
    q.enqueue(b"p", id="live")
    assert q.purge(limit=2) == 2
    assert [job_id for job_id, _ in q.ids(State.DEAD)] == ["c"]
    assert q.job("a") is None and q.job("b") is None and q.job("c") is not None
    assert q.purge(limit=2) == 1
    assert q.purge() == 0
    assert q.counts().dead == 0 and q.job("live") is not None and q.counts().pending == 1


def test_purge_older_than_keeps_the_recent_dead(q):
    dead(q, "old")
    died = q.ids(State.DEAD)[0][1]
    wait_server_past(q.connection.client, died + 50)
    dead(q, "new")
    assert q.purge(older_than_ms=600_000) == 0  # neither died ten minutes ago
    assert q.purge(older_than_ms=40) == 1
    assert [job_id for job_id, _ in q.ids(State.DEAD)] == ["new"] and q.job("old") is None


def test_purge_only_unlists_a_ghost_or_a_row_that_is_not_dead(q):
    q.connection.client.zadd(q.keys.dead, {"ghost": 0})
    q.enqueue(b"p", id="drift")
    q.connection.client.zadd(q.keys.dead, {"drift": 0})  # pending, and wrongly in dead too
    assert q.purge() == 2
    assert q.counts().dead == 0 and q.state("drift") is State.PENDING and q.job("ghost") is None


def test_purge_refusals_write_nothing(q):
    dead(q, "a")
    with queue_unchanged(q):
        if q.connection.wire == 6:
            with pytest.raises(ArgumentError, match="EMQARG limit"):
                raw(q, "purge", "0", "0")  # limit 1..=10000
        else:
            assert raw(q, "purge", "0", "0") == 0  # the script has no grammar: LIMIT 0 0 takes nothing (§5.6)
    q.connection.client.set(q.keys.job("a"), "x")
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.purge()


# --------------------------------------------------------------------------- DRAIN


def test_drain_deletes_the_head_of_pending_only(q):
    for job_id, priority in (("a", 5), ("b", 1), ("c", 3)):
        q.enqueue(b"p", id=job_id, priority=priority)
    q.schedule(b"s", 60_000, id="later")
    dead(q, "gone")
    assert q.drain(limit=2) == 2  # b and c: the claim order
    assert [job_id for job_id, _ in q.ids(State.PENDING)] == ["a"]
    assert q.job("b") is None and q.job("c") is None
    assert q.drain() == 1 and q.drain() == 0
    assert q.counts().scheduled == 1 and q.counts().dead == 1


def test_drain_only_unlists_a_row_that_is_not_pending(q):
    q.enqueue(b"p", id="a")
    q.claim(60_000)
    q.connection.client.zadd(q.keys.pending, {"a": 0, "ghost": 0})  # active a also in pending; a ghost
    assert q.drain() == 2
    assert q.state("a") is State.ACTIVE and q.counts().pending == 0 and q.job("ghost") is None


def test_drain_refuses_a_bad_limit_and_a_wrong_typed_pending(q):
    with pytest.raises(Exception):
        q.drain(limit=0)
    q.connection.client.set(q.keys.pending, "x")
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.drain()


# --------------------------------------------------------------------------- the tokens (SPEC §9.4)


def test_the_control_verbs_are_optional_tokens_on_wire_6(conn, wire):
    control = [BY_NAME[name] for name in ("remove", "cancel", "purge", "drain")]
    assert all(conn.supports(verb.name) for verb in control)
    if wire == 4:
        assert all(verb.name in conn.scripts for verb in control)
        return
    assert {token for verb in control for token in verb.tokens} <= conn.tokens
    conn.tokens = conn.tokens - {"purge"}  # a module that predates the verb
    assert not conn.supports("purge")
    q = Queue(conn, fresh_name("c"))
    with queue_unchanged(q):
        with pytest.raises(UnsupportedOnWire, match=r"purge needs the token\(s\) \['purge'\]"):
            q.purge()
    assert BY_NAME["purge"].tokens == ("purge",)
