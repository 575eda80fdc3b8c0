"""One queue over many slots: :class:`PartitionedQueue` (docs/cluster.md "Partitioned queues").

A queue declared with ``partitions=N`` is N sub-queues, ``name~0.s`` .. ``name~N-1.s``, each an
ordinary queue with its own hashtag, placed to spread evenly over the cluster's slots
(:func:`~echomq._protocol.keys.partition_layout`). Nothing new
runs on the server: every verb is the sub-queue's own, atomic within its partition, and a job
lives in the partition it was admitted to for its whole life (``Job.queue`` names it, so its
settles route to it). ``partitions=1`` is today's layout exactly: the queue itself.

The layout is recorded in the hash ``{emq}:partitions`` (name -> the partitions' suffixes; a queue
it does not name has one partition), so every producer, worker and ``emq`` command agrees. Declaring a different N is refused while any
job sits in the old or the new layout; an empty queue may be re-declared.

Where a job goes: by ``key=`` when given (CRC-32 of the key mod N: one key, one partition, so
jobs of one key keep their order), else by its explicit ``id=`` (so an idempotent re-enqueue
lands where the first did), else round robin. Reads and controls by id find the partition by
asking the id's hashed partition first, then the others.

As for one queue (:mod:`echomq._core.core`), :class:`PartitionedCore` holds the operations with no
I/O; each yields a round trip tagged with the partition it is for (None: a plain command whose
key routes it). :class:`PartitionedQueue` drives them blocking, :class:`echomq.aio.PartitionedQueue`
awaiting.
"""

from __future__ import annotations

from dataclasses import fields
import heapq
import itertools
from typing import TYPE_CHECKING, Any, Callable, Generator, Generic, Iterable, Sequence, TypeVar

from .._core.core import (MAX_PAYLOAD_BYTES, Enqueued, Job, Op, QueueCore, RoundTrip, T, check_connection,
                          op_enqueue_into, raise_first)
from ..errors import ConfigurationError
from .._protocol.keys import (PARTITIONS_KEY, State, check_partitions, check_queue_name, layout_record,
                              partition_layout, partition_of, recorded_layout)
from .queue import Queue
from .connection import Connection
from .._protocol.results import ResultLayout, check_layout
from .._protocol.serializers import JSON, Serializer
from .._protocol.verbs import Counts, Plain, Sweep, check_int

if TYPE_CHECKING:
    from .connection import WireCodec

Q = TypeVar("Q", bound=QueueCore)
#: A round trip and the partition it is for (None: plain commands routed by their own key).
Step = tuple["QueueCore | None", RoundTrip]
#: A partitioned operation: yields tagged round trips, is sent their replies, returns the answer.
POp = Generator[Step, list[Any], T]


def on(core: QueueCore | None, op: Op[T]) -> POp[T]:
    """One partition's operation, each of its round trips tagged with the partition (None: calls
    of several partitions, each routed by its own key)."""
    try:
        request = next(op)
        while True:
            request = op.send((yield core, request))
    except StopIteration as done:
        return done.value


def _plain(*args: Any) -> POp[Any]:
    (reply,) = yield None, [Plain(args)]
    raise_first([reply])
    return reply


def op_declare(codec: WireCodec, name: str, partitions: int | None) -> POp[list[str]]:
    """The queue's partitions (their queue names): the recorded layout when ``partitions`` is None
    or is its N, else a new layout of ``partitions`` (:func:`~echomq._protocol.keys.partition_layout`),
    recorded. Changing a recorded N is refused (:class:`ConfigurationError`, nothing written) while
    any job sits in either layout."""
    check_queue_name(name)
    if partitions is not None:
        check_partitions(name, partitions)
    record = yield from _plain("HGET", PARTITIONS_KEY, name)
    recorded = recorded_layout(name, None if record is None else record.decode())
    if partitions is None or partitions == len(recorded):
        return recorded
    layout = partition_layout(name, partitions)
    jobs = 0
    for sub in sorted(set(recorded) | set(layout)):
        core = QueueCore(sub, codec)
        jobs += (yield from on(core, core.op_counts())).total
    if jobs:
        raise ConfigurationError(
            f"queue {name!r} has {len(recorded)} partition(s) and {jobs} job(s): it cannot be re-declared with "
            f"{partitions} until it is empty (a job never moves between partitions)")
    if partitions == 1:
        yield from _plain("HDEL", PARTITIONS_KEY, name)
    else:
        yield from _plain("HSET", PARTITIONS_KEY, name, layout_record(name, layout))
    return layout


