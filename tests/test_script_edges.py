"""Wire 4 only: the scripts' loose edges, from the script side (SPEC §4 and §5).

The scripts trust the keyspace and repair nothing -- by design -- except where one read
inside the script is enough (SPEC §9.1): the row's state before a settle or a move, and
the one retry budget. Each test here pins what a script does on one of the edges SPEC §5
lists, so the parity instrument has a measured baseline and nobody "fixes" a script into
a third behaviour. Every test asserts the exact keys left behind.
"""

from __future__ import annotations

import itertools
import os

import pytest

from echomq import CommandRefused, EmbeddedServer, LeaseLost, Queue, State, StateError, WrongType, connect
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import BY_NAME
from support.dataset import TIME, H, K, R, Z, queue_unchanged, snap
from support.queues import raw
from support.waiting import wait_server_past

_names = itertools.count()


@pytest.fixture
def q(conn4):
    return Queue(conn4, f"edge{os.getpid()}-{next(_names)}", serializer=RAW)


def held(q, job_id="a", priority=0):
    q.enqueue(b"p", id=job_id, priority=priority)
    job = q.claim(60_000)
    assert job.id == job_id
    return job


def expire(q, *job_ids, priority=0):
    for job_id in job_ids:
        q.enqueue(b"p", id=job_id, priority=priority)
    jobs = [q.claim(1) for _ in job_ids]
    assert [j.id for j in jobs] == list(job_ids)
    wait_server_past(q.connection.client, max(s for _, s in q.ids(State.ACTIVE)))
    return jobs


# --------------------------------------------------------------------------- once §5.2/§5.3: the state is checked (SPEC §9.1)


def _refused(q, call, verb):
    """A move of a row not in its from-state: EMQSTATE, which a token-fenced verb raises as
    LeaseLost keeping the refusal, and any other verb as StateError."""
    fenced = BY_NAME[verb].fenced
    with queue_unchanged(q):
        with pytest.raises(LeaseLost if fenced else StateError) as raised:
            call()
    refusal = raised.value.refusal if fenced else raised.value
    assert isinstance(refusal, StateError) and str(refusal).startswith(f"EMQSTATE EMQ.{verb.upper()} ")
    return str(refusal)


def test_settles_with_a_matching_token_refuse_a_row_the_sweep_moved_back(q):
    (job,) = expire(q, "a")
    assert q.stalled_check(max_stalled=5).recovered == ["a"]
    assert q.state("a") is State.PENDING
    for verb, call in (("complete", lambda: q.complete(job)), ("extend", lambda: q.extend(job, 60_000)),
                       ("delay", lambda: q.delay(job, 1000)), ("requeue", lambda: q.requeue(job)),
                       ("fail", lambda: q.fail(job, "late", max_attempts=1))):
        assert "row is pending, not active" in _refused(q, call, verb)
    with queue_unchanged(q):
        assert q.extend_many([job], 60_000) == [0]  # EXTENDS answers 0 for the pair and writes nothing


def test_a_settle_refuses_an_active_row_missing_from_active(q):
    job = held(q)
    q.connection.client.zrem(q.keys.active, "a")
    assert "id is not in active" in _refused(q, lambda: q.complete(job), "complete")
    assert "id is not in active" in _refused(q, lambda: q.fail(job, "x", max_attempts=3), "fail")


def test_reprocess_refuses_a_member_of_dead_whose_state_is_not_dead(q):
    job = held(q, priority=3)
    q.fail(job, "x", max_attempts=1)
    q.connection.client.hset(q.keys.job("a"), "state", "active")  # a drifted row, still a member of dead
    assert "row is active, not dead" in _refused(q, lambda: q.reprocess("a"), "reprocess")


def test_reprocess_of_a_dead_row_missing_from_dead_answers_zero(q):
    job = held(q)
    q.fail(job, "x", max_attempts=1)
    q.connection.client.zrem(q.keys.dead, "a")
    with queue_unchanged(q):
        assert q.reprocess("a") is False


def test_reschedule_refuses_a_row_not_scheduled_and_answers_zero_for_no_row(q):
    q.enqueue(b"p", id="a")
    assert "row is pending, not scheduled" in _refused(q, lambda: q.reschedule("a", 10), "reschedule")
    q.schedule(b"p", 60_000, id="b")
    q.connection.client.zrem(q.keys.schedule, "b")
    assert "id is not in schedule" in _refused(q, lambda: q.reschedule("b", 10), "reschedule")
    with queue_unchanged(q):
        assert q.reschedule("zz", 10) is None


