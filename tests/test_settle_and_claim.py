"""Queue.settle_and_claim: a batch's settles and the next claims in one round trip (wire 6),
two on wire 4 (its pause read rides with the settles; the claims follow unless paused)."""

from __future__ import annotations

import pytest

from echomq import LeaseLost
from support.queues import round_trips as sent_round_trips

LEASE = 30_000


@pytest.fixture
def round_trips():
    """Each round trip sent from now on, as its verbs."""
    with sent_round_trips() as sent:
        yield sent


def test_settles_then_claims_in_the_fewest_round_trips(queue, wire, round_trips):
    queue.enqueue_many([{"n": i} for i in range(5)])
    held = queue.claim_many(2, LEASE)
    round_trips.clear()
    answers, nxt = queue.settle_and_claim([queue.complete_call(job) for job in held], 2, LEASE)
    assert answers == [1, 1]
    assert [job.payload["n"] for job in nxt] == [2, 3]
    assert len(round_trips) == 1  # on wire 4 the pause read rides with the settles and the claims
    counts = queue.counts()
    assert (counts.pending, counts.active) == (1, 2)
    assert queue.metrics()["completed"] == 2


def test_paused_settles_but_claims_nothing(queue):
    queue.enqueue_many(["a", "b", "c"])
    held = queue.claim_many(1, LEASE)
    queue.pause()
    answers, nxt = queue.settle_and_claim([queue.complete_call(held[0])], 2, LEASE)
    assert answers == [1] and nxt == []
    assert queue.counts().pending == 2
    queue.resume()
    assert len(queue.settle_and_claim([], 5, LEASE)[1]) == 2


def test_a_lost_lease_is_answered_not_raised(queue):
    queue.enqueue("x")
    (job,) = queue.claim_many(1, LEASE)
    queue.complete(job)
    answers, nxt = queue.settle_and_claim([queue.complete_call(job)], 1, LEASE)
    assert isinstance(answers[0], LeaseLost) and nxt == []


@pytest.mark.parametrize("count", [0, 3])
def test_nothing_to_settle_or_nothing_to_claim(queue, count):
    assert queue.settle_and_claim([], 0, LEASE) == ([], [])
    queue.enqueue_many(["a", "b", "c"])
    held = queue.claim_many(3, LEASE)
    answers, nxt = queue.settle_and_claim([queue.complete_call(j) for j in held], count, LEASE)
    assert answers == [1, 1, 1] and nxt == []


def test_the_worker_s_unchecked_settles_are_the_checked_calls(queue):
    """checked_already skips the SPEC §3 re-check for a job this process claimed (the worker's success
    path): it builds the very call the checked path does, flat or lane, and that call settles."""
    queue.enqueue_many(["a", "b"])
    queue.enqueue("c", group="g")
    held = queue.claim_many(2, LEASE) + queue.claim_lanes(1, LEASE)
    assert [job.group for job in held] == [None, None, "g"]
    for job in held:
        assert queue.complete_call(job, checked_already=True) == queue.complete_call(job)
        assert (queue.publish_call(job, b"null", retention_ms=60_000, checked_already=True)
                == queue.publish_call(job, b"null", retention_ms=60_000))
    calls = [queue.complete_call(held[0], checked_already=True)]
    if queue.connection.supports("publish"):
        calls.append(queue.publish_call(held[1], b"1", retention_ms=60_000, checked_already=True))
    else:
        calls.append(queue.complete_call(held[1], checked_already=True))
    calls.append(queue.publish_call(held[2], b"2", retention_ms=60_000, checked_already=True))
    assert queue.settle_many(calls) == [True, True, True]
    assert queue.counts().active == 0 and queue.counts().lane_active == 0
