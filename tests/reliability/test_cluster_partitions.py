"""One queue over many slots (issue 19 part 2) on a real local 3-primary cluster, both wires:
an 8-partition queue whose partitions sit on all three primaries, 3/3/2; 1,200 jobs enqueued round robin
and by key; one `emq worker` process drains them, each job exactly once, every key's jobs in
their enqueue order; `emq stats` sees one queue. Standalone nodes: tests/test_partitions.py."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

import echomq
from echomq import ConfigurationError, PartitionedQueue, connect
from echomq._protocol.keys import partition_of, slot_of

from support.cli import emq
from support.cluster import blocked_on, cluster_unchanged, slot_owner
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import WorkerProcess, processed

pytestmark = pytest.mark.timeout(180)


def test_eight_partitions_drained_by_one_worker(cluster, wire, tmp_path: Path):
    name = fresh_name("part")
    with connect(cluster.url, wire=wire) as conn:
        queue = PartitionedQueue(conn, name, partitions=8)
        owners = Counter(slot_owner(cluster.nodes[0], slot_of(q.name)) for q in queue.partitions)
        # placed over the slot space (docs/cluster.md "Sizing and placement"): as even as 8 on 3 allows
        assert set(owners) == {node.port for node in cluster.nodes} and sorted(owners.values()) == [2, 3, 3], owners

        spread = [e.id for e in queue.enqueue_many([{"n": n} for n in range(600)])]
        keys = [f"customer-{n % 20}" for n in range(600)]
        keyed = [e.id for e in queue.enqueue_many([{"n": n} for n in range(600)], keys=keys)]
        per_partition = queue.counts_by_partition()
        assert queue.counts().pending == 1200
        for i, q in enumerate(queue.partitions):  # round robin: 75 each, plus the keys that hash there
            by_key = sum(1 for key in keys if partition_of(key, 8) == i)
            assert per_partition[q.name].pending == 75 + by_key

    # one handler at a time: a partition is claimed in order, so every key's jobs run in enqueue order
    worker = WorkerProcess(cluster.nodes[1].url, wire, name, tmp_path, "-c", "1", "--burst",
                           env={"EMQ_TEST_PARTITIONS": "8"})
    assert worker.wait(150) == 0, worker.log()
    ran = [job_id for job_id, _, _ in processed(tmp_path)]
    assert Counter(ran) == Counter(spread + keyed)  # each exactly once, none missing
    position = {job_id: at for at, job_id in enumerate(ran)}
    for key in set(keys):
        mine = [job_id for job_id, k in zip(keyed, keys) if k == key]
        assert [position[j] for j in mine] == sorted(position[j] for j in mine), key

    (row,) = json.loads(emq("stats", "-q", name, "--url", cluster.nodes[2].url, "--json").stdout)
    assert row == {"queue": name, "partitions": 8, "pending": 0, "active": 0, "scheduled": 0, "dead": 0,
                   "paused": False, "completed_total": 1200, "dead_total": 0, "lane_pending": 0, "lane_active": 0,
                   "flow_waiting": 0, "flow_pending": 0, "flow_active": 0, "flow_scheduled": 0, "workers": 0}


def test_an_idle_worker_waits_on_every_partition_on_its_own_node(cluster, wire):
    """Wire 6: one EMQ.BCLAIM per partition; wire 4: one BZPOPMIN per slot (here each partition's
    slot is its own). A job in any partition wakes its waiter; the worker serves it and waits again."""
    name = fresh_name("part")
    seen: list[tuple[str, str]] = []
    app = echomq.App()
    app.handler(name, lambda payload, ctx: seen.append((ctx.queue, ctx.id)), partitions=8)
    with connect(cluster.url, wire=wire) as conn:
        worker = echomq.Worker(app, conn)  # declares the task's N
        queue = PartitionedQueue(conn, name)
        assert len(queue.partitions) == 8 and sorted(worker.queues) == sorted(q.name for q in queue.partitions)
        owners = Counter(cluster.node_for(f"{{{q.name}}}").port for q in queue.partitions)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        try:
            def waiting() -> bool:
                return all(blocked_on(node) == owners[node.port] for node in cluster.nodes)

            wait_until(waiting, what="a blocked waiter per partition, on its primary")
            added = [queue.enqueue({"n": n}).id for n in range(8)]  # round robin: one in each partition
            wait_until(lambda: len(seen) == 8, what="every job served")
            assert sorted(job_id for _, job_id in seen) == sorted(added) and {q for q, _ in seen} == {name}
            wait_until(waiting, what="blocked again")
        finally:
            worker.stop("test over")
            thread.join(10)


def test_changing_n_on_a_cluster_is_refused_with_nothing_written(cluster, wire):
    name = fresh_name("part")
    with connect(cluster.url, wire=wire) as conn:
        PartitionedQueue(conn, name, partitions=8).enqueue({}, key="k")
        for bad, match in ((4, r"has 8 partition\(s\) and 1 job\(s\)"), (0, "bad partitions")):
            with cluster_unchanged(cluster), pytest.raises(ConfigurationError, match=match):
                PartitionedQueue(conn, name, partitions=bad)
