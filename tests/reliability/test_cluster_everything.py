"""Everything on a cluster (issue 19, part 1), on a real local cluster, both wires:

* ``emq worker`` (no flag: it finds the cluster) drains six queues spread over three primaries;
* every ``emq`` command on a cluster node, and ``--no-cluster`` / ``--cluster`` overriding the detection;
* ``emq brand`` brands the cluster (one key, on its slot's primary) from any node, and the wire-6
  check names the primary that lacks the module;
* wire 4's waiters: one per slot (two queues sharing a slot share one blocked connection);
* a worker serving a queue whose slot is migrated to another primary (SETSLOT MIGRATING/IMPORTING,
  MIGRATE, SETSLOT NODE) completes every job exactly once and then waits on the new node; moved
  back while it waits there, its block is answered MOVED and it waits on the first node again;
* the same through Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS), on both wires (trafikey
  declares support for it);
* a worker riding out a primary failover (CLUSTER FAILOVER on its replica): nothing lost; then a
  killed primary whose replica takes over (TAKEOVER): every replicated job done.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import echomq
from echomq import Queue, connect, errors
from echomq.local.cluster import LocalCluster, node_id
from echomq._protocol.keys import VERSION_KEY, slot_of
from echomq.worker.policy import LeasePolicy
from echomq.worker.timers import TimerConfig

from support.cli import emq
from support.cluster import (
    blocked_on, cluster_unchanged, digests, migrate_slot, migrate_slot_atomically, names_on_every_node,
)
from support.waiting import wait_server_past, wait_until
from support.workers import WorkerProcess, processed

pytestmark = [pytest.mark.timeout(120), pytest.mark.cluster]  # every test on a cluster, some their own
_n = itertools.count()


def test_emq_worker_drains_six_queues_over_three_primaries(cluster, wire, tmp_path: Path):
    """Pointed at one node, with no cluster flag, it finds the others (it used to exit with MOVED)."""
    names = names_on_every_node(cluster, per_node=2)
    with connect(cluster.url, wire=wire) as conn:
        assert conn.cluster
        ids = {job.id for name in names for job in Queue(conn, name).enqueue_many([{"n": n} for n in range(40)])}
        worker = WorkerProcess(cluster.nodes[1].url, wire, ",".join(names), tmp_path, "-c", "4", "--burst")
        assert worker.wait(60) == 0, worker.log()
        rows = processed(tmp_path)
        assert sorted(job_id for job_id, _, _ in rows) == sorted(ids)  # each once, none missing
        for name in names:
            queue = Queue(conn, name)
            assert queue.metrics()["completed"] == 40 and queue.counts().total == 0
    assert "burst: the queues are empty" in worker.log()


def test_every_emq_command_on_a_cluster(cluster, wire):
    names = names_on_every_node(cluster, per_node=1)
    url = cluster.nodes[2].url  # any node: the commands find the queue's own
    for name in names:
        added = emq("enqueue", "-q", name, '{"a": 1}', "--count", "3", "--url", url, "--json")
        assert added.exit_code == 0, added.output
        assert len(json.loads(added.stdout)) == 3
    delayed = emq("enqueue", "-q", names[0], "{}", "--delay-ms", "0", "--url", url)
    assert delayed.exit_code == 0
    stats = emq("stats", "--url", url, "--json")
    assert stats.exit_code == 0, stats.output
    found = {row["queue"]: row for row in json.loads(stats.stdout)}
    assert all(found[name]["pending"] == 3 for name in names)
    assert found[names[0]]["scheduled"] == 1
    assert "EchoMQ queues on a cluster of 3 primaries" in emq("stats", "--url", url).stdout
    assert emq("promote", "-q", names[0], "--url", url, "--json").stdout.count('"promoted": 1') == 1
    with connect(cluster.url, wire=wire) as conn:
        for name in names:  # one job dead in each queue, one active with an expired lease
            queue = Queue(conn, name)
            job = queue.claim(30_000)
            queue.fail(job, "boom", max_attempts=1)
            held = queue.claim(1)
            wait_server_past(conn.node_client(queue.keys), conn.client.zscore(queue.keys.active, held.id))
        (pending_id, _), *_ = Queue(conn, names[1]).ids("pending")
    shown = emq("inspect", pending_id, "-q", names[1], "--url", url, "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["state"] == "pending"
    for name in names:
        dead = json.loads(emq("dead", "-q", name, "--url", url, "--json").stdout)
        assert dead["total"] == 1 and dead["jobs"][0]["last_error"] == "boom"
        swept = emq("sweep", "-q", name, "--url", url, "--json")
        assert swept.exit_code == 0
        assert len(json.loads(swept.stdout)["recovered"]) == 1
        again = emq("reprocess", "--all", "-q", name, "--url", url, "--json")
        assert again.exit_code == 0 and len(json.loads(again.stdout)["reprocessed"]) == 1
        assert emq("pause", "-q", name, "--url", url).exit_code == 0
        assert json.loads(emq("stats", "-q", name, "--url", url, "--json").stdout)[0]["paused"] is True
        assert emq("resume", "-q", name, "--url", url).exit_code == 0
    assert emq("workers", "--url", url, "--json").exit_code == 0
    assert "already" not in emq("brand", url, "--wire", str(wire)).output  # its own brand again: a no-op


def test_no_cluster_overrides_the_detection(cluster, wire):
    """--no-cluster on a node that does not hold the brand's slot: a clear refusal, nothing written;
    --cluster on a standalone node: refused as no cluster."""
    holder = cluster.node_for(VERSION_KEY)
    other = next(node for node in cluster.nodes if node is not holder)
    name = f"nc-{next(_n)}"
    with cluster_unchanged(cluster):
        refused = emq("enqueue", "-q", name, "{}", "--url", other.url, "--no-cluster")
    assert refused.exit_code == 1
    assert "runs in cluster mode" in refused.stderr and "--no-cluster" in refused.stderr
    with cluster_unchanged(cluster):
        branding = emq("brand", other.url, "--wire", str(wire), "--no-cluster")
    assert branding.exit_code == 1 and "runs in cluster mode" in branding.stderr
    plain = emq("stats", "--url", holder.url, "--no-cluster", "--json")  # the brand's node alone: its queues only
    assert plain.exit_code == 0
    with echomq.EmbeddedServer(brand=4) as standalone:
        forced = emq("stats", "--url", standalone.url, "--cluster")
        assert forced.exit_code == 1 and "no Valkey Cluster answers" in forced.stderr
        with standalone.client() as client:
            assert client.dbsize() == 1  # the brand alone


def test_brand_the_cluster_from_any_node_and_the_wire_6_check_names_the_primary_without_the_module():
    """The brand is one key (``{emq}:version``, one slot) for the whole cluster: `emq brand` on any node
    writes it on its slot's primary; every primary must then serve the wire, checked at connect."""
    cluster = LocalCluster(3, module=echomq.module_path())
    cluster.nodes[2].module = None  # this primary lacks trafikey
    with cluster:
        not_holder = next(node for node in cluster.nodes if node is not cluster.node_for(VERSION_KEY))
        before = digests(cluster)
        refused = emq("brand", not_holder.url, "--wire", "6")  # no wire-6 brand where a primary cannot serve it
        assert refused.exit_code == 1 and f"the primary 127.0.0.1:{cluster.nodes[2].port}" in refused.stderr
        assert digests(cluster) == before
        branded = emq("brand", not_holder.url, "--wire", "4")
        assert branded.exit_code == 0, branded.output
        assert "3 primaries" in branded.stdout and "branded echomq:4.0.0" in branded.stdout
        with cluster.node_for(VERSION_KEY).client() as client:
            client.set(VERSION_KEY, b"echomq:6.0.0")  # as an older `emq brand` left it
        before = digests(cluster)
        with pytest.raises(errors.WireError) as info:
            connect(cluster.url, wire=6)
        assert f"127.0.0.1:{cluster.nodes[2].port}" in str(info.value)
        refused = emq("stats", "--url", cluster.nodes[0].url)
        assert refused.exit_code == 1 and f"127.0.0.1:{cluster.nodes[2].port}" in refused.stderr
        other = emq("brand", cluster.nodes[1].url, "--wire", "4")
        assert other.exit_code == 1 and "already branded" in other.stderr
        assert digests(cluster) == before
        replaced = emq("brand", cluster.nodes[1].url, "--wire", "4", "--replace")  # the way out: no data yet
        assert replaced.exit_code == 0 and "branded echomq:4.0.0" in replaced.stdout


