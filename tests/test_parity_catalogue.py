"""The parity catalogue on a script node and a native node of their own (SPEC §8): every
verb's ordinary path and every §5 edge, each equal or a named difference, none UNEXPECTED."""

from __future__ import annotations

import io

import pytest

from echomq import module_path
from echomq.parity import main
from echomq.parity.cases import CATALOGUE, EDGES, ORDINARY
from echomq.parity.differences import NAMED
from echomq.parity.report import result_text
from echomq.parity.runner import Pair
from echomq.parity.steps import Do
from echomq.verbs import READS, VERBS


@pytest.fixture(scope="module")
def results():
    with Pair(module=module_path()) as pair:
        yield {case.name: pair.run_case(case) for case in CATALOGUE}


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