def test_fail_on_an_already_dead_row_is_refused(q):
    job = held(q)
    assert q.fail(job, "first", max_attempts=1) is State.DEAD
    assert "row is dead, not active" in _refused(q, lambda: q.fail(job, "second", max_attempts=1), "fail")
    assert snap(q)[K(q, "metrics:failed")] == H(count=1)  # one job, counted once


# --------------------------------------------------------------------------- one budget (SPEC §9.1, §9.2)


def test_a_stall_spends_no_retry_budget(q):
    expire(q, "a")
    q.stalled_check(max_stalled=5)
    job = q.claim(60_000)
    assert job.attempt == 2
    # one real failure, max_attempts=2: failures' = 1 < 2, so it retries (as native does)
    assert q.fail(job, "first real failure", max_attempts=2) is State.PENDING
    assert q.job("a")["attempts"] == "2" and q.job("a")["failures"] == "1"


def test_a_failures_field_hincrby_refuses_writes_nothing(q):
    job = held(q)
    q.connection.client.hset(q.keys.job("a"), "failures", "x")
    with queue_unchanged(q):
        with pytest.raises(CommandRefused):
            q.fail(job, "x", max_attempts=3)


def test_reprocess_refills_both_budgets_and_keeps_the_token(q):
    (job,) = expire(q, "a")
    q.stalled_check(max_stalled=5)
    job = q.claim(60_000)
    assert q.fail(job, "x", max_attempts=1) is State.DEAD
    assert (q.job("a")["failures"], q.job("a")["stalled"]) == ("1", "1")
    assert q.reprocess("a") is True
    row = q.job("a")
    assert (row["state"], row["attempts"], row["failures"], row["stalled"]) == ("pending", "2", "0", "0")
    assert q.claim(60_000).attempt == 3  # the token never goes down


def test_the_script_counts_an_expiry_across_a_restart():
    """No restart exemption on wire 4: a lease that expired while the server restarted is a stall."""
    with EmbeddedServer(aof=True, appendfsync="always", brand=4) as server:
        with connect(server.url, wire=4) as conn:
            q = Queue(conn, "restart", serializer=RAW)
            q.enqueue(b"p", id="a")
            q.claim(1)
            run_id = server.run_id()
        server.restart()
        assert server.run_id() != run_id
        with connect(server.url, wire=4) as conn:
            q = Queue(conn, "restart", serializer=RAW)
            wait_server_past(conn.client, q.ids(State.ACTIVE)[0][1])
            sweep = q.stalled_check(max_stalled=1)
            assert (sweep.recovered, sweep.exempt, sweep.dead) == ([], [], ["a"])
            assert "lease_epoch" not in q.job("a") and q.job("a")["stalled"] == "1"


# --------------------------------------------------------------------------- §5.4 ghosts make partial rows


def test_claim_consumes_a_ghost_in_pending_and_mints_no_row(q):
    q.connection.client.zadd(q.keys.pending, {"g": 0})
    assert q.claim(60_000) is None
    assert snap(q) == {}


def test_promote_of_a_ghost_creates_a_partial_row(q):
    q.connection.client.zadd(q.keys.schedule, {"g": 0})
    assert q.promote() == 1
    assert snap(q) == {K(q, "pending"): Z(("g", 0)), R(q, "g"): H(state="pending")}
    job = q.claim(60_000)  # the partial row is claimable: no payload, attempts minted by HINCRBY
    assert (job.id, job.raw_payload, job.payload, job.attempt) == ("g", None, None, 1)
    assert snap(q)[R(q, "g")] == H(state="active", attempts=1, started=TIME)


def test_reprocess_of_a_ghost_in_dead_removes_it_and_answers_zero(q):
    """One read is enough here, so the script does as the native verb (SPEC §9.1)."""
    q.connection.client.zadd(q.keys.dead, {"g": 0})
    assert q.reprocess("g") is False
    assert snap(q) == {}