def test_wire_4_queues_sharing_a_slot_share_one_blocked_connection(cluster4):
    """A BZPOPMIN's keys must share a slot: the waiters are per slot, so two queues whose names hash
    to one slot are watched by one blocked connection, and a third queue has its own."""
    first = f"slot-share-{next(_n)}"
    second = next(f"slot-mate-{i}" for i in itertools.count() if slot_of(f"slot-mate-{i}") == slot_of(first))
    third = next(name for name in names_on_every_node(cluster4, 1)
                 if cluster4.node_for(f"{{{name}}}") is cluster4.node_for(f"{{{first}}}"))
    node = cluster4.node_for(f"{{{first}}}")
    seen: list[str] = []
    app = echomq.App()
    for name in (first, second, third):
        app.handler(name, lambda payload, ctx: seen.append(ctx.queue))
    with connect(cluster4.url, wire=4) as conn:
        worker = echomq.Worker(app, conn)
        assert len(worker.queues) == 3
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            wait_until(lambda: blocked_on(node) == 2, what="two blocked waiters for three queues")
            for name in (first, second, third):
                Queue(conn, name).enqueue({})
            wait_until(lambda: sorted(seen) == sorted([first, second, third]), what="a job from each queue")
            wait_until(lambda: blocked_on(node) == 2, what="blocked again")
        finally:
            worker.stop("test over")
            thread.join(10)


