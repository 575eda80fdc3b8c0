"""echomq.aio specifics (the shared behaviour is the conformance suite's, through AwaitingQueue):
concurrent calls coalesce into one pipeline, each keeping its own answer or error; the pool; a
round trip's replies read as valkey-py's asyncio pipeline reads them, through faults and cancels."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from valkey.asyncio.retry import Retry
from valkey.backoff import NoBackoff
from valkey.exceptions import ConnectionError as LinkError

import echomq
from echomq import ConnectionFailed, WrongType, aio
from echomq._client.connection import Plain
from support.queues import fresh_name
from support.waiting import wait_until


def test_calls_made_in_one_turn_share_one_pipeline_and_keep_their_own_answers(server, wire):
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            good = aio.Queue(conn, fresh_name("a"))
            broken = aio.Queue(conn, fresh_name("a"))
            await conn.client.set(broken.keys.pending, "not a zset")
            pool = conn.client.connection_pool
            borrowed = []  # one socket borrowed per round trip
            real = pool.get_connection

            async def counting(*args, **kwargs):
                borrowed.append(1)
                return await real(*args, **kwargs)

            pool.get_connection = counting  # type: ignore[method-assign]
            results = await asyncio.gather(
                *(good.enqueue({"n": n}, id=f"j{n}") for n in range(20)),
                broken.enqueue({}, id="x"),
                return_exceptions=True,
            )
            round_trips = len(borrowed)
            return round_trips, results, await good.counts()

    round_trips, results, counts = asyncio.run(main())
    assert round_trips == 1  # 21 calls from 21 tasks, one round trip
    assert [r.id for r in results[:20]] == [f"j{n}" for n in range(20)] and all(r.created for r in results[:20])
    assert isinstance(results[20], WrongType)
    assert counts.pending == 20


def test_the_pool_bounds_the_sockets(server, wire):
    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=3) as conn:
            queue = aio.Queue(conn, fresh_name("a"))
            for _ in range(5):  # sequential turns, concurrent within each
                await asyncio.gather(*(queue.enqueue({}) for _ in range(40)), queue.counts())
            pool = conn.client.connection_pool
            return pool.max_connections, len(pool._in_use_connections) + len(pool._available_connections), \
                (await queue.counts()).pending

    limit, opened, pending = asyncio.run(main())
    assert limit == 3 and 1 <= opened <= 3 and pending == 200


# --------------------------------------------------------------------------- pipelined round trips


def test_a_pipelined_round_trip_answers_as_valkey_pys_async_pipeline_does(server, wire):
    """Connection._pipelined reads a round trip's replies itself: each as valkey-py's asyncio
    pipeline gives it (its reply callbacks: HGETALL's dict), an error reply in its place."""
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            q = aio.Queue(conn, fresh_name("a"))
            await q.enqueue({"n": 1}, id="a")
            await conn.client.sadd(q.keys.pending + ":set", "x", "y")
            await conn.client.set(q.keys.pending + ":str", "s")
            request = [Plain(("HGETALL", q.keys.job("a"))), Plain(("SMEMBERS", q.keys.pending + ":set")),
                       Plain(("HGET", q.keys.pending + ":str", "f")), Plain(("ZCARD", q.keys.pending)),
                       Plain(("HMGET", q.keys.job("a"), "state", "nothing"))]
            conn.client.pipeline = None  # ours must not go through valkey-py's pipeline
            ours = await conn.send_many(request)
            del conn.client.pipeline
            pipe = conn.client.pipeline(transaction=False)
            for item in request:
                pipe.execute_command(*conn.args_of(item))
            return ours, conn.refusals(request, await pipe.execute(raise_on_error=False))

    ours, theirs = asyncio.run(main())
    assert isinstance(ours[0], dict) and ours[0][b"state"] == b"pending"
    assert isinstance(ours[2], WrongType) and type(theirs[2]) is type(ours[2]) and str(theirs[2]) == str(ours[2])
    assert ours[:2] + ours[3:] == theirs[:2] + theirs[3:] == [ours[0], [b"x", b"y"], 1, [b"pending", None]]


async def _one_link(conn):
    """The pool's one socket (``max_connections=1``), connected, and its server-side id."""
    pool = conn.client.connection_pool
    link = await pool.get_connection("CLIENT")
    try:
        await link.send_command("CLIENT", "ID")
        return link, await link.read_response()
    finally:
        await pool.release(link)


def test_a_link_fault_mid_round_trip_is_connection_failed_and_the_next_round_trip_reads_its_own_replies(server,
                                                                                                       wire):
    """The server closes the socket after the second of three replies (QUIT; CLIENT KILL of the
    socket's own id): ConnectionFailed; the next round trip, on a new socket, is not read out of step."""
    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=1) as conn:
            after = []
            for closing in (("QUIT",), ("CLIENT", "KILL", "SKIPME", "no", "ID")):
                if closing[0] == "CLIENT":
                    closing += ((await _one_link(conn))[1],)  # the socket's id now (QUIT's was another)
                with pytest.raises(ConnectionFailed):
                    await conn.send_many([Plain(("ECHO", "one")), Plain(closing), Plain(("ECHO", "three"))])
                after.append(await conn.send_many([Plain(("ECHO", "four")), Plain(("ECHO", "five"))]))
            return after

    assert asyncio.run(main()) == [[b"four", b"five"]] * 2