@pytest.mark.parametrize("max_stalled", [1, 2])
def test_stalled_check_of_a_ghost_in_active_creates_a_partial_row(q, max_stalled):
    q.connection.client.zadd(q.keys.active, {"g": 1})  # a lease that expired long ago
    sweep = q.stalled_check(max_stalled=max_stalled)
    if max_stalled == 1:
        assert sweep.dead == ["g"]
        died = q.ids(State.DEAD)[0][1]
        assert died > 1  # scored the time it died
        assert snap(q) == {
            K(q, "dead"): Z(("g", died)),
            R(q, "g"): H(state="dead", stalled=1, last_error="stalled", failed=TIME),
            K(q, "metrics:failed"): H(count=1),
        }
    else:
        assert sweep.recovered == ["g"]
        assert snap(q) == {K(q, "pending"): Z(("g", 0)), R(q, "g"): H(state="pending", stalled=1)}


# --------------------------------------------------------------------------- §5.5 lane and flow rows are acted on


@pytest.fixture(params=["group", "parent"])
def marked(request, q):
    """A claimed job whose row carries a lane (``group``) or flow (``parent``) field."""
    q.enqueue(b"p", id="a")
    q.connection.client.hset(q.keys.job("a"), request.param, "g1")
    job = q.claim(60_000)
    return request.param, job


def test_complete_acts_on_a_lane_or_flow_row(q, marked):
    _, job = marked
    q.complete(job)
    assert snap(q) == {K(q, "metrics:completed"): H(count=1)}


def test_fail_acts_on_a_lane_or_flow_row(q, marked):
    field, job = marked
    assert q.fail(job, "x", max_attempts=1) is State.DEAD
    assert snap(q)[R(q, "a")] == H(state="dead", payload=b"p", attempts=1, failures=1, last_error="x", created=TIME, started=TIME, failed=TIME, **{field: "g1"})
    assert q.reprocess("a") is True
    assert q.state("a") is State.PENDING


def test_delay_and_stalled_check_act_on_a_lane_row(q):
    q.enqueue(b"p", id="a")
    q.connection.client.hset(q.keys.job("a"), "group", "g1")
    job = q.claim(1)
    due = q.delay(job, 0)
    wait_server_past(q.connection.client, due)
    assert q.promote() == 1
    q.claim(1)
    wait_server_past(q.connection.client, q.ids(State.ACTIVE)[0][1])
    assert q.stalled_check(max_stalled=1).dead == ["a"]
    assert snap(q)[R(q, "a")] == H(state="dead", payload=b"p", attempts=2, group="g1", stalled=1, last_error="stalled", created=TIME, started=TIME, failed=TIME)


# --------------------------------------------------------------------------- §5.6 a script may fail halfway


def wrong_type(q, suffix):
    q.connection.client.set(q.keys.key(suffix), "not a zset")
    return K(q, suffix), ("string", b"not a zset")


def test_enqueue_into_a_wrong_typed_pending_leaves_the_row_behind(q):
    key, value = wrong_type(q, "pending")
    with pytest.raises(WrongType):
        q.enqueue(b"p", id="a")
    assert snap(q) == {key: value, R(q, "a"): H(state="pending", payload=b"p", attempts=0, created=TIME)}


def test_schedule_into_a_wrong_typed_schedule_leaves_the_row_behind(q):
    key, value = wrong_type(q, "schedule")
    with pytest.raises(WrongType):
        q.schedule(b"p", 10, id="a", priority=2)
    assert snap(q) == {key: value, R(q, "a"): H(state="scheduled", payload=b"p", attempts=0, priority=2, created=TIME)}


def test_claim_into_a_wrong_typed_active_pops_and_counts_first(q):
    q.enqueue(b"p", id="a")
    key, value = wrong_type(q, "active")
    with pytest.raises(WrongType):
        q.claim(60_000)
    # popped from pending, attempts spent, state active -- and in no set
    assert snap(q) == {key: value, R(q, "a"): H(state="active", payload=b"p", attempts=1, created=TIME, started=TIME)}


def test_claim_with_a_non_numeric_lease_fails_after_the_pop(q):
    q.enqueue(b"p", id="a")
    with pytest.raises(CommandRefused) as info:
        raw(q, "claim", "soon")
    assert info.value.code == "ERR"
    assert snap(q) == {R(q, "a"): H(state="active", payload=b"p", attempts=1, created=TIME, started=TIME)}


