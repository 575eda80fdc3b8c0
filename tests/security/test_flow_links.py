"""No write through a queue's fence by way of another user's data (issue 43, item 1), on both wires.

A tenant confined to ``emq:{qa*}:*`` owns its queue's rows, so it can point its own flow job's
``parent`` at a job of queue ``qb``. The flow scripts follow that link only when the parent's own
record (``flow:children:<id>``, in the parent's queue, which the tenant cannot write) lists the
child; otherwise the link is treated as absent. Each path an admin may run on the tenant's job
(cancel, complete, fail to death, the reaper, a death that climbs) leaves ``qb`` unchanged, key for
key; the ordinary flow across two queues still runs its parent; a chain that comes back to a row it
passed ends instead of holding the server.
"""

from __future__ import annotations

import itertools

import pytest
import valkey

from echomq import EmbeddedServer, Flow, Queue, connect, module_path
from echomq.errors import CommandRefused
from support.dataset import dump, unchanged
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past

PASSWORD = "pw-flow-tenant"
TENANT = ["on", f">{PASSWORD}", "+@all", "-@admin", "-@dangerous", "+script", "+info", "%R~{emq}:version",
          "~emq:{qa*}:*", "&emq:{qa*}:outcome:*"]
LEASE = 60_000
_n = itertools.count()


@pytest.fixture
def tenant_url(server):
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "flow-tenant", "reset", *TENANT)
    return f"redis://flow-tenant:{PASSWORD}@127.0.0.1:{server.port}"


def queues(conn, wire: int) -> tuple[Queue, Queue]:
    """The tenant's queue qa and another queue qb (names inside and outside the tenant's grant)."""
    n = next(_n)
    return Queue(conn, f"qa-links-{wire}-{n}"), Queue(conn, f"qb-links-{wire}-{n}")


def a_waiting_parent(qb: Queue) -> str:
    """As the admin: a parent P in qb waiting for its one real child, with qb's events on (so any
    word told to qb would show in its stream); P's row key."""
    qb.enable_events(maxlen=100)
    qb.enqueue_flow("p", children=[Flow(qb.name, "x", id="x")], id="P")
    return qb.keys.job("P")


def forged(tenant: Queue, target: str, job_id: str = "C") -> None:
    """As the tenant: its own flow (R with children C and D, in qa), ``job_id``'s `parent` pointed at
    ``target``."""
    tenant.enqueue_flow("r", children=[Flow(tenant.name, "c", id="C"), Flow(tenant.name, "d", id="D")], id="R")
    tenant.connection.client.hset(tenant.keys.job(job_id), "parent", target)


def by_id(jobs, job_id: str):
    (job,) = [j for j in jobs if j.id == job_id]
    return job


def cancel(qa: Queue) -> None:
    assert qa.cancel("C") is True
    assert (qa.job("C")["state"], qa.job("C")["last_error"]) == ("dead", "cancelled")


def complete(qa: Queue) -> None:
    child = by_id(qa.flow_claim(10, LEASE), "C")
    assert qa.settle_many([qa.flow_complete_call(child, b'"forged result"', retention_ms=0)]) == [1]
    assert qa.job("C") is None


def fail_to_death(qa: Queue) -> None:
    child = by_id(qa.flow_claim(10, LEASE), "C")
    assert qa.settle_many([qa.flow_fail_call(child, "boom", max_attempts=1)]) == ["dead"]


def reap(qa: Queue) -> None:
    qa.flow_claim(10, 1)
    client = qa.connection.client
    wait_server_past(client, server_ms(client) + 2)
    assert "C" in qa.reap_flows(max_stalled=1).dead


def climb(qa: Queue) -> None:
    """C's death under R's `fail` kills R, whose own `parent` is the forged one."""
    fail_to_death(qa)
    assert (qa.job("R")["state"], qa.job("R")["last_error"]) == ("dead", "child C failed: boom")


PATHS = {"cancel": cancel, "complete": complete, "fail-to-death": fail_to_death, "reap": reap, "climb": climb}


