"""What a worker publishes about the jobs it ran, beside its heartbeat record (:mod:`echomq._core.workers`):
for each queue and task it serves, how many jobs came to each outcome, how long they ran and waited
(histograms) and their failures by error type, since it started and over the last minutes. The
dashboard sums them over the live workers (throughput, quantiles, failures by type, per queue and per
task) and exports them to Prometheus; the worker writes them with each beat, so they cost its jobs
nothing on the server.

One string key a worker, ``{emq}:worker-stats:<id>``, written with the record's TTL in the beat's round
trip and deleted with it: a JSON object::

    {"v": 1, "at": <unix s>, "run_le": [<bounds s>], "wait_le": [<bounds s>], "tasks": [
      {"queue": q, "task": t, "span_s": <the window's seconds>,
       "total": FIGURES, "window": FIGURES}]}

    FIGURES = {"n": {<outcome>: count}, "run": [<cumulative count at each bound, then +Inf>],
               "run_sum": <s>, "wait": [...], "wait_sum": <s>, "errors": {<error type>: count}}

Queue and task names are the worker's app's (its code's, never a job's); error types are the names
of the exception classes its handlers raised, at most :data:`ERRORS_KEPT` a task (the rest counted
as :data:`OTHER_ERROR`). Everything here is pure: the format, and the arithmetic readers do on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

STATS_PREFIX = "{emq}:worker-stats:"
#: the outcomes counted per queue and task (the worker's ``job.*`` events, as its tally names them)
OUTCOMES = ("claimed", "completed", "retried", "dead", "delayed", "lost", "requeued", "abandoned")
#: the outcomes that are a failure of the handler's attempt (counted by error type too)
FAILED = ("retried", "dead")
#: error types a task keeps apart: past them, failures count as OTHER_ERROR (the keys are bounded)
ERRORS_KEPT = 20
OTHER_ERROR = "(other)"
#: the summary's window: what "over the last minutes" means on the dashboard
WINDOW_S = 300.0
FORMAT = 1


def stats_key(worker_id: str) -> str:
    return STATS_PREFIX + worker_id


@dataclass(frozen=True)
class Buckets:
    """A histogram as Prometheus exports one: the cumulative count at each upper bound (the last at
    +Inf) and the sum of the values observed."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]  #: cumulative, one more than the bounds (+Inf)
    total: float = 0.0

    @classmethod
    def empty(cls, bounds: Sequence[float]) -> "Buckets":
        return cls(tuple(bounds), (0,) * (len(bounds) + 1))

    @property
    def count(self) -> int:
        return self.counts[-1]

    def plus(self, other: "Buckets") -> "Buckets":
        if other.bounds != self.bounds:
            return self  # a worker of another release bins otherwise: not summed
        return Buckets(self.bounds, tuple(a + b for a, b in zip(self.counts, other.counts)), self.total + other.total)

    def minus(self, before: "Buckets") -> "Buckets":
        """What was observed since ``before`` (an earlier snapshot of the same histogram)."""
        if before.bounds != self.bounds:
            return self
        return Buckets(self.bounds, tuple(max(0, a - b) for a, b in zip(self.counts, before.counts)),
                       max(0.0, self.total - before.total))

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) as Prometheus' ``histogram_quantile`` estimates it: linear within
        the bucket it falls in (from 0 for the first); the highest finite bound when it falls in
        +Inf; None when nothing was observed."""
        if not self.count:
            return None
        rank = q * self.count
        below, lower = 0, 0.0
        for bound, at_most in zip(self.bounds, self.counts):
            if at_most >= rank:
                inside = at_most - below
                return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
            below, lower = at_most, bound
        return self.bounds[-1] if self.bounds else None

    def encoded(self) -> list[int]:
        return list(self.counts)


@dataclass(frozen=True)
class Figures:
    """One queue's task's jobs over a span: counts by outcome, run and wait histograms, failures by type."""

    counts: Mapping[str, int]
    run: Buckets
    waited: Buckets
    errors: Mapping[str, int] = field(default_factory=dict)

    def plus(self, other: "Figures") -> "Figures":
        return Figures(_added(self.counts, other.counts), self.run.plus(other.run), self.waited.plus(other.waited),
                       _added(self.errors, other.errors))

    def minus(self, before: "Figures") -> "Figures":
        return Figures({k: max(0, v - before.counts.get(k, 0)) for k, v in self.counts.items()},
                       self.run.minus(before.run), self.waited.minus(before.waited),
                       {k: v - before.errors.get(k, 0) for k, v in self.errors.items()
                        if v - before.errors.get(k, 0) > 0})

    def encoded(self) -> dict[str, Any]:
        return {"n": dict(self.counts), "run": self.run.encoded(), "run_sum": self.run.total,
                "wait": self.waited.encoded(), "wait_sum": self.waited.total, "errors": dict(self.errors)}


def _added(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


@dataclass(frozen=True)
class TaskSummary:
    """What one worker says of one queue's task: since it started, and over its last ``span_s`` seconds
    (:data:`WINDOW_S`, less while the worker is younger)."""

    queue: str
    task: str
    total: Figures
    window: Figures
    span_s: float


def encode_summary(at: float, tasks: Iterable[TaskSummary], run_bounds: Sequence[float],
                   wait_bounds: Sequence[float]) -> str:
    """The stats key's value (pure)."""
    return json.dumps({"v": FORMAT, "at": at, "run_le": list(run_bounds), "wait_le": list(wait_bounds),
                       "tasks": [{"queue": t.queue, "task": t.task, "span_s": t.span_s, "total": t.total.encoded(),
                                  "window": t.window.encoded()} for t in tasks]}, separators=(",", ":"))


