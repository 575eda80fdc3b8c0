"""Completed records 0.2.0 kept (a key ``done:<id>`` each, fixtures/v0.2.0) are read after the
upgrade to the release that keeps them as fields of the queue's hash ``done`` (issue 44 item 2),
on both wires: ``result()``, ``status()`` and ``emq inspect`` read each until it expires, a job
completed again under the same id reads its newer record, and a queue switched to ``record`` keeps
writing what a 0.2.0 process reads during a rolling upgrade."""

from __future__ import annotations

import pytest
import valkey

from echomq import RAW, JobNotFound, Queue, Status, connect
from echomq.admin.inventory import record_view
from support.upgrade import dataset, facts, loaded, recorded
from support.waiting import wait_until

NAME = "v0.2.0"


@pytest.fixture(params=[4, 6], ids=["wire4", "wire6"])
def old(request, tmp_path):
    with loaded(NAME, request.param, tmp_path) as server:
        with connect(server.url, wire=request.param) as conn:
            yield conn, {"orders": Queue(conn, "orders"), "blobs": Queue(conn, "blobs", serializer=RAW)}


def expected(queue: str, fact: dict) -> object:
    return bytes.fromhex(fact["result"]) if queue == "blobs" else fact["result"]


def test_every_key_is_as_0_2_0_left_it(old):
    conn, _ = old
    keys = dataset(valkey.Valkey(connection_pool=conn.client.connection_pool))
    keys.pop("{emq}:version")  # the brand this node was given for its wire
    assert keys == recorded(NAME)


def test_each_record_0_2_0_kept_is_read(old):
    _, queues = old
    for name, records in facts(NAME)["records"].items():
        for job_id, fact in records.items():
            queue = queues[name]
            assert queue.status(job_id) is Status.COMPLETED
            assert queue.result(job_id, timeout=0) == expected(name, fact)
            shown = record_view(queue, job_id)
            assert shown.fields["finished"] == str(fact["finished"]) and shown.kept_ms > 0


def test_a_record_from_0_2_0_is_read_until_it_expires(old):
    """Its retention ends (here moved to now: the fixture's run ten years): then it is unknown,
    and the records beside it are still read."""
    conn, queues = old
    orders = queues["orders"]
    conn.client.pexpire(orders.keys.done("order-1"), 1)
    wait_until(lambda: orders.status("order-1") is Status.UNKNOWN, 10, "order-1's record to expire")
    with pytest.raises(JobNotFound):
        orders.result("order-1", timeout=0)
    assert record_view(orders, "order-1") is None and orders.result("order-2", timeout=0) == ["shipped", 2]


def test_a_job_completed_again_under_its_id_reads_its_newer_record(old):
    """The id is admitted again and completed by this release: whichever layout that record takes,
    it is the newer, and it is what every reader reads."""
    _, queues = old
    orders = queues["orders"]
    orders.enqueue({"again": True}, id="order-2")
    orders.publish(orders.claim(60_000), {"second": True}, retention_ms=60_000)
    assert orders.result("order-2", timeout=0) == {"second": True}
    assert record_view(orders, "order-2").payload == b'{"second":true}'


def test_a_queue_switched_to_record_keeps_what_0_2_0_reads(old):
    """During a rolling upgrade from 0.2.0 (a process that reads only done:<id>), the operator keeps
    the queue on record: this release's completions write done:<id>, as 0.2.0 did."""
    conn, queues = old
    orders = queues["orders"]
    orders.set_result_layout("record")
    job = orders.enqueue({"during": "the upgrade"})
    orders.publish(orders.claim(60_000), "kept for 0.2.0", retention_ms=60_000)
    as_0_2_0_reads = conn.client.hgetall(orders.keys.done(job.id))
    assert as_0_2_0_reads[b"result"] == b'"kept for 0.2.0"' and not conn.client.hexists(orders.keys.done_hash, job.id)
