"""COMPLETES (docs/spec.md §18): COMPLETE for many (id, token) pairs in one command, on both wires.
Each batch is checked against its definition, the same pairs sent as COMPLETEs in a row to a twin
queue set up the same way: the same answers and the same dataset (events, unique windows and the
count included). Each refusal of the whole command: its reply, and the dataset unchanged."""

from __future__ import annotations

import asyncio
import re
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from echomq import Queue, aio
from echomq._client.connection import build_call
from echomq.errors import ArgumentError, CounterError, ShapeError, StateError, WrongType
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import EXTENDS_MAX_PAIRS
from support.dataset import TIME, core_dump, mask_times, queue_unchanged
from support.queues import fresh_name, raw_reply, round_trips
from support.waiting import server_ms

LEASE = 60_000


@pytest.fixture
def twins(conn):
    """Two queues on one connection: one completes with COMPLETES, the other with COMPLETEs in a row."""
    return [Queue(conn, fresh_name("cp"), serializer=RAW) for _ in range(2)]


def completes_by_complete(q, pairs):
    """COMPLETES' definition: COMPLETE each pair in a row, each its own reply."""
    return q.connection.round_trip([build_call("complete", q.keys, pair) for pair in pairs])


def relative(q):
    """The queue's dataset with its name taken out of the keys and its times masked (mask_times masks
    the records kept as fields of `done` too, and leaves a value that is no packed record as it is:
    each must show its finished masked, a present server time); a window's marker expiry checked to
    be its `unique` ms after a present time."""
    client, now = q.connection.client, server_ms(q.connection.client)
    base = q.keys.base.encode()
    out = {}
    for key, (kind, value) in mask_times(core_dump(client, q.keys), now).items():
        if key == q.keys.key("done").encode() and kind == "hash":
            assert all(packed.split(b",", 4)[1:2] == [TIME] for packed in value.values()), value
        if b":unique:" in key and kind == "hash":
            assert 0 < client.pttl(key) <= 50_000, key
        if key == q.keys.active.encode():  # each lease's deadline: a present time + the lease
            assert all(now - 5_000 <= score - LEASE <= now for _, score in value), (value, now)
            value = [(member, "<now>") for member, _ in value]
        out[key.replace(base, b"<base>")] = (kind, value)
    return out


def answers(replies):
    """Replies as comparable values: an error element by its class and text, the verb's name left out."""
    return [(type(r).__name__, re.sub(r"EMQ\.[A-Z.]+", "<verb>", str(r))) if isinstance(r, Exception) else r
            for r in replies]


def setup(q, scenario):
    """Five held jobs a..e (one claim of each), then the scenario's drift; the pairs to complete."""
    client = q.connection.client
    if scenario == "events":
        client.hset(q.keys.meta, mapping={"events": 100, "waiters": 1})
    for job_id in "abcde":
        q.enqueue(b"p" + job_id.encode(), id=job_id)
    if scenario == "unique":
        client.hset(q.keys.job("b"), "unique", 50_000)
        client.hset(q.keys.job("d"), "unique", 40_000)
    held = {job.id: job.token for job in q.claim_many(5, LEASE)}
    pairs = [(job_id, held[job_id]) for job_id in "abcde"]
    if scenario == "lost":
        pairs[1] = ("b", "7")  # another token
        pairs[3] = ("nothing", "1")  # no row
        pairs.append(("a", "1"))  # completed earlier in the batch: no row by then
    if scenario == "refused":
        client.hset(q.keys.job("b"), "state", "pending")  # not active
        client.zrem(q.keys.active, "c")  # not in active
        client.hset(q.keys.job("d"), "group", "g")  # a lane row
        client.hset(q.keys.job("e"), "parent", "x")  # a flow child
        pairs.append(("c", "1"))  # again: refused again, as its COMPLETE would be
    if scenario == "marker":
        client.hset(q.keys.job("b"), "unique", "soon")  # a window that is not an integer
        client.hset(q.keys.job("c"), "unique", 1000)
        client.set(q.keys.key("unique:c"), "x")  # a marker that is not a hash
    return pairs