def test_enqueue_with_a_non_numeric_priority_fails_before_any_write(q):
    with pytest.raises(CommandRefused) as info:
        raw(q, "enqueue", "a", "p", "high")
    assert info.value.code == "ERR"
    assert snap(q) == {}


def test_enqueue_with_a_negative_priority_is_taken_as_a_score(q):
    """The script has no ARGV grammar: "-5" is written as the score, and no priority field."""
    assert raw(q, "enqueue", "a", "p", "-5") == 1
    assert snap(q) == {K(q, "pending"): Z(("a", -5)), R(q, "a"): H(state="pending", payload=b"p", attempts=0, created=TIME)}


def test_complete_into_a_wrong_typed_metric_has_already_deleted_the_row(q):
    job = held(q)
    key, value = wrong_type(q, "metrics:completed")
    with pytest.raises(WrongType):
        q.complete(job)
    assert snap(q) == {key: value}


def test_fail_into_a_wrong_typed_dead_leaves_an_active_row_in_no_set(q):
    job = held(q)
    key, value = wrong_type(q, "dead")
    with pytest.raises(WrongType):
        q.fail(job, "x", max_attempts=1)
    # failures is HINCRBY'd first, then ZADD dead fails: the row keeps the count, in no set
    assert snap(q) == {key: value, R(q, "a"): H(state="active", payload=b"p", attempts=1, failures=1, created=TIME, started=TIME)}


def test_promote_into_a_wrong_typed_pending_drops_the_member(q):
    q.schedule(b"p", 0, id="a")
    wait_server_past(q.connection.client, q.ids(State.SCHEDULED)[0][1])
    key, value = wrong_type(q, "pending")
    with pytest.raises(WrongType):
        q.promote()
    assert snap(q) == {key: value, R(q, "a"): H(state="scheduled", payload=b"p", attempts=0, created=TIME)}


def test_stalled_check_keeps_the_members_before_a_wrong_typed_row(q):
    expire(q, "a", "b")
    client = q.connection.client
    client.delete(q.keys.job("b"))
    client.set(q.keys.job("b"), "not a hash")
    with pytest.raises(WrongType):
        q.stalled_check(max_stalled=5)
    # "a" was recovered before the error; "b" left active and is in no set now
    assert snap(q) == {
        K(q, "pending"): Z(("a", 0)),
        R(q, "a"): H(state="pending", payload=b"p", attempts=1, stalled=1, created=TIME, started=TIME),
        R(q, "b"): ("string", b"not a hash"),
    }


def test_stalled_check_on_a_non_integer_stall_count(q):
    expire(q, "a")
    q.connection.client.hset(q.keys.job("a"), "stalled", "many")
    with pytest.raises(CommandRefused) as info:
        q.stalled_check(max_stalled=5)
    assert info.value.code == "ERR" and "not an integer" in str(info.value)
    assert snap(q) == {R(q, "a"): H(state="active", payload=b"p", attempts=1, stalled="many", created=TIME, started=TIME)}


@pytest.mark.parametrize("verb,argv", [("claim", (60_000,)), ("claims", (60_000, 3))])
@pytest.mark.parametrize("paused", ["1", "0", ""])
def test_a_paused_queue_s_claim_scripts_answer_empty_and_write_nothing(q, verb, argv, paused):
    """The claim scripts read the pause themselves (the client's pause read rides in the same round
    trip, SPEC §4): any value of `paused` holds the queue, before the pop, whatever its switches say."""
    q.enqueue(b"p", id="a")
    client = q.connection.client
    client.hset(q.keys.meta, mapping={"paused": paused, "events": "many"})  # a malformed switch, unread
    with queue_unchanged(q):
        assert raw(q, verb, *argv) == []
    client.hdel(q.keys.meta, "paused", "events")
    assert [job[0] for job in raw(q, "claims", 60_000, 3)] == [b"a"]


def test_a_claim_made_as_the_queue_was_resumed_stands_beside_its_pause_read(q):
    """The pause read and the claims travel in one round trip; a claim the script made (the queue was
    resumed between the two) is kept, and a refusal beside a pause read that could not read meta is
    that read's, not raised (QueueCore._paused_claims)."""
    job = object()
    assert q._paused_claims(True, [[job], CommandRefused("WRONGTYPE")]) == [[job], []]
    refusal = CommandRefused("EMQ hash value is not an integer")
    assert q._paused_claims(False, [[], refusal]) == [[], refusal]
