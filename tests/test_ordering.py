"""Claim order, payload bytes, idempotent enqueue and the Python-side argument checks, on both wires.

SPEC §1: ZPOPMIN serves the lowest priority first and equal priorities by id, and
default ids are time-ordered, so equal priorities are FIFO; an id that has a row is
not enqueued twice; payloads are opaque bytes. SPEC §3's number grammar is enforced
in Python before anything is sent: a bad value is a ConfigurationError naming it,
and the dataset does not change.
"""

from __future__ import annotations

import os

import pytest

from echomq import ConfigurationError, Job, Queue, State
from echomq._protocol.serializers import JSON, RAW
from support.dataset import dump, queue_unchanged, unchanged
from support.queues import fresh_name
from support.waiting import wait_server_past

@pytest.fixture
def q(conn):
    return Queue(conn, fresh_name("ord"), serializer=RAW)


def drain(q, lease_ms=60_000):
    out = []
    while (job := q.claim(lease_ms)) is not None:
        out.append(job)
    return out


# --------------------------------------------------------------------------- order


def test_lower_priority_first_and_fifo_within_a_priority(q):
    plan = [5, 0, 3, 0, 1, 5, 3, 0, 2**31 - 1, 1]
    made = [(q.enqueue(f"{i}".encode(), priority=p).id, p) for i, p in enumerate(plan)]
    expected = [job_id for job_id, _ in sorted(made, key=lambda m: m[1])]  # stable: FIFO among equals
    assert [job.id for job in drain(q)] == expected


def test_default_ids_are_fifo_across_single_and_pipelined_enqueues(q):
    ids = [q.enqueue(b"s").id for _ in range(20)]
    ids += [e.id for e in q.enqueue_many([b"m"] * 100)]
    ids += [q.enqueue(b"s").id for _ in range(20)]
    assert len(set(ids)) == 140
    assert [job.id for job in drain(q)] == ids


def test_caller_ids_of_equal_priority_are_served_lexicographically(q):
    for job_id in ["b", "a", "ab", "B", "a0", "é", "Z9"]:
        q.enqueue(b"p", id=job_id)
    served = [job.id for job in drain(q)]
    assert served == sorted(["b", "a", "ab", "B", "a0", "é", "Z9"], key=lambda s: s.encode())


def test_a_retried_job_reenters_pending_at_its_priority(q):
    q.enqueue(b"p", id="urgent", priority=1)
    q.enqueue(b"p", id="low", priority=9)
    q.enqueue(b"p", id="mid", priority=5)
    job = q.claim(60_000)
    assert job.id == "urgent"
    q.fail(job, "again", max_attempts=5)
    assert [j.id for j in drain(q)] == ["urgent", "mid", "low"]


def test_recovered_promoted_and_reprocessed_jobs_keep_their_priority(q):
    client = q.connection.client
    q.enqueue(b"p", id="stalled", priority=4)
    assert q.claim(1).id == "stalled"
    wait_server_past(client, q.ids(State.ACTIVE)[0][1])
    assert q.stalled_check(max_stalled=5).recovered == ["stalled"]
    q.enqueue(b"p", id="dead", priority=3)
    dead = q.claim(60_000)
    assert dead.id == "dead"
    q.fail(dead, "x", max_attempts=1)
    assert q.reprocess("dead")
    q.schedule(b"p", 0, id="promoted", priority=2)
    wait_server_past(client, q.ids(State.SCHEDULED)[0][1])
    assert q.promote() == 1
    q.enqueue(b"p", id="plain", priority=6)
    assert q.ids(State.PENDING) == [("promoted", 2), ("dead", 3), ("stalled", 4), ("plain", 6)]
    assert [j.id for j in drain(q)] == ["promoted", "dead", "stalled", "plain"]


# --------------------------------------------------------------------------- payload bytes


BINARY = [
    bytes(range(256)),
    b"\xff\xfe\xfd\x80\x00",
    b"\x00",
    b"",
    b"\xc3\x28 invalid utf-8 \xa0\xa1",
    os.urandom(64 * 1024),
]


