"""The operator's reads on the one send path (issue 41): every read of the node that ``emq``, the
dashboard and the admin functions make -- the inventory's SCAN, a job's row, a page of jobs, the
workers list -- goes through ``Connection.round_trip``, so a link that drops during one is
``ConnectionFailed`` from the library, one clear line and exit 1 from ``emq``, and the dashboard's
error page, never a valkey-py error or a traceback.

The link is dropped by the node's own death, at the moment the read starts: a ``verb.start``
subscriber kills the node when a round trip naming the read's command begins. The hook is emitted
by the send path only, so the kill happening at all proves the read took it."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import httpx
import pytest
from click.testing import CliRunner

from echomq import ConnectionFailed, EmbeddedServer, Queue, brand_node, connect, hooks, list_workers, module_path
from echomq.admin.doctor import examine
from echomq.local.versions import facts_of
from echomq.admin.inventory import job_page, job_view, numbers_of, queue_exists, record_view, scan_queues
from echomq.cli import main
from echomq._client.connection import open_client
from echomq._protocol.keys import State
from echomq._protocol.serializers import RAW
from echomq.dashboard import Settings, serving
from support.queues import take


@pytest.fixture
def node(wire):
    """A node of this test's own (its death is the fault), holding one queue: a dead job, a
    completed one's record, a pending one."""
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
        with connect(server.url) as conn:
            queue = Queue(conn, "q")
            queue.enqueue({}, id="doomed")
            queue.fail(take(queue), "ValueError: no", max_attempts=1)
            queue.enqueue({}, id="done")
            queue.publish(take(queue), {"ok": True}, retention_ms=60_000)
            queue.enqueue({}, id="waiting")
        yield server


@contextmanager
def killed_at(server: EmbeddedServer, command: str) -> Iterator[list[list[str]]]:
    """Kill ``server`` as the first round trip that names ``command`` starts; yields every round
    trip's names the send path reported (``command`` among them: the read went that way)."""
    seen: list[list[str]] = []

    def on_start(event: str, data: dict) -> None:
        seen.append(list(data["verbs"]))
        if command in data["verbs"] and server.running:
            server.kill()

    unsubscribe = hooks.subscribe("verb.start", on_start)
    try:
        yield seen
    finally:
        unsubscribe()
    assert any(command in names for names in seen), f"no round trip named {command}: {seen}"
    assert not server.running, "the read ran without the node dying under it"


LIBRARY_READS: dict[str, tuple[str, Callable[[Queue], object]]] = {
    "the inventory's scan": ("scan", lambda q: scan_queues(q.connection)),
    "a queue's presence": ("exists", queue_exists),
    "a queue's numbers": ("evalsha", lambda q: numbers_of([q])),
    "a job's row": ("hgetall", lambda q: job_view(q, "waiting")),
    "a completed record": ("hgetall", lambda q: record_view(q, "done")),
    "a page of jobs": ("hmget", lambda q: job_page(q, State.DEAD, offset=0, count=10)),
    "a page of lane jobs": ("zrange", lambda q: job_page(q, "lane_active", offset=0, count=10)),
    "the workers list": ("smembers", lambda q: list_workers(q.connection)),
}


@pytest.mark.parametrize("read", LIBRARY_READS)
def test_a_link_that_drops_during_an_admin_read_is_connection_failed(node, wire, read):
    command, reads = LIBRARY_READS[read]
    command = "counts" if command == "evalsha" else command  # the verb's name, not its carrier
    with connect(node.url, wire=wire, socket_timeout=2) as conn:
        queue = Queue(conn, "q", serializer=RAW)
        with killed_at(node, command), pytest.raises(ConnectionFailed) as failed:
            reads(queue)
    assert command in str(failed.value), failed.value


def test_a_scan_reads_every_matching_key_a_step_at_a_time_on_the_send_path(conn, server):
    names = [f"scan-probe-{n}" for n in range(25)]
    with server.client() as client:
        client.mset({name: 1 for name in names})
    seen: list[list[str]] = []
    unsubscribe = hooks.subscribe("verb.start", lambda event, data: seen.append(list(data["verbs"])))
    try:
        found = sorted(conn.scan("scan-probe-*", count=10))
    finally:
        unsubscribe()
        with server.client() as client:
            client.delete(*names)
    assert found == sorted(name.encode() for name in names)
    assert len(seen) >= 2 and all(names == ["scan"] for names in seen)  # COUNT 10 over a whole keyspace: steps


#: what reads a node that may carry no brand yet, on a raw client, and the read its fault names
RAW_READS = {"doctor": (examine, "the doctor's reads"), "brand": (lambda client: brand_node(client, 4), "the brand"),
             "emq --version --url": (lambda client: facts_of(client, "url"), "the node's versions")}


@pytest.mark.parametrize("act", RAW_READS)
def test_a_link_that_drops_during_a_read_of_an_unbranded_node_is_connection_failed(node, act):
    """The doctor, the brand and ``emq --version --url`` read a node that may carry no brand yet, so
    on a raw client: the connection layer's mapping still makes a dropped link ConnectionFailed."""
    reads, named = RAW_READS[act]
    client = open_client(node.url, cluster=False, socket_timeout=2)
    node.kill()
    with pytest.raises(ConnectionFailed, match=named):
        reads(client)
    client.close()


#: each page and the read its request makes that the node dies under
PAGES = {"/": "smembers", "/workers": "smembers", "/metrics": "smembers", "/queues/q?state=dead": "hmget",
         "/queues/q/job?id=waiting": "hgetall", "/queues/q/job?id=done": "hpttl"}


@pytest.mark.parametrize("path", PAGES)
def test_a_link_that_drops_during_a_dashboard_page_is_its_error_page(node, wire, path):
    with connect(node.url, wire=wire, socket_timeout=2) as conn, \
            serving(conn, Settings(queues=["q"], sample_interval_s=60)) as url, httpx.Client(base_url=url) as site:
        assert site.get(path).status_code == 200
        with killed_at(node, PAGES[path]):
            down = site.get(path)
    assert down.status_code == 503 and "the node does not answer" in down.text
    assert "Traceback" not in down.text


#: an emq command, and the read it makes that the node dies under
COMMANDS = {
    "stats": (["stats"], "scan"),
    "stats -q": (["stats", "-q", "q"], "smembers"),
    "inspect (found by SCAN)": (["inspect", "waiting"], "scan"),
    "inspect -q": (["inspect", "-q", "q", "waiting"], "hgetall"),
    "dead": (["dead", "-q", "q"], "hmget"),
    "workers": (["workers"], "smembers"),
    "events": (["events", "-q", "q"], "hget"),
    "pause": (["pause", "-q", "q"], "exists"),
    "reprocess --all": (["reprocess", "-q", "q", "--all"], "zrange"),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_link_that_drops_during_an_emq_read_is_one_line_and_exit_1(node, command):
    args, read = COMMANDS[command]
    with killed_at(node, read):
        done = CliRunner().invoke(main, [*args, "--url", node.url])
    assert done.exit_code == 1, (done.output, done.exception)
    assert done.stderr.startswith("Error: the link to Valkey failed during") and done.stderr.count("\n") == 1, \
        done.stderr
    assert "Traceback" not in done.output and isinstance(done.exception, SystemExit)
