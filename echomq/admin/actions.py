"""The operator's writes on a queue, as ``emq`` and the dashboard make them: jobs enqueued a batch
at a time, named jobs acted on one at a time (a refusal stops only its own), the dead jobs a filter
chooses reprocessed or removed in batches, a bounded verb repeated until it runs dry, and what a
drain or a sweep did in all."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, islice, repeat
from typing import Any, Callable, Iterator, Sequence

from .._client.partitioned import AnyQueue, PartitionedQueue
from .._client.queue import Enqueued, Queue, Sweep
from .._core.admission import ENQUEUES_SIZE
from .._core.reaper import merged
from .._protocol.keys import State
from ..errors import ConfigurationError, StateError
from .inventory import drive_together, partitions_of
from .selection import BULK_BATCH, JobFilter, walk_dead
from .steps import in_batches

#: jobs :func:`enqueue_jobs` makes and sends at once, one ``enqueue_many`` (eight ENQUEUES of its
#: measured size): its memory is a batch's, whatever the count
ENQUEUE_BATCH = 8 * ENQUEUES_SIZE


def enqueue_jobs(queue: AnyQueue, values: Sequence[Any], *, count: int = 1, job_id: str | None = None,
                 key: str | None = None, delay_ms: int | None = None, priority: int = 0,
                 group: str | None = None) -> Iterator[Enqueued]:
    """Enqueue each of ``values`` ``count`` times (``emq enqueue``): scheduled ``delay_ms`` from now,
    under ``job_id``, to ``key``'s partition, or as lane jobs of ``group``. Where they may go is
    checked now (ConfigurationError); the jobs are made and sent :data:`ENQUEUE_BATCH` at a time
    as the answers are read."""
    if key is not None:
        if not isinstance(queue, PartitionedQueue):
            raise ConfigurationError(f"--key picks a partition: queue {queue.name!r} is not partitioned")
        queue = queue.partition(key=key)
    if group is not None and isinstance(queue, PartitionedQueue):
        raise ConfigurationError(f"queue {queue.name!r} is partitioned: lanes are one queue's (no --group)")
    return _enqueued(queue, chain.from_iterable(repeat(values, count)), job_id, delay_ms, priority, group)


def _enqueued(queue: AnyQueue, every: Iterator[Any], job_id: str | None, delay_ms: int | None, priority: int,
              group: str | None) -> Iterator[Enqueued]:
    while batch := list(islice(every, ENQUEUE_BATCH)):
        if delay_ms is not None:
            yield from [queue.schedule(v, delay_ms, id=job_id, priority=priority) for v in batch]
        elif job_id is not None:
            yield queue.enqueue(batch[0], id=job_id, priority=priority, group=group)
        else:
            yield from queue.enqueue_many(batch, priority=priority, group=group)


def reprocess_dead(queue: AnyQueue, job_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Send the named dead jobs back to pending, :data:`BULK_BATCH` a round trip. Returns (the ids
    moved, the ids that were not in dead)."""
    moved: list[str] = []
    parts = partitions_of(queue)
    for at in range(0, len(job_ids), BULK_BATCH):
        batch = list(job_ids[at:at + BULK_BATCH])
        # a partitioned queue's job is in one partition: asked of each, it moves in the one that holds it
        answers = [_answers(part, "reprocess", batch) for part in parts]
        moved += [job_id for job_id, *each in zip(batch, *answers) if any(a is True for a in each)]
    return moved, [job_id for job_id in job_ids if job_id not in set(moved)]


@dataclass(frozen=True)
class Bulk:
    """What a bulk action on a queue's dead jobs did (:func:`act_on_dead`)."""

    action: str  #: ``reprocess`` or ``remove``
    done: list[str]  #: the jobs reprocessed (back to pending) or removed
    #: the jobs chosen and not acted on: gone meanwhile (another hand moved them), or refused (a flow
    #: job is not removed: cancel it)
    not_done: list[str]
    commands: int  #: commands sent, reads and acts: each one short, none holds the server

    @property
    def chosen(self) -> int:
        return len(self.done) + len(self.not_done)


#: the bulk actions on dead jobs: what each sends a job
BULK_ACTIONS = ("reprocess", "remove")