def decode_summary(text: str | bytes | None) -> list[TaskSummary]:
    """The tasks a stats key's value describes; none for a value that does not read as one (a worker of
    another format, or a key a raw command wrote): a reader shows what it can (pure)."""
    try:
        found = json.loads(text) if text else None
        if not isinstance(found, dict) or found.get("v") != FORMAT:
            return []
        run_le, wait_le = _bounds(found["run_le"]), _bounds(found["wait_le"])
        return [TaskSummary(str(t["queue"]), str(t["task"]), _figures(t["total"], run_le, wait_le),
                            _figures(t["window"], run_le, wait_le), float(t["span_s"])) for t in found["tasks"]]
    except (ValueError, KeyError, TypeError):
        return []


def _bounds(values: Any) -> tuple[float, ...]:
    bounds = tuple(float(v) for v in values)
    if any(not math.isfinite(b) for b in bounds) or list(bounds) != sorted(bounds):
        raise ValueError("bounds out of order")
    return bounds


def _figures(found: Any, run_le: tuple[float, ...], wait_le: tuple[float, ...]) -> Figures:
    def buckets(counts: Any, total: Any, bounds: tuple[float, ...]) -> Buckets:
        counted = tuple(int(c) for c in counts)
        if len(counted) != len(bounds) + 1:
            raise ValueError("a histogram of another shape")
        return Buckets(bounds, counted, float(total))

    return Figures({str(k): int(v) for k, v in found["n"].items()},
                   buckets(found["run"], found["run_sum"], run_le), buckets(found["wait"], found["wait_sum"], wait_le),
                   {str(k): int(v) for k, v in found["errors"].items()})


@dataclass(frozen=True)
class TaskTimes:
    """A queue's task over the live workers' windows, summed: what the dashboard shows."""

    queue: str
    task: str
    window: Figures
    per_s: float  #: jobs completed a second, each worker's over its own window, summed
    workers: int  #: how many live workers reported it
    span_s: float  #: the longest window among them

    def run_ms(self, q: float) -> float | None:
        value = self.window.run.quantile(q)
        return None if value is None else value * 1000

    def waited_ms(self, q: float) -> float | None:
        value = self.window.waited.quantile(q)
        return None if value is None else value * 1000

    @property
    def failures(self) -> list[tuple[str, int]]:
        """The window's failures by error type, the most first."""
        return sorted(self.window.errors.items(), key=lambda item: (-item[1], item[0]))


def over_workers(summaries: Iterable[Sequence[TaskSummary]]) -> list[TaskTimes]:
    """Each queue's task summed over the workers that report it (pure), by queue, then task."""
    found: dict[tuple[str, str], TaskTimes] = {}
    for tasks in summaries:
        for t in tasks:
            rate = t.window.counts.get("completed", 0) / t.span_s if t.span_s > 0 else 0.0
            before = found.get((t.queue, t.task))
            found[t.queue, t.task] = TaskTimes(t.queue, t.task, t.window, rate, 1, t.span_s) if before is None else \
                TaskTimes(t.queue, t.task, before.window.plus(t.window), before.per_s + rate, before.workers + 1,
                          max(before.span_s, t.span_s))
    return [found[key] for key in sorted(found)]


def by_queue(times: Iterable[TaskTimes]) -> dict[str, TaskTimes]:
    """Each queue's tasks summed into one (task ``""``) (pure)."""
    found: dict[str, TaskTimes] = {}
    for t in times:
        before = found.get(t.queue)
        found[t.queue] = TaskTimes(t.queue, "", t.window, t.per_s, t.workers, t.span_s) if before is None else \
            TaskTimes(t.queue, "", before.window.plus(t.window), before.per_s + t.per_s,
                      max(before.workers, t.workers), max(before.span_s, t.span_s))
    return found