@pytest.mark.parametrize("payload", BINARY, ids=["all-bytes", "high", "nul", "empty", "bad-utf8", "64k-random"])
def test_binary_payloads_round_trip_byte_for_byte(q, payload):
    q.enqueue(payload, id="a")
    assert q.connection.client.hget(q.keys.job("a"), "payload") == payload
    job = q.claim(60_000)
    assert job.raw_payload == payload and job.payload == payload and type(job.payload) is bytes


def test_binary_payloads_round_trip_through_schedule_and_pipelines(q):
    made = q.enqueue_many(BINARY[:3])
    q.schedule(BINARY[4], 0, id="sched")
    wait_server_past(q.connection.client, q.ids(State.SCHEDULED)[0][1])
    q.promote()
    got = {job.id: job.payload for job in drain(q)}
    assert got == {**{e.id: p for e, p in zip(made, BINARY[:3])}, "sched": BINARY[4]}


def test_raw_takes_text_as_utf8(q):
    q.enqueue("snow ☃", id="a")
    assert q.claim(60_000).payload == "snow ☃".encode()


def test_json_payloads_round_trip(conn):
    q = Queue(conn, fresh_name("ord"), serializer=JSON)
    payload = {"to": "é@example.com", "n": [1, 2.5, None, True], "nested": {"☃": ""}}
    q.enqueue(payload, id="a")
    job = q.claim(60_000)
    assert job.payload == payload and job.raw_payload == JSON.dumps(payload)
    assert q.job("a")["payload"] == payload


# --------------------------------------------------------------------------- idempotent enqueue


def test_an_id_is_enqueued_once_until_its_row_is_gone(q):
    assert q.enqueue(b"first", id="k").created
    before = dump(q.connection.client, q.keys)
    assert not q.enqueue(b"second", id="k", priority=3).created
    assert not q.schedule(b"third", 0, id="k").created
    assert dump(q.connection.client, q.keys) == before
    job = q.claim(60_000)
    assert job.payload == b"first"
    assert not q.enqueue(b"while held", id="k").created
    q.complete(job)
    again = q.enqueue(b"fresh", id="k")  # completion deleted the row: the id is new again
    assert again.created
    job = q.claim(60_000)
    assert (job.payload, job.attempt) == (b"fresh", 1)


# --------------------------------------------------------------------------- bad input: ConfigurationError, nothing sent


@pytest.mark.parametrize("name", ["", "a{b}", "q}", "{q", "x" * 129, "sp ace", "é", "a*", None, 7])
def test_a_bad_queue_name_is_refused_naming_it(conn, name):
    with unchanged(conn.client), pytest.raises(ConfigurationError) as info:
        Queue(conn, name)
    assert repr(name) in str(info.value)


BAD_IDS = ["", "x" * 513, "é" * 257, None, 5, b"raw-bytes"]


def _named(value) -> str:
    return repr(value[:40]) if isinstance(value, str) else repr(value)


ID_CALLS = {
    "enqueue": lambda q, bad: q.enqueue(b"p", id=bad),
    "schedule": lambda q, bad: q.schedule(b"p", 10, id=bad),
    "extend": lambda q, bad: q.extend(bad, 1_000, token=1),
    "complete": lambda q, bad: q.complete(bad, token=1),
    "fail": lambda q, bad: q.fail(bad, "e", max_attempts=1, token=1),
    "delay": lambda q, bad: q.delay(bad, 10, token=1),
    "requeue": lambda q, bad: q.requeue(bad, token=1),
    "reschedule": lambda q, bad: q.reschedule(bad, 10),
    "reprocess": lambda q, bad: q.reprocess(bad),
    "state": lambda q, bad: q.state(bad),
    "job": lambda q, bad: q.job(bad),
}


