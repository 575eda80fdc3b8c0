"""Rate limits on both wires (docs/scheduling.md, docs/spec.md §13): the queue's meta holds the
limit, every claim checks the sliding log of starts atomically with the pop, and a rated claim
answers the wait. Each refusal: its reply, and the dataset unchanged."""

from __future__ import annotations

import threading

import pytest

from echomq import (App, ConfigurationError, CounterError, Queue, RateLimit, UnsupportedOnWire, Worker,
                    WorkerConfig, connect)
from echomq._protocol.rates import parse_rate_limit
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import ARGUMENT_TOKENS
from support.dataset import queue_unchanged, unchanged
from support.queues import fresh_name, raw
from support.waiting import server_ms, wait_server_past, wait_until
from support.workers import QUIET_TIMERS, commands_sent
from test_rate_limit_workers import most_in_any_window
from test_results_layout import records_started

LEASE = 60_000


@pytest.fixture
def q(conn):
    queue = Queue(conn, fresh_name("rl"), serializer=RAW)
    yield queue
    # a short window's log would expire during a later test and change the node's DEBUG DIGEST under it
    conn.client.delete(queue.keys.rate)


def log(q):
    return {m.decode(): int(s) for m, s in q.connection.client.zrange(q.keys.rate, 0, -1, withscores=True)}


def test_parse_rate_limit():
    assert parse_rate_limit("50/s") == RateLimit(50, 1000)
    assert parse_rate_limit(" 600 / m ") == RateLimit(600, 60_000)
    assert parse_rate_limit("1000/h") == RateLimit(1000, 3_600_000)
    assert str(RateLimit(50, 1000)) == "50/s" and RateLimit(50, 1000).per_second == 50
    for bad in ("0/s", "50", "50/d", "-1/s", "1.5/s", "10001/s", "", None, 50):
        with pytest.raises(ConfigurationError):
            parse_rate_limit(bad)


def test_claim_rate_is_an_argument_token():
    assert ARGUMENT_TOKENS == ("fail.traceback", "claim.rate")


def test_a_full_window_holds_the_claims_and_answers_when_it_frees(q):
    client = q.connection.client
    q.set_rate_limit("3/s")
    assert q.rate_limit() == RateLimit(3, 1000)
    q.enqueue_many([b"p"] * 5)
    jobs = q.claim_many(5, LEASE)
    assert len(jobs) == 3
    starts = log(q)
    assert set(starts) == {f"{job.id}:1" for job in jobs}
    for job in jobs:  # the log's times are the rows' own start times
        assert int(client.hget(q.keys.job(job.id), "started")) == starts[f"{job.id}:1"]
    assert 0 < client.pttl(q.keys.rate) <= 1000
    first = min(starts.values())
    assert first + 1000 - server_ms(client) <= jobs.wait_ms <= 1000  # the held claims came after the starts
    # held: nothing written, nothing popped, whatever the claim
    with queue_unchanged(q):
        assert (held := q.claim_many(3, LEASE)) == [] and held.wait_ms >= 1
        assert raw(q, "claim", LEASE) == []  # a client that reads no wait: the empty array, as ever
        assert isinstance(raw(q, "claim", LEASE, 1), int)
    wait_server_past(client, first + 999)  # the first start leaves the window at first + 1000
    more = q.claim_many(5, LEASE)
    assert min(2, len([s for s in starts.values() if s == first])) <= len(more) <= 2
    assert q.counts().active == 3 + len(more)


def test_an_empty_pending_is_idle_not_held(q):
    q.set_rate_limit("1/h")
    q.enqueue(b"p")
    assert q.claim(LEASE) is not None
    assert raw(q, "claim", LEASE, 1) == []  # nothing to claim: empty, so a worker waits for a job instead
    q.enqueue(b"p")
    assert isinstance(raw(q, "claim", LEASE, 1), int)


def test_a_retried_job_counts_again_and_lifting_the_limit_frees_the_queue(q):
    q.set_rate_limit("2/h")
    q.enqueue(b"p", id="a")
    job = q.claim(LEASE)
    q.fail(job, "boom", max_attempts=3)
    assert q.claim(LEASE).attempt == 2
    assert set(log(q)) == {"a:1", "a:2"}  # every start counts, a retry's too
    q.enqueue(b"p", id="b")
    assert q.claim(LEASE) is None
    assert (held := q.claim_many(1, LEASE)) == [] and held.wait_ms > 3_500_000
    q.set_rate_limit(None)
    assert q.rate_limit() is None
    assert q.claim(LEASE).id == "b"
    assert set(log(q)) == {"a:1", "a:2"}  # an unlimited claim logs nothing; the log expires by itself


