"""The bus verbs natively (docs/spec.md §12): EMQ.APPEND, EMQ.FAILURES.INCR, EMQ.PUBLISH and the
events every moving verb appends. Ordinary paths with their exact writes, then every refusal
with its reply and an unchanged DEBUG DIGEST."""

from __future__ import annotations

import pytest

from support.dataset import digest, refused
from support.native import NativeQueue
from support.waiting import server_ms

NOT_INTEGER = "EMQ hash value is not an integer"


@pytest.fixture
def nq(c):
    """The queue of one test; its completed records, as fields of `done` or keys `done:<id>` (which
    expire, and would change other tests' DEBUG DIGEST as they do), are deleted afterwards."""
    q = NativeQueue(c)
    yield q
    for key in [*c.keys(q.base + b"done:*"), q.base + b"done"]:
        c.delete(key)


def field(c, nq, id):
    """The job's record as a field of `done` (docs/spec.md §12) and its expiry (-2 without one)."""
    done = nq.base + b"done"
    (expires,) = c.execute_command("HPEXPIRETIME", done, "FIELDS", 1, id)
    return c.hget(done, id), expires


def held(nq, id="j"):
    nq.enqueue(id, b"p")
    got = nq.claim(60000)
    assert got[0] == id.encode()
    return got[2]


def entries(nq):
    return [(f[b"type"], f[b"id"], f[b"attempt"]) for _, f in nq.c.xrange(nq.events)]


# -- ordinary paths ---------------------------------------------------------------------

def test_publish_completes_and_keeps_the_record_with_its_retention(c, nq):
    token = held(nq)
    row = nq.hrow("j")
    before = server_ms(c)
    assert nq.publish("j", token, b"\x00result\xff", 5000) == 1
    after = server_ms(c)
    assert not c.exists(nq.row("j")) and c.zscore(nq.active, "j") is None
    assert c.hget(nq.completed, "count") == b"1"
    value, expires = field(c, nq, "j")
    finished = value.split(b",")[1]
    assert value == b",".join([b"1", finished, row[b"created"], row[b"started"], b"\x00result\xff"])
    assert before <= int(finished) <= after and expires == int(finished) + 5000
    assert not c.exists(nq.done("j"))
    assert not c.exists(nq.events)  # events off: nothing appended


def test_publish_with_retention_zero_keeps_no_record_and_replaces_an_older_one(c, nq):
    token = held(nq)
    assert nq.publish("j", token, b"r", 0) == 1
    assert not c.exists(nq.done("j"), nq.base + b"done")
    # an older field goes with its expiry: the new value, the new deadline
    c.hset(nq.base + b"done", "k", "1,5,,,old")
    token = held(nq, "k")
    assert nq.publish("k", token, b"new", 1000) == 1
    value, expires = field(c, nq, "k")
    assert value.endswith(b",new") and expires == int(value.split(b",")[1]) + 1000
    # under `meta results record` an older `done:<id>` goes whole
    c.hset(nq.meta, "results", "record")
    c.hset(nq.done("m"), mapping={"result": "old", "stale": "x"})
    token = held(nq, "m")
    assert nq.publish("m", token, b"new", 1000) == 1
    assert b"stale" not in c.hgetall(nq.done("m")) and c.hget(nq.done("m"), "result") == b"new"
    assert field(c, nq, "m") == (None, -2)


def test_publish_tells_the_outcome_channel(native_server, c, nq):
    token = held(nq)
    listener = native_server.client()
    pubsub = listener.pubsub()
    pubsub.ssubscribe(nq.base + b"outcome:j")
    assert pubsub.get_sharded_message(timeout=5)["type"] == "ssubscribe"
    nq.publish("j", token)
    message = pubsub.get_sharded_message(timeout=5)
    assert message["data"] == b"completed"
    pubsub.close()
    listener.close()


def test_failures_incr_is_fail_with_the_traceback(c, nq):
    token = held(nq)
    assert nq.failures_incr("j", token, b"E: x", 3, 0, b"Traceback\n  E: x") == b"pending"
    row = nq.hrow("j")
    assert (row[b"state"], row[b"failures"], row[b"last_error"], row[b"traceback"]) == (
        b"pending", b"1", b"E: x", b"Traceback\n  E: x")
    token = nq.claim(60000)[2]
    assert nq.failures_incr("j", token, b"E: y", 2, 0, b"tb2") == b"dead"
    assert nq.hrow("j")[b"traceback"] == b"tb2" and c.hget(nq.failed, "count") == b"1"


def test_append_writes_progress_and_its_event(c, nq):
    c.hset(nq.meta, "events", 10)
    token = held(nq)
    assert nq.append("j", token, b'{"pct":10}') == 1
    assert nq.hrow("j")[b"progress"] == b'{"pct":10}'
    assert nq.append("j", 99, b"x") == 0  # another token: nothing written
    assert nq.hrow("j")[b"progress"] == b'{"pct":10}'
    last = c.xrange(nq.events)[-1][1]
    assert last == {b"type": b"progress", b"id": b"j", b"attempt": b"1", b"progress": b'{"pct":10}'}


