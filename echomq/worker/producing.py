"""An app's side as a producer: where its node is, the connections it opens there (lazily, one of
each kind per app), its tasks' queues on them, and the sending of a task's job.

Where the node is: ``echomq.App(url=...)``, else ``app.connect(url)``, else the ``EMQ_URL``
environment variable, read when the first job is sent. ``app.connect(conn)`` lends an
:class:`echomq.Connection` or an :class:`echomq.aio.Connection` the app uses and never closes.
The blocking connection is opened at the first ``delay()`` or ``enqueue()`` (valkey-py's client
is thread-safe: every thread shares it) and the asyncio one at the first ``adelay()`` or
``aenqueue()``; it belongs to the event loop it was opened in. ``app.close()`` and
``await app.aclose()`` close what the app opened.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Protocol, Sequence

from .. import aio
from .._client.connection import Connection, connect
from .._client.partitioned import PartitionedQueue, drive, on
from .._client.queue import Queue
from .._core.core import Enqueued, Op, QueueCore, raise_first
from ..errors import ConfigurationError
from .._protocol.keys import check_job_id
from .._protocol.serializers import Serializer
from .._protocol.verbs import Plain
from .calling import CallForm, JobOptions, own_headers
from .handles import AsyncJobHandle, JobHandle

#: the environment variable an app reads its node's URL from when it was given none
URL_VARIABLE = "EMQ_URL"


class Sent(Protocol):
    """What sending a task's job reads of the task (:class:`echomq.Task`)."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def serializer(self) -> Serializer: ...

    @property
    def partitions(self) -> int: ...

    @property
    def form(self) -> CallForm: ...


class Producer:
    """An app's node and its connections there (:mod:`echomq.worker.producing`)."""

    def __init__(self, url: str | None = None, wire: int | str = "auto", **options: Any) -> None:
        self._lock = threading.Lock()
        self._where: tuple[str | None, int | str, dict[str, Any]] = (url, wire, options)
        self._sync: Connection | None = None
        self._async: aio.Connection | None = None
        self._owned: set[int] = set()  #: ids of the connections this producer opened (and closes)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queues: dict[str, Queue | PartitionedQueue] = {}
        self._aqueues: dict[str, aio.Queue | aio.PartitionedQueue] = {}

    def configure(self, where: str | Connection | aio.Connection | None, wire: int | str,
                  options: dict[str, Any]) -> None:
        """``app.connect``: a URL to open lazily, or a connection to use (lent: never closed here)."""
        if where is not None and not isinstance(where, (str, Connection, aio.Connection)):
            raise ConfigurationError(f"app.connect takes a URL, an echomq.Connection or an echomq.aio.Connection, "
                                     f"not {type(where).__name__}")
        self.close_sync()
        if self._async is not None and id(self._async) in self._owned:
            raise ConfigurationError("the app's asyncio connection is open: await app.aclose() before app.connect()")
        self._async, self._loop, self._aqueues = None, None, {}
        if isinstance(where, Connection):
            self._sync = where
        elif isinstance(where, aio.Connection):
            self._async = where
        else:
            self._where = (where, wire, options)

    def _url(self) -> str:
        url = self._where[0] or os.environ.get(URL_VARIABLE)
        if not url:
            raise ConfigurationError("the app does not know its node: echomq.App(url=...), app.connect(url), or set "
                                     f"{URL_VARIABLE}")
        return url

    @property
    def connection(self) -> Connection:
        """The blocking connection: lent, or opened at first use."""
        with self._lock:
            if self._sync is None:
                _, wire, options = self._where
                self._sync = connect(self._url(), wire=wire, **options)
                self._owned.add(id(self._sync))
            return self._sync

    async def aconnection(self) -> aio.Connection:
        """The asyncio connection: lent, or opened at first use in the running loop (and only used there)."""
        loop = asyncio.get_running_loop()
        if self._async is None:
            _, wire, options = self._where
            opened = await aio.connect(self._url(), wire=wire, **options)
            if self._async is None:  # another task of this loop opened one meanwhile: keep that
                self._async, self._loop = opened, loop
                self._owned.add(id(opened))
            else:
                await opened.aclose()
        elif self._loop is not None and self._loop is not loop:
            raise ConfigurationError("the app's asyncio connection belongs to the event loop that opened it: await "
                                     "app.aclose() there before using the app from another loop")
        return self._async

    def queue(self, task: Sent) -> Queue | PartitionedQueue:
        """The task's queue on the blocking connection (a partitioned task's declares its N once)."""
        found = self._queues.get(task.queue)
        if found is None:
            if task.partitions > 1:
                found = PartitionedQueue(self.connection, task.queue, partitions=task.partitions,
                                         serializer=task.serializer)
            else:
                found = Queue(self.connection, task.queue, serializer=task.serializer)
            self._queues[task.queue] = found
        return found

    async def aqueue(self, task: Sent) -> aio.Queue | aio.PartitionedQueue:
        connection = await self.aconnection()
        found = self._aqueues.get(task.queue)
        if found is None:
            if task.partitions > 1:
                found = await aio.PartitionedQueue.open(connection, task.queue, partitions=task.partitions,
                                                        serializer=task.serializer)
            else:
                found = aio.Queue(connection, task.queue, serializer=task.serializer)
            self._aqueues[task.queue] = found
        return found

    def close_sync(self) -> None:
        with self._lock:
            if self._sync is not None and id(self._sync) in self._owned:
                self._owned.discard(id(self._sync))
                self._sync.close()
            self._sync, self._queues = None, {}

    async def aclose(self) -> None:
        if self._async is not None and id(self._async) in self._owned:
            self._owned.discard(id(self._async))
            await self._async.aclose()
        self._async, self._loop, self._aqueues = None, None, {}