class Recording:
    """A worker on its own thread whose handler records each job it completes."""

    def __init__(self, conn, names: list[str], concurrency: int = 4, **config) -> None:
        self.done: Counter[str] = Counter()
        self._lock = threading.Lock()
        app = echomq.App()
        for name in names:
            app.handler(name, self.handle)
        self.worker = echomq.Worker(app, conn, config=echomq.WorkerConfig(concurrency=concurrency, **config))
        self.thread = threading.Thread(target=self.worker.run, kwargs={"install_signals": False}, daemon=True)

    def handle(self, payload, ctx) -> None:
        time.sleep(0.002)  # the job's own work, so the run lasts across the slot's move
        with self._lock:
            self.done[ctx.id] += 1

    def __enter__(self) -> "Recording":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop("test over")
        self.thread.join(15)
        assert not self.thread.is_alive()


def test_a_worker_follows_its_queue_when_the_slot_migrates(cluster, wire):
    """On the shared cluster: the slot goes back where it was before the test ends."""
    with connect(cluster.url, wire=wire) as conn:
        name = names_on_every_node(cluster, per_node=1)[0]
        source = cluster.node_for(f"{{{name}}}")
        target = next(node for node in cluster.nodes if node is not source)
        queue = Queue(conn, name)
        ids = [job.id for job in queue.enqueue_many([{"n": n} for n in range(600)])]
        with Recording(conn, [name], concurrency=2) as run:
            wait_until(lambda: sum(run.done.values()) >= 100, 30, "a first hundred jobs done")
            moved = migrate_slot(slot_of(name), source, target, cluster.nodes)
            try:
                assert moved > 0
                assert sum(run.done.values()) < 600, "the slot moved after the run: raise the job count"
                wait_until(lambda: sum(run.done.values()) == 600, 60, "every job done")
                wait_until(lambda: blocked_on(target) == 1, 20, "the waiter blocked on the new node")
                assert blocked_on(source) == 0
                later = queue.enqueue({"after": True})  # picked up from the new node by the waiter's wake
                wait_until(lambda: run.done[later.id] == 1, 20, "a job enqueued after the move")
            finally:
                migrate_slot(slot_of(name), target, source, cluster.nodes)  # back, while the worker waits there
            back = queue.enqueue({"back": True})
            wait_until(lambda: run.done[back.id] == 1, 20, "a job enqueued after the move back")
            wait_until(lambda: blocked_on(source) == 1, 20, "the waiter blocked on the first node again")
            assert blocked_on(target) == 0
        assert set(run.done) == set(ids) | {later.id, back.id} and set(run.done.values()) == {1}
        assert queue.metrics()["completed"] == 602 and queue.counts().total == 0
        with source.client() as client:
            assert client.exists(queue.keys.key("metrics:completed")) == 1  # the queue lives there again


