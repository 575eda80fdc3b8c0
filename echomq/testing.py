"""Helpers for testing code that uses EchoMQ, with a real server (no mocks).

**A server per wire, as pytest fixtures.** Installed with the package as a pytest plugin
(entry point ``echomq.testing``; or list ``pytest_plugins = ["echomq.testing"]``):

* ``echomq_server`` -- an embedded valkey-server branded for ``echomq_wire``, started once
  per session and wire, and flushed (and branded again) after every test;
* ``echomq_wire`` -- 4 unless you parametrize it: ``@pytest.mark.parametrize("echomq_wire", [4, 6])``
  (wire 6 needs the trafikey module: ``emq module-path``);
* ``echomq_connection`` -- an :class:`echomq.Connection` to it.

**Running jobs in-process.** :func:`drain` runs an app's handlers on a queue until it is
empty (a burst :class:`~echomq.Worker` in this thread) and returns what they did.

**Asserting.** :func:`assert_enqueued` checks what is waiting in a queue.

    def test_signup_sends_a_welcome(echomq_connection):
        emails = echomq.Queue(echomq_connection, "emails")
        signup("ada@example.com", emails)
        assert_enqueued(emails, {"to": "ada@example.com"})
        assert drain(app, emails).completed == 1
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from .admin.steps import brand_node
from ._client.connection import Connection, connect
from ._protocol.keys import State
from .local.module import module_path
from ._client.partitioned import PartitionedQueue
from .worker.policy import IdlePolicy
from ._client.queue import Queue
from .local.server import EmbeddedServer
from .worker.tasks import App
from .worker.timers import TimerConfig
from .worker.worker import Tally, Worker, WorkerConfig

__all__ = ["ANY", "assert_enqueued", "drain", "embedded_server", "enqueued"]

ANY: Any = object()  #: matches any payload in :func:`assert_enqueued`
_PAGE = 1000


@contextmanager
def embedded_server(wire: int = 4) -> Iterator[EmbeddedServer]:
    """A branded embedded server for ``wire`` (6 loads trafikey), stopped on exit."""
    if wire not in (4, 6):
        raise ValueError(f"bad wire {wire!r}: 4 (scripts) or 6 (trafikey)")
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
        yield server


def drain(app: App, queue: Queue | PartitionedQueue, *, concurrency: int = 1, timeout_s: float = 30.0) -> Tally:
    """Run ``app``'s handler for ``queue`` in this process until the queue is empty: nothing
    pending, nothing scheduled (a retry's backoff is waited for), nothing held. Returns the
    worker's :class:`~echomq.Tally`. Raises ``TimeoutError`` if it is not empty after
    ``timeout_s`` (a job delayed far into the future, say). A partitioned queue is drained in
    all its partitions."""
    config = WorkerConfig(concurrency=concurrency, grace_s=0, burst=True,
                          idle=IdlePolicy(min_ms=1, max_ms=20), timers=TimerConfig(promote_interval_ms=10))
    worker = Worker(app, queue.connection, queues=[queue.name], config=config)
    timed_out = threading.Event()

    def give_up() -> None:
        timed_out.set()
        worker.stop("drain timed out")

    timer = threading.Timer(timeout_s, give_up)
    timer.daemon = True
    timer.start()
    try:
        tally = worker.run(install_signals=False)
    finally:
        timer.cancel()
    if timed_out.is_set():
        raise TimeoutError(f"queue {queue.name!r} was not empty after {timeout_s}s: {queue.counts()}")
    return tally


def enqueued(queue: Queue) -> list[dict[str, Any]]:
    """Every job waiting in ``queue`` (pending, then scheduled), each its row: ``id``, ``state``,
    ``payload`` (deserialized by the queue's serializer) and the row's other fields."""
    rows = []
    for state in (State.PENDING, State.SCHEDULED):
        offset = 0
        while page := queue.ids(state, offset=offset, count=_PAGE):
            for job_id, _ in page:
                row = queue.job(job_id)
                if row is not None:
                    rows.append({"id": job_id, **row})
            offset += len(page)
    return rows


def assert_enqueued(queue: Queue, payload: Any = ANY, *, count: int | None = None, id: str | None = None,
                    state: State | str | None = None) -> list[dict[str, Any]]:
    """Assert jobs matching ``payload`` (and ``id``, ``state`` when given) wait in ``queue``:
    at least one, or exactly ``count`` (0 asserts there is none). Returns the matching rows."""
    rows = enqueued(queue)
    matching = [
        row for row in rows
        if (payload is ANY or row["payload"] == payload) and (id is None or row["id"] == id)
        and (state is None or row["state"] == State(state).value)
    ]
    wanted = f"{count}" if count is not None else "at least one"
    if (count is None and not matching) or (count is not None and len(matching) != count):
        described = [f"{row['id']} ({row['state']}): {row['payload']!r}" for row in rows[:20]]
        what = f"payload {payload!r}" if payload is not ANY else "any payload"
        raise AssertionError(
            f"expected {wanted} job(s) with {what}" + (f", id {id!r}" if id else "") + (f", state {state}" if state else "")
            + f" in queue {queue.name!r}; found {len(matching)}. Waiting there: " + ("; ".join(described) or "nothing")
        )
    return matching


# -- the pytest plugin ------------------------------------------------------------------


@pytest.fixture(scope="session")
def echomq_servers() -> Iterator[dict[int, EmbeddedServer]]:
    """The session's embedded servers, one per wire, started when first asked for."""
    servers: dict[int, EmbeddedServer] = {}
    try:
        yield servers
    finally:
        for server in servers.values():
            server.cleanup()


@pytest.fixture
def echomq_wire() -> int:
    """The wire the ``echomq_*`` fixtures use: parametrize this name to change it."""
    return 4


@pytest.fixture
def echomq_server(echomq_servers: dict[int, EmbeddedServer], echomq_wire: int) -> Iterator[EmbeddedServer]:
    """An embedded server branded for ``echomq_wire``; empty at the start of each test."""
    server = echomq_servers.get(echomq_wire)
    if server is None:
        if echomq_wire not in (4, 6):
            raise ValueError(f"bad echomq_wire {echomq_wire!r}: 4 (scripts) or 6 (trafikey)")
        server = EmbeddedServer(module=module_path() if echomq_wire == 6 else None, brand=echomq_wire).start()
        echomq_servers[echomq_wire] = server
    try:
        yield server
    finally:
        with server.client() as client:  # the next test starts from an empty, branded node
            client.flushall()
            brand_node(client, echomq_wire)


@pytest.fixture
def echomq_connection(echomq_server: EmbeddedServer, echomq_wire: int) -> Iterator[Connection]:
    with connect(echomq_server.url, wire=echomq_wire) as connection:
        yield connection