# -- one task's job ------------------------------------------------------------------------------


def admission(queue: QueueCore | Any, task: Sent, payload: Any, args_form: bool,
              options: JobOptions) -> tuple[QueueCore, Op[Enqueued]]:
    """The partition a task's job goes to (its queue itself when it has one) and the operation that
    admits it: its payload encoded with its headers (refused here, before anything is sent, when the
    serializer cannot encode it or it is too large)."""
    partitioned = not isinstance(queue, QueueCore)
    if partitioned and (options.group is not None or options.unique_for is not None):
        raise ConfigurationError(f"task {task.name}'s queue {task.queue!r} is partitioned: a job of it takes no "
                                 "group= or unique_for= (each partition is a queue of its own)")
    core: QueueCore = queue.partition(id=options.id) if partitioned else queue  # type: ignore[union-attr]
    data = core.encode(payload, own_headers(task.name, args_form, options))
    return core, core.op_admit(data, id=options.id, priority=options.priority, delay_ms=options.delay_ms,
                               at_ms=options.at_ms, unique_for=options.unique_for, group=options.group)


def send(producer: Producer, task: Sent, payload: Any, args_form: bool, options: JobOptions) -> JobHandle[Any]:
    core, op = admission(producer.queue(task), task, payload, args_form, options)
    enqueued = drive(producer.connection, on(core, op))
    return JobHandle(core, enqueued.id, created=enqueued.created)  # type: ignore[arg-type]


async def asend(producer: Producer, task: Sent, payload: Any, args_form: bool,
                options: JobOptions) -> AsyncJobHandle[Any]:
    core, op = admission(await producer.aqueue(task), task, payload, args_form, options)
    enqueued = await aio.drive(await producer.aconnection(), on(core, op))
    return AsyncJobHandle(core, enqueued.id, created=enqueued.created)  # type: ignore[arg-type]


# -- a job found by its id alone ---------------------------------------------------------------


def op_holding(cores: Sequence[QueueCore], job_id: str) -> Op[list[QueueCore]]:
    """The queues holding a job ``job_id`` (its row, or its completed record in either layout), in
    one round trip: an EXISTS of its row and ``done:<id>`` and an HEXISTS of its field of ``done``
    a queue (its keys share its slot), pipelined (on a cluster, one pipeline per node)."""
    replies = (yield [call for core in cores for call in (
        Plain(("EXISTS", core.keys.job(job_id), core.keys.done(job_id))),
        Plain(("HEXISTS", core.keys.done_hash, job_id)))]) if cores else []
    raise_first(replies)
    return [core for core, keys, field in zip(cores, replies[::2], replies[1::2]) if keys or field]


def the_one(found: Sequence[QueueCore], job_id: str) -> QueueCore | None:
    if len(found) > 1:
        raise ConfigurationError(f"job id {job_id!r} is in {len(found)} of the app's queues "
                                 f"({', '.join(core.name for core in found)}): ids are unique within a queue; "
                                 "follow it with Queue(conn, name).result(id) on the one you mean")
    return found[0] if found else None


def partitions(queues: Sequence[Any]) -> list[QueueCore]:
    """Every queue as its partitions (a queue that has none as itself)."""
    return [part for queue in queues for part in (queue.partitions if not isinstance(queue, QueueCore) else [queue])]


def find(producer: Producer, tasks: Sequence[Sent], job_id: str) -> JobHandle[Any] | None:
    check_job_id(job_id)
    cores = partitions([producer.queue(task) for task in tasks])
    core = the_one(drive(producer.connection, on(None, op_holding(cores, job_id))), job_id)
    return None if core is None else JobHandle(core, job_id)  # type: ignore[arg-type]


async def afind(producer: Producer, tasks: Sequence[Sent], job_id: str) -> AsyncJobHandle[Any] | None:
    check_job_id(job_id)
    cores = partitions([await producer.aqueue(task) for task in tasks])
    core = the_one(await aio.drive(await producer.aconnection(), on(None, op_holding(cores, job_id))), job_id)
    return None if core is None else AsyncJobHandle(core, job_id)  # type: ignore[arg-type]