def test_a_worker_rides_out_a_primary_failover_then_a_killed_primary(wire, caplog):
    """A graceful failover (CLUSTER FAILOVER on the replica): nothing lost, every job once. Then the
    new primary is SIGKILLed and its replica (the old primary) takes over (CLUSTER FAILOVER
    TAKEOVER): the jobs were replicated before the run (WAIT), so every one is done, at least
    once: a settle the dead node acknowledged but never replicated runs a job again, and a claim
    whose answer was lost (with the node, or with the round trip it rode in) leaves a lease the
    sweep recovers. A lease the dead node stamped (a job its holder never renews) is recovered on
    wire 6 exempt from the stall count, its run_id being the dead node's; on wire 4 it counts.
    The short leases keep that quick."""
    with LocalCluster(3, replicas=1, module=echomq.module_path() if wire == 6 else None, brand=wire) as cluster, \
            connect(cluster.url, wire=wire) as conn:
        names = names_on_every_node(cluster, per_node=1)
        index = 1
        name = next(n for n in names if cluster.node_for(f"{{{n}}}") is cluster.nodes[index])
        others = [n for n in names if n != name]
        queue = Queue(conn, name)
        ids = [job.id for job in queue.enqueue_many([{"n": n} for n in range(600)])]
        old_primary = cluster.nodes[index]
        caplog.set_level(logging.INFO, logger="echomq.timers")  # an exempt recovery is logged at INFO
        lease = {"lease": LeasePolicy(1000), "timers": TimerConfig(sweep_interval_ms=200, idle_sweep_interval_ms=200)}
        with Recording(conn, [name, *others], concurrency=2, **lease) as run:
            wait_until(lambda: sum(run.done.values()) >= 100, 30, "a first hundred jobs done")
            cluster.failover(index)
            assert sum(run.done.values()) < 600, "the failover came after the run: raise the job count"
            wait_until(lambda: sum(run.done.values()) == 600, 60, "every job done")
            new_primary = cluster.nodes[index]
            assert new_primary is not old_primary
            wait_until(lambda: blocked_on(new_primary) == 1, 20, "the waiter blocked on the new primary")
            assert blocked_on(old_primary) == 0
            later = queue.enqueue({"after": True})
            wait_until(lambda: run.done[later.id] == 1, 20, "a job enqueued after the failover")
            assert set(run.done) == set(ids) | {later.id} and set(run.done.values()) == {1}
            assert queue.metrics()["completed"] == 601 and queue.counts().total == 0

            second = [job.id for job in queue.enqueue_many([{"n": n} for n in range(600)])]
            wait_until(lambda: sum(run.done[i] for i in second) >= 100, 30, "a first hundred of the second run")
            orphan = queue.claim(3000)  # held by a worker that dies with the node: nobody renews it
            with new_primary.client() as client:
                assert client.execute_command("WAIT", 1, 10_000) == 1  # on the replica before the crash
            cluster.failover(index, kill=True)
            assert sum(run.done[i] for i in second) < 600, "the crash came after the run: raise the job count"
            wait_until(lambda: all(run.done[i] >= 1 for i in second), 60, "every job of the second run done")
            wait_until(lambda: blocked_on(old_primary) == 1, 20, "the waiter blocked on the last primary")
        assert queue.counts().pending == queue.counts().dead == 0
        # the dead node stamped the orphan's lease with its run_id: on wire 6 its expiry is no stall
        swept = [r.getMessage() for r in caplog.records if r.name == "echomq.timers" and orphan.id in r.getMessage()]
        assert len(swept) == 1
        assert ("without a stall" in swept[0]) == (wire == 6) and ("counted as stalls" in swept[0]) == (wire == 4)
