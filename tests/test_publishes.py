"""PUBLISHES (docs/spec.md §19): PUBLISH for many (id, token, result) triples in one command, one
retention for all, on both wires. Each batch is checked against its definition, the same triples
sent as PUBLISHes in a row to a twin queue set up the same way: the same answers and the same
dataset (records, events, unique windows and the count included). Each refusal of the whole
command: its reply, and the dataset unchanged."""

from __future__ import annotations

import pytest

from echomq import LeaseLost, Queue
from echomq._client.connection import build_call
from echomq.errors import ArgumentError, CounterError, ShapeError, StateError, WrongType
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import EXTENDS_MAX_PAIRS
from support.dataset import KEEP_MS, queue_unchanged
from support.queues import fresh_name, raw_reply, round_trips
from support.waiting import server_ms
from test_completes import LEASE, active_wrong_typed, answers, relative
from test_completes import setup as completes_setup

SCENARIOS = ["normal", "events", "unique", "lost", "refused", "marker", "records"]


@pytest.fixture
def twins(conn):
    """Two queues on one connection: one publishes with PUBLISHES, the other with PUBLISHes in a row."""
    return [Queue(conn, fresh_name("pb"), serializer=RAW) for _ in range(2)]


def setup(q, scenario):
    """COMPLETES' five held jobs a..e and its scenario's drift (test_completes.setup), each pair given a
    result; and "records": an older record of a as a field (replaced, its expiry with it), and a
    `done:b` that is not a hash, which the fields layout does not look at (docs/spec.md §12)."""
    triples = [(job_id, token, b"r" + job_id.encode()) for job_id, token in completes_setup(q, scenario)]
    if scenario == "records":
        q.connection.client.hset(q.keys.key("done"), "a", f"1,{server_ms(q.connection.client)},,,older")
        q.connection.client.set(q.keys.key("done:b"), "x")
    return triples


def kept_field(q, job_id):
    """The job's record kept as a field of `done`: its value and ms to live (HPTTL)."""
    client, done = q.connection.client, q.keys.key("done")
    (ttl,) = client.execute_command("HPTTL", done, "FIELDS", 1, job_id)
    return client.hget(done, job_id), ttl


def flat(triples):
    return [part for triple in triples for part in triple]


@pytest.mark.parametrize("retention", [KEEP_MS, 0])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_batch_is_those_publishes_in_a_row(twins, scenario, retention, wire):
    batch, by_publish = twins
    triples = setup(batch, scenario)
    assert setup(by_publish, scenario) == triples
    reply = raw_reply(batch, "publishes", retention, *flat(triples))
    expected = by_publish.connection.round_trip(
        [build_call("publish", by_publish.keys, (*triple, retention)) for triple in triples])
    assert len(reply) == len(triples) and answers(reply) == answers(expected)
    assert 1 in reply
    assert relative(batch) == relative(by_publish)
    for (job_id, _, result), answer in zip(triples, reply):  # each record kept its retention after it finished
        if answer == 1 and retention:
            value, ttl = kept_field(batch, job_id)
            assert value.endswith(b"," + result) and 0 < ttl <= KEEP_MS, (job_id, value, ttl)
    if scenario == "records":
        assert batch.connection.client.get(batch.keys.key("done:b")) == b"x"


def test_refused_triples_are_their_errors_and_the_others_publish(twins, wire):
    q, _ = twins
    triples = setup(q, "refused")
    reply = raw_reply(q, "publishes", KEEP_MS, *flat(triples))
    not_in_active = "EMQSTATE EMQ.PUBLISHES id is not in active"
    # the lane row and the flow child: refused natively; publishes.lua completes them (§5.5)
    boundary = ["EMQSTATE lane row is not native", "EMQSTATE flow child is not native"] if wire == 6 else ["1", "1"]
    assert [str(r) for r in reply] == ["1", "EMQSTATE EMQ.PUBLISHES row is pending, not active", not_in_active,
                                       *boundary, not_in_active]
    assert all(isinstance(r, StateError) for r in reply if r != 1)
    assert kept_field(q, "a")[0].endswith(b",ra")
    assert kept_field(q, "b") == kept_field(q, "c") == (None, -2)


