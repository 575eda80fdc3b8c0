"""The markers ``slow``, ``cluster`` and ``browser`` (tests/support/markers.py): what decides them,
that the collection hook in tests/conftest.py applies them, and that each is registered strictly.
No server."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from support.markers import BY_FIXTURE, BY_NAME, SLOW_TOO, markers_for, on_other_wire
from support.processes import ROOT


@pytest.mark.parametrize("fixtures, name, marked, added", [
    (["conn", "queue", "wire"], "test_plain", [], set()),
    (["cluster4"], "test_x", [], {"cluster", "slow"}),
    (["cluster"], "test_x", ["timeout"], {"cluster", "slow"}),
    (["browser", "page"], "test_x", [], {"browser", "slow"}),
    (["spawn", "out", "server"], "test_x", [], {"slow"}),
    ([], "test_x", ["cluster"], {"slow"}),  # a module's pytestmark: slow follows
    ([], "test_x", ["slow"], set()),  # nothing twice
    (["cluster6"], "test_x", ["cluster", "slow"], set()),
    ([], "test_a_waiter_rides_out_a_failover", [], {"cluster", "slow"}),
    ([], "test_a_promote_reads_the_schedules_head_and_runs_again_when_it_falls_due", [], {"slow"}),
])
def test_a_test_gets_the_markers_of_what_it_uses(fixtures, name, marked, added):
    assert markers_for(fixtures, name, marked) == added


def test_the_markers_given_are_the_registered_ones_and_strict():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in options["markers"]}
    given = {m for markers in [*BY_FIXTURE.values(), *BY_NAME.values()] for m in markers} | SLOW_TOO | {"slow"}
    assert given == registered == {"slow", "cluster", "browser"}
    assert "--strict-markers" in options["addopts"].split()


def test_every_name_marked_by_hand_names_a_test():
    defined = {match for path in (ROOT / "tests").rglob("test_*.py")
               for match in re.findall(r"^(?:async )?def (test_\w+)\(", path.read_text(), re.M)}
    assert set(BY_NAME) <= defined, sorted(set(BY_NAME) - defined)


def test_the_hook_marks_a_test_from_its_fixtures(request, out):
    """``out``, the folder of a test's worker processes, makes it slow."""
    assert request.node.get_closest_marker("slow") is not None


@pytest.mark.browser
def test_a_browser_or_cluster_test_marked_by_hand_is_slow_too(request):
    assert request.node.get_closest_marker("slow") is not None


def test_a_test_that_uses_nothing_heavy_is_in_the_quick_set(request, conn, tmp_path):
    assert not {"slow", "cluster", "browser"} & {mark.name for mark in request.node.iter_markers()}


@pytest.mark.parametrize("params, wire, left_out", [
    ({"wire": 4}, "6", True),
    ({"wire": 6}, "6", False),
    ({"wire": "4"}, "6", True),  # a module's own parameter, as text
    ({"wire": 4}, None, False),  # no --wire: both
    ({}, "4", False),  # a test of no wire runs on either
    ({"wire": 5}, "4", False),  # a bad wire a test feeds is no wire to choose
    ({"echomq_wire": 4}, "6", False),
])
def test_wire_leaves_out_the_other_wires_tests(params, wire, left_out):
    assert on_other_wire(params, wire) is left_out


@pytest.mark.slow  # a pytest process of its own
def test_one_wire_is_collected_with_the_tests_of_no_wire():
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "--wire", "6", "tests/test_partitions.py"], cwd=ROOT, capture_output=True, text=True,
                               timeout=120)
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert ids and not [i for i in ids if "wire4" in i], collected.stdout
    assert [i for i in ids if "wire6" in i] and [i for i in ids if "[" not in i], ids
