"""Valkey Cluster: a real three-primary cluster on loopback (echomq.local.cluster.LocalCluster), both wires.

* queues spread over the slots of every primary; one queue's keys on one node;
* pipelines (enqueue_many, claim_many, complete_many, settle_many) split by node;
* a call that mixes two queues is refused CROSSSLOT by the node, nothing written;
  two queues that happen to share a slot pass CROSSSLOT and wire 6 refuses them
  EMQLAYOUT;
* the worker's own tests (tests/test_worker.py) run again on a cluster connection;
* an idle worker waits on every node that holds its queues (one blocked connection each);
* the chaos run on the cluster: nodes crashed and restarted from their AOF.
"""

from __future__ import annotations

import itertools
import json
import threading

import pytest
from valkey.crc import key_slot

import echomq
from echomq import Queue, connect, errors
from echomq._client.connection import build_call
from echomq._protocol.keys import Keyspace, slot_of

from chaos import Config, run
from support.cluster import blocked_on, cluster_unchanged, conn, names_on_every_node  # noqa: F401 (fixture: conn)
from support.waiting import wait_until

# The worker's tests, collected again here where ``conn`` is a cluster connection.
from test_worker import (  # noqa: F401
    test_a_busy_queue_does_not_starve_another,
    test_a_lease_found_lost_at_renewal_tells_the_handler_and_is_never_settled,
    test_a_paused_queue_is_not_claimed_until_resumed,
    test_a_stale_settle_is_refused_and_the_job_is_settled_once,
    test_dead_after_max_attempts,
    test_every_job_is_processed_exactly_once,
    test_retry_then_success,
    test_retry_with_its_own_delay_then_a_plain_delay,
    test_stop_releases_what_is_still_held_by_requeue_on_both_wires,
    test_timers_promote_and_sweep_and_say_what_they_moved,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.cluster]  # every test on a cluster, the chaos run's its own
_n = itertools.count()


def test_queues_spread_over_every_primary(cluster, conn):
    names = names_on_every_node(cluster)
    for name in names:
        q = Queue(conn, name)
        q.enqueue_many([{"n": n} for n in range(5)])
        job = q.claim(10_000)
        q.complete(job)
        assert q.counts().pending == 4 and q.metrics()["completed"] == 1
    for name in names:
        holders = []
        for node in cluster.nodes:
            with node.client() as client:
                holders.append(sum(1 for _ in client.scan_iter(match=Keyspace(name).pattern())))
        assert sorted(holders)[:2] == [0, 0] and max(holders) > 0, (name, holders)  # one node holds the queue
    assert all(node_keys for node_keys in (
        [k for k in node.client().scan_iter(match="emq:*")] for node in cluster.nodes))


def test_pipelines_on_the_cluster(cluster, conn):
    queues = [Queue(conn, name) for name in names_on_every_node(cluster, 1)]
    for q in queues:
        assert all(e.created for e in q.enqueue_many([{"n": n} for n in range(20)]))
        jobs = q.claim_many(10, 30_000)
        assert len(jobs) == 10
        assert q.complete_many(jobs[:5]) == [True] * 5
        calls = [q.fail_call(job, "x", max_attempts=1) for job in jobs[5:]]
        assert [str(r, "ascii") if isinstance(r, bytes) else r for r in q.settle_many(calls)] == ["dead"] * 5
        assert q.counts().pending == 10 and q.counts().dead == 5


def test_a_call_mixing_two_queues_is_refused_crossslot(cluster, conn, wire):
    a, b = names_on_every_node(cluster, 1)[:2]
    Queue(conn, a).enqueue({"n": 1}, id="j")
    ka, kb = Keyspace(a), Keyspace(b)
    mixed = build_call("claim", ka, [1000])
    mixed = type(mixed)(mixed.verb, (ka.pending, kb.active, ka.base), mixed.argv)
    with cluster_unchanged(cluster), pytest.raises(errors.CommandRefused) as info:
        conn.send(mixed)
    assert info.value.code == "CROSSSLOT"


def test_two_queues_in_one_slot_pass_crossslot_and_wire_6_refuses_the_layout(cluster, conn, wire):
    if wire == 4:
        pytest.skip("the layout check is native (SPEC §5.2); a script trusts its keys")
    first = Keyspace(f"slot-{next(_n)}")
    second = next(Keyspace(f"slot-{i}") for i in itertools.count(10**6) if slot_of(f"slot-{i}") == slot_of(first.queue))
    Queue(conn, first.queue).enqueue({"n": 1}, id="j")
    call = build_call("enqueue", first, ["k", b"{}", 0])
    call = type(call)(call.verb, (first.pending, second.base), call.argv)
    with cluster_unchanged(cluster), pytest.raises(errors.LayoutError):
        conn.send(call)


def test_chaos_on_the_cluster(wire, tmp_path):
    report = run(Config(wire=wire, jobs=1000, cluster=True, queues=6, restarts=2, power_cuts=0, seed=51 + wire),
                 str(tmp_path))
    print(json.dumps({k: v for k, v in report.__dict__.items() if k != "config"}, sort_keys=True))
    assert report.violations == []
    assert report.lost == report.in_two_sets == report.row_set_mismatch == 0
    assert report.completed + sum(report.dead.values()) == 1000
    assert report.restarts == 2
    if wire == 6:
        assert report.crossed_restart_counted == 0


