"""Flows (docs/lanes-and-flows.md "Flows"), on both wires: admission in one step, the parent once
after its last child, its children's results, the failure policies, nesting, several queues, the
flow reaper's verdicts, a stopping worker's release, the cluster-slot refusal, and the native
verbs' refusal of a flow child."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import AbstractSet, Any

import httpx
import pytest
from click.testing import CliRunner

from echomq import (App, Backoff, CrossSlotFlow, Delay, EmbeddedServer, Flow, LeaseLost, Queue, StateError, Status,
                    TimerConfig, Worker, WorkerConfig, aio, connect, module_path)
from echomq.cli import main
from echomq.dashboard import Settings, serving
from echomq.errors import CommandRefused, ConfigurationError
from echomq._core.flows import check_one_slot, plan, same_slot_name, slot_of
from echomq._protocol.serializers import JSON
from support.dataset import dump, unchanged
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past, wait_until
from test_worker import running

FAST = Backoff(base_ms=1, max_ms=5, jitter=0.0)
LEASE = 60_000


def flow_sets(queue: Queue) -> dict[str, list]:
    """The queue's flow sets and dead set, member ids only."""
    client: Any = queue.connection.client
    return {name: [m.decode() for m in client.zrange(queue.keys.key(name), 0, -1)]
            for name in ("flow:pending", "flow:active", "flow:schedule", "flow:waiting", "dead")}


def settle_all(queue: Queue, *, fail: AbstractSet[str] = frozenset(), max_attempts: int = 1) -> list[str]:
    """Claim every ready flow job of ``queue`` and complete it (result: its payload), or fail the
    ids in ``fail``; returns the ids claimed."""
    jobs = queue.flow_claim(1000, LEASE)
    calls = [queue.flow_fail_call(j, f"{j.id} broke", max_attempts=max_attempts) if j.id in fail
             else queue.flow_complete_call(j, JSON.dumps(j.payload), retention_ms=0) for j in jobs]
    queue.settle_many(calls)
    return [j.id for j in jobs]


# -- admission ----------------------------------------------------------------------------
def test_a_flow_is_admitted_in_one_step(conn):
    q = Queue(conn, fresh_name("f"))
    made = q.enqueue_flow({"sum": True}, children=[1, 2, Flow(q.name, 3, id="mid", children=[4])], id="root")
    assert made.created and made.id == "root"
    sets = flow_sets(q)
    assert sets["flow:waiting"] == ["mid", "root"] and len(sets["flow:pending"]) == 3
    root, mid = q.job("root"), q.job("mid")
    assert (root["state"], root["children"], root["on_child_failure"]) == ("waiting", "3", "fail")
    assert (mid["state"], mid["children"], mid["parent"]) == ("waiting", "1", q.keys.job("root"))
    assert q.status("root") is Status.WAITING
    # the flat sets hold none of it: no native verb moves a flow job
    assert q.counts().total == 0


def test_counts_show_the_flow_jobs_in_each_of_their_sets(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=["a", "b", "c"], id="root")
    held = q.flow_claim(2, LEASE)
    q.settle_many([q.flow_fail_call(held[0], "later", max_attempts=5, backoff_ms=LEASE)])
    c = q.counts()
    assert (c.flow_waiting, c.flow_pending, c.flow_active, c.flow_scheduled) == (1, 1, 1, 1)
    assert (c.total, c.lane_pending, c.lane_active, c.flows, c.grouped) == (0, 0, 0, "1/1/1/1", True)


def test_an_existing_root_admits_nothing_and_an_existing_child_refuses_the_flow(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=["a"], id="root")
    before = dump(conn.client, q.keys)
    assert not q.enqueue_flow("p2", children=["b"], id="root").created
    q.enqueue("flat", id="taken")
    before = dump(conn.client, q.keys)
    with pytest.raises(StateError, match="flow job .*taken already has a row: nothing admitted"):
        q.enqueue_flow("p", children=[Flow(q.name, "c", id="taken"), "d"], id="root2")
    assert dump(conn.client, q.keys) == before


