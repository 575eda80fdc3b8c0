"""One queue over many slots: :class:`PartitionedQueue` (docs/cluster.md "Partitioned queues").

A queue declared with ``partitions=N`` is N sub-queues, ``name~0`` .. ``name~N-1``, each an
ordinary queue with its own hashtag, so on a cluster they spread over the primaries. Nothing new
runs on the server: every verb is the sub-queue's own, atomic within its partition, and a job
lives in the partition it was admitted to for its whole life (``Job.queue`` names it, so its
settles route to it). ``partitions=1`` is today's layout exactly: the queue itself.

N is recorded in the hash ``{emq}:partitions`` (name -> N; a queue it does not name has one), so
every producer, worker and ``emq`` command agrees. Declaring a different N is refused while any
job sits in the old or the new layout; an empty queue may be re-declared.

Where a job goes: by ``key=`` when given (CRC-32 of the key mod N: one key, one partition, so
jobs of one key keep their order), else by its explicit ``id=`` (so an idempotent re-enqueue
lands where the first did), else round robin. Reads and controls by id find the partition by
asking the id's hashed partition first, then the others (a job admitted by key or round robin
is found by the search).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable, Iterable, Sequence, TypeVar

from .connection import Connection, plain_commands
from .core import MAX_PAYLOAD_BYTES, Enqueued, Job
from .errors import ConfigurationError
from .keys import PARTITIONS_KEY, State, check_partitions, check_queue_name, partition_names, partition_of
from .queue import Queue
from .serializers import JSON, Serializer
from .verbs import Counts, Sweep, check_int

T = TypeVar("T")


def recorded_partitions(connection: Connection, name: str) -> int:
    """N as recorded for ``name`` (1 when it is not recorded)."""
    with plain_commands("the partitions record"):
        value: Any = connection.client.hget(PARTITIONS_KEY, name)
    return 1 if value is None else int(value)


def _jobs_in(connection: Connection, names: Iterable[str]) -> int:
    return sum(Queue(connection, sub).counts().total for sub in names)


def declare_partitions(connection: Connection, name: str, partitions: int | None) -> int:
    """The queue's N: the recorded one when ``partitions`` is None, else ``partitions``, recorded.
    Changing a recorded N is refused (:class:`ConfigurationError`, nothing written) while any job
    sits in either layout."""
    check_queue_name(name)
    recorded = recorded_partitions(connection, name)
    if partitions is None or check_partitions(name, partitions) == recorded:
        return recorded
    jobs = _jobs_in(connection, set(partition_names(name, recorded)) | set(partition_names(name, partitions)))
    if jobs:
        raise ConfigurationError(
            f"queue {name!r} has {recorded} partition(s) and {jobs} job(s): it cannot be re-declared with "
            f"{partitions} until it is empty (a job never moves between partitions)")
    with plain_commands("the partitions record"):
        if partitions == 1:
            connection.client.hdel(PARTITIONS_KEY, name)
        else:
            connection.client.hset(PARTITIONS_KEY, name, str(partitions))
    return partitions


def open_queue(connection: Connection, name: str, **kwargs: Any) -> AnyQueue:
    """``name`` as its record says: a :class:`PartitionedQueue` when it has partitions, else a Queue."""
    partitions = recorded_partitions(connection, name)
    return Queue(connection, name, **kwargs) if partitions == 1 else PartitionedQueue(connection, name, **kwargs)


def sum_counts(counts: Sequence[Counts]) -> Counts:
    """One queue's counts from its partitions': sums; paused when any partition is."""
    return Counts(sum(c.pending for c in counts), sum(c.active for c in counts), sum(c.scheduled for c in counts),
                  sum(c.dead for c in counts), any(c.paused for c in counts))


class PartitionedQueue:
    """``PartitionedQueue(conn, "emails", partitions=8)``: one queue over 8 sub-queues. Without
    ``partitions`` it takes the recorded N; with it, it declares N (see :func:`declare_partitions`)."""

    def __init__(self, connection: Connection, name: str, *, partitions: int | None = None,
                 serializer: Serializer = JSON, max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        self.name = name
        self.connection = connection
        self.wire = connection.wire
        self.partitions = [Queue(connection, sub, serializer=serializer, max_payload_bytes=max_payload_bytes)
                           for sub in partition_names(name, declare_partitions(connection, name, partitions))]
        self._by_name = {queue.name: queue for queue in self.partitions}
        self._next = itertools.count()  #: round robin: admissions without a key or id, and the claims' first turn

    def __repr__(self) -> str:
        return f"PartitionedQueue({self.name!r}, partitions={len(self.partitions)}, wire={self.wire})"

    # -- routing (pure) -------------------------------------------------------------
    def partition(self, *, key: str | None = None, id: str | None = None) -> Queue:
        """Where a job goes: by key, else by explicit id, else the next in round robin."""
        n = len(self.partitions)
        chosen = key if key is not None else id
        return self.partitions[partition_of(chosen, n) if chosen is not None else next(self._next) % n]

    def of(self, job: Job) -> Queue:
        """The partition a claimed job lives in (its ``queue``)."""
        try:
            return self._by_name[job.queue]
        except KeyError:
            raise ConfigurationError(f"job {job.id!r} is of queue {job.queue!r}, not a partition of {self.name!r}") \
                from None

    def _turns(self) -> list[Queue]:
        """Every partition once, starting at the next in round robin (fair claims)."""
        start = next(self._next) % len(self.partitions)
        return self.partitions[start:] + self.partitions[:start]

    def find(self, job_id: str) -> Queue | None:
        """The partition that holds a row for ``job_id`` (its hashed partition is asked first); None when none does."""
        first = self.partition(id=job_id)
        for queue in [first] + [q for q in self.partitions if q is not first]:
            if queue.state(job_id) is not None:
                return queue
        return None

    def _by_id(self, job_id: str, act: Callable[[Queue], T], missing: T) -> T:
        queue = self.find(job_id)
        return missing if queue is None else act(queue)

    # -- admission ------------------------------------------------------------
    def enqueue(self, payload: Any, *, id: str | None = None, key: str | None = None, priority: int = 0) -> Enqueued:
        return self.partition(key=key, id=id).enqueue(payload, id=id, priority=priority)

    def enqueue_many(self, payloads: Iterable[Any], *, keys: Iterable[str] | None = None,
                     priority: int = 0) -> list[Enqueued]:
        """Enqueue many jobs, round robin or by ``keys`` (one per payload): one round trip per partition."""
        payloads = list(payloads)
        chosen = [self.partition() for _ in payloads] if keys is None else [self.partition(key=k) for k in keys]
        if len(chosen) != len(payloads):
            raise ConfigurationError(f"{len(payloads)} payloads but {len(chosen)} keys: give one key per payload")
        answers: list[Enqueued | None] = [None] * len(payloads)
        for queue in self.partitions:
            at = [i for i, q in enumerate(chosen) if q is queue]
            for i, answer in zip(at, queue.enqueue_many([payloads[i] for i in at], priority=priority) if at else []):
                answers[i] = answer
        return answers  # type: ignore[return-value]

    def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, key: str | None = None,
                 priority: int = 0) -> Enqueued:
        return self.partition(key=key, id=id).schedule(payload, delay_ms, id=id, priority=priority)

    # -- the lease --------------------------------------------------------------
    def claim(self, lease_ms: int) -> Job | None:
        jobs = self.claim_many(1, lease_ms)
        return jobs[0] if jobs else None

    def claim_many(self, count: int, lease_ms: int) -> list[Job]:
        """Up to ``count`` jobs, from the partitions in turn (each call starts one further on)."""
        check_int("count", count, 1)
        jobs: list[Job] = []
        for queue in self._turns():
            jobs += queue.claim_many(count - len(jobs), lease_ms)
            if len(jobs) == count:
                break
        return jobs

    def extend(self, job: Job, lease_ms: int) -> int:
        return self.of(job).extend(job, lease_ms)

    # -- settling: each job's own partition ------------------------------------------
    def complete(self, job: Job) -> None:
        self.of(job).complete(job)

    def complete_many(self, jobs: Sequence[Job]) -> list[bool]:
        answers: dict[int, bool] = {}
        for queue in self.partitions:
            at = [i for i, job in enumerate(jobs) if job.queue == queue.name]
            answers.update(zip(at, queue.complete_many([jobs[i] for i in at]) if at else []))
        return [answers[i] for i in range(len(jobs))]

    def fail(self, job: Job, error: str, *, max_attempts: int, backoff_ms: int = 0,
             traceback: str | None = None) -> State:
        return self.of(job).fail(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, traceback=traceback)

    def delay(self, job: Job, delay_ms: int) -> int:
        return self.of(job).delay(job, delay_ms)

    def requeue(self, job: Job) -> None:
        self.of(job).requeue(job)

    # -- by id: the partition that holds it ---------------------------------------------
    def state(self, job_id: str) -> State | None:
        return self._by_id(job_id, lambda q: q.state(job_id), None)

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._by_id(job_id, lambda q: q.job(job_id), None)

    def remove(self, job_id: str) -> State | None:
        return self._by_id(job_id, lambda q: q.remove(job_id), None)

    def cancel(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda q: q.cancel(job_id), False)

    def reprocess(self, job_id: str) -> bool:
        return self._by_id(job_id, lambda q: q.reprocess(job_id), False)

    def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        return self._by_id(job_id, lambda q: q.reschedule(job_id, delay_ms), None)

    # -- over every partition ------------------------------------------------------------
    def _up_to(self, limit: int, step: Callable[[Queue, int], int]) -> int:
        """``step`` over the partitions until ``limit`` is reached in all (returns at most ``limit``)."""
        check_int("limit", limit, 1)
        done = 0
        for queue in self.partitions:
            done += step(queue, limit - done)
            if done == limit:
                break
        return done

    def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        """As :meth:`Queue.purge`, oldest first within each partition."""
        return self._up_to(limit, lambda q, left: q.purge(older_than_ms=older_than_ms, limit=left))

    def drain(self, *, limit: int = 1000) -> int:
        return self._up_to(limit, lambda q, left: q.drain(limit=left))

    def promote(self, limit: int = 1000) -> int:
        return self._up_to(limit, lambda q, left: q.promote(left))

    def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """STALLED.CHECK in every partition in turn, recovering at most ``limit`` expired leases in all."""
        found = Sweep([], [], [])

        def step(queue: Queue, left: int) -> int:
            sweep = queue.stalled_check(max_stalled, left)
            for mine, theirs in ((found.recovered, sweep.recovered), (found.exempt, sweep.exempt),
                                 (found.dead, sweep.dead)):
                mine += theirs
            return len(sweep)

        self._up_to(limit, step)
        return found

    def pause(self) -> None:
        for queue in self.partitions:
            queue.pause()

    def resume(self) -> None:
        for queue in self.partitions:
            queue.resume()

    def counts(self) -> Counts:
        """Summed over the partitions (not one atomic read: each partition's is)."""
        return sum_counts([queue.counts() for queue in self.partitions])

    def counts_by_partition(self) -> dict[str, Counts]:
        return {queue.name: queue.counts() for queue in self.partitions}

    def metrics(self) -> dict[str, int]:
        per = [queue.metrics() for queue in self.partitions]
        return {name: sum(m[name] for m in per) for name in per[0]}

    def located_ids(self, state: State | str, *, offset: int = 0,
                    count: int = 100) -> list[tuple[Queue, str, float]]:
        """A page of (partition, id, score) over every partition's set of ``state``, lowest score first."""
        check_int("offset", offset, 0)
        check_int("count", count, 1)
        pages = [[(queue, job_id, score) for job_id, score in queue.ids(state, offset=0, count=offset + count)]
                 for queue in self.partitions]
        return list(heapq.merge(*pages, key=lambda row: row[2]))[offset:offset + count]

    def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        """A page of (id, score) over every partition's set of ``state``, lowest score first."""
        return [(job_id, score) for _, job_id, score in self.located_ids(state, offset=offset, count=count)]


AnyQueue = Queue | PartitionedQueue  #: what a queue name opens to (:func:`open_queue`)