def test_a_malformed_event_switch_refuses_the_whole_batch(twins):
    q, _ = twins
    triples = setup(q, "normal")
    q.connection.client.hset(q.keys.meta, "events", "many")
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ hash value is not an integer$"):
        raw_reply(q, "publishes", KEEP_MS, *flat(triples))
    with queue_unchanged(q):  # no triple held: the switch is not read, nothing is written
        assert raw_reply(q, "publishes", KEEP_MS, "a", "9", "r", "b", "9", "r") == [0, 0]


def test_native_refuses_the_whole_command_before_any_write(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 is publish.lua's executor: arguments unchecked, the count's HINCRBY fails after "
                    "the ZREM (§5.6, §19)")
    q = Queue(conn, fresh_name("pb"), serializer=RAW)
    triples = setup(q, "normal")
    client, metrics = conn.client, q.keys.key("metrics:completed")
    argv = flat(triples)
    client.set(metrics, "x")
    with queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "publishes", KEEP_MS, *argv)
    client.delete(metrics)
    client.hset(metrics, "count", 2**63 - 3)  # room for three more, not five
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ increment or decrement would overflow$"):
        raw_reply(q, "publishes", KEEP_MS, *argv)
    client.delete(metrics)
    for bad, refusal in (([KEEP_MS], ShapeError), ([KEEP_MS, *argv[:4]], ShapeError), (argv, ShapeError),
                         ([-1, *argv], ArgumentError), (["soon", *argv], ArgumentError),
                         ([KEEP_MS, "", "1", "r"], ArgumentError),
                         ([2**63 - 1, *argv], ArgumentError),  # the expiry leaves the clock
                         ([KEEP_MS, *["x", "1", "r"] * (EXTENDS_MAX_PAIRS + 1)], ShapeError)):
        with queue_unchanged(q), pytest.raises(refusal):
            raw_reply(q, "publishes", *bad)
    assert raw_reply(q, "publishes", KEEP_MS, *argv) == [1] * 5


def test_a_wrong_typed_active_refuses_the_whole_batch(twins):
    q, _ = twins
    triples = setup(q, "normal")
    with active_wrong_typed(q), queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "publishes", KEEP_MS, *flat(triples))
    assert raw_reply(q, "publishes", KEEP_MS, *triples[0]) == [1]


def test_a_round_trip_s_publishes_go_as_one_per_retention(twins):
    """settle_many: the PUBLISH calls of one retention as one PUBLISHES, another retention its own,
    each call answered as its PUBLISH (a lost lease LeaseLost)."""
    q, alone = twins
    calls = []
    for queue in (q, alone):
        queue.enqueue_many([b"p"] * 5)
        jobs = queue.claim_many(5, LEASE)
        calls.append([queue.publish_call(jobs[0], b"r0", retention_ms=KEEP_MS),
                      queue.publish_call(jobs[1], b"r1", retention_ms=KEEP_MS - 1),
                      queue.publish_call(jobs[2], b"r2", retention_ms=KEEP_MS, token=9),
                      queue.publish_call(jobs[3], b"r3", retention_ms=KEEP_MS - 1),
                      queue.publish_call(jobs[4], b"r4", retention_ms=KEEP_MS)])
    with round_trips() as sent:
        got = q.settle_many(calls[0])
    assert sent == [["publishes", "publishes"]]
    expected = [answer for call in calls[1] for answer in alone.settle_many([call])]
    assert [type(a) for a in got] == [type(a) for a in expected]
    assert got[0] is True and isinstance(got[2], LeaseLost) and got[4] is True
    assert kept_field(q, calls[0][1].argv[0])[0].endswith(b",r1")


def test_each_published_job_s_outcome_is_told_on_its_channel(twins, wire):
    """PUBLISH tells `completed` on the job's outcome channel, always (§12): PUBLISHES tells it for each
    job it completed, none for a triple it did not."""
    q, _ = twins
    triples = setup(q, "lost")
    listener = q.connection.client.pubsub()
    for job_id in "abcd":
        listener.ssubscribe(q.keys.key(f"outcome:{job_id}"))
        assert listener.get_sharded_message(timeout=5)["type"] == "ssubscribe"
    assert raw_reply(q, "publishes", KEEP_MS, *flat(triples)) == [1, 0, 1, 0, 1, 0]
    q.connection.client.spublish(q.keys.key("outcome:d"), "marker")  # the last message: every one before it came
    told = []
    while (message := listener.get_sharded_message(timeout=5))["data"] != b"marker":
        told.append((message["channel"].decode().rsplit(":", 1)[1], message["data"]))
    listener.close()
    assert told == [("a", b"completed"), ("c", b"completed")]