def test_a_flow_refuses_bad_input_before_sending(conn):
    q = Queue(conn, fresh_name("f"))
    before = dump(conn.client, q.keys)
    with pytest.raises(ConfigurationError, match="on_child_failure"):
        q.enqueue_flow("p", children=["a"], on_child_failure="retry")
    with pytest.raises(ConfigurationError, match="twice in the flow"):
        q.enqueue_flow("p", children=[Flow(q.name, 1, id="x"), Flow(q.name, 2, id="x")])
    assert dump(conn.client, q.keys) == before


# -- the parent after its children --------------------------------------------------------
def test_the_parent_of_1000_children_runs_once_after_the_last_one(conn):
    name, lock = fresh_name("f"), threading.Lock()
    finished: list[float] = []
    parents: list[tuple[float, dict]] = []

    def handler(payload, ctx):
        if payload == "parent":
            with lock:
                parents.append((time.monotonic(), ctx.children_results()))
            return "all done"
        with lock:
            finished.append(time.monotonic())
        return payload * 2

    app = App()
    app.handler(name, handler)
    q = Queue(conn, name)
    q.enqueue_flow("parent", children=list(range(1000)), id="root")
    config = WorkerConfig(concurrency=50, claim_batch=50)
    with running(Worker(app, conn, config=config)):
        wait_until(lambda: q.metrics()["completed"] == 1001, timeout=60, what="1001 completions")
    assert len(parents) == 1 and len(finished) == 1000
    ran_at, results = parents[0]
    assert ran_at > max(finished)
    assert sorted(results.values()) == [n * 2 for n in range(1000)]
    assert all(not ids for ids in flow_sets(q).values())
    assert conn.client.exists(q.keys.flow_results("root")) == 0  # its flow is over: the results go with it


def test_children_in_two_queues_and_three_levels(conn):
    """root (queue a) <- mid (queue b) <- two leaves (a and b), and a leaf of root in b."""
    a, b, seen = fresh_name("fa"), fresh_name("fb"), []

    def handler(payload, ctx):
        seen.append(payload)
        if payload in ("root", "mid"):
            return {"me": payload, "children": ctx.children_results()}
        return payload

    app = App()
    app.handler(a, handler)
    app.handler(b, handler)
    qa, qb = Queue(conn, a), Queue(conn, b)
    mid = Flow(b, "mid", id="mid", children=[Flow(a, "leaf-a", id="la"), Flow(b, "leaf-b", id="lb")])
    qa.enqueue_flow("root", children=[mid, Flow(b, "leaf-root", id="lr")], id="root")
    with running(Worker(app, conn, config=WorkerConfig(concurrency=4))):
        wait_until(lambda: qa.metrics()["completed"] == 2, timeout=20, what="root and leaf-a")
    assert qa.status("root") is Status.COMPLETED
    assert seen.index("root") == len(seen) - 1 and seen.index("mid") > max(seen.index("leaf-a"), seen.index("leaf-b"))
    assert qb.metrics()["completed"] == 3


def test_the_parent_reads_its_childrens_results_and_keeps_its_own(conn):
    name = fresh_name("f")
    app = App()

    @app.task(queue=name, result_ttl=60)
    def handler(payload, ctx):
        if payload == "parent":
            return sum(ctx.children_results().values())
        return payload

    q = Queue(conn, name)
    q.enqueue_flow("parent", children=[1, 2, 3, 4], id="root")
    with running(Worker(app, conn)):
        assert q.result("root", timeout=20) == 10


def test_a_child_cannot_read_children(conn):
    name, errors = fresh_name("f"), []

    def handler(payload, ctx):
        if payload == "child":
            try:
                ctx.children_results()
            except ConfigurationError as exc:
                errors.append(str(exc))

    app = App()
    app.handler(name, handler)
    q = Queue(conn, name)
    q.enqueue_flow("parent", children=["child"], id="root")
    with running(Worker(app, conn)):
        wait_until(lambda: q.metrics()["completed"] == 2, what="the flow")
    assert errors == ["this job is not a flow parent: only a parent's handler reads its children"]