def test_a_streamed_round_trip_sends_ahead_pairs_each_reply_and_survives_a_fault_mid_stream(server, wire):
    """As the blocking connection's: parts of a command or two, the second written before the
    first reply is read, each reply in its own command's place; QUIT in a later part is
    ConnectionFailed, and the next streamed round trip reads its own replies. And enqueue_many
    streamed: every job made, ids in mint order."""
    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=1) as conn:
            base = fresh_name("a")
            await conn.client.set(base + ":str", "s")
            request = []
            for i in range(100):
                request += [Plain(("HSET", f"{base}:{i}", "f", i)), Plain(("HGETALL", f"{base}:{i}")),
                            Plain(("HGET", base + ":str", "f"))]
            link, _ = await _one_link(conn)
            events: list[str] = []
            send, read = link.send_packed_command, link.read_response

            async def sending(*a, **k):
                events.append("send")
                return await send(*a, **k)

            async def reading(*a, **k):
                events.append("read")
                return await read(*a, **k)

            link.send_packed_command, link.read_response = sending, reading
            conn.stream_args = 5
            replies = await conn.send_many(request)
            del link.send_packed_command, link.read_response
            with pytest.raises(ConnectionFailed):
                await conn.send_many([Plain(("ECHO", n)) for n in range(30)] + [Plain(("QUIT",))]
                                     + [Plain(("ECHO", n)) for n in range(30)])
            after = await conn.send_many([Plain(("ECHO", n)) for n in range(40)])
            queue = aio.Queue(conn, fresh_name("a"))
            made = await queue.enqueue_many([{"n": n} for n in range(1200)])
            return events, replies, after, made, await queue.counts()

    events, replies, after, made, counts = asyncio.run(main())
    assert events[:2] == ["send", "send"] and events.count("send") > 50
    for i in range(100):
        assert replies[3 * i] == 1 and replies[3 * i + 1] == {b"f": str(i).encode()}
        assert isinstance(replies[3 * i + 2], WrongType)
    assert after == [str(n).encode() for n in range(40)]
    ids = [e.id for e in made]
    assert all(e.created for e in made) and ids == sorted(ids) and len(set(ids)) == 1200 and counts.pending == 1200


def test_a_link_fault_mid_round_trip_is_retried_as_the_clients_retry_policy_says(server, wire):
    """With a retry on a link fault, the killed round trip goes again, whole, on a new socket
    (whose id is not the one killed: the second CLIENT KILL kills none)."""
    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=1, retry=Retry(NoBackoff(), 1),
                                     retry_on_error=[LinkError]) as conn:
            _, own = await _one_link(conn)
            replies = await conn.send_many([Plain(("ECHO", "one")), Plain(("CLIENT", "KILL", "SKIPME", "no", "ID", own)),
                                            Plain(("ECHO", "three"))])
            _, now = await _one_link(conn)
            return replies, own, now

    replies, own, now = asyncio.run(main())
    assert now != own and replies == [b"one", 0, b"three"]  # the second time, no client of that id to kill


