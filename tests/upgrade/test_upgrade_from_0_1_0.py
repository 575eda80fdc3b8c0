"""Data written by the first release, 0.1.0, served by this one (issue 40 item 4): a data directory
each wire's node kept under 0.1.0 (fixtures/v0.1.0: UUIDv7 ids, rows without timestamps, dead
scores of 0, no completed records; on wire 6 leases stamped by 0.1.0's trafikey), loaded by this
release's server -- stop, new version, same data directory, start. On wire 6 that is a trafikey
upgrade: the module is this release's, the data the old one's."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

import pytest
import valkey
from click.testing import CliRunner

from echomq import JSON, RAW, App, Job, LeaseLost, Queue, Status, connect
from echomq.cli import main
from echomq.testing import drain
from support.upgrade import dataset, facts, loaded, recorded

TIMES = ("created", "started", "failed")


@pytest.fixture(params=[4, 6], ids=["wire4", "wire6"])
def old(request, tmp_path):
    """(this release's node on 0.1.0's data for the wire, the facts of that data)."""
    name = f"v0.1.0/wire{request.param}"
    with loaded(name, request.param, tmp_path) as server:
        yield server, facts(name)


#: how each queue's payloads were written (blobs: bytes as given)
SERIALIZERS = {"orders": JSON, "blobs": RAW, "held": JSON}


def queues(server, fact):
    conn = connect(server.url, wire=fact["wire"])
    return {name: Queue(conn, name, serializer=SERIALIZERS[name]) for name in fact["queues"]}


def test_every_key_is_as_0_1_0_left_it(old):
    server, fact = old
    assert dataset(valkey.Valkey.from_url(server.url)) == recorded(f"v0.1.0/wire{fact['wire']}")


def test_each_job_is_where_0_1_0_left_it(old):
    server, fact = old
    found = queues(server, fact)
    for name, held in fact["queues"].items():
        queue = found[name]
        counts = queue.counts()
        assert (counts.pending, counts.active, counts.scheduled, counts.dead) == tuple(
            len(held.get(state, [])) for state in ("pending", "active", "scheduled", "dead")), name
        assert counts.paused is held.get("paused", False)
        for state in ("pending", "active", "scheduled", "dead"):
            for job_id in held.get(state, []):
                assert queue.status(job_id) is Status(state)
                row = queue.job(job_id)
                assert row is not None and not set(TIMES) & set(row)  # 0.1.0 kept no times
        for job_id in held.get("completed", []):  # 0.1.0 kept no record of a completed job
            assert queue.status(job_id) is Status.UNKNOWN
    metrics = found["orders"].metrics()
    assert (metrics["completed"], metrics["failed"]) == (3, 2)


def test_the_operators_commands_read_0_1_0_rows(old):
    server, fact = old
    dead = fact["queues"]["orders"]["dead"]
    listed = CliRunner().invoke(main, ["dead", "--url", server.url, "-q", "orders", "--json"])
    assert listed.exit_code == 0, listed.output
    shown = json.loads(listed.output)["jobs"]
    assert [job["id"] for job in shown] == sorted(dead)  # score 0: the oldest, by id
    assert {job["last_error"] for job in shown} == {"ValueError: poison"}
    inspected = CliRunner().invoke(main, ["inspect", fact["held_lease"]["id"], "--url", server.url, "-q", "orders"])
    assert inspected.exit_code == 0 and "active" in inspected.output, inspected.output
    stats = CliRunner().invoke(main, ["stats", "--url", server.url, "--json"])
    assert stats.exit_code == 0 and {row["queue"] for row in json.loads(stats.output)} == {"orders", "blobs", "held"}


def test_dead_scores_of_0_read_as_the_oldest_deaths(old):
    server, fact = old
    orders = queues(server, fact)["orders"]
    assert orders.purge(older_than_ms=3_600_000) == 2  # died "at 0": older than any hour
    assert orders.counts().dead == 0


def test_the_lease_a_worker_held_across_the_upgrade_still_holds(old):
    server, fact = old
    orders = queues(server, fact)["orders"]
    held = fact["held_lease"]
    job = Job("orders", held["id"], None, None, int(held["token"]))
    assert orders.extend(job, 60_000) > 0  # the holder's token, kept in the row, still fences
    with pytest.raises(LeaseLost):  # and only it
        orders.extend(Job("orders", held["id"], None, None, int(held["token"]) + 1), 60_000)
    orders.publish(job, "done", retention_ms=60_000)
    assert orders.status(held["id"]) is Status.COMPLETED and orders.result(held["id"], timeout=5) == "done"


def test_a_lease_that_ran_out_before_the_upgrade_is_recovered(old):
    server, fact = old
    orders = queues(server, fact)["orders"]
    expired = fact["expired_lease"]["id"]
    sweep = orders.stalled_check(max_stalled=3)
    if fact["wire"] == 6:  # stamped by 0.1.0's server run: a restart's, not the worker's stall
        assert (sweep.recovered, sweep.exempt, sweep.dead) == ([], [expired], [])
        assert "stalled" not in orders.job(expired)
    else:  # the scripts have no restart exemption (SPEC §5): a counted stall, within the budget
        assert (sweep.recovered, sweep.exempt, sweep.dead) == ([expired], [], [])
    assert orders.status(expired) is Status.PENDING


def test_new_jobs_queue_behind_the_ones_0_1_0_left(old):
    """Default ids changed from UUIDv7 text to 16 characters of 0-9A-Za-z; both start with the
    minting time, and the old ones sort first, so equal priorities stay first in, first out."""
    server, fact = old
    orders = queues(server, fact)["orders"]
    new = orders.enqueue({"n": "new"}).id
    served = [job_id for job_id, score in orders.ids("pending") if score == 0]  # ZPOPMIN's order
    old_ids = [job_id for job_id in served if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}",
                                                          job_id)]
    assert len(old_ids) == 3 and served.index(new) > max(map(served.index, old_ids))


def test_this_release_runs_every_job_0_1_0_left(old):
    server, fact = old
    found = queues(server, fact)
    ran: Counter[str] = Counter()
    payloads: dict[str, object] = {}
    lock = threading.Lock()

    def record(payload, ctx):
        with lock:
            ran[ctx.id] += 1
            payloads[ctx.id] = payload.hex() if isinstance(payload, bytes) else payload
        if isinstance(payload, dict) and payload.get("poison"):
            return "cured"  # a dead job sent back runs like any other

    app = App("upgraded")
    for name in found:
        app.handler(name, record, serializer=SERIALIZERS[name])
    orders = found["orders"]
    held = fact["held_lease"]
    orders.complete(Job("orders", held["id"], None, None, int(held["token"])))  # its holder finishes it
    for job_id in fact["queues"]["orders"]["dead"]:
        assert orders.reprocess(job_id)
    assert orders.reschedule(fact["scheduled_later"]["id"], 0)
    found["held"].resume()
    for queue in found.values():
        drain(app, queue, timeout_s=60)

    kept = fact["queues"]["orders"]
    expected = {job_id: payload for job_id, payload in fact["payloads"].items()
                if job_id not in kept["completed"] and job_id != held["id"]}
    assert payloads == expected
    assert set(ran.values()) == {1}
    for queue in found.values():
        counts = queue.counts()
        assert (counts.pending, counts.active, counts.scheduled, counts.dead) == (0, 0, 0, 0)
    left = {job_id for state in ("pending", "active", "scheduled", "dead") for job_id in kept[state]}
    assert orders.metrics()["completed"] == kept["completed_total"] + len(left)  # the held one's too