def test_lane_starts_count_against_the_limit_in_the_same_log(q):
    """A lane job's start counts as a flat one's (docs/spec.md §13): one log, one limit. A full window
    holds a lane claim that could start a job and answers the wait (nothing moves); with no group
    ready the answer is empty, not held; a start leaving the window frees the next."""
    client = q.connection.client
    q.set_rate_limit("3/s")
    q.enqueue_many([b"p"] * 2)
    for group in ("a", "b", "c"):
        q.enqueue(b"p", group=group)
    flat = q.claim_many(2, LEASE)
    lanes = q.claim_lanes(3, LEASE)
    assert (len(flat), len(lanes)) == (2, 1) and 1 <= lanes.wait_ms <= 1000
    starts = log(q)
    assert set(starts) == {f"{job.id}:1" for job in flat + lanes}
    assert int(client.hget(q.keys.job(lanes[0].id), "started")) == starts[f"{lanes[0].id}:1"]
    with queue_unchanged(q):
        assert (held := q.claim_lanes(2, LEASE)) == [] and 1 <= held.wait_ms <= 1000
    wait_server_past(client, min(starts.values()) + 999)  # the first start leaves the window
    assert 1 <= len(q.claim_lanes(2, LEASE)) <= 2


def test_a_lane_claim_with_no_group_ready_is_empty_not_held(q):
    """Nothing a group could start (its k running): empty, so a worker waits for a job rather than
    for the window; a group that could start one is held by the full window."""
    q.set_rate_limit("1/h")
    q.enqueue(b"p", group="a")
    q.enqueue(b"p", group="a")  # k = 1: waits while the first runs
    assert len(q.claim_lanes(1, LEASE)) == 1
    assert (none_ready := q.claim_lanes(1, LEASE)) == [] and none_ready.wait_ms is None
    q.enqueue(b"p", group="b")
    with queue_unchanged(q):
        assert (held := q.claim_lanes(1, LEASE)) == [] and held.wait_ms > 3_500_000


def test_a_lowered_limit_waits_until_the_window_holds_fewer(q):
    q.set_rate_limit("5/h")
    q.enqueue_many([b"p"] * 6)
    assert len(q.claim_many(4, LEASE)) == 4
    q.set_rate_limit("2/h")
    assert (held := q.claim_many(1, LEASE)) == []
    starts = sorted(log(q).values())
    # the claim may start when the third-newest leaves: three must go before fewer than two remain
    assert held.wait_ms == pytest.approx(starts[2] + 3_600_000 - server_ms(q.connection.client), abs=50)


def test_bad_limits_are_refused_client_side_and_nothing_is_sent(q):
    client = q.connection.client
    with unchanged(client):
        for bad in ("0/s", "abc", "10/d", "10001/s"):
            with pytest.raises(ConfigurationError):
                q.set_rate_limit(bad)
        with pytest.raises(ConfigurationError):
            Queue(q.connection, q.name).build("claim", LEASE, 2)  # rated is 1 or absent


@pytest.mark.parametrize("meta, message", [
    ({"rate_limit": "many"}, "EMQ hash value is not an integer"),
    ({"rate_limit": "5", "rate_window": "1s"}, "EMQ hash value is not an integer"),
    ({"rate_limit": "5"}, "EMQ rate limit must be"),
    ({"rate_limit": "5", "rate_window": "0"}, "EMQ rate limit must be"),
    ({"rate_limit": "10001", "rate_window": "1000"}, "EMQ rate limit must be"),
    ({"rate_limit": "5", "rate_window": "86400001"}, "EMQ rate limit must be"),
])
def test_a_malformed_limit_in_meta_is_refused_by_every_claim(q, meta, message):
    q.enqueue(b"p")
    q.enqueue(b"p", group="g")
    q.enqueue_flow(b"p", children=[b"c"])
    q.connection.client.hset(q.keys.meta, mapping=meta)
    with queue_unchanged(q):
        for argv in ((LEASE,), (LEASE, 1)):
            with pytest.raises(CounterError, match=message):
                raw(q, "claim", *argv)
        with pytest.raises(CounterError, match=message):  # a lane claim and a flow claim read it alike
            q.claim_lanes(1, LEASE)
        with pytest.raises(CounterError, match=message):
            q.flow_claim(1, LEASE)


