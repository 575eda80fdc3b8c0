"""ENQUEUES (docs/spec.md §20): ENQUEUE for many (id, payload, priority) triples in one command, on both
wires. Each batch is checked against its definition, the same triples sent as ENQUEUEs in a row to a
twin queue set up the same way: the same answers and the same dataset (events included). Each refusal
of the whole command: its reply, and the dataset unchanged."""

from __future__ import annotations

import pytest

from echomq import Queue
from echomq._client.connection import build_call
from echomq.errors import ArgumentError, CounterError, WrongType
from echomq._protocol.serializers import RAW
from echomq._core.admission import ENQUEUES_DEPTH, ENQUEUES_SIZE
from echomq._protocol.verbs import EXTENDS_MAX_PAIRS
from support.dataset import core_dump, mask_times, queue_unchanged
from support.queues import fresh_name, raw_reply, round_trips
from support.waiting import server_ms


@pytest.fixture
def twins(conn):
    """Two queues on one connection: one enqueues with ENQUEUES, the other with ENQUEUEs in a row."""
    return [Queue(conn, fresh_name("eq"), serializer=RAW) for _ in range(2)]


def relative(q):
    """The queue's dataset with its name taken out of the keys and its times masked."""
    base = q.keys.base.encode()
    dumped = mask_times(core_dump(q.connection.client, q.keys), server_ms(q.connection.client))
    return {key.replace(base, b"<base>"): value for key, value in dumped.items()}


def setup(q, scenario):
    """The scenario's queue before the batch, and the triples to enqueue."""
    client = q.connection.client
    if scenario == "events":
        client.hset(q.keys.meta, "events", 100)
    q.enqueue(b"old", id="b")  # an id with a row already
    client.set(q.keys.job("s"), "x")  # a row of another type: not enqueued either
    triples = [("a", "pa", "0"), ("b", "pb", "0"), ("c", "pc", "7"), ("s", "ps", "0"), ("a", "again", "3"),
               ("d", "pd", "2147483647")]
    return triples


@pytest.mark.parametrize("scenario", ["normal", "events"])
def test_a_batch_is_those_enqueues_in_a_row(twins, scenario):
    batch, by_enqueue = twins
    triples = setup(batch, scenario)
    assert setup(by_enqueue, scenario) == triples
    reply = raw_reply(batch, "enqueues", *[part for triple in triples for part in triple])
    expected = by_enqueue.connection.round_trip([build_call("enqueue", by_enqueue.keys, t) for t in triples])
    assert reply == expected == [1, 0, 1, 0, 0, 1]
    assert relative(batch) == relative(by_enqueue)
    assert batch.counts().pending == 4 and batch.connection.client.hget(batch.keys.job("a"), "payload") == b"pa"


def test_enqueue_many_sends_round_trips_of_the_measured_shape(twins):
    """ENQUEUES_SIZE jobs a command, ENQUEUES_DEPTH commands a round trip (the shape bench/bulk_enqueue.py
    found fastest on both wires), the rest in a last round trip of its own."""
    q, _ = twins
    n = ENQUEUES_SIZE * ENQUEUES_DEPTH + 2 * ENQUEUES_SIZE + 100
    with round_trips() as sent:
        made = q.enqueue_many([b"p"] * n, priority=5)
    assert sent == [["enqueues"] * ENQUEUES_DEPTH, ["enqueues"] * 3] and ENQUEUES_SIZE <= EXTENDS_MAX_PAIRS
    assert [e.created for e in made] == [True] * n and len({e.id for e in made}) == n
    assert q.counts().pending == n
    assert q.connection.client.zscore(q.keys.pending, made[0].id) == 5.0
    assert q.connection.client.zscore(q.keys.pending, made[-1].id) == 5.0


def test_enqueue_many_of_one_job_and_of_lane_jobs_go_one_by_one(twins):
    q, _ = twins
    with round_trips() as sent:
        q.enqueue_many([b"p"])
        q.enqueue_many([b"l1", b"l2"], group="g")
    assert sent == [["enqueue"], ["lane_enqueue", "lane_enqueue"]]


def test_a_module_without_the_token_gets_enqueues_one_by_one(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 always has the script")
    q = Queue(conn, fresh_name("eq"), serializer=RAW)
    conn.tokens = conn.tokens - {"enqueues"}  # a module that predates the verb
    try:
        with round_trips() as sent:
            assert all(e.created for e in q.enqueue_many([b"p"] * 3))
    finally:
        conn.tokens = conn.tokens | {"enqueues"}
    assert sent == [["enqueue"] * 3]


def test_the_wake_marker_is_written_once_for_the_batch(twins, wire):
    if wire == 6:
        pytest.skip("the wake marker is wire 4's (SPEC §9.3)")
    q, _ = twins
    client = q.connection.client
    raw_reply(q, "enqueues", "a", "p", "0", "b", "p", "0")
    assert client.zrange(q.keys.wake, 0, -1, withscores=True) == [(b"w", 0.0)]
    client.delete(q.keys.wake)
    assert raw_reply(q, "enqueues", "a", "p", "0") == [0]  # nothing made claimable: no marker
    assert client.exists(q.keys.wake) == 0


def test_a_wrong_typed_pending_refuses_the_whole_batch(twins):
    q, _ = twins
    client = q.connection.client
    client.set(q.keys.pending, "x")
    with queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "enqueues", "a", "p", "0", "b", "p", "0")


def test_a_wrong_typed_event_stream_refuses_the_whole_batch(twins):
    q, _ = twins
    client = q.connection.client
    client.hset(q.keys.meta, "events", 100)
    client.set(q.keys.events, "x")
    with queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "enqueues", "a", "p", "0", "b", "p", "0")


def test_a_malformed_event_switch_refuses_the_whole_batch(twins):
    q, _ = twins
    q.connection.client.hset(q.keys.meta, "events", "many")
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ hash value is not an integer$"):
        raw_reply(q, "enqueues", "a", "p", "0", "b", "p", "0")


def test_a_priority_that_is_not_a_number_refuses_the_whole_batch(twins):
    q, _ = twins
    with queue_unchanged(q), pytest.raises(ArgumentError, match="^EMQARG priority must"):
        raw_reply(q, "enqueues", "a", "p", "0", "b", "p", "high")


def test_the_client_checks_each_triple_before_sending(twins):
    q, _ = twins
    with pytest.raises(Exception, match="priority"):
        q.enqueue_many([b"p", b"q"], priority=-1)
    assert q.counts().pending == 0
