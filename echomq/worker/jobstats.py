"""A worker's figures per queue and task: how many jobs came to each outcome, how long they ran and
waited, their failures by error type and the last of them, kept as the jobs settle (by the batch:
a settle's run times in one call, a claim's waits in another) and summarised for the heartbeat
(:mod:`echomq._core.summaries`: since the worker started, and over the last :data:`WINDOW_S` seconds,
from the snapshots it took at its beats). ``emq worker --metrics-port`` exports the same figures,
labelled by queue and task.

A task's label is its name as the app knows it (``Task.name``: ``name=``, else its handler's): code,
never a job's data, so the labels a worker exports are bounded by its app. A job counts under the
task it runs (the one its headers name, else its queue's one task: ``Held.task``); a job that runs
none (a task its app lacks, headers that cannot be read) under its queue's first task.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import deque
from typing import Callable, Sequence

from .._core.summaries import (ERRORS_KEPT, OTHER_ERROR, OUTCOMES, WINDOW_S, Buckets, Figures, TaskSummary,
                               encode_summary)
from .._core.workers import LastError
from .._protocol.shown import clip
from . import policy

#: upper bounds (s) of the run-time histogram: Prometheus' defaults, then up to ten minutes
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
#: upper bounds (s) of the pending-wait histogram: from a millisecond to an hour
WAIT_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0)


class Histogram:
    """Observations counted into fixed buckets, with their sum: what a Prometheus histogram
    exports, kept without ``prometheus_client`` (a worker runs without it).

    Observed values are kept as they come and binned in bulk -- sorted once, then each bound's
    count is one binary search -- when a snapshot is read or :data:`BIN_AT` of them gathered
    (which bounds the memory). Binning each value as it came cost ~2k instructions a value,
    twice a job (its pending wait, its run time); in bulk it is a few hundred."""

    #: values kept unbinned at most: then they are binned (a worker nobody scrapes holds no more)
    BIN_AT = 1024

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        #: observing (the worker's control thread) and binning for a snapshot (a scrape's thread) take turns
        self._lock = threading.Lock()
        self._unbinned: list[float] = []
        self._at_most: list[int] = [0] * len(self.bounds)  #: how many binned values were <= each bound
        self._count = 0
        self._sum = 0.0

    def observe_many(self, values: list[float]) -> None:
        """Observe each of ``values`` (a claim batch's, a settle's: one call, one lock)."""
        with self._lock:
            self._unbinned += values
            if len(self._unbinned) >= self.BIN_AT:
                self._bin()

    def _bin(self) -> None:
        """Under the lock: the values kept so far into the counts and the sum."""
        values, self._unbinned = self._unbinned, []
        self._sum = sum(values, self._sum)  # in the order observed
        self._count += len(values)
        values.sort()
        for at, bound in enumerate(self.bounds):
            self._at_most[at] += bisect_right(values, bound)

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """The cumulative count at each bound (the last at +Inf) and the sum, read together."""
        with self._lock:
            self._bin()
            return [*zip(self.bounds, self._at_most), (float("inf"), self._count)], self._sum


#: the last error a worker's record keeps: its text cut to this many characters (the row keeps it whole)
LAST_ERROR_CHARS = 200


def error_type(outcome: policy.Outcome | None) -> str:
    """The type a failure is counted under (pure): the exception's class name; ``Retry`` for a
    handler that asked for one."""
    if isinstance(outcome, (policy.Raised, policy.Undecodable)):
        return type(outcome.error).__name__
    if isinstance(outcome, policy.RetryAsked):
        return "Retry"
    return "(unknown)"


class TaskStats:
    """One queue's task in this worker: counts by outcome, run and wait histograms, failures by type."""

    __slots__ = ("counts", "run", "waited", "errors")

    def __init__(self) -> None:
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.run = Histogram(DURATION_BUCKETS_S)
        self.waited = Histogram(WAIT_BUCKETS_S)
        self.errors: dict[str, int] = {}

    def failed(self, kind: str) -> None:
        """One more failure of ``kind`` (past ERRORS_KEPT kinds, counted as OTHER_ERROR)."""
        if kind not in self.errors and len(self.errors) >= ERRORS_KEPT:
            kind = OTHER_ERROR
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def figures(self) -> Figures:
        """A snapshot of everything so far."""
        return Figures(dict(self.counts), _buckets(self.run), _buckets(self.waited), dict(self.errors))