@pytest.fixture
def held(q):
    """A queue with one claimed job, one pending and one dead, so a wrongly sent call would change something."""
    q.enqueue(b"p", id="a")
    job = q.claim(60_000)
    q.enqueue(b"p", id="b")
    q.enqueue(b"p", id="d")
    q.fail(q.claim(60_000), "x", max_attempts=1)
    q.schedule(b"p", 0, id="s")
    return q, job


@pytest.mark.parametrize("verb", list(ID_CALLS))
def test_a_bad_job_id_is_refused_naming_it(held, verb):
    q, _ = held
    for bad in BAD_IDS:
        if bad is None and verb in ("enqueue", "schedule"):
            continue  # id=None asks for a generated id
        with queue_unchanged(q):
            with pytest.raises(ConfigurationError) as info:
                ID_CALLS[verb](q, bad)
        assert _named(bad) in str(info.value), (verb, bad)


def test_an_id_without_its_token_is_refused(held):
    q, job = held
    with queue_unchanged(q):
        for call in (lambda: q.complete("a"), lambda: q.extend("a", 1_000), lambda: q.delay("a", 5),
                     lambda: q.fail("a", "e", max_attempts=1), lambda: q.requeue("a")):
            with pytest.raises(ConfigurationError, match="'a'.*token="):
                call()


NUMBER_CALLS = [
    ("priority", lambda q, job, v: q.enqueue(b"p", priority=v), [-1, 2**31, True, 1.5, "1", None]),
    ("priority", lambda q, job, v: q.enqueue_many([b"p"], priority=v), [-1, 2**31]),
    ("priority", lambda q, job, v: q.schedule(b"p", 0, priority=v), [-1, 2**31]),
    ("delay_ms", lambda q, job, v: q.schedule(b"p", v), [-1, 2**63, 0.5, "10", None]),
    ("lease_ms", lambda q, job, v: q.claim(v), [0, -1, 2**63, True, 1.0, "100"]),
    ("lease_ms", lambda q, job, v: q.extend(job, v), [0, -1, 2**63]),
    ("lease_ms", lambda q, job, v: q.extend_many([job], v), [0, False]),
    ("max_attempts", lambda q, job, v: q.fail(job, "e", max_attempts=v), [0, -1, True, 2**63, "3"]),
    ("backoff_ms", lambda q, job, v: q.fail(job, "e", max_attempts=3, backoff_ms=v), [-1, 2**63, 1.5]),
    ("delay_ms", lambda q, job, v: q.delay(job, v), [-1, 2**63]),
    ("delay_ms", lambda q, job, v: q.reschedule("s", v), [-1, None]),
    ("limit", lambda q, job, v: q.promote(v), [0, 10_001, -1, True]),
    ("max_stalled", lambda q, job, v: q.stalled_check(max_stalled=v), [0, -1, 1.0]),
    ("limit", lambda q, job, v: q.stalled_check(limit=v), [0, 10_001]),
]


@pytest.mark.parametrize("name,call,values", NUMBER_CALLS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(NUMBER_CALLS)])
def test_a_bad_number_is_refused_naming_it(held, name, call, values):
    q, job = held
    for value in values:
        with queue_unchanged(q):
            with pytest.raises(ConfigurationError) as info:
                call(q, job, value)
        message = str(info.value)
        assert name in message and repr(value) in message, (name, value, message)


def test_the_edge_values_are_accepted(q):
    """The bounds themselves are in the grammar: priority 2^31-1, delay 0, lease 1, limit 10000."""
    assert q.enqueue(b"p", id="top", priority=2**31 - 1).created
    assert q.schedule(b"p", 0, id="now").created
    assert q.promote(10_000) in (0, 1)
    assert isinstance(q.claim(1), Job)
    assert len(q.stalled_check(max_stalled=1, limit=10_000)) in (0, 1)


def test_empty_batches_send_nothing(q):
    """An empty batch answers empty without a command (an EXTENDS of no pair would be a shape error)."""
    with queue_unchanged(q):
        assert q.enqueue_many([]) == []
        assert q.complete_many([]) == []
        assert q.extend_many([], 1_000) == []
