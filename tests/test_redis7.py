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
from echomq._protocol.serializers import RAW

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


def test_redis_7_keeps_each_completed_record_as_its_own_key(redis7):
    """docs/spec.md §12: a node without HSETEX (Redis 7) keeps today's layout, `done:<id>` with
    its PEXPIREAT, from PUBLISH, PUBLISHES, lane_complete and flow_complete alike; no `done` hash."""
    client = redis7.client()
    with connect(redis7.url, wire=4) as conn:
        q = Queue(conn, "compat-records", serializer=RAW)
        for job_id in ("a", "b", "c"):
            q.enqueue(b"p", id=job_id)
        q.enqueue(b"p", id="lane", group="g")
        q.enqueue_flow(b"parent", children=[b"child"], id="root")
        before = server_ms(client)
        q.publish(q.claim(60_000), b"ra", retention_ms=60_000)
        jobs = [q.claim(60_000), q.claim(60_000)]
        calls = q.completion_calls([p for job in jobs for p in (job.id, str(job.token), b"r")], 60_000)
        assert q.settle_many(calls) == [True, True]
        (lane,) = q.claim_lanes(1, 60_000)
        q.publish(lane, b"rl", retention_ms=60_000)
        (child,) = q.flow_claim(1, 60_000)
        assert q.settle_many([q.flow_complete_call(child, b"rc", retention_ms=60_000)]) == [True]
        after = server_ms(client)
        assert not client.exists(q.keys.key("done"))
        for job_id in ("a", "b", "c", "lane", child.id):
            record = client.hgetall(q.keys.key(f"done:{job_id}"))
            assert record[b"attempts"] == b"1" and before <= int(record[b"finished"]) <= after
            assert client.pexpiretime(q.keys.key(f"done:{job_id}")) == int(record[b"finished"]) + 60_000


def test_trafikey_does_not_load_into_redis_7(redis7_binary):
    """docs/compatibility.md: wire 6 is Valkey's. Redis lacks module calls trafikey makes, so it
    refuses to start with it (it dies loading the module): no Redis node ever serves wire 6."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, redis7_binary)
        with pytest.raises(ServerStartError):
            EmbeddedServer(module=module_path()).start()
