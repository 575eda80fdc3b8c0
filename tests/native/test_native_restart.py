"""The restart exemption (SPEC §2, §5 STALLED.CHECK): a lease stamped with another run_id
that expires is recovered without counting a stall; EXTEND after the restart re-stamps the
lease, so its later expiry counts. The AOF holds effects, never the verbs."""

from __future__ import annotations

from pathlib import Path

import pytest

from echomq import EmbeddedServer, module_path
from support.native import NativeQueue
from support.waiting import wait_server_past


@pytest.fixture
def aof_server():
    with EmbeddedServer(module=module_path(), aof=True, appendfsync="always") as server:
        yield server


def test_an_expiry_across_a_restart_is_exempt(aof_server):
    c = aof_server.client()
    q = NativeQueue(c)
    first_run = aof_server.run_id()
    q.enqueue("held", b"p")
    q.enqueue("extended", b"p")
    q.claim(1)
    q.claim(1)
    assert q.hrow("held")[b"lease_epoch"] == first_run
    c.close()

    aof_server.restart()
    second_run = aof_server.run_id()
    assert second_run != first_run
    c = aof_server.client()
    q = NativeQueue(c, q.name)
    assert q.hrow("held")[b"lease_epoch"] == first_run  # the AOF replayed the effects

    # EXTEND after the restart re-stamps the lease with the new run_id
    at = q.extend("extended", 1, 1)
    assert q.hrow("extended")[b"lease_epoch"] == second_run
    wait_server_past(c, max(at, int(c.zscore(q.active, "held"))))

    # "held" expired under another epoch: exempt, stalled untouched; "extended" counts
    assert q.stalled_check(1, 10) == [[], [b"held"], [b"extended"]]
    held = q.hrow("held")
    assert held[b"state"] == b"pending" and b"stalled" not in held
    assert q.hrow("extended")[b"stalled"] == b"1"

    # a lease taken after the restart is stamped with the new run_id and counts
    assert q.claim(1)[0] == b"held"
    assert q.hrow("held")[b"lease_epoch"] == second_run
    wait_server_past(c, int(c.zscore(q.active, "held")))
    assert q.stalled_check(5, 10) == [[b"held"], [], []]
    assert q.hrow("held")[b"stalled"] == b"1"
    c.close()


def test_the_aof_holds_effects_not_verbs(aof_server):
    c = aof_server.client()
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    q.claim(1)
    q.fail("j", 1, b"e", 1, 0)
    q.reprocess("j")
    c.close()
    aof_server.stop()
    aof = b"".join(p.read_bytes() for p in Path(aof_server.dir).rglob("*.aof"))
    assert b"EMQ." not in aof.upper()
    assert b"ZREM" in aof and b"HINCRBY" in aof and b"MULTI" in aof
