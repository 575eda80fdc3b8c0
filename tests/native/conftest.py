"""Fixtures for the trafikey tests: real valkey-server processes with the module loaded,
raw EMQ.* commands, no mocks (helpers in native_helpers.py)."""

from __future__ import annotations

import pytest
import valkey

from echomq import EmbeddedServer, module_path
from support.native import NativeQueue
from support.queues import fresh_name


@pytest.fixture(scope="session")
def native_server():
    with EmbeddedServer(module=module_path()) as server:
        yield server


@pytest.fixture
def c(native_server):
    client = native_server.client()
    yield client
    client.close()


@pytest.fixture
def nq(c):
    return NativeQueue(c)


@pytest.fixture(scope="session")
def run_id(native_server):
    return native_server.run_id()


@pytest.fixture
def admin(native_server):
    client = native_server.client()
    yield client
    client.close()


@pytest.fixture
def make_user(native_server, admin):
    """A client logged in as a fresh ACL user with ``rules``; every user is deleted after the test."""
    made = []

    def make(*rules: str) -> valkey.Valkey:
        name = fresh_name("user")
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules)
        made.append(name)
        return native_server.client(username=name, password="pw", socket_timeout=10)

    yield make
    for name in made:
        admin.execute_command("ACL", "DELUSER", name)
