"""A round trip's settles in batches (docs/spec.md §18): the COMPLETEs of one ``settle_many`` or
``settle_and_claim`` travel as one COMPLETES, yet each call answers exactly as it does sent alone.
Each round trip is checked against a twin queue set up the same way whose calls go one per round
trip (a call alone never batches): the same answers and the same dataset."""

from __future__ import annotations

import threading

import pytest

from echomq import App, LeaseLost, Queue, Worker, WorkerConfig, hooks
from echomq._core.core import batched_settles, settle_answers
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import EXTENDS_MAX_PAIRS, BY_NAME, Call
from support.dataset import KEEP_MS
from support.queues import fresh_name, round_trips
from support.waiting import wait_until
from test_completes import answers, relative
from test_worker import running

LEASE = 60_000


@pytest.fixture
def twins(conn):
    """Two queues on one connection: one settles in batches, the other one call per round trip."""
    return [Queue(conn, fresh_name("sb"), serializer=RAW) for _ in range(2)]


def call(verb, *argv, keys=("active", "base")):
    return Call(BY_NAME[verb], keys, argv)


# -- deciding: which calls batch, and where each reply is -------------------------------------

def test_the_completes_of_a_round_trip_go_as_one_in_the_place_of_the_first():
    calls = [call("fail", "x", "1", "e", 3, 0), call("complete", "a", "1"), call("delay", "y", "2", 5),
             call("complete", "b", "2"), call("complete", "c", "3")]
    sent, routes = batched_settles(calls, lambda verb: True)
    assert [c.verb.name for c in sent] == ["fail", "completes", "delay"]
    assert sent[1].argv == ("a", "1", "b", "2", "c", "3") and sent[1].keys == ("active", "base")
    assert routes == [(0, -1), (1, 0), (2, -1), (1, 1), (1, 2)]


def test_nothing_batches_alone_nor_where_the_verb_is_not_carried_nor_across_queues():
    one = [call("complete", "a", "1")]
    assert batched_settles(one, lambda verb: True) == (one, [(0, -1)])
    two = [call("complete", "a", "1"), call("complete", "b", "1")]
    assert batched_settles(two, lambda verb: False) == (two, [(0, -1), (1, -1)])
    apart = [call("complete", "a", "1"), call("complete", "b", "1", keys=("other", "base"))]
    assert batched_settles(apart, lambda verb: True) == (apart, [(0, -1), (1, -1)])


def test_a_batch_holds_at_most_the_bound_and_the_next_opens_at_its_first_call():
    calls = [call("complete", str(i), "1") for i in range(EXTENDS_MAX_PAIRS + 2)]
    sent, routes = batched_settles(calls, lambda verb: True)
    assert [len(c.argv) for c in sent] == [2 * EXTENDS_MAX_PAIRS, 4]
    assert routes[EXTENDS_MAX_PAIRS - 1] == (0, EXTENDS_MAX_PAIRS - 1) and routes[-1] == (1, 1)


def test_each_call_answers_its_element_or_its_batch_s_whole_refusal():
    calls = [call("complete", "a", "1"), call("complete", "b", "2"), call("delay", "y", "2", 5)]
    sent, routes = batched_settles(calls, lambda verb: True)
    got = settle_answers(calls, routes, [[1, 0], 1])
    assert got[0] is True and isinstance(got[1], LeaseLost) and got[2] == 1
    refused = RuntimeError("refused whole")
    assert settle_answers(calls, routes, [refused, 1])[:2] == [refused, refused]


# -- doing: on both wires, against the same calls one per round trip -------------------------