def test_every_moving_verb_appends_its_event_when_on(c, nq):
    c.hset(nq.meta, "events", 100)
    token = held(nq, "a")
    nq.fail("a", token, b"E", 1, 0)
    nq.enqueue("b")
    nq.schedule("s", b"p", 60000)
    token = nq.claim(60000)[2]
    nq.complete("b", token)
    nq.remove("s")
    nq.enqueue("d")
    nq.drain()
    nq.purge()
    assert entries(nq) == [
        (b"enqueued", b"a", b"0"), (b"claimed", b"a", b"1"), (b"failed", b"a", b"1"), (b"dead", b"a", b"1"),
        (b"enqueued", b"b", b"0"), (b"enqueued", b"s", b"0"), (b"claimed", b"b", b"1"),
        (b"completed", b"b", b"1"), (b"removed", b"s", b"0"), (b"enqueued", b"d", b"0"), (b"removed", b"d", b"0"),
        (b"removed", b"a", b"1")]


def test_the_stream_is_bounded_exactly(c, nq):
    c.hset(nq.meta, "events", 3)
    for n in range(10):
        nq.enqueue(f"j{n}")
    assert [f[b"id"] for _, f in c.xrange(nq.events)] == [b"j7", b"j8", b"j9"]
    c.hset(nq.meta, "events", 0)  # 0 (or below) is off
    nq.enqueue("off")
    assert c.xlen(nq.events) == 3


# -- refusals: a reply, and nothing written --------------------------------------------

@pytest.mark.parametrize("verb", ["EMQ.APPEND", "EMQ.PUBLISH", "EMQ.FAILURES.INCR"])
def test_a_token_that_matches_a_row_that_is_not_active_is_refused(c, nq, verb):
    nq.enqueue("x")
    c.hset(nq.row("x"), "attempts", 1)
    msg = refused(c, "EMQSTATE", *nq.lines()[verb])
    assert msg == f"EMQSTATE {verb} row is pending, not active"
    c.hset(nq.row("x"), "state", "active")
    assert refused(c, "EMQSTATE", *nq.lines()[verb]) == f"EMQSTATE {verb} id is not in active"


@pytest.mark.parametrize("verb", ["EMQ.APPEND", "EMQ.PUBLISH", "EMQ.FAILURES.INCR"])
def test_a_lost_token_answers_zero_and_writes_nothing(c, nq, verb):
    held(nq, "x")
    c.hset(nq.meta, "events", 10)
    before = digest(c)
    line = list(nq.lines()[verb])
    line[2 + line[1] + 1] = "2"  # the token: not the holder's
    assert c.execute_command(*line) == 0
    assert digest(c) == before


def _ready(nq, verb):
    """The state each verb moves from, for job x (the id every line of ``nq.lines()`` names)."""
    if verb in ("EMQ.ENQUEUE", "EMQ.SCHEDULE"):
        return
    if verb in ("EMQ.REMOVE", "EMQ.DRAIN"):
        nq.enqueue("x")
    elif verb == "EMQ.STALLED.CHECK":
        nq.enqueue("x")
        nq.expire_all()
    elif verb == "EMQ.PURGE":
        held(nq, "x")
        nq.fail("x", 1, b"E", 1, 0)
    elif verb == "EMQ.CLAIM":
        nq.enqueue("x")
    else:
        held(nq, "x")


EMITTERS = ["EMQ.APPEND", "EMQ.PUBLISH", "EMQ.FAILURES.INCR", "EMQ.ENQUEUE", "EMQ.SCHEDULE", "EMQ.CLAIM",
            "EMQ.COMPLETE", "EMQ.FAIL", "EMQ.STALLED.CHECK", "EMQ.REMOVE", "EMQ.CANCEL", "EMQ.PURGE", "EMQ.DRAIN"]


@pytest.mark.parametrize("verb", EMITTERS)
def test_a_wrong_typed_event_stream_or_switch_is_refused(c, nq, verb):
    _ready(nq, verb)
    c.hset(nq.meta, "events", 10)
    c.set(nq.events, "not a stream")
    refused(c, "WRONGTYPE", *nq.lines()[verb])
    c.delete(nq.events)
    c.hset(nq.meta, "events", "ten")
    assert refused(c, "EMQ", *nq.lines()[verb]) == NOT_INTEGER
    c.delete(nq.meta)
    c.set(nq.meta, "x")
    refused(c, "WRONGTYPE", *nq.lines()[verb])
    c.delete(nq.meta)
    c.hset(nq.meta, "events", 10)
    c.execute_command(*nq.lines()[verb])  # with a good switch, the same call goes through and tells
    assert c.xlen(nq.events) >= 1