def test_a_wrong_typed_log_is_refused(q, wire):
    q.set_rate_limit("5/s")
    q.enqueue(b"p")
    q.enqueue(b"p", group="g")
    q.enqueue_flow(b"p", children=[b"c"])
    q.connection.client.set(q.keys.rate, "x")
    with queue_unchanged(q):
        for claim in (lambda: raw(q, "claim", LEASE, 1), lambda: q.claim_lanes(1, LEASE),
                      lambda: q.flow_claim(1, LEASE)):
            with pytest.raises(Exception, match="WRONGTYPE"):
                claim()


def test_native_refuses_a_bad_rated_argument(q, wire):
    if wire == 4:
        pytest.skip("the scripts check no argument (§4): any ARGV[2] reads as rated")
    q.enqueue(b"p")
    with queue_unchanged(q):
        for verb, argv in (("claim", (LEASE, 2)), ("bclaim", (LEASE, 10, "x")), ("claim", (LEASE, 1, 1))):
            with pytest.raises(Exception, match="EMQARG rated|EMQSHAPE"):
                raw(q, verb, *argv)


def test_bclaim_answers_a_rated_caller_the_wait_and_blocks_one_that_reads_none(q, wire):
    if wire == 4:
        pytest.skip("BCLAIM is wire 6's")
    q.set_rate_limit("1/h")
    q.enqueue_many([b"p"] * 2)
    assert q.bclaim(LEASE, 0) is not None
    with queue_unchanged(q):
        assert q.bclaim(LEASE, 0) is None  # at once, even with no timeout
        assert q.claimed(raw(q, "bclaim", LEASE, 0, 1)).wait_ms > 3_500_000
        assert raw(q, "bclaim", LEASE, 50) == []  # reads no wait: blocked as on an empty queue, until its timeout


def test_a_node_without_claim_rate_is_not_given_a_limit(q, wire):
    codec = q.codec
    if wire == 4:
        assert codec.carries("claim", "rated")
        return
    codec.tokens = codec.tokens - {"claim.rate"}  # a module that predates it would ignore the limit
    try:
        with unchanged(q.connection.client):
            with pytest.raises(UnsupportedOnWire, match="claim.rate"):
                q.set_rate_limit("5/s")
        assert q.build("claim", LEASE) == q._claim_calls(1, LEASE)[0]  # claims go without `rated`
    finally:
        codec.tokens = codec.tokens | {"claim.rate"}


def test_a_worker_waits_out_the_window_without_spinning(server, wire):
    """An idle worker's waiter wakes for a job the full window holds (wire 6: a rated BCLAIM answers
    the wait; wire 4: the woken claim does), waits it out, then starts it: a handful of commands, not a
    poll loop, and the second start a window after the first (server clock)."""
    name, seen = fresh_name("rw"), []
    app = App()
    app.handler(name, lambda payload, ctx: seen.append(ctx.id), rate_limit=RateLimit(1, 1500))
    with connect(server.url, wire=wire) as conn:
        queue = Queue(conn, name)
        worker = Worker(app, conn, config=WorkerConfig(timers=QUIET_TIMERS, claim_batch=1))
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            first = queue.enqueue({})
            wait_until(lambda: seen == [first.id], what="the first job run")
            wait_until(lambda: worker.pacing.idle == {name}, what="the worker idle")
            before = commands_sent(conn.client)
            second = queue.enqueue({})
            # settled (polled with EXISTS, which the count below leaves out)
            wait_until(lambda: conn.client.hexists(queue.keys.key("done"), second.id), 10, what="the second job settled")
            assert seen == [first.id, second.id]
            # the enqueue, the woken claim (held), the claim after the wait, the claim that finds the queue
            # empty, the settle, pause reads on wire 4: a dozen over 1.5 s, where a poll loop sends hundreds;
            # plus, after the wake, one lane probe (LANE_CLAIM and its EXISTS: docs/lanes-and-flows.md) and
            # one flow probe (FLOW_CLAIM and its pause read; a queue with no flow work is not polled again while
            # busy). Wire 4 sends all 16 (the scripts' own HGETs count); a machine under load adds a claim or
            # two (each 3 on wire 4: seen at 22), which is still no loop
            assert commands_sent(conn.client) - before <= 30
            started = records_started(conn.client, queue.keys, [first.id, second.id])
            assert started[1] - started[0] >= 1500
        finally:
            worker.stop("test over")
            thread.join(10)
            conn.client.delete(queue.keys.rate)  # not left to expire under a later test's digest


