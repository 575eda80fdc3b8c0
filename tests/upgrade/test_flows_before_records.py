"""Flows under way when their release had no ``flow:children:<id>`` record finish after the
upgrade, and the cross-queue hole issue 43 closed stays closed (issue 40 item 4), on both wires.

The fixture (fixtures/v0.1.0+8fc76d0) is main before issue 43: one flow in a single queue (a child
done and told, one held under a live lease, one waiting), one whose children sit in another queue
(one waiting, one whose lease ran out), and one nested across the two queues. A link to a parent
without a record counts in the child's own queue; across queues only once ``emq adopt-flows``
has written the record the children prove."""

from __future__ import annotations

import threading

import pytest
import valkey
from click.testing import CliRunner

from echomq import App, Queue, StateError, Worker, WorkerConfig, connect
from echomq.admin.flows import FLOW_ADOPT, FlowRow, plan_adoptions
from echomq.cli import main
from echomq._protocol.keys import Keyspace
from echomq._protocol.serializers import JSON
from echomq._protocol.verbs import Call
from support.dataset import unchanged
from support.upgrade import facts, loaded
from support.waiting import wait_until
from test_worker import running

NAME = "v0.1.0+8fc76d0"
T = "1796454922264"  # an admission time


@pytest.fixture(params=[4, 6], ids=["wire4", "wire6"])
def old(request, tmp_path):
    with loaded(NAME, request.param, tmp_path) as server:
        with connect(server.url, wire=request.param) as conn:
            yield server, conn