def test_a_batch_the_cluster_client_cannot_place_mid_migration_fails_whole_as_connection_failed(cluster, wire):
    """A slot MIGRATING with its keys not moved yet: a verb whose keys partly exist (active does
    not, pending does) is answered TRYAGAIN until the client's retries run out. In a pipeline
    valkey-py hands that fault back among the replies; the send path raises it as ConnectionFailed
    (the worker backs off and retries) instead of passing a raw ClusterError on. Nothing is written."""
    name = names_on_every_node(cluster, per_node=1)[0]
    source = cluster.node_for(f"{{{name}}}")
    target = next(node for node in cluster.nodes if node is not source)
    slot = slot_of(name)
    with connect(cluster.url, wire=wire) as conn:
        queue = Queue(conn, name)
        queue.enqueue_many([{}] * 3)
        before = digests(cluster)
        with source.client() as src, target.client() as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", node_id(source))
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", node_id(target))
            try:
                with pytest.raises(errors.ConnectionFailed) as info:
                    queue.claim_many(3, 30_000)
                assert "TTL exhausted" in str(info.value)
                assert digests(cluster) == before
            finally:
                for client in (src, dst):
                    client.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        assert len(queue.claim_many(3, 30_000)) == 3


def test_atomic_slot_migration_under_a_running_worker(cluster, wire):
    """Valkey 9's CLUSTER MIGRATESLOTS: ownership changes in one step once the target holds every key,
    so a queue's verbs never meet the TRYAGAIN window of the classic procedure. On wire 6 trafikey
    declares support (its verbs write plain effects, which stream to the target like any command).
    Moved away under a running worker, then back while the worker waits blocked on the new owner:
    every job exactly once, and the waiter follows the slot both ways."""
    name = names_on_every_node(cluster, per_node=1)[0]
    source = cluster.node_for(f"{{{name}}}")
    target = next(node for node in cluster.nodes if node is not source)
    slot = slot_of(name)
    with connect(cluster.url, wire=wire) as conn:
        queue = Queue(conn, name)
        ids = [job.id for job in queue.enqueue_many([{"n": n} for n in range(400)])]
        with Recording(conn, [name], concurrency=2) as run:
            wait_until(lambda: sum(run.done.values()) >= 50, 30, "a first fifty jobs done")
            migrate_slot_atomically(slot, source, target, cluster.nodes)
            try:
                assert sum(run.done.values()) < 400, "the slot moved after the run: raise the job count"
                wait_until(lambda: sum(run.done.values()) == 400, 60, "every job done")
                wait_until(lambda: blocked_on(target) == 1, 20, "the waiter blocked on the new node")
            finally:
                migrate_slot_atomically(slot, target, source, cluster.nodes)  # the shared cluster as it was
            back = queue.enqueue({"back": True})  # the blocked waiter was moved along: it claims this
            wait_until(lambda: run.done[back.id] == 1, 20, "a job enqueued after the move back")
            wait_until(lambda: blocked_on(source) == 1, 20, "the waiter blocked on the first node again")
        assert set(run.done) == set(ids) | {back.id} and set(run.done.values()) == {1}
        assert queue.metrics()["completed"] == 401 and queue.counts().total == 0