def mixed(q):
    """Held jobs and the calls settling them: completions not kept (three, one of them lost), two kept
    (PUBLISH), a FAIL (back to pending), a lane job's completion; two jobs left pending."""
    for job_id in "abcdefgh":
        q.enqueue(b"p" + job_id.encode(), id=job_id)
    q.enqueue(b"lane", id="l", group="g")
    held = {job.id: job for job in q.claim_many(6, LEASE)}
    (lane,) = q.claim_lanes(1, LEASE)
    return [q.complete_call(held["a"]), q.publish_call(held["b"], b"r", retention_ms=KEEP_MS),
            q.complete_call(held["c"], token=9), q.fail_call(held["d"], "boom", max_attempts=3),
            q.complete_call(lane), q.complete_call(held["e"]), q.publish_call(held["f"], b"s", retention_ms=KEEP_MS)]


def one_by_one(q, calls):
    return [answer for c in calls for answer in q.settle_many([c])]


@pytest.mark.parametrize("round_trip", ["settle_many", "settle_and_claim"])
def test_a_round_trip_s_settles_answer_as_each_alone(twins, round_trip):
    q, alone = twins
    calls, expected_calls = mixed(q), mixed(alone)
    with round_trips() as sent:
        if round_trip == "settle_many":
            got = q.settle_many(calls)
        else:
            got, claimed = q.settle_and_claim(calls, 3, LEASE)
            assert sorted(job.id for job in claimed) == ["d", "g", "h"]  # d failed first: wire 4's order
    assert sent[0][:4] == ["completes", "publishes", "fail", "lane_complete"]
    expected = one_by_one(alone, expected_calls)
    if round_trip == "settle_and_claim":
        alone.claim_many(3, LEASE)
    assert [type(a).__name__ for a in got] == [type(a).__name__ for a in expected]
    assert answers(got) == answers(expected)
    assert got[0] is True and isinstance(got[2], LeaseLost) and got[5] is True and got[6] is True
    assert relative(q) == relative(alone)


def test_a_batch_refused_whole_answers_its_refusal_for_each_call(twins, wire):
    q, _ = twins
    q.enqueue_many([b"p"] * 3)
    jobs = q.claim_many(3, LEASE)
    q.connection.client.hset(q.keys.key("metrics:completed"), "count", "many")  # not a count
    got = q.settle_many([q.complete_call(job) for job in jobs])
    assert len({str(a) for a in got}) == 1 and all(isinstance(a, Exception) for a in got)
    assert not any(isinstance(a, LeaseLost) for a in got)
    # wire 4 is complete.lua's executor: the count's HINCRBY fails after the ZREM (§5.6, §18)
    assert q.counts().active == (3 if wire == 6 else 0)


@pytest.mark.parametrize("result_ttl, batch", [(0, "completes"), (60, "publishes")])
def test_a_worker_settles_its_completions_in_batches(conn, result_ttl, batch):
    """A real worker: its completions of a round trip go as COMPLETES (a task that keeps no result)
    or PUBLISHES (one that does, the default), and every job is still settled exactly once, the
    failures retried, each kept result readable."""
    name, seen, lock = fresh_name("w"), [], threading.Lock()

    def handler(payload, ctx):
        with lock:
            seen.append((payload["n"], ctx.attempt))
        if payload["n"] % 7 == 0 and ctx.attempt == 1:
            raise ValueError("once")
        return payload["n"] * 2

    app = App()
    app.handler(name, handler, result_ttl=result_ttl)
    queue = Queue(conn, name)
    jobs = queue.enqueue_many([{"n": n} for n in range(200)])
    verbs: list[str] = []
    unsubscribe = hooks.subscribe("verb.stop", lambda event, data: verbs.extend(data["verbs"]))
    try:
        with running(Worker(app, conn, config=WorkerConfig(concurrency=8))) as worker:
            wait_until(lambda: queue.metrics()["completed"] == 200, what="200 completions")
    finally:
        unsubscribe()
    assert sorted(seen) == sorted([(n, 1) for n in range(200)] + [(n, 2) for n in range(0, 200, 7)])
    assert worker.tally.completed == 200 and queue.counts().total == 0
    assert batch in verbs
    if result_ttl:
        assert [queue.result(job.id) for job in jobs[:20]] == [n * 2 for n in range(20)]
