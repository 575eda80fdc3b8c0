"""Result waiters across faults (issue 37, SPEC §9.7): ``result()`` rides out a server restart and a
failover within its timeout (it subscribes and reads again), and a waiter that vanishes without
counting itself out stops costing settles within the bound of docs/spec.md §12 "Waiters" (its
count's field expires). Both wires, both clients, real servers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest

from echomq import EmbeddedServer, Queue, aio, connect, module_path
from echomq.local.cluster import LocalCluster
from echomq._protocol.results import WAITER_TTL_S, relink_pause_s, wait_slice_s
from support.processes import ROOT, TESTS, reap
from support.queues import fresh_name
from support.waiting import wait_until

KEEP_MS = 600_000


# -- deciding: pure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("counted, left, slice_s", [
    (1, None, 10.0), (1, 3.0, 3.0), (1, 25.0, 10.0),  # a counted waiter reads again as it refreshes its count
    (0, None, 1.0), (0, 0.5, 0.5),  # one that could not count itself reads again each second
])
def test_a_waiter_listens_a_slice_at_a_time(counted, left, slice_s):
    assert wait_slice_s(counted, left) == slice_s


@pytest.mark.parametrize("failures, deadline, pause", [
    (1, None, 0.05), (2, None, 0.1), (5, None, 0.8), (9, None, 1.0),  # doubling, at most a second
    (1, 100.05, None),  # the pause would outlast the timeout: the link fault is the answer
    (3, 101.0, 0.2),
])
def test_a_waiter_whose_link_failed_pauses_while_its_timeout_lasts(failures, deadline, pause):
    assert relink_pause_s(failures, deadline, now=100.0) == pause


# -- a waiter that dies ------------------------------------------------------------------------------

DYING_WAITER = """
import asyncio, sys
import echomq, echomq._core.bus
from echomq import aio
url, wire, name, job_id, client, ttl = sys.argv[1:]
echomq._core.bus.WAITER_TTL_S = int(ttl)  # a bound the test can wait out
if client == "sync":
    echomq.Queue(echomq.connect(url, wire=int(wire)), name).result(job_id, timeout=60)
else:
    async def main():
        await aio.Queue(await aio.connect(url, wire=int(wire)), name).result(job_id, timeout=60)
    asyncio.run(main())