# -- a child that dies: the policies --------------------------------------------------------
def test_a_dead_child_fails_the_parent_by_default(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=[Flow(q.name, "bad", id="bad"), Flow(q.name, "ok", id="ok")], id="root")
    settle_all(q, fail={"bad"})
    root = q.job("root")
    assert (root["state"], root["last_error"]) == ("dead", "child bad failed: bad broke")
    # told once: the dead child is a flat dead row now (REPROCESS would run it alone)
    assert "parent" not in q.job("bad") and q.job("bad")["flow_parent"] == q.keys.job("root")
    sets = flow_sets(q)
    assert sorted(sets.pop("dead")) == ["bad", "root"] and not any(sets.values())
    assert settle_all(q) == []  # the parent never becomes ready
    assert q.metrics() == {"completed": 1, "failed": 2}
    assert conn.client.exists(q.keys.flow_results("root")) == 0
    assert q.reprocess("bad") is True  # alone, as a flat job: its flow is over
    assert [job_id for job_id, _ in q.ids("pending")] == ["bad"] and q.counts().flow_pending == 0


def test_the_failure_reaches_the_grandparent(conn):
    q = Queue(conn, fresh_name("f"))
    mid = Flow(q.name, "mid", id="mid", children=[Flow(q.name, "bad", id="bad")])
    q.enqueue_flow("root", children=[mid, Flow(q.name, "ok", id="ok")], id="root")
    settle_all(q, fail={"bad"})
    assert q.job("mid")["state"] == "dead" and q.job("root")["state"] == "dead"
    assert q.job("root")["last_error"] == "child mid failed: child bad failed: bad broke"


@pytest.mark.parametrize("policy", ["ignore", "continue"])
def test_ignore_and_continue_run_the_parent(conn, policy):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=[Flow(q.name, "bad", id="bad"), Flow(q.name, "ok", id="ok")], id="root",
                   on_child_failure=policy)
    assert sorted(settle_all(q, fail={"bad"})) == ["bad", "ok"]
    (parent,) = q.flow_claim(10, LEASE)
    assert parent.id == "root" and parent.has_children
    children = q.children("root")
    assert children.results == {"ok": "ok"}
    assert children.failures == ({"bad": "bad broke"} if policy == "continue" else {})


def test_a_retried_child_does_not_tell_its_parent(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=[Flow(q.name, "c", id="c")], id="root")
    (child,) = q.flow_claim(10, LEASE)
    assert q.settle_many([q.flow_fail_call(child, "once", max_attempts=2)]) == ["pending"]
    assert q.job("root")["children"] == "1"
    (child,) = q.flow_claim(10, LEASE)
    assert child.attempt == 2
    assert q.settle_many([q.flow_fail_call(child, "later", max_attempts=3, backoff_ms=60_000)]) == ["scheduled"]
    assert flow_sets(q)["flow:schedule"] == ["c"]


def test_policies_in_a_worker(conn):
    name, ran = fresh_name("f"), []

    def handler(payload, ctx):
        if payload == "bad":
            raise RuntimeError("no")
        if payload == "parent":
            ran.append((ctx.children_results(), ctx.children_failures()))

    app = App()
    app.handler(name, handler, max_attempts=2, backoff=FAST)
    q = Queue(conn, name)
    q.enqueue_flow("parent", children=[Flow(name, "bad", id="bad"), Flow(name, "ok", id="ok")], id="root",
                   on_child_failure="continue")
    with running(Worker(app, conn)):
        wait_until(lambda: ran, timeout=20, what="the parent")
    assert ran == [({"ok": None}, {"bad": "RuntimeError: no"})]
    assert q.job("bad")["failures"] == "2"


def test_a_delay_in_a_flow_job_waits_in_flow_schedule_and_spends_no_budget(conn):
    """FLOW_DELAY (DELAY's twin): flow:active -> flow:schedule for the delay, nothing counted, the
    parent not told; claimed again once due. A stale token is refused and changes nothing."""
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=[Flow(q.name, "c", id="c")], id="root")
    (child,) = q.flow_claim(10, LEASE)
    with unchanged(conn.client):
        assert isinstance(q.settle_many([q.flow_delay_call(child, 60_000, token=child.attempt + 1)])[0], LeaseLost)
    conn.client.zrem(q.keys.key("flow:active"), "c")  # held with its token, yet no longer leased
    with unchanged(conn.client):
        (refused,) = q.settle_many([q.flow_delay_call(child, 5)])
    assert isinstance(refused, LeaseLost) and "EMQ.FLOW.DELAY id is not in flow:active" in str(refused.refusal)
    conn.client.zadd(q.keys.key("flow:active"), {"c": server_ms(conn.client) + LEASE})
    (due,) = q.settle_many([q.flow_delay_call(child, 5)])
    row = q.job("c")
    assert due > 0 and (row["state"], row.get("failures"), row.get("last_error")) == ("scheduled", None, None)
    assert flow_sets(q)["flow:schedule"] == ["c"] and q.job("root")["children"] == "1"
    wait_server_past(conn.client, due)
    (again,) = q.flow_claim(10, LEASE)
    assert (again.id, again.attempt) == ("c", 2)