def test_a_reply_callback_that_raises_drops_the_socket(server, wire):
    """A reply callback that fails on the first of three replies breaks off the reading: its error
    is the round trip's, and the socket, two replies still unread, is closed, not pooled."""
    def refusing(reply, **options):
        raise ValueError(f"unreadable {reply!r}")

    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=1) as conn:
            link, _ = await _one_link(conn)
            conn.client.set_response_callback("ECHO", refusing)
            with pytest.raises(ValueError, match="unreadable b'one'"):
                await conn.send_many([Plain(("ECHO", "one")), Plain(("PING",)), Plain(("DBSIZE",))])
            closed = not link.is_connected
            return closed, await conn.send_many([Plain(("TYPE", fresh_name("none"))), Plain(("PING",))])

    assert asyncio.run(main()) == (True, [b"none", True])


@pytest.mark.parametrize("cancelled", ["caller", "reader"])
def test_a_cancel_mid_round_trip_leaves_the_next_round_trip_its_own_replies(server, wire, cancelled):
    """A round trip is cancelled while its second reply (a BLPOP that blocks) is awaited: the
    caller, whose batch goes on reading in the background (the socket kept, its replies all read),
    or the task reading the replies (the loop closing), whose socket is closed before it goes back
    to the pool. Then the BLPOP's key gets a value: the next round trip still reads its own replies."""
    key = fresh_name("blocked")

    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=1) as conn:
            link, own = await _one_link(conn)
            reading, readers = asyncio.Event(), []
            read = link.read_response

            async def noting(*args, **kwargs):
                readers.append(asyncio.current_task())
                if len(readers) == 2:
                    reading.set()
                return await read(*args, **kwargs)

            link.read_response = noting
            trip = asyncio.ensure_future(conn.send_many(
                [Plain(("ECHO", "one")), Plain(("BLPOP", key, 0)), Plain(("ECHO", "three"))]))
            await reading.wait()
            (trip if cancelled == "caller" else readers[-1]).cancel()
            with pytest.raises(asyncio.CancelledError):
                await trip
            del link.read_response
            closed = not link.is_connected
            with server.client() as other:
                other.lpush(key, "late")  # the old socket, were it still read, would answer BLPOP then three
            after = await conn.send_many([Plain(("ECHO", "four")), Plain(("ECHO", "five"))])
            _, now = await _one_link(conn)
            return closed, after, now == own

    closed, after, same_socket = asyncio.run(main())
    assert after == [b"four", b"five"]
    assert closed == (cancelled == "reader") and same_socket == (cancelled == "caller")


@pytest.mark.parametrize("bad", [0, -1, "x"])
def test_a_bad_argument_is_a_configuration_error_naming_it(server, wire, bad):
    from echomq import ConfigurationError

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            with pytest.raises(ConfigurationError, match="lease_ms"):
                await aio.Queue(conn, fresh_name("a")).claim(bad)

    asyncio.run(main())


@pytest.mark.parametrize("wire", [4, 6])
def test_on_a_cluster_every_queue_goes_to_its_slots_primary(wire, request):
    cluster = request.getfixturevalue(f"cluster{wire}")  # the session's (tests/conftest.py)
    names = [fresh_name(f"c{i}") for i in range(12)]

    async def main(url: str):
        async with await aio.connect(url, wire=wire, cluster=True) as conn:
            queues = [aio.Queue(conn, name) for name in names]
            await asyncio.gather(*(q.enqueue_many([{"q": q.name}] * 3) for q in queues))
            jobs = await asyncio.gather(*(q.claim_many(2, 60_000) for q in queues))
            await asyncio.gather(*(q.complete_many(held) for q, held in zip(queues, jobs)))
            return [await q.counts() for q in queues]

    counts = asyncio.run(main(cluster.url))
    assert [(c.pending, c.active) for c in counts] == [(1, 0)] * 12
    nodes = {cluster.node_for(f"emq:{{{name}}}:pending").port for name in names}
    assert len(nodes) > 1  # the queues really live on different primaries
    for name in names:  # and each queue's keys are on its own slot's node
        with cluster.node_for(f"emq:{{{name}}}:pending").client() as node:
            assert node.zcard(f"emq:{{{name}}}:pending") == 1


