"""ENQUEUES (docs/spec.md §20): ENQUEUE for many (id, payload, priority) triples in one command, on both
wires. Each batch is checked against its definition, the same triples sent as ENQUEUEs in a row to a
twin queue set up the same way: the same answers and the same dataset (events included). Each refusal
of the whole command: its reply, and the dataset unchanged."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError

import pytest

from echomq import Enqueued, PartitionedQueue, Queue
from echomq._client.connection import STREAM_ARGS, build_call
from echomq.errors import ArgumentError, CounterError, PayloadError, WrongType
from echomq._protocol.serializers import RAW
from echomq._core.admission import ENQUEUES_SIZE, enqueued_of
from echomq._protocol.verbs import EXTENDS_MAX_PAIRS, Admission
from support.dataset import core_dump, mask_times, queue_unchanged, unchanged
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


def test_enqueue_many_sends_every_enqueues_in_one_round_trip(twins):
    """ENQUEUES_SIZE jobs a command (the size bench/bulk_enqueue.py found fastest on both wires),
    every command in one round trip, which the connection streams; ids in the payloads' order
    sort in that order (mint order)."""
    q, _ = twins
    n = 3 * ENQUEUES_SIZE + 100
    with round_trips() as sent:
        made = q.enqueue_many([b"p"] * n, priority=5)
    assert sent == [["enqueues"] * 4] and ENQUEUES_SIZE <= EXTENDS_MAX_PAIRS
    ids = [e.id for e in made]
    assert [e.created for e in made] == [True] * n and len(set(ids)) == n and ids == sorted(ids)
    assert made[0] == Enqueued(ids[0], True, Admission.CREATED) and repr(made[0]) == repr(Enqueued(ids[0], True))
    assert q.counts().pending == n
    assert q.connection.client.zscore(q.keys.pending, made[0].id) == 5.0
    assert q.connection.client.zscore(q.keys.pending, made[-1].id) == 5.0


def test_enqueue_many_answers_each_job_in_a_stream_of_small_parts(twins):
    """Parts of one ENQUEUES (each sent before the last one's replies are read): the ids that
    had a row answer not created, each in its payload's place."""
    q, _ = twins
    q.connection.stream_args = 10
    try:
        first = q.enqueue_many([b"p"] * 1200)
        q.connection.client.delete(*[q.keys.job(e.id) for e in first[::7]])  # rows gone: made again
        assert q.enqueue_many([b"x"] * 2) and q.counts().pending == 1202
    finally:
        q.connection.stream_args = STREAM_ARGS
    again = q.connection.round_trip([build_call("enqueues", q.keys, tuple(
        part for e in first[:1000] for part in (e.id, "again", "0")))])
    assert again[0] == [1 if i % 7 == 0 else 0 for i in range(1000)]


@pytest.mark.parametrize("bad", ["unencodable", "over the limit"])
def test_a_payload_that_does_not_pass_among_10000_sends_nothing(conn, bad):
    q = Queue(conn, fresh_name("eq"), max_payload_bytes=100)
    payloads = [{"n": n} for n in range(10_000)]
    payloads[7_777] = {"bad": object()} if bad == "unencodable" else {"big": "x" * 200}
    refusal = "cannot be encoded by JSONSerializer" if bad == "unencodable" else "over the limit of 100"
    with unchanged(conn.client, dump_keys=False), round_trips() as sent, pytest.raises(PayloadError, match=refusal):
        q.enqueue_many(payloads)
    assert sent == []


def test_a_refused_queue_among_partitions_is_raised_after_every_job_was_sent(conn):
    """A partition whose event stream is of another type refuses its ENQUEUES whole; the other
    partition's jobs, in the same streamed round trip, are made, and the refusal is raised after."""
    queue = PartitionedQueue(conn, fresh_name("p"), partitions=2)
    broken, fine = queue.partitions
    conn.client.hset(broken.keys.meta, "events", 100)
    conn.client.set(broken.keys.events, "x")
    before = core_dump(conn.client, broken.keys)
    conn.stream_args = 10
    try:
        with pytest.raises(WrongType):
            queue.enqueue_many([{}] * 2000)
    finally:
        conn.stream_args = STREAM_ARGS
    assert core_dump(conn.client, broken.keys) == before  # the refused partition: nothing written
    assert fine.counts().pending == 1000


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


def test_the_enqueued_made_in_bulk_are_the_public_enqueued():
    """enqueue_many's Enqueued, made through the slots: equal, shown, hashed and frozen as the
    ones the constructor makes."""
    made = enqueued_of(["a", "b"], [True, False])
    assert made == [Enqueued("a", True), Enqueued("b", False, Admission.EXISTS)]
    assert [repr(e) for e in made] == [repr(Enqueued("a", True)), repr(Enqueued("b", False))]
    assert hash(made[0]) == hash(Enqueued("a", True)) and pickle.loads(pickle.dumps(made[1])) == made[1]
    with pytest.raises(FrozenInstanceError):
        made[0].id = "c"  # type: ignore[misc]