def test_a_flow_handler_that_delays_runs_again_without_spending_an_attempt(conn):
    """A `Delay` in a flow job's handler, with max_attempts=1: it runs again after the delay (a
    retry would have killed it) and its parent runs once it completes."""
    name, runs = fresh_name("f"), []

    def handler(payload, ctx):
        runs.append((payload, ctx.attempt))
        if payload == "c" and ctx.attempt == 1:
            raise Delay(20)

    app = App()
    app.handler(name, handler, max_attempts=1)
    q = Queue(conn, name)
    q.enqueue_flow("root", children=[Flow(name, "c", id="c")], id="root")
    with running(Worker(app, conn)):
        wait_until(lambda: ("root", 1) in runs, timeout=20, what="the parent")
    assert runs == [("c", 1), ("c", 2), ("root", 1)]
    assert q.metrics() == {"completed": 2, "failed": 0}


# -- leases: renewal, release, the flow reaper -----------------------------------------------
def expire(q: Queue, lease_ms: int = 1) -> list:
    jobs = q.flow_claim(1000, lease_ms)
    wait_server_past(q.connection.client, server_ms(q.connection.client) + lease_ms)
    return jobs


# -- events (docs/spec.md §12): each flow job's move, told in its own queue --------------------------


def told(q: Queue) -> list[tuple]:
    return [(e.type, e.job_id, e.attempt, e.error, e.state) for e in q.events()]


def test_a_flow_tells_each_jobs_moves_in_its_queue(conn):
    """Admission, claims, a retry, a retry's promotion, completions, the parent's readiness and a
    lease the reaper recovers, each told as the flat verb it stands for, in order."""
    q = Queue(conn, fresh_name("f"))
    q.enable_events(maxlen=100)
    q.enqueue_flow("p", children=[Flow(q.name, "a", id="a"), Flow(q.name, "b", id="b")], id="root")
    a, b = sorted(q.flow_claim(10, LEASE), key=lambda job: job.id)
    q.settle_many([q.flow_complete_call(a, b"1", retention_ms=0),
                   q.flow_fail_call(b, "once", max_attempts=3, backoff_ms=1)])
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    (b,) = q.flow_claim(10, LEASE)
    q.settle_many([q.flow_release_call(b)])
    (b,) = q.flow_claim(10, 1)
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    assert q.reap_flows(max_stalled=2).recovered == ["b"]
    (b,) = q.flow_claim(10, LEASE)
    q.settle_many([q.flow_complete_call(b, b"2", retention_ms=0)])
    (root,) = q.flow_claim(10, LEASE)
    q.settle_many([q.flow_complete_call(root, b"3", retention_ms=0)])
    assert told(q) == [
        ("enqueued", "root", 0, None, "waiting"), ("enqueued", "a", 0, None, "pending"),
        ("enqueued", "b", 0, None, "pending"), ("claimed", "a", 1, None, None), ("claimed", "b", 1, None, None),
        ("completed", "a", 1, None, None), ("failed", "b", 1, "once", None), ("retried", "b", 1, None, "scheduled"),
        ("promoted", "b", 1, None, "pending"), ("claimed", "b", 2, None, None), ("requeued", "b", 2, None, "pending"),
        ("claimed", "b", 3, None, None), ("stalled", "b", 3, None, None), ("recovered", "b", 3, None, "pending"),
        ("claimed", "b", 4, None, None), ("completed", "b", 4, None, None), ("promoted", "root", 0, None, "pending"),
        ("claimed", "root", 1, None, None), ("completed", "root", 1, None, None)]


