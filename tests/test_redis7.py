"""Wire 4 runs on any Redis >= 7: every scripted verb, and a worker's flat, lane and flow jobs,
on Debian's redis-server 7.0; trafikey (wire 6) does not load there.

The scripts are the compatibility executor for nodes where no module may be
loaded (managed services). This runs each script's ordinary path on a real
Redis 7.0 server, the oldest the spec promises.
"""

from __future__ import annotations

import shutil

import pytest

from echomq import App, EmbeddedServer, Queue, ServerStartError, State, Status, connect, module_path
from echomq.local.server import BINARY_ENV
from echomq.testing import drain

from support.waiting import server_ms, wait_server_past


@pytest.fixture(scope="module")
def redis7_binary():
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is missing: ./run setup installs Debian's redis-server")
    return binary


@pytest.fixture(scope="module")
def redis7(redis7_binary):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, redis7_binary)
        server = EmbeddedServer(brand=4)
    with server:
        with server.client() as client:
            assert client.info("server")["redis_version"].startswith("7.")
        yield server


def test_every_scripted_verb_runs_on_redis_7(redis7):
    with connect(redis7.url, wire=4) as conn:
        q = Queue(conn, "compat")
        q.enqueue({"n": 1}, id="a")
        q.enqueue({"n": 2}, id="b", priority=1)
        job = q.claim(60_000)
        assert (job.id, job.payload, job.attempt) == ("a", {"n": 1}, 1)
        assert q.extend(job, 60_000) > server_ms(redis7.client())
        assert q.extend_many([job], 60_000)[0] > 0
        q.complete(job)
        second = q.claim(60_000)
        assert q.fail(second, "boom", max_attempts=1) is State.DEAD
        assert q.reprocess("b") and q.state("b") is State.PENDING
        third = q.claim(60_000)
        due = q.delay(third, 0)
        wait_server_past(redis7.client(), due - 1)
        assert q.promote() == 1
        q.schedule({"n": 3}, 0, id="c")
        leased = q.claim(1)
        wait_server_past(redis7.client(), server_ms(redis7.client()) + 1)
        swept = q.stalled_check(max_stalled=5)
        assert swept.recovered == [leased.id]
        assert q.counts().pending == 1 and q.metrics() == {"completed": 1, "failed": 1}


def test_a_worker_runs_flat_lane_and_flow_jobs_on_redis_7(redis7):
    """docs/compatibility.md promises wire 4 whole on Redis 7.0: the worker, results, lanes and flows."""
    ran: list[str] = []
    app = App("compat")
    app.handler("compat-worker", lambda payload, ctx: ran.append(ctx.id) or payload)
    with connect(redis7.url, wire=4) as conn:
        q = Queue(conn, "compat-worker")
        q.enqueue("flat", id="flat")
        q.enqueue("lane", id="lane", group="tenant-1")
        q.enqueue_flow("parent", children=["child"], id="parent")
        assert drain(app, q).completed == 4
        assert len(ran) == 4 and {"flat", "lane", "parent"} <= set(ran) and ran.index("parent") == 3
        assert q.result("flat", timeout=5) == "flat" and q.status("parent") is Status.COMPLETED


def test_trafikey_does_not_load_into_redis_7(redis7_binary):
    """docs/compatibility.md: wire 6 is Valkey's. Redis lacks module calls trafikey makes, so it
    refuses to start with it (it dies loading the module): no Redis node ever serves wire 6."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, redis7_binary)
        with pytest.raises(ServerStartError):
            EmbeddedServer(module=module_path()).start()