def test_flow_starts_count_against_the_limit_in_the_same_log(q):
    """A flow job's start counts as a flat one's: FLOW_CLAIM starts at most the window's room, and with
    the window full while jobs wait it answers the wait (nothing moves); a start leaving frees one."""
    client = q.connection.client
    q.set_rate_limit("3/s")
    q.enqueue(b"p")
    q.enqueue_flow(b"parent", children=[b"a", b"b", b"c"])
    flat = q.claim(LEASE)
    children = q.flow_claim(5, LEASE)
    assert len(children) == 2
    starts = log(q)
    assert set(starts) == {f"{job.id}:1" for job in [flat, *children]}
    with queue_unchanged(q):
        assert (held := q.flow_claim(5, LEASE)) == [] and 1 <= held.due_ms <= 1000
    wait_server_past(client, min(starts.values()) + 999)  # the first start leaves the window
    assert len(q.flow_claim(5, LEASE)) == 1  # the last child; its parent waits for all three


def test_a_worker_holds_lane_and_flow_starts_to_the_limit(server, wire):
    """Lane jobs of three groups, then a flow of two children, under 2 starts a second: the worker
    starts each as the window frees, never more than 2 in any second of the server's clock (the
    completed records' ``started``)."""
    name, seen = fresh_name("rw"), []
    app = App()
    app.handler(name, lambda payload, ctx: seen.append(ctx.id), rate_limit=RateLimit(2, 1000))
    with connect(server.url, wire=wire) as conn:
        queue = Queue(conn, name)
        ids = [queue.enqueue({}, group=f"g{n}").id for n in range(3)]
        ids += [queue.enqueue_flow({}, children=[{}] * 2, id=f"parent-{name}").id]
        worker = Worker(app, conn, config=WorkerConfig(timers=QUIET_TIMERS))
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            wait_until(lambda: len(seen) == 6 and all(conn.client.hexists(queue.keys.key("done"), i) for i in seen), 20,
                       what="three lane jobs and a flow of three")
            started = records_started(conn.client, queue.keys, seen)
            assert set(ids) <= set(seen) and most_in_any_window(started, 1000) <= 2
            assert max(started) - min(started) >= 2000  # six starts at two a second span three windows
        finally:
            worker.stop("test over")
            thread.join(10)
            conn.client.delete(queue.keys.rate, queue.keys.key("done"))


def test_the_asyncio_queue_sets_reads_and_honours_the_limit(server, wire):
    import asyncio

    from echomq import aio

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            q = aio.Queue(conn, fresh_name("ra"))
            await q.set_rate_limit("1/m")
            assert await q.rate_limit() == RateLimit(1, 60_000)
            await q.enqueue({})
            await q.enqueue({})
            assert len(jobs := await q.claim_many(2, LEASE)) == 1 and 59_000 < jobs.wait_ms <= 60_000
            await q.set_rate_limit(None)
            assert await q.claim(LEASE) is not None

    asyncio.run(main())


def test_a_task_takes_a_rate_limit_but_not_with_partitions():
    app = App()
    assert app.handler("plain", lambda p: None, rate_limit="5/m").rate_limit == RateLimit(5, 60_000)
    with pytest.raises(ConfigurationError, match="rate limit"):
        app.handler("parted", lambda p: None, partitions=2, rate_limit="5/s")
    with pytest.raises(ConfigurationError, match="bad rate limit"):
        app.handler("bad", lambda p: None, rate_limit="5 per second")


def test_two_asyncio_callers_of_one_queue_each_get_their_own_answer(server, wire):
    """What a claim learned is its caller's (issue 41): two tasks claiming at once on one aio.Queue, a
    window with room for one start. One gets the job and no wait; the other nothing, held, and the
    window's wait. The queue kept the last claim's wait on itself (claim_wait_ms), which the two
    callers shared: each read the other's answer as well as its own."""
    import asyncio

    from echomq import aio

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            q = aio.Queue(conn, fresh_name("ra"))
            await q.set_rate_limit("1/h")
            await q.enqueue_many([{}, {}])
            answers = await asyncio.gather(q.claim_many(1, LEASE), q.claim_many(1, LEASE))
            await conn.client.delete(q.keys.rate)  # not left to change a later test's digest
            return answers

    started, held = sorted(asyncio.run(main()), key=len, reverse=True)
    assert (len(started), started.wait_ms, started.paused) == (1, None, False)
    assert held == [] and 3_500_000 < held.wait_ms <= 3_600_000 and not held.paused
