"""The server dies mid-session: both clients raise ConnectionFailed (never a valkey-py error),
and a worker rides it out, then finishes the work once the server is back."""

from __future__ import annotations

import asyncio
import threading

import pytest

from echomq import App, ConnectionFailed, EmbeddedServer, Queue, Worker, WorkerConfig, aio, connect, module_path
from echomq.worker.policy import IdlePolicy
from support.queues import fresh_name
from support.waiting import wait_until


@pytest.mark.parametrize("wire", [4, 6])
def test_a_killed_server_is_connection_failed_on_both_clients_and_the_worker_rides_it_out(wire, tmp_path):
    name, done, lock = fresh_name("k"), [], threading.Lock()
    app = App()

    @app.task(queue=name)
    def handler(payload):
        with lock:
            done.append(payload["n"])

    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire, aof=True,
                        appendfsync="always", directory=tmp_path / "data") as server:
        loop = asyncio.new_event_loop()
        with connect(server.url, wire=wire, socket_timeout=2) as conn, \
                connect(server.url, wire=wire, socket_timeout=2) as worker_conn:
            aconn = loop.run_until_complete(aio.connect(server.url, wire=wire, socket_timeout=2))
            queue, aqueue = Queue(conn, name), aio.Queue(aconn, name)
            worker = Worker(app, worker_conn, config=WorkerConfig(concurrency=4, idle=IdlePolicy(min_ms=5, max_ms=50)))
            thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
            thread.start()
            try:
                queue.enqueue_many([{"n": n} for n in range(10)])
                loop.run_until_complete(aqueue.enqueue_many([{"n": n} for n in range(10, 20)]))
                wait_until(lambda: len(done) == 20, what="20 jobs before the crash")

                server.kill()
                with pytest.raises(ConnectionFailed) as sync_error:
                    queue.enqueue({"n": -1})
                with pytest.raises(ConnectionFailed) as async_error:
                    loop.run_until_complete(aqueue.enqueue({"n": -2}))
                assert "enqueue" in str(sync_error.value) and "enqueue" in str(async_error.value)
                assert thread.is_alive()  # the worker's steps fail and back off; it does not die

                server.start()  # same port and directory: the AOF brings the brand back
                queue.enqueue_many([{"n": n} for n in range(20, 30)])  # both clients reconnect by themselves
                loop.run_until_complete(aqueue.enqueue_many([{"n": n} for n in range(30, 40)]))
                wait_until(lambda: len(done) == 40, timeout=30, what="the jobs enqueued after the restart")
                wait_until(lambda: queue.metrics()["completed"] == 40, what="40 completions on the server")
                assert queue.counts().total == 0
            finally:
                worker.stop()
                thread.join(15)
                loop.run_until_complete(aconn.aclose())
                loop.close()
        assert not thread.is_alive()
        assert sorted(done) == list(range(40))
        # a settle in flight at the crash may have applied unseen: resent, the token fences it (lost, not twice)
        assert worker.tally.completed + worker.tally.lost == 40 and worker.tally.claimed == 40


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_timed_out_call_is_connection_failed(server4, client):
    """The server stalls (DEBUG SLEEP on another link) past the client's socket timeout."""
    import valkey

    name = fresh_name("k")
    stall = threading.Thread(target=lambda: server4.client().execute_command("DEBUG", "SLEEP", "1"), daemon=True)

    if client == "sync":
        with connect(server4.url, wire=4, socket_timeout=0.2) as conn:
            stall.start()
            wait_until(lambda: _stalled(server4), what="the server to stall")
            with pytest.raises(ConnectionFailed) as info:
                Queue(conn, name).enqueue({})
    else:
        async def main():
            async with await aio.connect(server4.url, wire=4, socket_timeout=0.2) as conn:
                stall.start()
                await asyncio.to_thread(wait_until, lambda: _stalled(server4), 10.0, "the server to stall")
                await aio.Queue(conn, name).enqueue({})

        with pytest.raises(ConnectionFailed) as info:
            asyncio.run(main())
    assert isinstance(info.value.__cause__, valkey.TimeoutError), repr(info.value.__cause__)
    stall.join(5)


def _stalled(server) -> bool:
    """True once a fresh client's PING times out: the server is inside DEBUG SLEEP."""
    import valkey

    try:
        with server.client(socket_timeout=0.05) as probe:
            probe.ping()
    except valkey.TimeoutError:
        return True
    return False