class Runs:
    """What the handlers ran: each job's payload, and a parent's children's results."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.parents: dict[str, dict] = {}
        self.leaves: list[str] = []

    def app(self, *queues: str) -> App:
        app = App("upgraded")
        for queue in queues:
            app.handler(queue, self.run)
        return app

    def run(self, payload, ctx):
        with self.lock:
            if "flow" in payload or "m" in payload:
                self.parents[ctx.id] = ctx.children_results()
            else:
                self.leaves.append(ctx.id)
        return f"{ctx.id} ran"


def finish_the_held_child(conn) -> None:
    """The worker that held ``same-1`` across the upgrade completes it with its token."""
    held = facts(NAME)["held_lease"]
    reports = Queue(conn, held["queue"])
    reports.settle_many([reports.flow_complete_call(held["id"], JSON.dumps("same-1 held"), retention_ms=0,
                                                    token=held["token"])])


def fast() -> WorkerConfig:
    return WorkerConfig(flow_poll_max_ms=50)


def test_a_flow_in_one_queue_finishes_without_adoption(old):
    server, conn = old
    finish_the_held_child(conn)
    runs = Runs()
    with running(Worker(runs.app("reports"), conn, config=fast())):
        wait_until(lambda: "same" in runs.parents, timeout=20, what="the parent of the one-queue flow")
    assert runs.parents["same"] == {"same-0": "same-0 done", "same-1": "same-1 held", "same-2": "same-2 ran"}
    client = valkey.Valkey.from_url(server.url)
    assert client.zrange("emq:{reports}:flow:waiting", 0, -1) == [b"cross", b"nested"]  # across queues: waiting


def test_across_queues_a_link_without_a_record_tells_nobody(old):
    """The children in `pages` finish; their parents in `reports` are not told (a row's `parent` is
    its own queue's data: followed across queues only through a record). In `pages`, the middle
    parent hears its leaves: its own queue."""
    server, conn = old
    runs = Runs()
    with running(Worker(runs.app("pages"), conn, config=fast())):
        wait_until(lambda: "nested-mid" in runs.parents and len(runs.leaves) == 4, timeout=20,
                   what="every job of pages (cross-0 recovered by the reaper)")
    assert sorted(runs.leaves) == ["cross-0", "cross-1", "nested-leaf-0", "nested-leaf-1"]
    assert runs.parents["nested-mid"] == {"nested-leaf-0": "nested-leaf-0 ran", "nested-leaf-1": "nested-leaf-1 ran"}
    client = valkey.Valkey.from_url(server.url)
    assert client.hmget("emq:{reports}:job:cross", "state", "children") == [b"waiting", b"2"]
    assert client.hmget("emq:{reports}:job:nested", "state", "children") == [b"waiting", b"1"]
    assert client.hgetall("emq:{reports}:flow:results:cross") == {}


def test_adoption_lets_every_flow_finish(old):
    server, conn = old
    client = valkey.Valkey.from_url(server.url)
    with unchanged(client):
        dry = CliRunner().invoke(main, ["adopt-flows", "--url", server.url, "--dry-run"])
    adopted = ["emq:{pages}:job:nested-mid: 2 children (pages)", "emq:{reports}:job:cross: 2 children (pages)",
               "emq:{reports}:job:nested: 1 children (pages)", "emq:{reports}:job:same: 2 children (reports)"]
    assert dry.exit_code == 0 and dry.output.splitlines() == [f"would adopt {line}" for line in adopted], dry.output
    done = CliRunner().invoke(main, ["adopt-flows", "--url", server.url])
    assert done.exit_code == 0 and done.output.splitlines() == [f"adopted {line}" for line in adopted], done.output
    assert sorted(client.smembers("emq:{reports}:flow:children:cross")) == [b"emq:{pages}:job:cross-0",
                                                                            b"emq:{pages}:job:cross-1"]
    again = CliRunner().invoke(main, ["adopt-flows", "--url", server.url])
    assert again.exit_code == 0 and again.output == "no flow parent without its record: nothing to adopt\n"

    finish_the_held_child(conn)
    runs = Runs()
    with running(Worker(runs.app("reports", "pages"), conn, config=fast())):
        wait_until(lambda: "nested" in runs.parents and "cross" in runs.parents and "same" in runs.parents,
                   timeout=30, what="every parent")
    assert runs.parents["cross"] == {"cross-0": "cross-0 ran", "cross-1": "cross-1 ran"}
    assert runs.parents["nested"] == {"nested-mid": "nested-mid ran"}
    assert runs.parents["same"] == {"same-0": "same-0 done", "same-1": "same-1 held", "same-2": "same-2 ran"}
    for queue in ("reports", "pages"):
        assert all(client.zcard(f"emq:{{{queue}}}:flow:{name}") == 0 for name in ("pending", "active", "waiting"))


def test_a_row_that_names_a_parent_it_was_not_admitted_with_stops_the_adoption(old):
    """A tenant who may write `pages` points a row of its own at `reports`' parent: the parent's
    children no longer add up, so it is named, not adopted (nor is anything else written for it)."""
    server, conn = old
    client = valkey.Valkey.from_url(server.url)
    client.hset("emq:{pages}:job:forged", mapping={"state": "pending", "parent": "emq:{reports}:job:cross",
                                                   "payload": "{}", "attempts": "0", "created": "1"})
    client.zadd("emq:{pages}:flow:pending", {"forged": 0})
    result = CliRunner().invoke(main, ["adopt-flows", "--url", server.url, "-q", "reports", "-q", "pages"])
    assert result.exit_code == 1
    assert ("not adopted emq:{reports}:job:cross: it waits for 2 children; 3 live flow jobs name it, 2 of them "
            "admitted with it: rows that were not admitted with it name it") in result.output
    assert not client.exists("emq:{reports}:flow:children:cross")
    assert "adopted emq:{reports}:job:same: 2 children (reports)" in result.output  # the others are


@pytest.mark.parametrize("children, why", [
    (["emq:{pages}:job:cross-0"], "emq:{reports}:job:cross waits for 2 children, 1 given"),
    (["emq:{pages}:job:cross-0", "emq:{pages}:job:cross-0"], "emq:{pages}:job:cross-0 is given twice"),
    (["emq:{pages}:job:cross-0", "cross-1"], "cross-1 is not a row key"),
    (["emq:{pages}:job:cross-0", "emq:{pages}:job:nested-leaf-0"],
     "emq:{pages}:job:nested-leaf-0 does not name emq:{reports}:job:cross as its parent"),
    (["emq:{pages}:job:cross-0", "emq:{pages}:job:dead-child"], "emq:{pages}:job:dead-child is not waiting to run or running"),
    (["emq:{pages}:job:cross-0", "emq:{pages}:job:late-child"], "emq:{pages}:job:late-child was not admitted with its parent"),
])
def test_flow_adopt_refuses_children_it_cannot_prove_and_writes_nothing(old, children, why):
    server, conn = old
    client = valkey.Valkey.from_url(server.url)
    client.hset("emq:{pages}:job:dead-child", mapping={"state": "dead", "parent": "emq:{reports}:job:cross",
                                                       "created": T})
    client.zadd("emq:{pages}:dead", {"dead-child": 1})
    client.hset("emq:{pages}:job:late-child", mapping={"state": "pending", "parent": "emq:{reports}:job:cross",
                                                       "created": "1"})
    client.zadd("emq:{pages}:flow:pending", {"late-child": 0})
    call = Call(FLOW_ADOPT, (Keyspace("reports").base,), ("cross", *children))
    with unchanged(client):
        (reply,) = conn.round_trip([call])
    assert isinstance(reply, StateError) and str(reply) == f"EMQSTATE EMQ.FLOW.ADOPT {why}: nothing written"


@pytest.mark.parametrize("parent, why", [
    ("nested-mid", "emq:{reports}:job:nested-mid is not a waiting flow parent"),  # no such row in reports
    ("same-2", "emq:{reports}:job:same-2 is not a waiting flow parent"),  # a child, pending
])
def test_flow_adopt_refuses_what_is_not_a_waiting_parent_and_writes_nothing(old, parent, why):
    server, conn = old
    client = valkey.Valkey.from_url(server.url)
    with unchanged(client):
        (reply,) = conn.round_trip([Call(FLOW_ADOPT, (Keyspace("reports").base,), (parent, "emq:{reports}:job:x"))])
    assert isinstance(reply, StateError) and str(reply) == f"EMQSTATE EMQ.FLOW.ADOPT {why}: nothing written"


def test_flow_adopt_refuses_a_parent_with_its_record_and_writes_nothing(old):
    server, conn = old
    client = valkey.Valkey.from_url(server.url)
    client.sadd("emq:{reports}:flow:children:cross", "emq:{pages}:job:cross-0")
    with unchanged(client):
        (reply,) = conn.round_trip([Call(FLOW_ADOPT, (Keyspace("reports").base,),
                                         ("cross", "emq:{pages}:job:cross-0", "emq:{pages}:job:cross-1"))])
    assert str(reply) == "EMQSTATE EMQ.FLOW.ADOPT emq:{reports}:job:cross has its record already: nothing written"


# -- deciding: pure ------------------------------------------------------------------------------


def parent(children: int, record: bool = False, state: str = "waiting") -> FlowRow:
    return FlowRow("emq:{a}:job:p", state, None, T, children, record)


def child(name: str, created: str = T, state: str = "pending", of: str = "emq:{a}:job:p") -> FlowRow:
    return FlowRow(f"emq:{{b}}:job:{name}", state, of, created)


def test_a_parent_is_adopted_with_exactly_the_children_admitted_with_it():
    report = plan_adoptions([parent(2), child("c1"), child("c2", state="active"), child("other", of="emq:{a}:job:q")])
    assert [(a.parent, a.children, a.queue, a.id) for a in report.adopted] == [
        ("emq:{a}:job:p", ("emq:{b}:job:c1", "emq:{b}:job:c2"), "a", "p")]
    assert report.refused == []


@pytest.mark.parametrize("rows, why", [
    ([parent(2), child("c1")], "it waits for 2 children; 1 live flow jobs name it, 1 of them admitted with it: a child "
                               "finished (across queues, unheard) before this adoption, or sits in a queue not read"),
    ([parent(1), child("c1"), child("forged", created="1")],
     "it waits for 1 children; 2 live flow jobs name it, 1 of them admitted with it: rows that were not admitted"),
    ([parent(2), child("c1"), child("gone", state="dead")], "it waits for 2 children; 1 live flow jobs name it"),
])
def test_a_parent_whose_children_do_not_add_up_is_named_with_why(rows, why):
    report = plan_adoptions(rows)
    assert report.adopted == [] and len(report.refused) == 1 and report.refused[0].why.startswith(why)


@pytest.mark.parametrize("row", [parent(1, record=True), parent(1, state="pending"), parent(1, state="active")])
def test_parents_with_a_record_or_not_waiting_are_left_alone(row):
    report = plan_adoptions([row, child("c1")])
    assert report.adopted == [] and report.refused == []

