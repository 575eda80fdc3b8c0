"""Shared fixtures: real valkey-server processes, one per wire, shared by the session.

Every test gets a queue of its own (a fresh name), so tests share servers without
sharing state. ``wire`` parametrises the conformance tests over both executors (``--wire 6``
runs one). The helpers are in ``support/`` (its ``__init__`` says which module holds what);
the markers ``slow``, ``cluster`` and ``browser`` are given here, at collection, from what a
test uses (``support/markers.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from echomq import EmbeddedServer, Queue, connect, module_path
from echomq.local.cluster import LocalCluster
from echomq._protocol.serializers import RAW
from support import cli
from support.markers import markers_for, on_other_wire
from support.queues import fresh_name
from support.workers import WorkerProcess, forget_heartbeats


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--wire", choices=("4", "6"), help="run the tests of one wire (and those of none)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's markers from what it uses, and --wire's choice (support/markers.py decides)."""
    wire = config.getoption("--wire")
    other = [item for item in items if on_other_wire(getattr(getattr(item, "callspec", None), "params", {}), wire)]
    if other:
        config.hook.pytest_deselected(items=other)
        left_out = set(other)
        items[:] = [item for item in items if item not in left_out]
    for item in items:
        function = getattr(item, "originalname", item.name)
        marked = {mark.name for mark in item.iter_markers()}
        for name in sorted(markers_for(getattr(item, "fixturenames", ()), function, marked)):
            item.add_marker(name)


@pytest.fixture(scope="session")
def server4():
    with EmbeddedServer(brand=4) as server:
        yield server


@pytest.fixture(scope="session")
def server6():
    with EmbeddedServer(module=module_path(), brand=6) as server:
        yield server


@pytest.fixture(scope="session")
def cluster4():
    """A local three-primary cluster per wire (echomq.local.cluster.LocalCluster), shared by every module
    that runs on a cluster; each test uses queues of its own, and puts back any slot it moves."""
    with LocalCluster(3, brand=4) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster6():
    with LocalCluster(3, module=module_path(), brand=6) as cluster:
        yield cluster


@pytest.fixture(params=[4, 6], ids=["wire4", "wire6"])
def wire(request):
    return request.param


@pytest.fixture
def server(wire, request):
    return request.getfixturevalue(f"server{wire}")


@pytest.fixture
def conn(server, wire):
    with connect(server.url, wire=wire) as connection:
        yield connection


@pytest.fixture
def queue(conn):
    return Queue(conn, fresh_name())


@pytest.fixture
def raw_queue(conn):
    return Queue(conn, fresh_name(), serializer=RAW)


@pytest.fixture
def conn4(server4):
    with connect(server4.url, wire=4) as connection:
        yield connection


@pytest.fixture
def queue4(conn4):
    return Queue(conn4, fresh_name())


@pytest.fixture
def emq(server):
    """``emq(*args)`` runs the CLI in-process on the test's server (a module's own ``server``, when it
    defines one; ``url=`` another); returns the click Result."""

    def run(*args: str, url: str | None = None):
        return cli.emq(*args, url=url or server.url)

    return run


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """The folder of the test's worker processes: their logs and what their handler wrote."""
    return tmp_path


@pytest.fixture
def spawn(server, wire, out):
    """``spawn(queue, *args)`` starts a worker process on the test's server; all are killed at teardown."""
    started_procs: list[WorkerProcess] = []

    def start(queue: str, *args: str, env: dict | None = None) -> WorkerProcess:
        proc = WorkerProcess(server.url, wire, queue, out, *args, env=env)
        started_procs.append(proc)
        return proc

    yield start
    for proc in started_procs:
        proc.kill()
    forget_heartbeats(server.client(), {proc.pid for proc in started_procs})