def test_a_death_is_told_up_the_flow_in_each_queue_and_a_bad_switch_refuses(conn):
    """A child's death under `fail` kills its parent, in another queue: each death in its own queue's
    stream. A malformed switch in any queue a move may tell refuses the move: nothing changes."""
    qa, qb = Queue(conn, fresh_name("f")), Queue(conn, fresh_name("f"))
    qa.enable_events(maxlen=100)
    qb.enable_events(maxlen=100)
    qb.enqueue_flow("p", children=[Flow(qa.name, "c", id="c")], id="root")
    (child,) = qa.flow_claim(10, LEASE)
    assert qa.settle_many([qa.flow_fail_call(child, "boom", max_attempts=1)]) == ["dead"]
    assert told(qa)[-3:] == [("claimed", "c", 1, None, None), ("failed", "c", 1, "boom", None),
                             ("dead", "c", 1, "boom", "dead")]
    assert told(qb) == [("enqueued", "root", 0, None, "waiting"), ("dead", "root", 0, "child c failed: boom", "dead")]
    qb.enqueue_flow("p", children=[Flow(qa.name, "c2", id="c2")], id="root2")
    (child,) = qa.flow_claim(10, LEASE)
    conn.client.hset(qb.keys.meta, "events", "many")  # the parent's queue: its death or readiness would be told there
    for call in (qa.flow_complete_call(child, b"1", retention_ms=0), qa.flow_fail_call(child, "e", max_attempts=1)):
        with unchanged(conn.client):
            (refused,) = qa.settle_many([call])
        assert isinstance(refused, CommandRefused) and "not an integer" in str(refused)
    with unchanged(conn.client), pytest.raises(CommandRefused, match="not an integer"):
        qb.enqueue_flow("p", children=[Flow(qa.name, "c3", id="c3")], id="root3")
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    conn.client.zadd(qa.keys.key("flow:active"), {"c2": 0})  # its lease ran out: the reaper would tell qb of a death
    with unchanged(conn.client), pytest.raises(CommandRefused, match="not an integer"):
        qa.reap_flows(max_stalled=1)


def test_the_reaper_recovers_then_kills_and_tells_the_parent(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=[Flow(q.name, "c", id="c")], id="root", on_child_failure="continue")
    expire(q)
    found = q.reap_flows(max_stalled=2)
    assert (found.recovered, found.exempt, found.dead) == (["c"], [], [])
    assert q.job("c")["stalled"] == "1" and flow_sets(q)["flow:pending"] == ["c"]
    expire(q)
    found = q.reap_flows(max_stalled=2)
    assert found.dead == ["c"] and q.job("c")["last_error"] == "stalled"
    assert q.children("root").failures == {"c": "stalled"}
    assert flow_sets(q)["flow:pending"] == ["root"]  # continue: the parent runs


def test_the_reaper_exempts_a_lease_that_crossed_a_real_restart(wire):
    """A flow lease stamped before a restart (the AOF replays the stamp) is exempt when it expires;
    one taken after it counts a stall."""
    module = module_path() if wire == 6 else None
    with EmbeddedServer(module=module, aof=True, appendfsync="always", brand=wire) as server:
        with connect(server.url, wire=wire) as conn:
            q = Queue(conn, fresh_name("f"))
            q.enqueue_flow("p", children=[Flow(q.name, "a", id="a"), Flow(q.name, "b", id="b")], id="root")
            assert [j.id for j in q.flow_claim(1, 1)] == ["a"]
            before = q.job("a")["lease_epoch"]
        server.restart()
        with connect(server.url, wire=wire) as conn:
            q = Queue(conn, q.name)
            assert q.job("a")["lease_epoch"] == before  # replayed from the AOF
            assert [j.id for j in q.flow_claim(1, 1)] == ["b"]
            assert q.job("b")["lease_epoch"] != before
            wait_server_past(conn.client, server_ms(conn.client) + 1)
            found = q.reap_flows(max_stalled=2)
            assert (found.recovered, found.exempt, found.dead) == (["b"], ["a"], [])
            assert "stalled" not in q.job("a") and q.job("b")["stalled"] == "1"