@pytest.mark.parametrize("path", list(PATHS))
def test_a_forged_parent_in_another_queue_is_never_written(server, wire, tenant_url, path):
    with connect(server.url, wire=wire) as admin_conn, connect(tenant_url, wire=wire) as tenant_conn:
        qa, qb = queues(admin_conn, wire)
        parent = a_waiting_parent(qb)
        tenant = Queue(tenant_conn, qa.name)
        forged(tenant, parent, "R" if path == "climb" else "C")
        # the tenant cannot write qb itself, nor forge the parent's record of its children
        with pytest.raises(valkey.exceptions.NoPermissionError):
            tenant_conn.client.sadd(qb.keys.flow_children("P"), qa.keys.job("C"))
        before = dump(admin_conn.client, qb.keys)
        PATHS[path](qa)  # the admin's move, through every permission
        assert dump(admin_conn.client, qb.keys) == before
        assert qb.job("P")["state"] == "waiting" and qb.job("P")["children"] == "1"


def test_the_parents_real_child_still_runs_it_after_a_forged_one_died(server, wire, tenant_url):
    with connect(server.url, wire=wire) as admin_conn, connect(tenant_url, wire=wire) as tenant_conn:
        qa, qb = queues(admin_conn, wire)
        a_waiting_parent(qb)
        forged(Queue(tenant_conn, qa.name), qb.keys.job("P"))
        fail_to_death(qa)
        (x,) = qb.flow_claim(10, LEASE)
        assert qb.settle_many([qb.flow_complete_call(x, b'"x done"', retention_ms=0)]) == [1]
        (p,) = qb.flow_claim(10, LEASE)
        assert (p.id, qb.children("P").results) == ("P", {"x": "x done"})


def test_a_flow_across_two_queues_tells_its_parent_and_the_record_empties(server, wire):
    """The ordinary path: a child in qa of a parent in qb (a flow the admin enqueued) tells it; each
    child leaves the parent's record as it tells, so the record is gone when the parent runs."""
    with connect(server.url, wire=wire) as conn:
        qa, qb = queues(conn, wire)
        qb.enqueue_flow("p", children=[Flow(qa.name, "a", id="a"), Flow(qa.name, "b", id="b")], id="P")
        record = qb.keys.flow_children("P")
        assert set(conn.client.smembers(record)) == {qa.keys.job("a").encode(), qa.keys.job("b").encode()}
        a, b = sorted(qa.flow_claim(10, LEASE), key=lambda job: job.id)
        qa.settle_many([qa.flow_complete_call(a, b'"A"', retention_ms=0)])
        assert set(conn.client.smembers(record)) == {qa.keys.job("b").encode()}
        qa.settle_many([qa.flow_complete_call(b, b'"B"', retention_ms=0)])
        assert conn.client.exists(record) == 0
        (p,) = qb.flow_claim(10, LEASE)
        assert p.id == "P" and qb.children("P").results == {"a": "A", "b": "B"}


def test_a_tenant_worker_cannot_settle_a_real_child_whose_parent_it_may_not_read(server, wire, tenant_url):
    """A legitimate link into a queue outside the caller's grant: the step reads the parent's record
    before its first write, so it is refused whole (the admin's worker settles it later)."""
    with connect(server.url, wire=wire) as admin_conn, connect(tenant_url, wire=wire) as tenant_conn:
        qa, qb = queues(admin_conn, wire)
        qb.enqueue_flow("p", children=[Flow(qa.name, "a", id="a")], id="P")
        tenant = Queue(tenant_conn, qa.name)
        (a,) = tenant.flow_claim(10, LEASE)
        with unchanged(admin_conn.client):
            (refused,) = tenant.settle_many([tenant.flow_complete_call(a, b'"A"', retention_ms=0)])
        assert isinstance(refused, CommandRefused) and "No permissions" in str(refused)


@pytest.fixture
def own_server(wire, tmp_path):
    """A server of the test's own: were a chain walked forever, only this one would be held."""
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire, directory=tmp_path) as server:
        yield server


def test_a_chain_of_links_that_comes_back_ends(own_server, wire):
    """A row whose confirmed parent is itself (its own queue's record says so: the tenant may write
    both): a cancel walks the chain once, the job dies, and nothing is told twice."""
    with connect(own_server.url, wire=wire, socket_timeout=10) as conn:
        q = Queue(conn, fresh_name("qa-loop"))
        q.enqueue_flow("r", children=[Flow(q.name, "c", id="C")], id="R")
        row = q.keys.job("C")
        conn.client.hset(row, mapping={"parent": row, "children": 1, "on_child_failure": "fail"})
        conn.client.sadd(q.keys.flow_children("C"), row)
        assert q.cancel("C") is True
        assert (q.job("C")["state"], q.job("C")["last_error"]) == ("dead", "cancelled")
        assert q.job("R")["state"] == "waiting"
