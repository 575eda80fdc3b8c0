"""Fixtures for the trafikey tests: real valkey-server processes with the module loaded,
raw EMQ.* commands, no mocks (helpers in native_helpers.py)."""

from __future__ import annotations

import pytest

from echomq import EmbeddedServer, module_path
from native_helpers import NativeQueue


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