def sum_counts(counts: Sequence[Counts]) -> Counts:
    """One queue's counts from its partitions': sums; paused when any partition is."""
    return Counts(**{f.name: (any if f.name == "paused" else sum)(getattr(c, f.name) for c in counts)
                     for f in fields(Counts)})


class PartitionedCore(Generic[Q]):
    """A partitioned queue's routing and operations over its partitions' cores (no I/O)."""

    def __init__(self, name: str, partitions: list[Q]) -> None:
        self.name = name
        self.partitions = partitions
        self._by_name = {queue.name: queue for queue in partitions}
        self._next = itertools.count()  #: round robin: admissions without a key or id, and the claims' first turn

    # -- routing ------------------------------------------------------------------
    def partition(self, *, key: str | None = None, id: str | None = None) -> Q:
        """Where a job goes: by key, else by explicit id, else the next in round robin."""
        n = len(self.partitions)
        chosen = key if key is not None else id
        return self.partitions[partition_of(chosen, n) if chosen is not None else next(self._next) % n]

    def of(self, job: Job) -> Q:
        """The partition a claimed job lives in (its ``queue``)."""
        try:
            return self._by_name[job.queue]
        except KeyError:
            raise ConfigurationError(f"job {job.id!r} is of queue {job.queue!r}, not a partition of {self.name!r}") \
                from None

    def _turns(self) -> list[Q]:
        """Every partition once, starting at the next in round robin (fair claims)."""
        start = next(self._next) % len(self.partitions)
        return self.partitions[start:] + self.partitions[:start]

    # -- admission ------------------------------------------------------------
    def op_enqueue(self, payload: Any, id: str | None, key: str | None, priority: int) -> POp[Enqueued]:
        core = self.partition(key=key, id=id)
        return (yield from on(core, core.op_enqueue(payload, id, priority)))

    def op_enqueue_many(self, payloads: Iterable[Any], keys: Iterable[str] | None,
                        priority: int) -> POp[list[Enqueued]]:
        payloads = list(payloads)
        chosen = [self.partition() for _ in payloads] if keys is None else [self.partition(key=k) for k in keys]
        if len(chosen) != len(payloads):
            raise ConfigurationError(f"{len(payloads)} payloads but {len(chosen)} keys: give one key per payload")
        places: dict[int, tuple[Q, list[int]]] = {}  # each partition chosen, and its jobs' places
        for i, core in enumerate(chosen):
            places.setdefault(id(core), (core, []))[1].append(i)
        # ids minted in the payloads' order (default ids are time-ordered), one round trip over every partition
        return (yield from on(None, op_enqueue_into(list(places.values()), payloads, priority)))

    def op_schedule(self, payload: Any, delay_ms: int, id: str | None, key: str | None,
                    priority: int) -> POp[Enqueued]:
        core = self.partition(key=key, id=id)
        return (yield from on(core, core.op_schedule(payload, delay_ms, id, priority)))

    # -- the lease and settling: each job's own partition ---------------------------
    def op_claim_many(self, count: int, lease_ms: int) -> POp[list[Job]]:
        check_int("count", count, 1)
        jobs: list[Job] = []
        for core in self._turns():
            jobs += yield from on(core, core.op_claim_many(count - len(jobs), lease_ms))
            if len(jobs) == count:
                break
        return jobs

    def op_extend(self, job: Job, lease_ms: int) -> POp[int]:
        core = self.of(job)
        return (yield from on(core, core.op_extend(job, lease_ms, None)))

    def op_settle(self, job: Job, build: Callable[[Q], Any]) -> POp[Any]:
        """One fenced settle, built by ``build`` on the job's partition and sent there."""
        core = self.of(job)
        return (yield from on(core, core.op_fenced(build(core))))

    def op_complete(self, job: Job) -> POp[None]:
        return (yield from self.op_settle(job, lambda core: core.complete_call(job)))

    def op_fail(self, job: Job, error: str, max_attempts: int, backoff_ms: int, traceback: str | None) -> POp[State]:
        return (yield from self.op_settle(job, lambda core: core.fail_call(
            job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, traceback=traceback)))

    def op_delay(self, job: Job, delay_ms: int) -> POp[int]:
        return (yield from self.op_settle(job, lambda core: core.delay_call(job, delay_ms)))

    def op_requeue(self, job: Job) -> POp[None]:
        return (yield from self.op_settle(job, lambda core: core.requeue_call(job)))

    def op_complete_many(self, jobs: Sequence[Job]) -> POp[list[bool]]:
        answers: dict[int, bool] = {}
        for core in self.partitions:
            at = [i for i, job in enumerate(jobs) if job.queue == core.name]
            if at:
                answers.update(zip(at, (yield from on(core, core.op_complete_many([jobs[i] for i in at])))))
        return [answers[i] for i in range(len(jobs))]

    # -- by id: the partition that holds it ---------------------------------------------
    def op_find(self, job_id: str) -> POp[Q | None]:
        """The partition that holds a row for ``job_id`` (its hashed partition is asked first)."""
        first = self.partition(id=job_id)
        for core in [first] + [c for c in self.partitions if c is not first]:
            if (yield from on(core, core.op_state(job_id))) is not None:
                return core
        return None

    def op_by_id(self, job_id: str, make: Callable[[Q], Op[T]], missing: T) -> POp[T]:
        core = yield from self.op_find(job_id)
        return missing if core is None else (yield from on(core, make(core)))

    def op_state(self, job_id: str) -> POp[State | None]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_state(job_id), None))

    def op_job(self, job_id: str) -> POp[dict[str, Any] | None]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_job(job_id), None))

    def op_remove(self, job_id: str) -> POp[State | None]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_remove(job_id), None))

    def op_cancel(self, job_id: str) -> POp[bool]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_cancel(job_id), False))

    def op_reprocess(self, job_id: str) -> POp[bool]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_reprocess(job_id), False))

    def op_reschedule(self, job_id: str, delay_ms: int) -> POp[int | None]:
        return (yield from self.op_by_id(job_id, lambda core: core.op_reschedule(job_id, delay_ms), None))

    # -- over every partition ------------------------------------------------------------
    def op_up_to(self, limit: int, make: Callable[[Q, int], Op[int]]) -> POp[int]:
        """``make``'s operation on the partitions in turn until ``limit`` is reached in all."""
        check_int("limit", limit, 1)
        done = 0
        for core in self.partitions:
            done += yield from on(core, make(core, limit - done))
            if done == limit:
                break
        return done

    def op_purge(self, older_than_ms: int, limit: int) -> POp[int]:
        return (yield from self.op_up_to(limit, lambda core, left: core.op_purge(older_than_ms, left)))

    def op_drain(self, limit: int) -> POp[int]:
        return (yield from self.op_up_to(limit, lambda core, left: core.op_drain(left)))

    def op_promote(self, limit: int) -> POp[int]:
        return (yield from self.op_up_to(limit, lambda core, left: core.op_promote(left)))

    def op_stalled_check(self, max_stalled: int, limit: int) -> POp[Sweep]:
        found = Sweep([], [], [])

        def make(core: Q, left: int) -> Op[int]:
            sweep = yield from core.op_stalled_check(max_stalled, left)
            found.recovered.extend(sweep.recovered)
            found.exempt.extend(sweep.exempt)
            found.dead.extend(sweep.dead)
            return len(sweep)

        yield from self.op_up_to(limit, make)
        return found

    def op_each(self, make: Callable[[Q], Op[T]]) -> POp[list[T]]:
        """``make``'s operation on every partition, in order; their answers."""
        answers = []
        for core in self.partitions:
            answers.append((yield from on(core, make(core))))
        return answers

    def op_pause(self) -> POp[None]:
        yield from self.op_each(lambda core: core.op_pause())

    def op_resume(self) -> POp[None]:
        yield from self.op_each(lambda core: core.op_resume())

    def op_set_result_layout(self, layout: str) -> POp[None]:
        check_layout(layout)  # before the first partition's write
        yield from self.op_each(lambda core: core.op_set_result_layout(layout))

    def op_result_layout(self) -> POp[list[ResultLayout]]:
        return (yield from self.op_each(lambda core: core.op_result_layout()))

    def op_counts(self) -> POp[Counts]:
        return sum_counts((yield from self.op_each(lambda core: core.op_counts())))

    def op_counts_by_partition(self) -> POp[dict[str, Counts]]:
        counts = yield from self.op_each(lambda core: core.op_counts())
        return {core.name: c for core, c in zip(self.partitions, counts)}

    def op_metrics(self) -> POp[dict[str, int]]:
        per = yield from self.op_each(lambda core: core.op_metrics())
        return {name: sum(m[name] for m in per) for name in per[0]}

    def op_located_ids(self, state: State | str, offset: int, count: int) -> POp[list[tuple[Q, str, float]]]:
        """A page of (partition, id, score) over every partition's set of ``state``, lowest score first."""
        check_int("offset", offset, 0)
        check_int("count", count, 1)
        pages = yield from self.op_each(lambda core: core.op_ids(state, 0, offset + count))
        located = [[(core, job_id, score) for job_id, score in page] for core, page in zip(self.partitions, pages)]
        # a set serves by score, then by id: merged the same way (pending at one priority: oldest id first)
        return list(heapq.merge(*located, key=lambda row: (row[2], row[1])))[offset:offset + count]


