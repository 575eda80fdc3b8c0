"""Partitioned queues on a standalone node, both wires (issue 19 part 2; the cluster run is in
tests/reliability/test_cluster_partitions.py): one queue over N sub-queues ``name~i``, built
client-side over the verbs, with N recorded in ``{emq}:partitions``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from echomq import ConfigurationError, PartitionedQueue, Queue, State, connect
from echomq._protocol.keys import (
    PARTITIONS_KEY, SLOTS, Keyspace, check_queue_name, layout_record, parent_queue, partition_layout, partition_of,
    recorded_layout, slot_of,
)
from echomq._client.partitioned import open_queue
from echomq.worker.tasks import App

from support.cli import emq
from support.dataset import unchanged
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past
from support.workers import WorkerProcess, processed


# -- the names (pure) ------------------------------------------------------------------
def test_partition_names_and_routing_are_stable():
    assert partition_layout("emails", 1) == ["emails"]  # one partition: today's layout exactly
    layout = partition_layout("emails", 8)
    assert [sub.split(".")[0] for sub in layout] == [f"emails~{i}" for i in range(8)]  # name~i.salt
    assert partition_layout("emails", 8) == layout  # deterministic
    assert recorded_layout("emails", layout_record("emails", layout)) == layout
    assert recorded_layout("emails", "3") == ["emails~0", "emails~1", "emails~2"]  # a record from before salts
    assert recorded_layout("emails", None) == ["emails"]
    for bad in ("1", "0", "x.1 y", "0.1 1.99999"):
        with pytest.raises(ConfigurationError, match="unreadable partitions record"):
            recorded_layout("emails", bad)
    assert Keyspace(layout[2]).pending == f"emq:{{{layout[2]}}}:pending"  # its own hashtag
    assert parent_queue(layout[2]) == parent_queue("emails~2") == parent_queue("emails") == "emails"
    assert partition_of("customer-42", 8) == partition_of("customer-42", 8) == 5  # CRC-32: every process agrees
    with pytest.raises(ConfigurationError):
        check_queue_name("emails~2")  # a user's queue name cannot be a partition's


def primaries_split(layout: list[str], primaries: int) -> list[int]:
    """How many partitions each of ``primaries`` holds when they own equal runs of slots (as
    ``valkey-cli --cluster create`` assigns them)."""
    split = [0] * primaries
    for sub in layout:
        split[slot_of(sub) * primaries // SLOTS] += 1
    return split


def test_partitions_spread_evenly_over_the_slots_for_any_name():
    """``name~i`` alone lands 8 partitions 2/2/4 on 3 primaries for most names (CRC16 is linear);
    the salted layout is as even as the counts allow, 3/3/2, for every name tried, and likewise
    for other N and primaries; each partition within a few slots of its target."""
    import random
    rng = random.Random(19)
    names = ["emails", "bench"] + ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789.:_-", k=rng.randint(1, 24)))
                                   for _ in range(100)]
    unsalted = Counter(tuple(sorted(primaries_split([f"{n}~{i}" for i in range(8)], 3))) for n in names)
    assert unsalted[(2, 2, 4)] > len(names) * 0.8
    worst = 0
    for name in names:
        for partitions, primaries in ((8, 3), (12, 5)):
            layout = partition_layout(name, partitions)
            split = primaries_split(layout, primaries)
            assert max(split) - min(split) <= 1, (name, partitions, primaries, split)
            targets = [(2 * i + 1) * SLOTS // (2 * partitions) for i in range(partitions)]
            worst = max(worst, *(abs(slot_of(sub) - t) for sub, t in zip(layout, targets)))
        assert sorted(primaries_split(partition_layout(name, 8), 3)) == [2, 3, 3]
    assert worst <= 64, worst  # 31 measured (docs/cluster.md)


# -- declaring N ------------------------------------------------------------------------
def test_declare_records_n_and_readers_agree(conn):
    name = fresh_name("p")
    queue = PartitionedQueue(conn, name, partitions=4)
    assert [q.name for q in queue.partitions] == partition_layout(name, 4)
    assert conn.client.hget(PARTITIONS_KEY, name).decode() == layout_record(name, partition_layout(name, 4))
    found = open_queue(conn, name)  # a reader without N: the record's
    assert isinstance(found, PartitionedQueue) and len(found.partitions) == 4
    assert isinstance(open_queue(conn, fresh_name("plain")), Queue)


@pytest.mark.parametrize("bad", [0, -1, 1025, True, "8", 2.0])
def test_bad_n_is_refused_and_nothing_written(conn, bad):
    with unchanged(conn.client):
        with pytest.raises(ConfigurationError, match="bad partitions"):
            PartitionedQueue(conn, fresh_name("p"), partitions=bad)
        with pytest.raises(ConfigurationError, match="bad partitions"):
            App().handler(fresh_name("p"), print, partitions=bad)


def test_changing_n_is_refused_while_jobs_remain(conn):
    name = fresh_name("p")
    PartitionedQueue(conn, name, partitions=4).enqueue({"n": 1})
    for other in (8, 2, 1):
        with unchanged(conn.client):
            with pytest.raises(ConfigurationError, match=r"has 4 partition\(s\) and 1 job\(s\)"):
                PartitionedQueue(conn, name, partitions=other)
    plain = fresh_name("p")
    Queue(conn, plain).enqueue({})  # an unpartitioned queue with a job cannot become partitioned
    with unchanged(conn.client):
        with pytest.raises(ConfigurationError, match=r"has 1 partition\(s\) and 1 job\(s\)"):
            PartitionedQueue(conn, plain, partitions=4)


def test_an_empty_queue_may_be_redeclared(conn):
    name = fresh_name("p")
    queue = PartitionedQueue(conn, name, partitions=4)
    queue.enqueue({})
    queue.complete(queue.claim(60_000))  # empty again: completed jobs leave no row
    assert len(PartitionedQueue(conn, name, partitions=8).partitions) == 8
    assert conn.client.hget(PARTITIONS_KEY, name).decode() == layout_record(name, partition_layout(name, 8))
    PartitionedQueue(conn, name, partitions=1)  # back to one: the record goes, today's layout
    assert conn.client.hget(PARTITIONS_KEY, name) is None


def test_a_record_from_before_salts_keeps_its_layout(conn):
    """A record written as a bare N names ``name~0`` .. ``name~N-1``: readers and a re-declaration of
    the same N keep that layout (its jobs stay reachable); a new N, once empty, gets the salted one."""
    name = fresh_name("p")
    conn.client.hset(PARTITIONS_KEY, name, 3)
    Queue(conn, f"{name}~1").enqueue({"old": True})
    for queue in (PartitionedQueue(conn, name), PartitionedQueue(conn, name, partitions=3), open_queue(conn, name)):
        assert [q.name for q in queue.partitions] == [f"{name}~{i}" for i in range(3)]
        assert queue.counts().pending == 1
    job = queue.claim(60_000)
    assert job.queue == f"{name}~1" and job.payload == {"old": True}
    queue.complete(job)
    assert [q.name for q in PartitionedQueue(conn, name, partitions=4).partitions] == partition_layout(name, 4)


# -- producing ---------------------------------------------------------------------------
def test_round_robin_by_key_and_by_id(conn):
    queue = PartitionedQueue(conn, fresh_name("p"), partitions=4)
    queue.enqueue_many([{"n": n} for n in range(16)])
    assert [c.pending for c in queue.counts_by_partition().values()] == [4, 4, 4, 4]
    keyed = queue.enqueue_many([{"k": n} for n in range(6)], keys=["alice"] * 6)
    home = queue.partitions[partition_of("alice", 4)]
    assert [job_id for job_id, _ in home.ids(State.PENDING)][-6:] == [e.id for e in keyed]  # one partition, in order
    first = queue.enqueue({"x": 1}, id="order-7")
    again = queue.enqueue({"x": 2}, id="order-7")  # an explicit id lands in its hashed partition: idempotent
    assert first.created and not again.created
    assert queue.partitions[partition_of("order-7", 4)].state("order-7") == State.PENDING
    assert queue.schedule({}, 60_000, key="alice").id in {j for j, _ in home.ids(State.SCHEDULED)}
    assert queue.counts().pending == 16 + 6 + 1 and queue.counts().scheduled == 1
    with pytest.raises(ConfigurationError, match="one key per payload"):
        queue.enqueue_many([{}, {}], keys=["a"])


def test_claims_take_turns_and_settles_route_by_job(conn):
    queue = PartitionedQueue(conn, fresh_name("p"), partitions=4)
    queue.enqueue_many([{"n": n} for n in range(8)])
    firsts = [queue.claim(60_000).queue for _ in range(4)]
    assert sorted(firsts) == sorted(q.name for q in queue.partitions)  # each partition in turn, none skipped
    jobs = queue.claim_many(10, 60_000)
    assert len(jobs) == 4 and queue.claim(60_000) is None
    assert queue.complete_many(jobs[:2]) == [True, True]
    queue.complete(jobs[2])
    assert queue.fail(jobs[3], "boom", max_attempts=1) == State.DEAD
    assert queue.counts().active == 4 and queue.counts().dead == 1
    assert queue.metrics() == {"completed": 3, "failed": 1}
    assert queue.reprocess(jobs[3].id) and queue.state(jobs[3].id) == State.PENDING
    assert queue.job(jobs[3].id)["payload"] == jobs[3].payload


def test_controls_over_every_partition(conn):
    queue = PartitionedQueue(conn, fresh_name("p"), partitions=3)
    added = queue.enqueue_many([{"n": n} for n in range(9)])
    assert [job_id for job_id, _ in queue.ids(State.PENDING)] == [e.id for e in added]  # merged: oldest id first
    assert [job_id for job_id, _ in queue.ids(State.PENDING, offset=4, count=3)] == [e.id for e in added[4:7]]
    queue.pause()
    assert queue.counts().paused and all(c.paused for c in queue.counts_by_partition().values())
    assert queue.claim_many(5, 60_000) == []
    queue.resume()
    assert not queue.counts().paused
    held = queue.claim(60_000)
    assert queue.cancel(held.id) and queue.state(held.id) == State.DEAD
    assert queue.ids(State.DEAD) and queue.ids(State.DEAD)[0][0] == held.id
    assert queue.remove(added[-1].id) == State.PENDING and queue.remove(added[-1].id) is None
    assert queue.cancel("no-such-job") is False and queue.state("no-such-job") is None
    assert queue.drain(limit=4) == 4 and queue.drain(limit=100) == 3  # at most limit per call, over partitions
    assert queue.purge(limit=10) == 1 and queue.counts().total == 0


def test_a_sweep_recovers_every_partitions_expired_leases(conn):
    queue = PartitionedQueue(conn, fresh_name("p"), partitions=3)
    queue.enqueue_many([{"n": n} for n in range(3)])
    held = queue.claim_many(3, 1)
    assert sorted(job.queue for job in held) == [q.name for q in queue.partitions]
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    swept = queue.stalled_check(max_stalled=5, limit=2)  # at most limit in all
    assert len(swept.recovered) == 2 and queue.stalled_check(max_stalled=5).recovered != []
    assert queue.counts().pending == 3 and queue.counts().active == 0


# -- the worker and the commands ---------------------------------------------------------
def test_worker_and_commands_see_one_queue(server, wire, tmp_path: Path):
    name = fresh_name("p")
    with connect(server.url, wire=wire) as conn:
        queue = PartitionedQueue(conn, name, partitions=4)
        ids = {e.id for e in queue.enqueue_many([{"n": n} for n in range(200)])}
        doomed = queue.enqueue({"fail": 9}, key="doomed").id
    worker = WorkerProcess(server.url, wire, name, tmp_path, "-c", "4", "--burst",
                           env={"EMQ_TEST_PARTITIONS": "4", "EMQ_TEST_MAX_ATTEMPTS": "1"})
    assert worker.wait(60) == 0, worker.log()
    done = Counter(job_id for job_id, _, _ in processed(tmp_path))
    assert set(done) == ids and set(done.values()) == {1}  # each once; the doomed one died

    (row,) = json.loads(emq("stats", "-q", name, "--url", server.url, "--json").stdout)
    assert row == {"queue": name, "partitions": 4, "pending": 0, "active": 0, "scheduled": 0, "dead": 1,
                   "paused": False, "completed_total": 200, "dead_total": 1, "lane_pending": 0, "lane_active": 0,
                   "flow_waiting": 0, "flow_pending": 0, "flow_active": 0, "flow_scheduled": 0, "workers": 0}
    shown = emq("stats", "--url", server.url, "--partitions")
    assert f"{name} (4 partitions)" in shown.stdout and f"{name}~3" in shown.stdout
    dead = json.loads(emq("dead", "-q", name, "--url", server.url, "--json").stdout)
    assert dead["total"] == 1 and [(job["id"], job["queue"]) for job in dead["jobs"]] == [
        (doomed, PartitionedQueue(conn, name).partitions[partition_of('doomed', 4)].name)]
    assert json.loads(emq("inspect", doomed, "-q", name, "--url", server.url, "--json").stdout)["state"] == "dead"
    assert emq("pause", "-q", name, "--url", server.url).exit_code == 0
    assert json.loads(emq("stats", "-q", name, "--url", server.url, "--json").stdout)[0]["paused"]
    assert emq("resume", "-q", name, "--url", server.url).exit_code == 0
    assert emq("reprocess", "--all", "-q", name, "--url", server.url).exit_code == 0
    (row,) = json.loads(emq("stats", "-q", name, "--url", server.url, "--json").stdout)
    assert (row["pending"], row["dead"], row["paused"]) == (1, 0, False)

    keyed = emq("enqueue", "-q", name, "--key", "alice", "--count", "3", "--url", server.url, "--json")
    assert keyed.exit_code == 0, keyed.output
    with connect(server.url, wire=wire) as conn:
        home = PartitionedQueue(conn, name).partitions[partition_of("alice", 4)]
        assert [job_id for job_id, _ in home.ids(State.PENDING)][-3:] == [j["id"] for j in json.loads(keyed.stdout)]
        plain = Queue(conn, fresh_name("plain"))
        plain.enqueue({})
        with unchanged(conn.client):
            refused = emq("enqueue", "-q", plain.name, "--key", "alice", "--url", server.url)
            assert refused.exit_code == 1 and "is not partitioned" in refused.stderr
            grouped = emq("enqueue", "-q", name, "--group", "t", "--url", server.url)
            assert grouped.exit_code == 1 and "lanes are one queue's" in grouped.stderr


def test_testing_drain_runs_a_partitioned_task_in_process(conn):
    from echomq.testing import drain

    name, seen = fresh_name("p"), []
    app = App()
    task = app.handler(name, lambda payload, ctx: seen.append((ctx.queue, payload["n"])), partitions=3)
    queue = task.on(conn)
    assert isinstance(queue, PartitionedQueue) and len(queue.partitions) == 3
    queue.enqueue_many([{"n": n} for n in range(30)])
    assert drain(app, queue).completed == 30
    assert sorted(n for _, n in seen) == list(range(30)) and {q for q, _ in seen} == {name}
    assert queue.counts().total == 0


# -- asyncio ----------------------------------------------------------------------------
def test_the_aio_twin_agrees_with_the_sync_queue(server, wire, conn):
    import asyncio

    from echomq import aio

    name = fresh_name("p")

    async def main_() -> tuple:
        connection = await aio.connect(server.url, wire=wire)
        try:
            with pytest.raises(ConfigurationError, match="bad partitions"):
                await aio.PartitionedQueue.open(connection, name, partitions=0)
            queue = await aio.PartitionedQueue.open(connection, name, partitions=4)
            added = await queue.enqueue_many([{"n": n} for n in range(8)])
            keyed = await queue.enqueue({"k": 1}, key="alice")
            job = await queue.claim(60_000)
            assert job is not None
            await queue.complete(job)
            found = await queue.state(keyed.id)
            later = await aio.PartitionedQueue.open(connection, name)  # the recorded N
            return added, job, found, len(later.partitions), await queue.counts()
        finally:
            await connection.aclose()

    added, job, found, n, counts = asyncio.run(main_())
    sync = PartitionedQueue(conn, name)
    assert n == 4 and found == State.PENDING and job.queue.startswith(name + "~")
    assert counts == sync.counts() and counts.pending == 8 and sync.metrics()["completed"] == 1
    homes = Counter(sync.find(e.id).name for e in added if e.id != job.id)
    assert sorted(homes.values()) in ([1, 2, 2, 2], [2, 2, 2, 2]) and job.queue in homes  # round robin: 2 each
