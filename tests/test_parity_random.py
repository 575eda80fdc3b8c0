"""Random sequences (hypothesis, stateful) on both nodes: every verb interleaved on two queues
with clocks, ghosts, lane rows, pauses and restarts. CI runs a bounded number with a fixed
seed; ``PARITY_LONG=1`` runs the long mode (>= 10,000 steps)."""

from __future__ import annotations

import os

import pytest

from echomq import module_path
from echomq.parity.plants import SCRIPT_PLANT
from echomq.parity.report import by_kind
from echomq.parity.runner import Pair, Tally
from echomq.parity.sequences import Unexpected, run_random, run_until

pytestmark = pytest.mark.slow  # random sequences on a pair of nodes, shrunk when they differ

SEED = 20260


@pytest.fixture(scope="module")
def pair():
    with Pair(module=module_path()) as pair:
        yield pair


def test_random_sequences_with_a_fixed_seed(pair):
    pair.tally = Tally()
    run_random(pair, examples=25, steps=30, seed=SEED)
    print("random:", by_kind(pair.tally))
    assert pair.tally.steps >= 400 and pair.tally.unexpected == 0


def test_a_planted_defect_fails_a_random_sequence_and_shrinks_to_a_short_one(pair):
    pair.set_script_plants([SCRIPT_PLANT["script:fail.keep_error"]])
    try:
        with pytest.raises(Unexpected) as caught:
            run_random(pair, examples=300, steps=20, seed=SEED, restarts=False)
    finally:
        pair.set_script_plants([])
    assert "last_error" in str(caught.value)


@pytest.mark.skipif(not os.environ.get("PARITY_LONG"), reason="long mode: set PARITY_LONG=1")
def test_long_mode(pair):
    pair.tally = Tally()
    steps = run_until(pair, min_steps=10_000, steps=50, seed=SEED)
    print("long mode:", by_kind(pair.tally))
    assert steps >= 10_000 and pair.tally.unexpected == 0
