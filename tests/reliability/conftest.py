"""The local three-primary clusters (echomq.cluster.LocalCluster), one per wire, shared by the
cluster test modules of the session; each test uses queues of its own."""

from __future__ import annotations

import pytest

import echomq
from echomq.cluster import LocalCluster


@pytest.fixture(scope="session")
def cluster4():
    with LocalCluster(3, brand=4) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster6():
    with LocalCluster(3, module=echomq.module_path(), brand=6) as cluster:
        yield cluster


@pytest.fixture
def cluster(wire, request):
    return request.getfixturevalue(f"cluster{wire}")