def drive(connection: Connection, op: POp[T]) -> T:
    """Drive a partitioned operation blocking: each round trip to its partition's node."""
    try:
        core, request = next(op)
        while True:
            core, request = op.send(connection.round_trip(request, on=None if core is None else core.keys))
    except StopIteration as done:
        return done.value


def open_queue(connection: Connection, name: str, **kwargs: Any) -> AnyQueue:
    """``name`` as its record says: a :class:`PartitionedQueue` when it has partitions, else a Queue."""
    return open_queues(connection, [name], **kwargs)[0]


def open_queues(connection: Connection, names: Sequence[str], **kwargs: Any) -> list[AnyQueue]:
    """:func:`open_queue` for each name, their partitions records read in one round trip."""
    for name in names:
        check_queue_name(name)
    records = connection.round_trip([Plain(("HMGET", PARTITIONS_KEY, *names))])[0] if names else []
    raise_first([records])
    layouts = [recorded_layout(name, None if record is None else record.decode())
               for name, record in zip(names, records)]
    return [Queue(connection, name, **kwargs) if len(layout) == 1 else
            PartitionedQueue(connection, name, partitions=len(layout), **kwargs)
            for name, layout in zip(names, layouts)]


class PartitionedQueue(PartitionedCore[Queue]):
    """``PartitionedQueue(conn, "emails", partitions=8)``: one queue over 8 sub-queues (``partitions``,
    each a :class:`~echomq.Queue`). Without ``partitions`` it takes the recorded N; with it, it
    declares N (refused while jobs would be stranded: see :func:`op_declare`)."""

    def __init__(self, connection: Connection, name: str, *, partitions: int | None = None,
                 serializer: Serializer = JSON, max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        check_connection(connection, Connection, "echomq.PartitionedQueue", "echomq.connect(url)")
        layout = drive(connection, op_declare(connection, name, partitions))
        super().__init__(name, [Queue(connection, sub, serializer=serializer, max_payload_bytes=max_payload_bytes)
                                for sub in layout])
        self.connection = connection
        self.wire = connection.wire

    def __repr__(self) -> str:
        return f"PartitionedQueue({self.name!r}, partitions={len(self.partitions)}, wire={self.wire})"

    def _run(self, op: POp[T]) -> T:
        return drive(self.connection, op)

    # -- admission ------------------------------------------------------------
    def enqueue(self, payload: Any, *, id: str | None = None, key: str | None = None, priority: int = 0) -> Enqueued:
        return self._run(self.op_enqueue(payload, id, key, priority))

    def enqueue_many(self, payloads: Iterable[Any], *, keys: Iterable[str] | None = None,
                     priority: int = 0) -> list[Enqueued]:
        """Enqueue many jobs, round robin or by ``keys`` (one per payload), in one round trip."""
        return self._run(self.op_enqueue_many(payloads, keys, priority))

    def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, key: str | None = None,
                 priority: int = 0) -> Enqueued:
        return self._run(self.op_schedule(payload, delay_ms, id, key, priority))

    # -- the lease and settling ------------------------------------------------------
    def claim(self, lease_ms: int) -> Job | None:
        jobs = self.claim_many(1, lease_ms)
        return jobs[0] if jobs else None

    def claim_many(self, count: int, lease_ms: int) -> list[Job]:
        """Up to ``count`` jobs, from the partitions in turn (each call starts one further on)."""
        return self._run(self.op_claim_many(count, lease_ms))

    def extend(self, job: Job, lease_ms: int) -> int:
        return self._run(self.op_extend(job, lease_ms))

    def complete(self, job: Job) -> None:
        self._run(self.op_complete(job))

    def complete_many(self, jobs: Sequence[Job]) -> list[bool]:
        return self._run(self.op_complete_many(jobs))

    def fail(self, job: Job, error: str, *, max_attempts: int, backoff_ms: int = 0,
             traceback: str | None = None) -> State:
        return self._run(self.op_fail(job, error, max_attempts, backoff_ms, traceback))

    def delay(self, job: Job, delay_ms: int) -> int:
        return self._run(self.op_delay(job, delay_ms))

    def requeue(self, job: Job) -> None:
        self._run(self.op_requeue(job))

    # -- by id ------------------------------------------------------------------------------
    def find(self, job_id: str) -> Queue | None:
        """The partition that holds a row for ``job_id``; None when none does."""
        return self._run(self.op_find(job_id))

    def state(self, job_id: str) -> State | None:
        return self._run(self.op_state(job_id))

    def job(self, job_id: str) -> dict[str, Any] | None:
        return self._run(self.op_job(job_id))

    def remove(self, job_id: str) -> State | None:
        return self._run(self.op_remove(job_id))

    def cancel(self, job_id: str) -> bool:
        return self._run(self.op_cancel(job_id))

    def reprocess(self, job_id: str) -> bool:
        return self._run(self.op_reprocess(job_id))

    def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        return self._run(self.op_reschedule(job_id, delay_ms))

    # -- over every partition ---------------------------------------------------------------
    def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        """As :meth:`Queue.purge`, oldest first within each partition; at most ``limit`` in all."""
        return self._run(self.op_purge(older_than_ms, limit))

    def drain(self, *, limit: int = 1000) -> int:
        return self._run(self.op_drain(limit))

    def promote(self, limit: int = 1000) -> int:
        return self._run(self.op_promote(limit))

    def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """STALLED.CHECK in every partition in turn, recovering at most ``limit`` expired leases in all."""
        return self._run(self.op_stalled_check(max_stalled, limit))

    def set_result_layout(self, layout: str) -> None:
        """As :meth:`Queue.set_result_layout`, on every partition."""
        self._run(self.op_set_result_layout(layout))

    def result_layout(self) -> list[ResultLayout]:
        """Each partition's :meth:`Queue.result_layout`, in partition order."""
        return self._run(self.op_result_layout())

    def pause(self) -> None:
        self._run(self.op_pause())

    def resume(self) -> None:
        self._run(self.op_resume())

    def counts(self) -> Counts:
        """Summed over the partitions (not one atomic read: each partition's is)."""
        return self._run(self.op_counts())

    def counts_by_partition(self) -> dict[str, Counts]:
        return self._run(self.op_counts_by_partition())

    def metrics(self) -> dict[str, int]:
        return self._run(self.op_metrics())

    def located_ids(self, state: State | str, *, offset: int = 0,
                    count: int = 100) -> list[tuple[Queue, str, float]]:
        """A page of (partition, id, score) over every partition's set of ``state``, lowest score first."""
        return self._run(self.op_located_ids(state, offset, count))

    def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        """A page of (id, score) over every partition's set of ``state``, lowest score first."""
        return [(job_id, score) for _, job_id, score in self.located_ids(state, offset=offset, count=count)]


AnyQueue = Queue | PartitionedQueue  #: what a queue name opens to (:func:`open_queue`)
