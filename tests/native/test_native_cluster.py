"""Cluster smoke: the key-specs route every verb by the queue's hashtag; one node holding all
slots serves a queue; keys of two queues in one call are CROSSSLOT."""

from __future__ import annotations

from dataclasses import replace

import pytest
import valkey

from echomq import EmbeddedServer, LeaseLost, Queue, brand_node, connect, module_path
from support.native import Blocker, NativeQueue, wait_blocked
from support.queues import fresh_name
from support.waiting import wait_until

pytestmark = pytest.mark.cluster  # a cluster-mode node of the module's own


@pytest.fixture(scope="module")
def cluster_node():
    with EmbeddedServer(module=module_path(), cluster=True) as node:
        with node.client() as c:
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
            wait_until(lambda: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"), 20, "cluster_state:ok")
        yield node


def test_verbs_work_on_one_queue(cluster_node):
    with cluster_node.client() as c:
        q = NativeQueue(c)
        assert q.enqueue("j", b"p") == 1
        _, _, att = q.claim()
        assert q.extend("j", att, 5000) > 0
        assert q.fail("j", att, b"e", 3, 0) == b"pending"
        _, _, att = q.claim()
        assert q.complete("j", att) == 1
        assert q.schedule("s", b"p", 0, 0) == 1
        assert q.stalled_check(3, 10) == [[], [], []]
        assert c.execute_command("EMQ.VERSION").startswith(b"enqueue claim")
        slots = {c.execute_command("CLUSTER", "KEYSLOT", k) for k in (q.pending, q.active, q.base, q.row("j"))}
        assert len(slots) == 1


def test_bclaim_blocks_on_its_queues_slot_and_is_served(cluster_node):
    """BCLAIM waits on pending and schedule, keys of the queue's one slot."""
    with cluster_node.client() as c:
        q = NativeQueue(c)
        blocker = Blocker(cluster_node, q).start()
        wait_blocked(c, blocker)
        q.enqueue("j", b"p")
        assert blocker.result() == [b"j", b"p", 1]
        blocker = Blocker(cluster_node, q).start()
        wait_blocked(c, blocker)
        q.schedule("s", b"p", 60_000)  # an earlier next due time: answered empty
        assert blocker.result() == []


def test_keys_of_two_queues_are_crossslot(cluster_node):
    with cluster_node.client() as c:
        a = NativeQueue(c, fresh_name("a"))
        b = NativeQueue(c, fresh_name("b"))
        assert c.execute_command("CLUSTER", "KEYSLOT", a.base) != c.execute_command("CLUSTER", "KEYSLOT", b.base)
        with pytest.raises(valkey.ResponseError, match="CROSSSLOT"):
            c.execute_command("EMQ.CLAIM", 3, a.pending, b.active, a.base, 1000)
        with pytest.raises(valkey.ResponseError, match="CROSSSLOT"):
            c.execute_command("EMQ.ENQUEUE", 2, a.pending, b.base, "j", "p", 0)
        with pytest.raises(valkey.ResponseError, match="CROSSSLOT"):
            c.execute_command("EMQ.BCLAIM", 3, a.pending, b.active, a.base, 1000, 0)
        with pytest.raises(valkey.ResponseError, match="CROSSSLOT"):
            c.execute_command("EMQ.COMPLETES", 2, a.active, b.base, "j", "1")


def test_a_batch_of_completes_through_the_cluster_client(cluster_node):
    """COMPLETES routed by its declared keys: Queue.complete_many on a cluster connection sends one
    per batch, each pair answered (a lost lease among them)."""
    with cluster_node.client() as c:
        brand_node(c, 6)
    with connect(cluster_node.url, wire=6, cluster=True) as conn:
        assert conn.cluster
        q = Queue(conn, fresh_name("cc"))
        q.enqueue_many(["x"] * 4)
        jobs = q.claim_many(4, 60_000)
        assert q.complete_many([*jobs[:2], replace(jobs[2], attempt=9), jobs[3]]) == [True, True, False, True]
        assert q.counts().active == 1 and q.metrics()["completed"] == 3


def test_a_batch_of_publishes_through_the_cluster_client(cluster_node):
    """PUBLISHES routed by its declared keys: Queue.settle_many on a cluster connection sends the
    PUBLISH calls of one retention as one, each answered (a lost lease among them)."""
    with cluster_node.client() as c:
        brand_node(c, 6)
    with connect(cluster_node.url, wire=6, cluster=True) as conn:
        q = Queue(conn, fresh_name("cc"))
        q.enqueue_many(["x"] * 3)
        jobs = q.claim_many(3, 60_000)
        calls = [q.publish_call(job, b"r", retention_ms=60_000, token=9 if n == 1 else None)
                 for n, job in enumerate(jobs)]
        answers = q.settle_many(calls)
        assert answers[0] is True and isinstance(answers[1], LeaseLost) and answers[2] is True
        assert q.counts().active == 1 and q.metrics()["completed"] == 2


def test_routing_reads_the_declared_keys():
    """A node serving half the slots: a verb on a queue in an unserved slot is stopped by the
    server's routing (before the verb runs), exactly as a plain command on that key is."""
    with EmbeddedServer(
        module=module_path(), cluster=True, extra_args=("--cluster-require-full-coverage", "no")
    ) as node, node.client() as c:
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        wait_until(lambda: b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO"), 20, "cluster_state:ok")
        served, unserved = None, None
        for i in range(200):
            q = NativeQueue(c, fresh_name(f"r{i}-"))
            slot = c.execute_command("CLUSTER", "KEYSLOT", q.base)
            if slot <= 8191:
                served = served or q
            else:
                unserved = unserved or q
            if served and unserved:
                break
        assert served.enqueue("j", b"p") == 1
        for line in unserved.lines().values():
            with pytest.raises(valkey.ResponseError, match="CLUSTERDOWN Hash slot not served"):
                c.execute_command(*line)
        with pytest.raises(valkey.ResponseError, match="CLUSTERDOWN Hash slot not served"):
            c.hset(unserved.row("j"), "state", "pending")