def test_connecting_checks_every_primary_and_loads_scripts_on_each(cluster, wire):
    with connect(cluster.url, wire=wire, cluster=True) as connection:
        for node in cluster.nodes:
            with node.client() as client:
                loaded = client.script_exists(*(s.sha for s in connection.scripts.values()))
                assert all(loaded), f"scripts missing on node {node.port}"
                if wire == 6:
                    stats = client.info("commandstats")
                    assert stats.get("cmdstat_EMQ.VERSION", {}).get("calls", 0) >= 1, node.port


def test_connecting_to_no_cluster_is_connection_failed():
    from echomq.local.server import free_port

    with pytest.raises(errors.ConnectionFailed):
        connect(f"redis://127.0.0.1:{free_port()}", wire=4, cluster=True)


def test_an_idle_worker_blocks_on_every_node_and_picks_up_from_each(cluster, conn, wire):
    """A BZPOPMIN's keys must share a slot, so on a cluster the worker waits per queue (wire 4 as
    wire 6): one blocked connection on each node here, one queue per node."""
    names, seen = names_on_every_node(cluster, per_node=1), []
    app = echomq.App()
    for name in names:
        app.handler(name, lambda payload, ctx: seen.append(ctx.queue))
    worker = echomq.Worker(app, conn)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        def blocked_per_node() -> list[int]:
            return [blocked_on(node) for node in cluster.nodes]

        wait_until(lambda: blocked_per_node() == [1, 1, 1], what="one blocked waiter on each node")
        for name in names:
            Queue(conn, name).enqueue({})
        wait_until(lambda: sorted(seen) == sorted(names), what="a job run from every node")
        wait_until(lambda: blocked_per_node() == [1, 1, 1], what="blocked again on each node")
    finally:
        worker.stop("test over")
        thread.join(10)
    assert not thread.is_alive()


def test_the_workers_list_and_the_dashboards_metrics_on_a_cluster(conn, cluster):
    """The worker records share the {emq} slot (one node); the dashboard finds queues on every node."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from echomq.dashboard import Settings, serving
    from echomq._core.workers import record_key
    from echomq.admin.workers import list_workers
    from echomq.worker.heartbeat import Heartbeat

    names = names_on_every_node(cluster, per_node=1)
    for n, name in enumerate(names):
        Queue(conn, name).enqueue_many([{}] * (n + 1))
    beat = Heartbeat(conn.client, queues=names, concurrency=2, wire=conn.wire)
    beat.beat(held=0, completed=0, failed=0)
    try:
        assert beat.id in {r.id for r in list_workers(conn)}
        assert key_slot(record_key(beat.id).encode()) == key_slot(b"{emq}:workers")
        with serving(conn, Settings()) as url:
            text = httpx.get(url + "/metrics").text
            for name in names:  # a job list and a job page read rows on the queue's own node
                listed = httpx.get(f"{url}/queues/{name}")
                assert listed.status_code == 200 and listed.text.count("/job?id=") == names.index(name) + 1
                (first, _), *_ = Queue(conn, name).ids("pending")
                assert httpx.get(f"{url}/queues/{name}/job", params={"id": first}).status_code == 200
        pending = {s.labels["queue"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "echomq_jobs" and s.labels["state"] == "pending"}
        assert {name: pending.get(name) for name in names} == {name: n + 1 for n, name in enumerate(names)}
    finally:
        beat.remove()
    assert beat.id not in {r.id for r in list_workers(conn)}


def test_results_status_and_events_on_every_primary(cluster, conn):
    """The bus on a cluster: the record, the event stream and the outcome channel (SSUBSCRIBE, the
    queue's slot) live with the queue, whichever primary serves it."""
    import threading

    from echomq import Status

    for name in names_on_every_node(cluster, 1):
        q = Queue(conn, name)
        q.enable_events()
        job = q.enqueue({"n": 1})
        held = q.claim(30_000)
        got = {}
        waiter = threading.Thread(target=lambda: got.update(value=q.result(job.id, timeout=20)))
        waiter.start()
        q.progress(held, 50)
        q.publish(held, {"ok": name}, retention_ms=60_000)
        waiter.join(20)
        assert got == {"value": {"ok": name}} and q.status(job.id) is Status.COMPLETED
        assert [e.type for e in q.events()] == ["enqueued", "claimed", "progress", "completed"]


def test_an_async_result_waiter_is_woken_on_every_primary(cluster, conn):
    """echomq.aio's result(): SSUBSCRIBE on a socket to the node that serves the channel's slot
    (valkey.asyncio's cluster client has no pub/sub), woken by a PUBLISH from another client."""
    import asyncio

    from echomq import aio

    async def main() -> None:
        aconn = aio.Connection.sharing(conn)
        try:
            for name in names_on_every_node(cluster, 1):
                q, aq = Queue(conn, name), aio.Queue(aconn, name)
                job = await aq.enqueue({"n": 1})
                held = await aq.claim(30_000)
                channel = q.keys.outcome(job.id)
                node = conn.client.get_node_from_key(channel).valkey_connection
                waiter = asyncio.create_task(aq.result(job.id, timeout=20))
                while not waiter.done() and node.execute_command("PUBSUB", "SHARDNUMSUB", channel)[1] != 1:
                    await asyncio.wait({waiter}, timeout=0.005)  # until the waiter has subscribed
                q.publish(held, {"ok": name}, retention_ms=60_000)
                assert await asyncio.wait_for(waiter, 20) == {"ok": name}
        finally:
            await aconn.aclose()

    asyncio.run(main())