def test_failures_incr_refuses_a_failures_count_it_cannot_increment(c, nq):
    held(nq, "x")
    c.hset(nq.row("x"), "failures", "many")
    assert refused(c, "EMQ", *nq.lines()["EMQ.FAILURES.INCR"]) == NOT_INTEGER
    c.hset(nq.row("x"), "failures", "9223372036854775807")
    assert refused(c, "EMQ", *nq.lines()["EMQ.FAILURES.INCR"]) == "EMQ increment or decrement would overflow"


def test_publish_refuses_a_completed_count_it_cannot_increment(c, nq):
    held(nq, "x")
    c.hset(nq.completed, "count", "x")
    assert refused(c, "EMQ", *nq.lines()["EMQ.PUBLISH"]) == NOT_INTEGER


def test_append_accepts_lane_rows_and_flow_children_as_extend_does(c, nq):
    held(nq, "x")
    c.hset(nq.row("x"), mapping={"group": "g", "parent": "p"})
    assert nq.append("x", 1, b"1") == 1


def test_publish_refuses_a_wrong_typed_record(c, nq):
    held(nq, "x")
    c.set(nq.base + b"done", "not a hash")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.PUBLISH"])
    # under `meta results record` the record is `done:x`: `done` is not looked at, `done:x` is
    c.hset(nq.meta, "results", "record")
    c.set(nq.done("x"), "not a hash")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.PUBLISH"])


def test_the_bus_refuses_a_lane_row_and_publish_a_flow_child(c, nq):
    held(nq, "x")
    c.hset(nq.row("x"), "parent", "p")
    assert refused(c, "EMQSTATE", *nq.lines()["EMQ.PUBLISH"]) == "EMQSTATE flow child is not native"
    assert refused(c, "EMQSTATE", *nq.lines()["EMQ.FAILURES.INCR"]) == "EMQSTATE flow child is not native"
    c.hset(nq.row("x"), "group", "g")
    assert refused(c, "EMQSTATE", *nq.lines()["EMQ.PUBLISH"]) == "EMQSTATE lane row is not native"


def test_the_bus_fences_its_derived_keys_and_tells_only_where_it_may(native_server, c, nq, make_user):
    held(nq, "x")
    base = nq.base.decode()
    keys = [f"~{base}active", f"~{base}", f"~{base}job:*", f"~{base}metrics:*", f"%R~{base}meta", "+@all"]
    user = NativeQueue(make_user(*keys), nq.name)
    line = user.lines()["EMQ.PUBLISH"]
    assert f"'{base}done'" in refused(user.c, "NOPERM", *line, observer=c)
    c.hset(nq.meta, "events", 10)
    with_done = NativeQueue(make_user(*keys, f"~{base}done"), nq.name)
    assert "events" in refused(with_done.c, "NOPERM", *line, observer=c)
    assert "events" in refused(with_done.c, "NOPERM", *with_done.lines()["EMQ.APPEND"], observer=c)
    # keys but no channel: the move goes through, untold (the next message is the admin's marker)
    keys_only = NativeQueue(make_user(*keys, f"~{base}done", f"~{base}events"), nq.name)
    listener = native_server.client()
    pubsub = listener.pubsub()
    pubsub.ssubscribe(nq.base + b"outcome:x")
    assert pubsub.get_sharded_message(timeout=5)["type"] == "ssubscribe"
    assert keys_only.publish("x", 1, b"r", 1000) == 1
    c.execute_command("SPUBLISH", nq.base + b"outcome:x", "marker")
    assert pubsub.get_sharded_message(timeout=5)["data"] == b"marker"
    # with the channel: told
    held(nq, "y")
    pubsub.ssubscribe(nq.base + b"outcome:y")
    assert pubsub.get_sharded_message(timeout=5)["type"] == "ssubscribe"
    told = NativeQueue(make_user(*keys, f"~{base}done", f"~{base}events", f"&{base}outcome:*"), nq.name)
    assert told.publish("y", 1, b"r", 1000) == 1
    assert pubsub.get_sharded_message(timeout=5)["data"] == b"completed"
    pubsub.close()
    listener.close()


def test_the_sweep_and_cancel_tell_a_death(native_server, c, nq):
    listener = native_server.client()
    pubsub = listener.pubsub()
    for job in ("s", "k"):
        pubsub.ssubscribe(nq.base + b"outcome:" + job.encode())
        assert pubsub.get_sharded_message(timeout=5)["type"] == "ssubscribe"
    nq.enqueue("s")
    nq.expire_all()
    assert nq.stalled_check(1, 10)[2] == [b"s"]
    message = pubsub.get_sharded_message(timeout=5)
    assert (message["channel"], message["data"]) == (nq.base + b"outcome:s", b"dead")
    held(nq, "k")
    assert nq.cancel("k") == 1
    message = pubsub.get_sharded_message(timeout=5)
    assert (message["channel"], message["data"]) == (nq.base + b"outcome:k", b"dead")
    pubsub.close()
    listener.close()
