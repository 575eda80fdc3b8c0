"""Flows on a real three-primary cluster, both wires: a flow whose queues cross slots is refused
client-side with what to do and nothing written; one whose queues share a slot (named with
echomq._core.flows.same_slot_name) runs, its parent after its children, on the node that holds the slot."""

from __future__ import annotations

import itertools

import pytest

from echomq import CrossSlotFlow, Flow, Queue
from echomq._core.flows import same_slot_name, slot_of
from echomq._protocol.serializers import JSON
from support.cluster import cluster_unchanged, conn  # noqa: F401 (fixture: conn)

pytestmark = pytest.mark.timeout(180)
_n = itertools.count()


def test_a_flow_across_slots_is_refused_and_one_slot_runs(cluster, conn):
    root = f"orders-{next(_n)}"
    other = f"invoices-{next(_n)}"
    assert slot_of(root) != slot_of(other)
    with cluster_unchanged(cluster), pytest.raises(CrossSlotFlow, match="same_slot_name"):
        Queue(conn, root).enqueue_flow("p", children=[Flow(other, "c")])

    sibling = same_slot_name(other, root)
    qr, qs = Queue(conn, root), Queue(conn, sibling)
    assert qr.enqueue_flow("p", children=[Flow(sibling, "a", id="a"), Flow(root, "b", id="b")], id="root").created
    for q in (qs, qr):
        for job in q.flow_claim(10, 60_000):
            q.settle_many([q.flow_complete_call(job, JSON.dumps(job.payload), retention_ms=0)])
    (parent,) = qr.flow_claim(10, 60_000)
    assert parent.id == "root" and qr.children("root").results == {"a": "a", "b": "b"}