def test_the_reaper_removes_a_ghost_and_leaves_live_leases(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=["a", "b"], id="root")
    held = q.flow_claim(2, LEASE)
    conn.client.zadd(q.keys.key("flow:active"), {"ghost": 0})  # expired, and no row
    assert len(q.reap_flows()) == 0
    assert flow_sets(q)["flow:active"] == sorted(j.id for j in held)
    assert conn.client.exists(q.keys.job("ghost")) == 0


def test_extend_and_release_are_fenced(conn):
    q = Queue(conn, fresh_name("f"))
    q.enqueue_flow("p", children=["a"], id="root")
    (job,) = q.flow_claim(1, LEASE)
    assert q.flow_extend_many([job], LEASE)[0] > 0
    (stale,) = q.settle_many([q.flow_release_call(job, token=9)])
    assert isinstance(stale, LeaseLost)
    assert q.settle_many([q.flow_release_call(job)]) == [True]
    assert q.flow_extend_many([job], LEASE) == [0]
    assert q.job(job.id)["state"] == "pending" and "stalled" not in q.job(job.id)


def test_a_worker_sweeps_flow_leases_and_releases_at_stop(conn):
    name, started, release = fresh_name("f"), threading.Event(), threading.Event()

    def handler(payload, ctx):
        if payload == "hold":
            started.set()
            release.wait(10)

    app = App()
    app.handler(name, handler)
    q = Queue(conn, name)
    q.enqueue_flow("parent", children=["hold"], id="root")
    worker = Worker(app, conn, config=WorkerConfig(grace_s=0.0))
    with running(worker):
        wait_until(started.is_set, what="the child to start")
    release.set()
    assert worker.tally.requeued == 1
    assert flow_sets(q)["flow:pending"] != [] and q.job("root")["children"] == "1"

    # a lease left to expire is recovered by the worker's sweep (flow_reap on the sweep's clock)
    q.flow_claim(1, 1)
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    timers = TimerConfig(sweep_interval_ms=10, idle_sweep_interval_ms=10, max_stalled=5)
    with running(Worker(app, conn, config=WorkerConfig(timers=timers))) as worker:
        wait_until(lambda: q.metrics()["completed"] == 2, timeout=20, what="the flow to finish")
    assert worker.tally.stalled >= 1


# -- the native verbs refuse a flow child ----------------------------------------------------
def test_native_complete_and_fail_refuse_a_flow_child(server6):
    with connect(server6.url, wire=6) as conn:
        q = Queue(conn, fresh_name("f"))
        q.enqueue_flow("p", children=["c"], id="root")
        (child,) = q.flow_claim(1, LEASE)
        client = conn.client
        for command in (("EMQ.COMPLETE", 2, q.keys.active, q.keys.base, child.id, child.token),
                        ("EMQ.FAIL", 5, q.keys.active, q.keys.pending, q.keys.schedule, q.keys.dead, q.keys.base,
                         child.id, child.token, "e", 3, 0)):
            with unchanged(client), pytest.raises(Exception, match="^EMQSTATE flow child is not native$"):
                client.execute_command(*command)


# -- cluster slots -------------------------------------------------------------------------
def test_a_flow_across_slots_is_refused_with_what_to_do():
    a, b = "orders", "invoices"
    assert slot_of(a) != slot_of(b)
    root = Flow(a, "p", children=[Flow(b, "c")])
    with pytest.raises(CrossSlotFlow, match=r"must share a slot; orders \(slot \d+\), invoices \(slot \d+\) do not"
                                            r".*same_slot_name"):
        plan(root, JSON.dumps, cluster=True)
    assert plan(root, JSON.dumps, cluster=False).queues == (a, b)  # one node: any queues
    near = same_slot_name(b, a)
    assert near.startswith("invoices.") and slot_of(near) == slot_of(a)
    check_one_slot([a, near])
    assert plan(Flow(a, "p", children=[Flow(near, "c")]), JSON.dumps, cluster=True).call.keys == (
        "emq:{orders}:", "emq:{%s}:" % near)


def test_the_asyncio_queue_admits_and_reaps_flows(server, wire):
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            q = aio.Queue(conn, fresh_name("f"))
            made = await q.enqueue_flow("p", children=["a"], id="root")
            (child,) = await q.flow_claim(1, 1)
            return made, child, await q.children("root")

    made, child, children = asyncio.run(main())
    assert made.created and child.flow and not child.has_children and children.results == {}