"""


def waiters(queue: Queue) -> Any:
    return queue.connection.client.hget(queue.keys.meta, "waiters")


def field_ttl_s(queue: Queue) -> int:
    (ttl,) = queue.connection.client.execute_command("HTTL", queue.keys.meta, "FIELDS", 1, "waiters")
    return ttl


def first_word_after(queue: Queue, job_id: str, settle) -> bytes:
    """What the job's outcome channel says first once ``settle`` ran: its outcome if the settle told
    it, else the fence this sends right after (so nothing is waited for that may never come)."""
    pubsub = queue.connection.client.pubsub()
    try:
        pubsub.ssubscribe(queue.keys.outcome(job_id))
        assert pubsub.get_sharded_message(timeout=10)["type"] == "ssubscribe"
        settle()
        queue.connection.client.execute_command("SPUBLISH", queue.keys.outcome(job_id), "fence")
        return pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=10)["data"]
    finally:
        pubsub.close()


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_sigkilled_waiter_is_forgotten_and_settles_stop_telling(server, wire, conn, client):
    name = fresh_name("dw")
    queue = Queue(conn, name)
    job = queue.enqueue({"n": 1})
    dying = subprocess.Popen([sys.executable, "-c", DYING_WAITER, server.url, str(wire), name, job.id, client, "1"],
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)])),
                             stderr=subprocess.PIPE)
    try:
        wait_until(lambda: waiters(queue) == b"1", 20, "the waiter counted")
        dying.send_signal(signal.SIGKILL)  # no count-out: its count stays until its field expires
        dying.wait(10)
        held = queue.claim(KEEP_MS)
        wait_until(lambda: waiters(queue) is None, 20, "the dead waiter's count to expire")
        assert first_word_after(queue, job.id, lambda: queue.complete(held)) == b"fence"  # told nobody
    finally:
        reap(dying)


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_live_waiter_counts_itself_with_an_expiry_and_counts_itself_out(server, wire, conn, client):
    name = fresh_name("lw")
    queue = Queue(conn, name)
    job = queue.enqueue({"n": 1})
    held = queue.claim(KEEP_MS)
    got = background_result(server.url, wire, client, name, job.id, 30)
    wait_until(lambda: waiters(queue) == b"1", 20, "the waiter counted")
    assert 0 < field_ttl_s(queue) <= WAITER_TTL_S  # the bound a vanished waiter would cost
    assert first_word_after(queue, job.id, lambda: queue.complete(held)) == b"completed"  # told while counted
    got.join()
    assert got.value is None  # COMPLETE keeps no result
    assert waiters(queue) == b"0" and 0 < field_ttl_s(queue) <= WAITER_TTL_S  # counted out; the 0 expires too


class background_result(threading.Thread):
    """``result(job_id, timeout)`` on a connection of its own (``client``: sync or async), in a thread."""

    def __init__(self, url: str, wire: int, client: str, name: str, job_id: str, timeout: float) -> None:
        super().__init__(daemon=True)
        self.url, self.wire, self.client, self.name, self.job_id, self.timeout = url, wire, client, name, job_id, timeout
        self.value: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            if self.client == "sync":
                with connect(self.url, wire=self.wire) as connection:
                    self.value = Queue(connection, self.name).result(self.job_id, timeout=self.timeout)
            else:
                self.value = asyncio.run(self._awaited())
        except BaseException as exc:  # handed to the test
            self.error = exc

    async def _awaited(self) -> Any:
        async with await aio.connect(self.url, wire=self.wire) as connection:
            return await aio.Queue(connection, self.name).result(self.job_id, timeout=self.timeout)

    def join(self, timeout: float | None = 30) -> None:  # type: ignore[override]
        super().join(timeout)
        assert not self.is_alive(), "the waiter is still waiting"
        if self.error is not None:
            raise self.error


# -- restarts and failovers -------------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("wire", [4, 6])
def test_a_waiter_rides_out_a_server_restart(wire, client):
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire, aof=True) as server:
        with connect(server.url, wire=wire) as conn:
            queue = Queue(conn, "r")
            job = queue.enqueue({"n": 1})
            held = queue.claim(KEEP_MS)
        got = background_result(server.url, wire, client, "r", job.id, 30)
        with server.client() as client_before:
            wait_until(lambda: client_before.hget(queue.keys.meta, "waiters") == b"1", 20, "the waiter counted")
        server.restart()  # SIGTERM, the AOF flushed; a new run_id
        with connect(server.url, wire=wire) as conn:
            Queue(conn, "r").publish(held, {"after": "restart"}, retention_ms=KEEP_MS)
        got.join()
        assert got.value == {"after": "restart"}
        with server.client() as after:
            # the count the restart cut off (its count-out never reached the server) expires on its own
            (ttl,) = after.execute_command("HTTL", queue.keys.meta, "FIELDS", 1, "waiters")
            assert 0 < ttl <= WAITER_TTL_S


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("wire", [4, 6])
def test_a_waiter_rides_out_a_failover(wire, client):
    with LocalCluster(1, replicas=1, module=module_path() if wire == 6 else None, brand=wire) as cluster:
        with connect(cluster.url, wire=wire) as conn:
            queue = Queue(conn, "f")
            job = queue.enqueue({"n": 1})
            held = queue.claim(KEEP_MS)
            with cluster.nodes[0].client() as primary:
                assert primary.execute_command("WAIT", 1, 10_000) == 1
            got = background_result(cluster.url, wire, client, "f", job.id, 30)
            wait_until(lambda: conn.client.hget(queue.keys.meta, "waiters") == b"1", 20, "the waiter counted")
            cluster.failover(0)  # the replica takes over; the old primary's subscribers are told to go
            with cluster.nodes[0].client() as new_primary:  # not found by a read at its next refresh: heard
                channel = queue.keys.outcome(job.id)
                wait_until(lambda: new_primary.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] == 1, 20,
                           "the waiter subscribed on the new primary")
            conn.refresh_slots()
            Queue(conn, "f").publish(held, {"after": "failover"}, retention_ms=KEEP_MS)
            got.join()
        assert got.value == {"after": "failover"}


def test_on_a_server_without_field_expiry_a_waiter_still_counts_itself_and_is_told():
    """Redis 7.0 (no HEXPIRE): the count cannot expire (docs/spec.md §12 says what that costs), but
    the waiter is counted, told by COMPLETE, and counts itself out."""
    import shutil

    from echomq.local.server import BINARY_ENV

    binary = shutil.which("redis-server")
    assert binary, "redis-server is missing: ./run setup installs Debian's redis-server"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, binary)
        server = EmbeddedServer(brand=4)
    with server, connect(server.url, wire=4) as conn:
        queue = Queue(conn, "old")
        job = queue.enqueue({"n": 1})
        held = queue.claim(KEEP_MS)
        got = background_result(server.url, 4, "sync", "old", job.id, 30)
        wait_until(lambda: waiters(queue) == b"1", 20, "the waiter counted")
        assert first_word_after(queue, job.id, lambda: queue.complete(held)) == b"completed"
        got.join()
        assert got.value is None and waiters(queue) == b"0"
