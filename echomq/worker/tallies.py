"""Tallies: what a worker did, counted by outcome (:class:`Tally`) and per queue and task
(:class:`~echomq.worker.jobstats.JobStats`, with how long its jobs ran and waited), and its ``job.*``
and ``sweep.*`` events (:class:`Events`): each counted in the tally and its task's figures, then told to :mod:`echomq.hooks` when someone listens. The worker's per-job
log lines are such a listener."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from .. import hooks
from .._client.queue import Job, Sweep
from .._protocol.ids import minted_ms_of
from .._protocol.keys import parent_queue
from .._protocol.shown import one_line, quoted
from .jobstats import JobStats
from .tasks import Task

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


def waited_in_pending_s(jobs: Sequence[Job], now_s: float) -> list[float | None]:
    """Each job's seconds from its id's minting to this claim (``now_s``, read once for a claim batch),
    for a first claim of an id that says when it was minted (a default id, or the UUIDv7 of older
    clients: echomq._protocol.ids.minted_ms); else None (nothing honest to say without a read: the row's
    server-clock ``created`` is not in CLAIM's reply). Both ends are wall clocks of possibly two
    hosts: skew is clamped at 0."""
    now_ms = now_s * 1000
    return [None if minted is None else (now_ms - minted) / 1000 if now_ms > minted else 0.0
            for minted in minted_ms_of([job.id if job.attempt == 1 else "" for job in jobs])]


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
    """A worker's events: each counted in its tally and its task's figures, then told to the hooks if
    anyone listens (with ``worker=`` the worker that emits it). Counted here, not by a subscriber, as
    building an event's data for no listener cost more than counting it. The two events of every job
    (``job.claimed``, ``job.completed``) are counted where they happen, by the batch, and only told here."""

    def __init__(self, worker: Any, tally: Tally, stats: JobStats) -> None:
        self.worker = worker
        self.tally = tally
        self.stats = stats

    def emit(self, event: str, job: Job, task: Task, **fields: Any) -> None:
        """Count ``event`` (in the tally and in ``task``'s figures on the job's queue), then tell it if heard."""
        self.tally.add(event)
        self.stats.of(parent_queue(job.queue), task.name).counts[TALLIED[event]] += 1
        if event in hooks.heard:
            self.tell(event, job, **fields)

    def tell(self, event: str, job: Job, **fields: Any) -> None:
        hooks.emit(event, worker=self.worker, queue=job.queue, id=job.id, attempt=job.attempt, **fields)

    def sweep(self, queue: str, found: Sweep) -> None:
        """What this worker's sweep of ``queue`` found, one event a job (no task: a sweep reads no payload)."""
        for event, ids in (("sweep.stalled", found.recovered), ("sweep.recovered", found.exempt),
                           ("sweep.stalled_dead", found.dead)):
            for job_id in ids:
                self.tally.add(event)
                self.stats.swept(parent_queue(queue), TALLIED[event])
                hooks.emit(event, worker=self.worker, queue=queue, id=job_id)