def test_an_async_handlers_producer_shares_a_cluster_connection(cluster4):
    """ctx.producer in an async handler on a cluster: aio.Connection.sharing opens an asyncio
    cluster client to the same nodes; the follow-ups land on their own queue's primary."""
    import threading

    from echomq import App, Queue, Worker, WorkerConfig, connect
    from support.waiting import wait_until

    first, second = fresh_name("cf"), fresh_name("cs")
    app = App()

    @app.task(queue=first)
    async def forward(payload, ctx):
        await ctx.producer(second).enqueue(payload, id=f"f{payload['n']}")

    cluster = cluster4
    with connect(cluster.url, wire=4, cluster=True) as conn:
        Queue(conn, first).enqueue_many([{"n": n} for n in range(10)])
        worker = Worker(app, conn, queues=[first], config=WorkerConfig(concurrency=4))
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            wait_until(lambda: Queue(conn, second).counts().pending == 10, what="10 follow-ups")
        finally:
            worker.stop()
            thread.join(10)
        assert worker.tally.completed == 10
        with cluster.node_for(f"emq:{{{second}}}:pending").client() as node:
            assert node.zcard(f"emq:{{{second}}}:pending") == 10


def test_a_call_that_blocks_goes_out_alone_and_holds_no_other(server, wire):
    # an event follower's XREAD BLOCK (or a BCLAIM) went out in the pipeline of its turn, and every
    # call batched behind it waited for the block to end: a request's counts() took 1.6 s
    name = fresh_name("b")

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            queue = aio.Queue(conn, name)
            await queue.enable_events()
            blocking = [asyncio.ensure_future(queue._run(queue.op_events_page("$", 1, 20_000)))]
            if wire == 6:
                blocking.append(asyncio.ensure_future(queue.bclaim(60_000, 20_000)))
            counts = asyncio.ensure_future(queue.counts())  # the same turn as the blocks
            answered = await asyncio.wait_for(counts, 10)
            still = [not task.done() for task in blocking]
            await queue.enqueue({"n": 1})  # ends both blocks: an event, and a job to claim
            return answered, still, await asyncio.gather(*blocking)

    answered, still, ended = asyncio.run(main())
    assert answered.pending == 0 and all(still)  # answered while the blocks went on
    assert [event.type for event in ended[0]] == ["enqueued"]
    if wire == 6:
        assert ended[1].payload == {"n": 1}


# --------------------------------------------------------------------------- result waiters: one socket


def listeners(server) -> list[int]:
    """The shard-channel count of each client of ``server`` that listens on any (CLIENT LIST's ssub)."""
    with server.client() as client:
        return [int(c["ssub"]) for c in client.client_list() if int(c.get("ssub", 0)) > 0]


async def listening(server, expected: list[int], what: str, waiters: Sequence[asyncio.Task] = ()) -> None:
    """Until ``server``'s listeners are ``expected`` (polled from a thread: the loop runs on); the
    failure names the last ones seen, every count seen on the way, the channels the server holds,
    and how each of ``waiters`` (the tasks that listen) ended, if it did."""
    seen: list[list[int]] = []

    def reached() -> bool:
        seen.append(listeners(server))
        return seen[-1] == expected

    try:
        await asyncio.to_thread(wait_until, reached, 10, what)
    except AssertionError as exc:
        with server.client() as client:
            channels = sorted(client.execute_command("PUBSUB", "SHARDCHANNELS"))
        ended = {n: "cancelled" if task.cancelled() else repr(task.exception())
                 for n, task in enumerate(waiters) if task.done()}
        counts = list(dict.fromkeys(map(tuple, seen)))
        raise AssertionError(f"{exc}: listeners {seen[-1]}, expected {expected} (seen on the way {counts}); "
                             f"channels {channels}; waiters ended {ended}") from None


def publish_all(url: str, wire: int, names: list[str], count: int, value=lambda job: "done") -> None:
    """The worker's side, from a sync connection: claim ``count`` jobs of each queue and publish
    ``value(job)`` for each."""
    with echomq.connect(url, wire=wire) as sync:
        for name in names:
            worker = echomq.Queue(sync, name)
            for job in worker.claim_many(count, 60_000):
                worker.publish(job, value(job), retention_ms=60_000)