def act_on_dead(queue: AnyQueue, action: str, job_filter: JobFilter, as_of_ms: int,
                batch: int = BULK_BATCH) -> Bulk:
    """Reprocess or remove every dead job that died at or before ``as_of_ms`` (server clock: the
    ones there were when the operator counted them) and that ``job_filter`` matches: read and acted
    on ``batch`` at a time, each job by its own short command (REPROCESS, REMOVE; a lane job by its
    lane's), so no call holds the server however many there are (``emq reprocess --all``, the
    dashboard's bulk actions)."""
    if action not in BULK_ACTIONS:
        raise ConfigurationError(f"bad bulk action {action!r}: one of {', '.join(BULK_ACTIONS)}")
    done: list[str] = []
    not_done: list[str] = []

    def act(part: Queue, job_ids: list[str]) -> list[bool]:
        answers = _answers(part, action, job_ids)
        for job_id, answer in zip(job_ids, answers):
            (done if acted(action, answer) else not_done).append(job_id)
        return [left_dead(action, answer) for answer in answers]

    walked = walk_dead(queue, job_filter, as_of_ms, act, batch)
    return Bulk(action, done, not_done, walked.commands)


def _answers(part: Queue, action: str, job_ids: list[str]) -> list[Any]:
    """Each job's answer to ``action`` (its refusal in its place), every job's in one round trip
    (a second only for lane rows, which the flat verbs refuse)."""
    ops = [part.op_reprocess(job_id) if action == "reprocess" else part.op_remove(job_id) for job_id in job_ids]
    return drive_together(part.connection, ops)


def acted(action: str, answer: Any) -> bool:
    """Whether a bulk action's answer for a job means it was done (pure): reprocessed (True), or
    removed (the state it left)."""
    return answer is True if action == "reprocess" else isinstance(answer, State)


def left_dead(action: str, answer: Any) -> bool:
    """Whether a job has left dead after ``action``'s answer (pure): acted on, or, for reprocess, not
    in dead (a REPROCESS answering 0 removed a ghost, or the job was gone); a refusal, or a REMOVE
    that found no row (a ghost it leaves), stays."""
    return acted(action, answer) or (action == "reprocess" and answer is False)


def each_job(job_ids: Sequence[str], act: Callable[[str], Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``act`` on every named job, one at a time: (its answer by id, the server's refusal by id).
    A refusal (an active job for remove, a job not active for cancel) stops only its own id."""
    answers: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for job_id in job_ids:
        try:
            answers[job_id] = act(job_id)
        except StateError as exc:
            refused[job_id] = str(exc)
    return answers, refused


def purge(queue: AnyQueue, older_than_ms: int, batch: int) -> int:
    """Delete the queue's dead jobs (only those dead at least ``older_than_ms``; 0: all), oldest
    first, ``batch`` per call; how many."""
    return in_batches(lambda: queue.purge(older_than_ms=older_than_ms, limit=batch), batch)


@dataclass(frozen=True)
class Drained:
    pending: int  #: pending jobs deleted, flat and lane jobs alike
    lanes: int  #: of them, lane jobs
    flows_left: int  #: flow jobs not started, left: a parent waits for its children


def drain(queue: AnyQueue, batch: int) -> Drained:
    """Delete the queue's pending jobs, flat and lane jobs alike, ``batch`` per call (a partitioned
    queue has no lanes); active, scheduled, dead and flow jobs are left."""
    flat = in_batches(lambda: queue.drain(limit=batch), batch)
    lanes = 0 if isinstance(queue, PartitionedQueue) else in_batches(lambda: queue.drain_lanes(limit=batch), batch)
    return Drained(flat + lanes, lanes, queue.counts().flow_waiting_total)


def sweep(queue: AnyQueue, max_stalled: int, limit: int) -> Sweep:
    """Recover expired leases once: STALLED.CHECK, then the reaper for lane and flow leases (a
    partitioned queue has no lanes)."""
    lanes = [] if isinstance(queue, PartitionedQueue) else [queue.reap(max_stalled, limit)]
    return merged([queue.stalled_check(max_stalled, limit), *lanes])

