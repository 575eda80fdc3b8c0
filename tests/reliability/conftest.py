"""The cluster test modules take ``cluster``: the session's local three-primary cluster of the test's
wire (``cluster4``, ``cluster6``: tests/conftest.py); each test uses queues of its own."""

from __future__ import annotations

import pytest


@pytest.fixture
def cluster(wire, request):
    return request.getfixturevalue(f"cluster{wire}")