def test_result_waiters_share_one_socket_however_many_and_however_small_the_pool(server, wire):
    # a web service awaiting many results at once: each waiter on a pooled socket of its own held
    # the pool (3 here) and the waiters' reads waited on each other until the pool's timeout
    name, waiters = fresh_name("w"), 30

    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=3, pool_timeout=2) as conn:
            queue = aio.Queue(conn, name)
            ids = [(await queue.enqueue({"n": n})).id for n in range(waiters)]
            waiting = [asyncio.create_task(queue.result(job_id, timeout=30)) for job_id in ids]
            twice = asyncio.create_task(queue.result(ids[0], timeout=30))  # a second waiter on one job
            quitter = asyncio.create_task(queue.result(ids[1], timeout=30))
            await listening(server, [waiters], "every channel subscribed")
            quitter.cancel()  # its channel stays: ids[1] has another waiter
            await asyncio.to_thread(publish_all, server.url, wire, [name], waiters,
                                    lambda job: (job.payload["n"] + 1) * 10)
            return await asyncio.gather(*waiting), await twice

    answers, again = asyncio.run(main())
    assert answers == [(n + 1) * 10 for n in range(waiters)] and again == 10
    assert listeners(server) == []  # the last waiter closed the socket


def test_a_waiter_that_leaves_unsubscribes_its_channel_and_a_link_fault_reaches_every_waiter(server, wire):
    name = fresh_name("w")

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            queue = aio.Queue(conn, name)
            ids = [(await queue.enqueue({})).id for _ in range(3)]
            async with conn.outcome_listener(queue.keys.outcome("a")) as first, \
                    conn.outcome_listener(queue.keys.outcome("b")) as second:
                waiting = [asyncio.create_task(queue.result(job_id, timeout=30)) for job_id in ids]
                await listening(server, [5], "five channels subscribed", waiting)
                waiting[0].cancel()
                await listening(server, [4], "the channel left unsubscribed", waiting)
                with server.client() as client:
                    assert client.client_kill_filter(_type="pubsub") == 1
                faults = await asyncio.gather(first(30), second(30), return_exceptions=True)
            # result() rides the fault out: its waiters subscribe again, on a socket of their own
            await listening(server, [2], "the waiters subscribed again", waiting)
            await asyncio.to_thread(publish_all, server.url, wire, [name], 3)
            return faults, await asyncio.gather(*waiting[1:])

    faults, answers = asyncio.run(main())
    assert all(isinstance(f, ConnectionFailed) for f in faults), faults
    assert answers == ["done", "done"] and listeners(server) == []


def test_a_blocking_read_waits_longer_than_valkey_pys_asyncio_read_timeout(server, wire):
    # valkey-py's asyncio reads give up after 5 s by default: an event follower's XREAD BLOCK asked
    # to wait 5.5 s (or a BCLAIM) was ConnectionFailed at 5
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            queue = aio.Queue(conn, fresh_name("b"))
            await queue.enable_events()
            follower = queue.events(since="$", follow=True, block_ms=5_500)
            try:
                await asyncio.wait_for(anext(follower), 6.0)  # one quiet block, then the next
            except asyncio.TimeoutError:
                return "still following"
            finally:
                await follower.aclose()

    assert asyncio.run(main()) == "still following"


def test_a_quiet_outcome_channel_outlives_the_socket_timeout(server, wire):
    # valkey-py's asyncio socket timeout (5 s by default) read a quiet channel as a dead link: the
    # shared socket broke, a listener got ConnectionFailed and result() subscribed again, every 5 s
    name = fresh_name("w")

    def listening_clients() -> list[str]:
        with server.client() as client:
            return [c["id"] for c in client.client_list() if int(c.get("ssub", 0)) > 0]

    async def main():
        async with await aio.connect(server.url, wire=wire, socket_timeout=0.2) as conn:
            queue = aio.Queue(conn, name)
            job = await queue.enqueue({})
            async with conn.outcome_listener(queue.keys.outcome("a")) as quiet:
                waiting = asyncio.create_task(queue.result(job.id, timeout=30))
                await listening(server, [2], "both channels subscribed", [waiting])
                before = await asyncio.to_thread(listening_clients)
                assert await quiet(1.0) is None  # five socket timeouts of silence, then the wait's own end
                assert await asyncio.to_thread(listening_clients) == before and not waiting.done()
            await asyncio.to_thread(publish_all, server.url, wire, [name], 1)
            return await waiting

    assert asyncio.run(main()) == "done"
    assert listeners(server) == []