def test_an_idle_worker_runs_a_flow_retry_when_its_backoff_ends(conn):
    """The flow poll of an idle (blocked) queue waits for its waiter, except for a flow retry's due
    time, which the empty flow claim answers: the retry runs then, not at the block's timeout."""
    name, runs = fresh_name("f"), []

    def handler(payload, ctx):
        runs.append((payload, ctx.attempt))
        if payload == "flaky" and ctx.attempt == 1:
            raise RuntimeError("once")

    app = App()
    app.handler(name, handler, max_attempts=2, backoff=Backoff(base_ms=300, max_ms=300, jitter=0.0))
    q = Queue(conn, name)
    q.enqueue_flow("parent", children=["flaky"], id="root")
    with running(Worker(app, conn)):
        wait_until(lambda: ("parent", 1) in runs, timeout=10, what="the parent after the retried child")
    assert runs == [("flaky", 1), ("flaky", 2), ("parent", 1)]


def test_a_blocked_wire4_worker_is_woken_by_a_new_flow(server4):
    """Wire 4: the flow scripts write the wake marker, so a worker blocked on it claims at once."""
    with connect(server4.url, wire=4) as conn:
        name, runs = fresh_name("f"), []
        app = App()
        app.handler(name, lambda payload: runs.append(payload))
        q = Queue(conn, name)
        with running(Worker(app, conn)):
            wait_until(lambda: any(c["cmd"] == "bzpopmin" for c in conn.client.client_list()), what="the block")
            q.enqueue_flow("parent", children=["child"], id="root")
            wait_until(lambda: runs == ["child", "parent"], timeout=5, what="the flow")


def test_an_idle_worker_runs_a_parent_another_process_released(conn):
    """While a parent waits in its queue, an idle worker of that queue keeps polling its flow sets
    (up to flow_poll_max_ms apart), so a parent whose last child another process settled runs then,
    on wire 6 too, where no flow script can end a BCLAIM."""
    parents, children, runs = fresh_name("fp"), fresh_name("fc"), []
    app = App()
    app.handler(parents, lambda payload, ctx: runs.append(ctx.children_results()))
    qp, qc = Queue(conn, parents), Queue(conn, children)
    qp.enqueue_flow("parent", children=[Flow(children, "c", id="c")], id="root")
    with running(Worker(app, conn, config=WorkerConfig(flow_poll_max_ms=100))):
        wait_until(lambda: any(c["cmd"].lower() in ("bzpopmin", "emq.bclaim") for c in conn.client.client_list()),
                   what="the worker idle, blocked")
        (child,) = qc.flow_claim(1, LEASE)
        qc.settle_many([qc.flow_complete_call(child, JSON.dumps("done"), retention_ms=0)])
        wait_until(lambda: runs, timeout=5, what="the parent")
    assert runs == [{"c": "done"}]