SCENARIOS = ["normal", "events", "unique", "lost", "refused", "marker"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_batch_is_those_completes_in_a_row(twins, scenario):
    batch, by_complete = twins
    pairs = setup(batch, scenario)
    assert setup(by_complete, scenario) == pairs
    reply = raw_reply(batch, "completes", *[part for pair in pairs for part in pair])
    expected = completes_by_complete(by_complete, pairs)
    assert len(reply) == len(pairs) and answers(reply) == answers(expected)
    assert 1 in reply or scenario == "refused"
    assert relative(batch) == relative(by_complete)


def test_a_refused_pair_is_its_error_and_the_others_complete(twins, wire):
    q, _ = twins
    pairs = setup(q, "refused")
    reply = raw_reply(q, "completes", *[part for pair in pairs for part in pair])
    not_in_active = "EMQSTATE EMQ.COMPLETES id is not in active"
    # the lane row and the flow child: refused natively; complete.lua's executor completes them (§5.5)
    boundary = ["EMQSTATE lane row is not native", "EMQSTATE flow child is not native"] if wire == 6 else ["1", "1"]
    assert [str(r) for r in reply] == ["1", "EMQSTATE EMQ.COMPLETES row is pending, not active", not_in_active,
                                       *boundary, not_in_active]
    assert all(isinstance(r, StateError) for r in reply if r != 1)
    count = q.connection.client.hget(q.keys.key("metrics:completed"), "count")
    assert count == (b"1" if wire == 6 else b"3")


def test_complete_many_answers_each_job_as_its_complete(twins, wire):
    """A lost lease amid good ones reads False; a lane job amid flat ones goes by lane_complete; the
    batch is one COMPLETES (one EVALSHA on wire 4) beside the lane job's own call."""
    q, _ = twins
    client = q.connection.client
    q.enqueue_many([b"p"] * 4)
    q.enqueue(b"lane", group="g")
    flat = q.claim_many(4, LEASE)
    (lane,) = q.claim_lanes(1, LEASE)
    client.hset(q.keys.job(flat[1].id), "attempts", 9)  # someone else holds it now
    with round_trips() as sent:
        assert q.complete_many([flat[0], lane, flat[1], flat[2], flat[3]]) == [True, True, False, True, True]
    assert sent == [["completes", "lane_complete"]]
    assert q.counts().active == 1 and q.counts().lane_active == 0
    assert q.complete_many([flat[0], flat[2]]) == [False, False]  # settled already: no row left


def test_a_refused_pair_that_is_not_a_lost_lease_is_raised(twins):
    q, _ = twins
    q.enqueue_many([b"p"] * 2)
    jobs = q.claim_many(2, LEASE)
    q.connection.client.set(q.keys.key(f"unique:{jobs[1].id}"), "x")
    q.connection.client.hset(q.keys.job(jobs[1].id), "unique", 1000)
    with pytest.raises(WrongType):
        q.complete_many(jobs)
    assert q.counts().active == 1  # the other pair completed


def test_batches_of_more_than_the_bound_are_one_command_per_thousand(twins):
    q, _ = twins
    q.enqueue_many([b"p"] * 2100)
    jobs = q.claim_many(2100, LEASE)
    with round_trips() as sent:
        assert q.complete_many(jobs) == [True] * 2100
    assert sent == [["completes"] * 3]
    assert EXTENDS_MAX_PAIRS == 1000 and q.counts().active == 0
    assert q.connection.client.hget(q.keys.key("metrics:completed"), "count") == b"2100"


def test_a_module_without_the_token_gets_completes_one_by_one(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 always has the script")
    q = Queue(conn, fresh_name("cp"), serializer=RAW)
    conn.tokens = conn.tokens - {"completes"}  # a module that predates the verb
    try:
        with round_trips() as sent:
            q.enqueue_many([b"p"] * 3)
            assert q.complete_many(q.claim_many(3, LEASE)) == [True] * 3
    finally:
        conn.tokens = conn.tokens | {"completes"}
    assert ["complete"] * 3 in sent


def test_a_malformed_event_switch_refuses_the_whole_batch(twins):
    q, _ = twins
    pairs = setup(q, "normal")
    q.connection.client.hset(q.keys.meta, "events", "many")
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ hash value is not an integer$"):
        raw_reply(q, "completes", *[part for pair in pairs for part in pair])
    with queue_unchanged(q):  # no pair held: the switch is not read, nothing is written
        assert raw_reply(q, "completes", "a", "9", "b", "9") == [0, 0]


@contextmanager
def active_wrong_typed(q: Queue) -> Iterator[None]:
    """``q``'s active set replaced by a string for the block, the set put back after it."""
    client: Any = q.connection.client  # the sync client: its replies, not awaitables
    saved = client.zrange(q.keys.active, 0, -1, withscores=True)
    client.delete(q.keys.active)
    client.set(q.keys.active, "x")
    try:
        yield
    finally:
        client.delete(q.keys.active)
        client.zadd(q.keys.active, dict(saved))


def test_a_wrong_typed_active_refuses_the_whole_batch(twins):
    q, _ = twins
    pairs = setup(q, "normal")
    with active_wrong_typed(q), queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "completes", *[part for pair in pairs for part in pair])
    assert raw_reply(q, "completes", *pairs[0]) == [1]


def test_native_refuses_a_wrong_typed_count_or_an_overflow_before_any_write(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 is complete.lua's executor: the count's HINCRBY fails after the ZREM (§5.6, §18)")
    q = Queue(conn, fresh_name("cp"), serializer=RAW)
    pairs = setup(q, "normal")
    client, metrics = conn.client, q.keys.key("metrics:completed")
    argv = [part for pair in pairs for part in pair]
    client.set(metrics, "x")
    with queue_unchanged(q), pytest.raises(WrongType):
        raw_reply(q, "completes", *argv)
    client.delete(metrics)
    client.hset(metrics, "count", 2**63 - 3)  # room for three more, not five
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ increment or decrement would overflow$"):
        raw_reply(q, "completes", *argv)
    client.delete(metrics)
    for bad, refusal in (([], ShapeError), (argv[:3], ShapeError), (["", "1"], ArgumentError),
                         (["x", "1"] * (EXTENDS_MAX_PAIRS + 1), ShapeError)):
        with queue_unchanged(q), pytest.raises(refusal):
            raw_reply(q, "completes", *bad)
    assert raw_reply(q, "completes", *argv) == [1] * 5


def test_the_asyncio_queue_answers_the_same(server, wire):
    """The asyncio connection reads a COMPLETES reply as the sync one does: a lost lease False, a
    refused pair's error typed and raised."""
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            q = aio.Queue(conn, fresh_name("cp"), serializer=RAW)
            await q.enqueue_many([b"p"] * 3)
            jobs = await q.claim_many(3, LEASE)
            await conn.client.hset(q.keys.job(jobs[1].id), "attempts", 9)
            answers = await q.complete_many(jobs)
            await q.enqueue_many([b"p"] * 2)
            more = await q.claim_many(2, LEASE)
            await conn.client.hset(q.keys.job(more[0].id), "unique", "soon")
            with pytest.raises(CounterError):
                await q.complete_many(more)
            return answers, await q.counts()

    answers, counts = asyncio.run(main())
    assert answers == [True, False, True] and counts.active == 2
