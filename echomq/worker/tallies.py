"""Tallies and timings: what a worker did, counted by outcome (:class:`Tally`), how long its jobs ran
and waited (:class:`Timings`), and its ``job.*`` and ``sweep.*`` events (:class:`Events`): each
counted in the tally, then told to :mod:`echomq.hooks` when someone listens. The worker's per-job
log lines are such a listener."""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Sequence

from .. import hooks
from .._client.queue import Job, Sweep
from .._protocol.ids import minted_ms_of
from .._protocol.shown import one_line, quoted

log = logging.getLogger("echomq.worker")


@dataclass
class Tally:
    """What this worker did, by outcome: each field counts the worker's ``job.*`` or ``sweep.*``
    event of its name (the worker counts every event it emits, whether or not a hook listens)."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0  #: FAIL answered pending or scheduled
    dead: int = 0  #: FAIL answered dead
    delayed: int = 0
    lost: int = 0  #: lease lost: dropped, or a settle the server fenced off
    requeued: int = 0  #: released at shutdown
    abandoned: int = 0  #: left to lease expiry at shutdown (REQUEUE failed or was refused)
    stalled: int = 0  #: this worker's sweeps found a lease expired: back to pending, a stall counted
    recovered: int = 0  #: ... expired across a server restart: back to pending, no stall (wire 6)
    stalled_dead: int = 0  #: ... stalled past max_stalled: dead

    def __str__(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in vars(self).items() if value) or "nothing"

    def add(self, event: str) -> None:
        self.__dict__[TALLIED[event]] += 1


#: the Tally field each counted event bumps: job.completed -> completed, sweep.stalled -> stalled
#: told around each handler call, on its own thread or task (a place to set a context), not counted
AROUND_HANDLER = ("job.started", "job.returned")
TALLIED = {event: event.split(".", 1)[1] for event in hooks.EVENTS
           if event.startswith(("job.", "sweep.")) and event not in AROUND_HANDLER}


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


@dataclass
class Timings:
    """How long this worker's jobs ran and waited: every ``duration_s`` and ``waited_s`` its
    ``job.*`` events carry (``emq worker --metrics-port`` exports them; the worker observes them by batch)."""

    duration: Histogram = field(default_factory=lambda: Histogram(DURATION_BUCKETS_S))
    waited: Histogram = field(default_factory=lambda: Histogram(WAIT_BUCKETS_S))


def waited_in_pending_s(jobs: Sequence[Job], now_s: float) -> list[float | None]:
    """Each job's seconds from its id's minting to this claim (``now_s``, read once for a claim batch),
    for a first claim of an id that says when it was minted (a default id, or the UUIDv7 of older
    clients: echomq._protocol.ids.minted_ms); else None (nothing honest to say without a read: the row's
    server-clock ``created`` is not in CLAIM's reply). Both ends are wall clocks of possibly two
    hosts: skew is clamped at 0."""
    waits: list[float | None] = []
    for job, minted in zip(jobs, minted_ms_of([job.id if job.attempt == 1 else "" for job in jobs])):
        if minted is None:
            waits.append(None)
        else:
            waited_s = now_s - minted / 1000
            waits.append(waited_s if waited_s > 0 else 0.0)
    return waits


def _log(event: str, data: dict[str, Any]) -> None:
    """The worker's per-job log lines, as a subscriber: the id quoted and the error on one line
    (echomq._protocol.shown), so nothing a job carries can end a line or forge the next."""
    where = f"job {data['queue']}/{quoted(data['id'])} attempt {data['attempt']}"
    if event == "job.lost":
        log.warning("%s: %s", where, one_line(str(data["reason"])))
    elif event == "job.dead":
        log.error("%s failed (%s) and is dead: its budget of %d attempts is spent", where, one_line(data["error"]),
                  data["max_attempts"])
    elif event == "job.retried":
        log.info("%s failed (%s); retry in %d ms", where, one_line(data["error"]), data["backoff_ms"])


for _event in ("job.lost", "job.dead", "job.retried"):
    hooks.subscribe(_event, _log)


class Events:
    """A worker's events: each counted in its tally, then told to the hooks if anyone listens (with
    ``worker=`` the worker that emits it). Counted here, not by a subscriber, as building an event's
    data for no listener cost more than counting it. The two events of every job (``job.claimed``,
    ``job.completed``) are counted where they happen, by the batch, and only told here."""

    def __init__(self, worker: Any, tally: Tally) -> None:
        self.worker = worker
        self.tally = tally

    def emit(self, event: str, job: Job, **fields: Any) -> None:
        """Count ``event``, then tell it if heard."""
        self.tally.add(event)
        if event in hooks.heard:
            self.tell(event, job, **fields)

    def tell(self, event: str, job: Job, **fields: Any) -> None:
        hooks.emit(event, worker=self.worker, queue=job.queue, id=job.id, attempt=job.attempt, **fields)

    def sweep(self, queue: str, found: Sweep) -> None:
        """What this worker's sweep of ``queue`` found, one event a job."""
        for event, ids in (("sweep.stalled", found.recovered), ("sweep.recovered", found.exempt),
                           ("sweep.stalled_dead", found.dead)):
            for job_id in ids:
                self.tally.add(event)
                hooks.emit(event, worker=self.worker, queue=queue, id=job_id)