def test_inspect_and_the_job_page_find_flow_jobs_in_their_own_sets(conn, server):
    """A flow job sits in the flow sets, never the flat ones: `emq inspect` and the dashboard name
    its set and do not call it lost (they read the flat set its state names, before)."""
    name = fresh_name("flow-seen")
    queue = Queue(conn, name)
    queue.enqueue_flow({"p": 1}, children=[Flow(name, {"c": 1}, id="kid")], id="root")
    queue.enqueue({"n": 1}, group="g", id="lane-job")
    def inspected(job_id):
        result = CliRunner().invoke(main, ["inspect", job_id, "-q", name, "--url", server.url, "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    shown = {job_id: inspected(job_id) for job_id in ("root", "kid", "lane-job")}
    assert {i: (v["state"], v["set"], v["in_its_set"]) for i, v in shown.items()} == {
        "root": ("waiting", "flow:waiting", True), "kid": ("pending", "flow:pending", True),
        "lane-job": ("pending", "lane:g", True)}
    (kid,) = queue.flow_claim(1, 60_000)
    active = inspected("kid")
    assert (active["set"], active["in_its_set"]) == ("flow:active", True) and 0 < active["due_in_ms"] <= 60_000
    table = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["inspect", "root", "-q", name, "--url", server.url])
    assert "flow:waiting" in table.stdout and "children" in table.stdout and "in its set" not in table.stdout
    with serving(conn, Settings(queues=[name])) as site:
        page = httpx.get(f"{site}/queues/{name}/job", params={"id": "kid"}).text
    assert "not in its set" not in page and "lease</th><td>ends in" in page


# -- cancel ------------------------------------------------------------------------------
def test_cancel_stops_a_running_child_and_its_parent_is_told_as_of_a_death(conn):
    q = Queue(conn, fresh_name("f-cancel"))
    q.enqueue_flow("p", children=[Flow(q.name, "a", id="a"), Flow(q.name, "b", id="b")], id="root")
    running = next(job for job in q.flow_claim(10, LEASE) if job.id == "a")
    assert q.cancel("a") is True
    row, root = q.job("a"), q.job("root")
    assert (row["state"], row["last_error"]) == ("dead", "cancelled")
    assert (root["state"], root["last_error"]) == ("dead", "child a failed: cancelled")  # policy fail
    (refused,) = q.settle_many([q.flow_complete_call(running, b'"a"', retention_ms=0)])
    assert isinstance(refused, LeaseLost)  # its holder's settle is refused
    assert sorted(flow_sets(q)["dead"]) == ["a", "root"] and q.metrics()["failed"] == 2


def test_cancel_reaches_a_flow_job_in_every_live_set_and_continue_runs_the_parent_after_it(conn):
    q = Queue(conn, fresh_name("f-cancel"))
    q.enqueue_flow("p", children=[Flow(q.name, "a", id="a"), Flow(q.name, "b", id="b")], id="root",
                   on_child_failure="continue")
    assert q.cancel("a") is True  # still pending: it never runs
    assert settle_all(q) == ["b"]
    (parent,) = q.flow_claim(10, LEASE)
    assert parent.id == "root" and q.children("root").failures == {"a": "cancelled"}
    q.enqueue_flow("p2", children=["c"], id="waiting-root")
    assert q.cancel("waiting-root") is True and q.job("waiting-root")["state"] == "dead"  # a parent that waits
    assert settle_all(q) != []  # its child runs on; its outcome finds the flow over and changes nothing
    assert q.job("waiting-root")["state"] == "dead"


def test_cancel_and_remove_of_flow_jobs_refuse_what_they_cannot_do_and_write_nothing(conn):
    q = Queue(conn, fresh_name("f-cancel"))
    client = q.connection.client
    q.enqueue_flow("p", children=["a"], id="root")
    q.enqueue({"n": 1}, id="flat")
    child = flow_sets(q)["flow:pending"][0]
    with unchanged(client, q.keys), pytest.raises(StateError, match="a flow job is not removed .* cancel it"):
        q.remove(child)
    with unchanged(client, q.keys), pytest.raises(StateError, match="^EMQSTATE EMQ.CANCEL row is pending, not active$"):
        q.cancel("flat")  # a flat row's own refusal, not the flow script's
    client.zrem(q.keys.key("flow:waiting"), "root")  # a drifted parent: waiting, missing from flow:waiting
    with unchanged(client, q.keys), pytest.raises(StateError, match="^EMQSTATE EMQ.FLOW.CANCEL id is not in flow:waiting$"):
        q.connection.send(q.build("flow_cancel", "root"))
    with unchanged(client, q.keys), pytest.raises(StateError, match="^EMQSTATE EMQ.FLOW.CANCEL row is not a flow job$"):
        q.connection.send(q.build("flow_cancel", "flat"))
    assert q.connection.send(q.build("flow_cancel", "nobody")) == 0
    q.enqueue_flow("p", children=["b"], id="doomed-root")
    (kid,) = [job for job in q.flow_claim(10, LEASE) if job.id != child]
    q.settle_many([q.flow_fail_call(kid, "broke", max_attempts=1)])  # its parent dies with it
    with unchanged(client, q.keys), pytest.raises(
            StateError, match="^EMQSTATE EMQ.FLOW.CANCEL row is dead, not active, pending, scheduled or waiting$"):
        q.connection.send(q.build("flow_cancel", "doomed-root"))