def _buckets(histogram: Histogram) -> Buckets:
    cumulative, total = histogram.snapshot()
    return Buckets(histogram.bounds, tuple(count for _, count in cumulative), total)


class JobStats:
    """Every queue's task this worker ran, and the snapshots its window is taken from (one at each beat,
    kept for :data:`WINDOW_S`). Counted on the worker's control thread; summarised on it too (a beat)
    and read by a scrape's thread, which only reads histograms (each behind its lock) and copies ints."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        self.window_s, self.clock = window_s, clock
        self.started = clock()
        self.tasks: dict[tuple[str, str], TaskStats] = {}
        #: what this worker's stall sweeps found, per queue (no task: a sweep reads no payload)
        self.sweeps: dict[str, dict[str, int]] = {}
        self.last_error: LastError | None = None
        #: (at, each key's figures then): the beats' snapshots, the oldest first
        self._snapshots: deque[tuple[float, dict[tuple[str, str], Figures]]] = deque()
        self._lock = threading.Lock()  #: a new key is added under it, so a scrape can list them

    def of(self, queue: str, task: str) -> TaskStats:
        found = self.tasks.get((queue, task))
        if found is None:
            with self._lock:
                found = self.tasks.setdefault((queue, task), TaskStats())
        return found

    def keys(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.tasks)

    def swept(self, queue: str, outcome: str) -> None:
        """A job one of this worker's sweeps of ``queue`` recovered or killed (``stalled``, ``recovered``,
        ``stalled_dead``)."""
        counts = self.sweeps.get(queue)
        if counts is None:
            with self._lock:
                counts = self.sweeps.setdefault(queue, {})
        counts[outcome] = counts.get(outcome, 0) + 1

    def failed(self, queue: str, task: str, outcome: policy.Outcome | None, job_id: str, error: str) -> None:
        """A failure (retried or dead): counted by type, and the worker's last error."""
        self.of(queue, task).failed(error_type(outcome))
        self.last_error = LastError(self.clock(), queue, task, job_id, clip(error, LAST_ERROR_CHARS))

    def summary(self) -> str:
        """The stats key's value now (:func:`echomq._core.summaries.encode_summary`), this beat's
        snapshot kept for the windows of the beats to come."""
        now = self.clock()
        current = {key: stats.figures() for key, stats in list(self.tasks.items())}
        self._snapshots.append((now, current))
        while len(self._snapshots) > 1 and self._snapshots[1][0] <= now - self.window_s:
            self._snapshots.popleft()  # the oldest kept is the last at or before the window's start
        since, before = self._snapshots[0]
        if since > now - self.window_s:  # the worker is younger than the window: from its start
            since, before = self.started, {}
        tasks = [TaskSummary(queue, task, figures, figures.minus(before[queue, task]) if (queue, task) in before
                             else figures, now - since) for (queue, task), figures in current.items()]
        return encode_summary(now, tasks, DURATION_BUCKETS_S, WAIT_BUCKETS_S)


class Summed:
    """A histogram of every task's together, read as one (:class:`Timings`): ``snapshot`` sums theirs."""

    def __init__(self, stats: JobStats, which: str, bounds: Sequence[float]) -> None:
        self.stats, self.which, self.bounds = stats, which, tuple(bounds)

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """The cumulative count at each bound (the last at +Inf) and the sum, over every task."""
        summed = Buckets.empty(self.bounds)
        for key in self.stats.keys():
            summed = summed.plus(_buckets(getattr(self.stats.tasks[key], self.which)))
        return [*zip((*self.bounds, float("inf")), summed.counts)], summed.total


class Timings:
    """How long this worker's jobs ran and waited, every task's together: every ``duration_s`` and
    ``waited_s`` its ``job.*`` events carry (``worker.timings.duration.snapshot()``); per queue and
    task in :class:`JobStats`, which the worker observes by batch."""

    def __init__(self, stats: JobStats) -> None:
        self.duration = Summed(stats, "run", DURATION_BUCKETS_S)
        self.waited = Summed(stats, "waited", WAIT_BUCKETS_S)
