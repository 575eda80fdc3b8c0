"""echomq.aio specifics (the shared behaviour is the conformance suite's, through AwaitingQueue):
concurrent calls coalesce into one pipeline, each keeping its own answer or error; the pool."""

from __future__ import annotations

import asyncio

import pytest

from echomq import WrongType, aio
from helpers import fresh_name


def test_calls_made_in_one_turn_share_one_pipeline_and_keep_their_own_answers(server, wire):
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            pipelines = []
            real = conn.client.pipeline

            def counting(*args, **kwargs):
                pipelines.append(1)
                return real(*args, **kwargs)

            conn.client.pipeline = counting  # type: ignore[method-assign]
            good = aio.Queue(conn, fresh_name("a"))
            broken = aio.Queue(conn, fresh_name("a"))
            await conn.client.set(broken.keys.pending, "not a zset")
            results = await asyncio.gather(
                *(good.enqueue({"n": n}, id=f"j{n}") for n in range(20)),
                broken.enqueue({}, id="x"),
                return_exceptions=True,
            )
            return pipelines, results, await good.counts()

    pipelines, results, counts = asyncio.run(main())
    assert len(pipelines) == 1  # 21 calls from 21 tasks, one round trip
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
    from worker_helpers import wait_until

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
