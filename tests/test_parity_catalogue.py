"""The parity catalogue on a script node and a native node of their own (SPEC §8): every
verb's ordinary path and every §5 edge, each equal or a named difference, none UNEXPECTED.
The native node has a replica (a plain server, no module) and its append-only file on: after
every case the replica, once caught up, and the dataset reloaded from the AOF hold exactly the
native node's dataset (DEBUG DIGEST), so merged effects replay to the same bytes (issue 18)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pytest

from echomq import EmbeddedServer, module_path
from echomq.parity import main
from echomq.parity.cases import CATALOGUE, EDGES, ORDINARY
from echomq.parity.differences import NAMED
from echomq.parity.report import result_text
from echomq.parity.runner import Pair
from echomq.parity.steps import Do
from echomq._protocol.verbs import READS, VERBS
from support.dataset import digest
from support.waiting import caught_up

pytestmark = pytest.mark.slow  # every parity case on a pair of nodes and a replica


@dataclass
class Run:
    results: dict = field(default_factory=dict)
    #: cases after which the replica's or the reloaded AOF's digest was not the native node's
    replica_differs: list = field(default_factory=list)
    aof_differs: list = field(default_factory=list)
    compared: int = 0  #: cases that ended with data (a digest other than the empty dataset's)


@pytest.fixture(scope="module")
def run():
    out = Run()
    pair = Pair(module=module_path())
    # a Restart step's resync starts at once, not after the default 5 s wait for more replicas
    pair.native.server.extra_args += ("--repl-diskless-sync-delay", "0")
    with pair, \
            EmbeddedServer(replicaof=("127.0.0.1", pair.native.server.port)) as replica:
        with replica.client() as r:
            for case in CATALOGUE:
                out.results[case.name] = pair.run_case(case)
                native = pair.native.client  # a Restart step reconnects it
                caught_up(native, r)
                if digest(r) != digest(native):
                    out.replica_differs.append(case.name)
                held = digest(native)
                out.compared += held != b"0" * 40
                native.execute_command("DEBUG", "LOADAOF")
                if digest(native) != held:
                    out.aof_differs.append(case.name)
    yield out


@pytest.fixture(scope="module")
def results(run):
    return run.results


def test_a_replica_and_the_aof_hold_the_native_nodes_dataset_after_every_case(run):
    assert len(run.results) == len(CATALOGUE)
    assert run.compared > len(CATALOGUE) // 2
    assert run.replica_differs == []
    assert run.aof_differs == []


def explain(result) -> str:
    lines = []
    for step in result.steps:
        if step.verdict.kind != "equal":
            lines += [f"#{step.index} {step.step}"] + ["    " + line for line in result_text(step.verdict)]
    return "\n".join(lines)


@pytest.mark.parametrize("name", [case.name for case in CATALOGUE])
def test_case_is_equal_or_named(results, name):
    result = results[name]
    assert not result.unexpected, explain(result)
    assert not result.missed, f"{name} was written to show {sorted(result.missed)}:\n{explain(result)}"


@pytest.mark.parametrize("name", [case.name for case in ORDINARY])
def test_ordinary_paths_are_equal_step_by_step(results, name):
    assert all(step.verdict.kind == "equal" for step in results[name].steps), explain(results[name])


def test_every_verb_has_an_ordinary_case_and_every_named_difference_an_edge(results):
    ordinary_verbs = {step.verb for case in ORDINARY for step in case.steps if isinstance(step, Do)}
    assert {verb.name for verb in VERBS + READS} <= ordinary_verbs
    shown = set().union(*(results[case.name].names for case in EDGES))
    assert shown == set(NAMED)


def test_the_script_side_shows_what_it_left_behind_when_it_fails_halfway(results):
    step = next(s for s in results["claim.edge.lease-not-a-number"].steps if s.verdict.kind == "named")
    left = {(d.key, d.part) for d in step.verdict.left_behind}
    assert (b"emq:{q}:job:a", "field attempts") in left and (b"emq:{q}:job:a", "field state") in left


def test_the_command_prints_the_table_and_a_total():
    out = io.StringIO()
    assert main(["--case", "fail.*", "--brief"], out=out) == 0
    text = out.getvalue()
    assert "differs as §5.5" in text and "0 UNEXPECTED" in text and text.rstrip().endswith("s")


def test_the_instrument_finds_no_difference_between_two_script_nodes():
    """No false alarm from two clocks, two processes and two AOFs: the instrument against itself."""
    with Pair(module=None) as pair:
        for case in CATALOGUE:
            pair.run_case(case)
        assert pair.tally.steps == pair.tally.equal, pair.tally
