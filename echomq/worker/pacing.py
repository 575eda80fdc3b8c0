"""Pacing: when each queue is claimed next and how many, from what its claims found (no I/O, no clock).

A queue that gives jobs is claimed again at once, in batches; one whose claim came back empty is
**idle** -- a waiter watches it (:mod:`echomq.worker.waiting`), or, without one, it is polled again
after a back-off -- and a wake or a block's end claims it afresh. A rate limit that held a claim is
waited out. Flat and lane claims share a round (:func:`policy.split_claims`); a queue's flow sets are
polled on their own back-off. A stop ends every claim. The worker's loop tells this what each claim
found and asks it what to claim; :mod:`echomq.worker.policy` decides each number.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable

from . import policy
from .._core.claims import Claims
from .config import WorkerConfig


class Pacing:
    """The claims of a worker's ``queues``: what each found last, and when each is due."""

    def __init__(self, queues: Iterable[str], config: WorkerConfig) -> None:
        names = list(queues)
        self.idle_backoff = config.idle
        self.claim_batch = config.claim_batch
        #: a busy queue's flow sets back off as an empty queue does, up to flow_poll_max_ms
        self.flow_backoff = replace(config.idle, max_ms=max(config.idle.min_ms, config.flow_poll_max_ms))
        #: idle queues are waited on (set once the waiters start), not polled
        self.blocking = False
        #: no more claims (a signal, stop(), max_jobs, shutdown): set with stop_at, a plain attribute as
        #: the loop reads it several times a step
        self.stopping = False
        self.stop_at: float | None = None  #: the local time the jobs held have until (inf: their end)
        self.idle: set[str] = set()  #: queues whose last claim came back empty: a waiter watches them
        #: queues a wake marker woke whose round after it is still to come (None) or out (its free
        #: slots): that round's claims decide whether the wake is passed on (policy.pass_wake_on)
        self.marker_woken: dict[str, int | None] = {}
        self.paused: set[str] = set()  #: wire 4: idle queues whose last claim read the pause flag
        #: wire 4: what each queue's last pause read said (it rides with the flat claims only)
        self.pause_read = {name: False for name in names}
        self.no_lanes: set[str] = set()  #: queues whose last lane claim said they never had a lane job
        self.empty_polls = {name: 0 for name in names}
        #: whether the last flat and the last lane claims of each queue gave jobs (policy.split_claims)
        self.found = {name: (True, True) for name in names}
        self.rounds = {name: 0 for name in names}  #: claim rounds per queue: whose turn a lone claim is
        self.next_poll = {name: 0.0 for name in names}
        #: flow jobs are claimed from their own sets (FLOW_CLAIM), which no blocking claim serves: a busy
        #: queue's are polled with the idle back-off (at once again while they give jobs, or after a flow
        #: job settles here); an idle one's when its waiter's block ends (waiter.flow_poll_triggers)
        self.empty_flow_polls = {name: 0 for name in names}
        self.next_flow_poll = {name: 0.0 for name in names}

    def stop_claiming(self, at_ms: float) -> None:
        """No claims from here on; the jobs held get until ``at_ms`` (local ms) to finish."""
        self.stop_at = at_ms
        self.stopping = True  # after stop_at: a thread that reads it true finds the time set

    # -- flat and lane claims ---------------------------------------------------------
    def plan(self, name: str, now: float, capacity: int, watched: Callable[[str], bool]) -> tuple[int, int]:
        """How many flat and lane claims to send ``name`` in this round, ``capacity`` slots free:
        none while stopping, while a waiter watches it (``watched``), or before its next poll."""
        count = 0
        idle = name in self.idle and watched(name)  # else an idle queue is polled (polled)
        if not self.stopping and not idle and now >= self.next_poll[name]:
            count = policy.claim_batch(capacity, self.empty_polls[name], self.claim_batch)
        flat, lanes = policy.split_claims(count, capacity, *self.found[name], self.rounds[name], name in self.no_lanes)
        self.rounds[name] += bool(count)
        if count and name in self.marker_woken:
            self.marker_woken[name] = capacity
            flat, lanes = policy.woken_claims(flat, lanes, capacity)
        return flat, lanes

    def claimed(self, name: str, now: float, flat: int, lanes: int, jobs: Claims) -> bool:
        """What a round of ``flat`` and ``lanes`` claims of ``name`` found; True when the caller
        passes a wake marker's wake on (:func:`policy.pass_wake_on`). A rate limit's wait
        (``jobs.wait_ms``) is the caller's to pass on (:meth:`rate_wait`), at its own clock."""
        capacity = self.marker_woken.pop(name, None)
        self.found[name] = found = policy.claims_found(self.found[name], flat, lanes, jobs)
        if lanes:
            (self.no_lanes.add if jobs.no_lanes else self.no_lanes.discard)(name)
        if flat:  # a round of lane claims alone reads no pause: the last read stands
            self.pause_read[name] = jobs.paused
        self.polled(name, now, found=any(found), paused=self.pause_read[name])
        return capacity is not None and policy.pass_wake_on(flat, lanes, jobs, capacity)

    def polled(self, name: str, now: float, *, found: bool, paused: bool) -> None:
        """After a claim: claim again at once while the queue gives jobs; else a waiter watches it
        (or, without one, poll again after a back-off). While every slot is taken no waiter can
        (wire 6's would claim a job the worker cannot take): exchanges poll an idle queue no waiter
        watches with that back-off, so a busy queue cannot keep a quiet one waiting till it drains."""
        if found:
            self.empty_polls[name] = 0
            self.busy(name)
            return
        self.empty_polls[name] += 1
        self.next_poll[name] = now + policy.idle_interval_ms(self.idle_backoff, self.empty_polls[name])
        if self.blocking:
            # the claim after its next wake is one, not a batch: a wake at a block's timeout (the
            # backstop) usually finds nothing, and a single job is the common reason for a wake
            self.idle.add(name)
            if paused:
                self.paused.add(name)
            else:
                self.paused.discard(name)

    def busy(self, name: str) -> None:
        """``name`` has jobs, or may: no waiter watches it, and the exchanges claim it from now on,
        not after the back-off of the empty claims before (:meth:`polled`)."""
        self.idle.discard(name)
        self.next_poll[name] = 0.0

    def claim_afresh(self, name: str) -> None:
        """Something in ``name`` may be claimable now (a wake, a promote, a block's timeout): claim it,
        each kind as if it had given jobs last time (the lanes unless the queue never had any). What a
        kind's claim found before says nothing now: a lone claim that probes the lanes must not leave
        the queue idle over a flat job, nor a lone flat claim over a lane job."""
        self.busy(name)
        self.found[name] = (True, name not in self.no_lanes)

    def woken(self, name: str, marker: bool = False) -> None:
        """A block on ``name`` ended (a wake marker popped: ``marker``, or its timeout): claim it
        afresh, the lanes probed too (the marker may be a lane script's)."""
        self.no_lanes.discard(name)
        self.claim_afresh(name)
        if marker:
            self.marker_woken[name] = None

    def rate_wait(self, name: str, now: float, wait_ms: int) -> None:
        """The queue's rate limit held a claim: claim it again (a batch) when its window frees, not
        before, and not through a waiter (no write signals a window freeing)."""
        self.idle.discard(name)
        self.empty_polls[name] = 1  # then one claim, not a batch: a window frees a start at a time
        self.next_poll[name] = now + wait_ms

    def came_back_empty(self, name: str) -> bool:
        """The last claim of ``name`` found nothing."""
        return name in self.idle if self.blocking else self.empty_polls[name] > 0

    def next_claim_ms(self, claim_at: float) -> float:
        """When the next claim of a queue no waiter watches, or the next flow poll, is due; a claim not
        before ``claim_at`` (0: whenever)."""
        times = [max(at, claim_at) for name, at in self.next_poll.items() if name not in self.idle]
        return min([*times, *self.next_flow_poll.values()], default=float("inf"))

    # -- flow claims ------------------------------------------------------------------
    def flows_due(self, name: str, now: float) -> bool:
        return now >= self.next_flow_poll[name]

    def flows_claimed(self, name: str, now: float, *, found: bool, due_ms: int | None, slack_ms: int) -> None:
        """What a flow claim of ``name`` found (FLOW_CLAIM's ``due_ms``: :class:`Claims`): when to poll
        its flow sets next (policy.next_flow_poll_ms)."""
        self.empty_flow_polls[name] = 0 if found else self.empty_flow_polls[name] + 1
        self.next_flow_poll[name] = policy.next_flow_poll_ms(
            now, found=found, due_ms=due_ms, idle_blocking=self.blocking and name in self.idle,
            empty_polls=self.empty_flow_polls[name], backoff=self.flow_backoff, slack_ms=slack_ms)

    def poll_flows(self, names: Iterable[str] | None = None, at: float = 0.0) -> None:
        """Poll the flow sets of ``names`` (None: every queue's) at ``at``: a flow job settled (its parent
        may be ready), a block ended, the reaper put flow jobs back."""
        for name in self.next_flow_poll if names is None else names:
            self.next_flow_poll[name] = at

    def flows_came_back_empty(self) -> bool:
        """Every queue's last flow claim found nothing."""
        return all(polls > 0 for polls in self.empty_flow_polls.values())
