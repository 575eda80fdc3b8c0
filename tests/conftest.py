"""Shared fixtures: real valkey-server processes, one per wire, shared by the session.

Every test gets a queue of its own (a fresh name), so tests share servers without
sharing state. ``wire`` parametrises the conformance tests over both executors.
"""

from __future__ import annotations


import pytest

import echomq
from echomq import EmbeddedServer, Queue, connect, module_path
from echomq.local.cluster import LocalCluster
from echomq._protocol.serializers import RAW
from helpers import fresh_name



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