def test_waiters_cancelled_at_any_point_leave_the_others_their_results(server, wire):
    # a cancel that broke off a waiter's SSUBSCRIBE half written broke the socket every waiter shares
    name, waiters = fresh_name("w"), 300

    async def main():
        async with await aio.connect(server.url, wire=wire, max_connections=4) as conn:
            queue = aio.Queue(conn, name)
            ids = [job.id for job in await queue.enqueue_many([{"n": n} for n in range(waiters)])]
            waiting = [asyncio.create_task(queue.result(job_id, timeout=30)) for job_id in ids]
            for turn, task in enumerate(waiting[::3]):  # a third, each cancelled a turn later than the last
                for _ in range(turn % 7):
                    await asyncio.sleep(0)
                task.cancel()
            await asyncio.to_thread(publish_all, server.url, wire, [name], waiters, lambda job: job.payload["n"])
            return await asyncio.gather(*waiting, return_exceptions=True)

    answers = asyncio.run(main())
    kept = [(n, answer) for n, answer in enumerate(answers) if n % 3]
    assert [answer for _, answer in kept] == [n for n, _ in kept]
    assert all(isinstance(answers[n], asyncio.CancelledError) or answers[n] == n for n in range(0, waiters, 3))
    assert listeners(server) == []


def test_a_waiter_cancelled_mid_subscribe_does_not_break_off_the_write(server, wire):
    # the write is held at a gate while its waiter is cancelled: it still goes out whole (under load
    # a cancel that broke a write off mid-way broke the socket for every waiter)
    name = fresh_name("w")

    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            queue = aio.Queue(conn, name)
            ids = [job.id for job in await queue.enqueue_many([{}, {}])]
            reached, gate, sent = asyncio.Event(), asyncio.Event(), []
            make = conn.client.pubsub

            def gated():
                pubsub = make()
                execute = pubsub.execute_command

                async def held_at_the_gate(*command):
                    reached.set()
                    await gate.wait()
                    await execute(*command)
                    sent.append(command[0])

                pubsub.execute_command = held_at_the_gate
                return pubsub

            conn.client.pubsub = gated
            first = asyncio.create_task(queue.result(ids[0], timeout=30))
            second = asyncio.create_task(queue.result(ids[1], timeout=30))
            await reached.wait()  # the first waiter's SSUBSCRIBE is being sent
            first.cancel()
            gate.set()
            await listening(server, [1], "one channel left")
            await asyncio.to_thread(publish_all, server.url, wire, [name], 2)
            return await asyncio.gather(first, return_exceptions=True), await second, sent

    (cancelled,), answer, sent = asyncio.run(main())
    assert isinstance(cancelled, asyncio.CancelledError) and answer == "done"
    assert sent == ["SSUBSCRIBE", "SSUBSCRIBE", "SUNSUBSCRIBE"]  # the cancelled waiter's went out, then left


def test_on_a_cluster_the_result_waiters_share_one_socket_to_each_node(cluster4):
    names = [fresh_name(f"cw{i}") for i in range(8)]
    nodes = {cluster4.node_for(f"emq:{{{name}}}:pending").port: cluster4.node_for(f"emq:{{{name}}}:pending")
             for name in names}
    assert len(nodes) > 1  # the waiters' channels live on different primaries

    async def main():
        async with await aio.connect(cluster4.url, wire=4, cluster=True) as conn:
            queues = [aio.Queue(conn, name) for name in names]
            ids = [[(await q.enqueue({"q": q.name})).id for _ in range(2)] for q in queues]
            waiting = [asyncio.create_task(q.result(job_id, timeout=30))
                       for q, two in zip(queues, ids) for job_id in two]
            # each node: one listening socket, with the channels of its queues
            per_node = {port: 2 * sum(cluster4.node_for(f"emq:{{{n}}}:pending").port == port for n in names)
                        for port in nodes}
            await asyncio.to_thread(wait_until, lambda: all(listeners(node) == [per_node[port]]
                                                            for port, node in nodes.items()), 10, "each node's socket")
            await asyncio.to_thread(publish_all, cluster4.url, 4, names, 2, lambda job: job.payload["q"])
            return await asyncio.gather(*waiting)

    assert asyncio.run(main()) == [name for name in names for _ in range(2)]
    assert all(listeners(node) == [] for node in nodes.values())
