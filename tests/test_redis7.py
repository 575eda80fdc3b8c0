"""Wire 4 runs on any Redis >= 7: every scripted verb on Debian's redis-server 7.0.

The scripts are the compatibility executor for nodes where no module may be
loaded (managed services). This runs each script's ordinary path on a real
Redis 7.0 server, the oldest the spec promises.
"""

from __future__ import annotations

import shutil

import pytest

from echomq import EmbeddedServer, Queue, State, connect
from echomq.local.server import BINARY_ENV

from helpers import server_ms, wait_server_past


@pytest.fixture(scope="module")
def redis7(tmp_path_factory):
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is missing: ./run setup installs Debian's redis-server")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, binary)
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
