"""A handle to follow one job: what ``task.delay()``, ``task.enqueue()``, a canvas and ``app.job(id)``
return. It knows the job's queue (a partition's own, for a partitioned task) and the serializer its
result is decoded with; every method is one of that queue's (docs/results.md), so it answers and
raises as they do. :class:`AsyncJobHandle` is its asyncio twin (``adelay``, ``aenqueue``, ``app.ajob``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .._protocol.results import Status

if TYPE_CHECKING:
    from .. import aio
    from .._client.queue import Queue

V = TypeVar("V", covariant=True)


class JobHandle(Generic[V]):
    """One job: ``handle.id``, ``handle.get(timeout=30)`` (its result), ``status()``, ``progress()``,
    ``cancel()``."""

    def __init__(self, queue: Queue, job_id: str, *, created: bool = True) -> None:
        self.queue = queue  #: the job's queue (its partition, for a partitioned task)
        self.id = job_id
        #: False when nothing was made: the id had a job, or is within its unique window (Enqueued.created)
        self.created = created

    def __repr__(self) -> str:
        return f"JobHandle({self.queue.name!r}, {self.id!r})"

    def get(self, timeout: float | None = None) -> V:
        """The job's result, waiting up to ``timeout`` seconds (None: no limit): :meth:`echomq.Queue.result`.
        Raises JobFailed when it died, JobNotFound when there is none, TimeoutError when time runs out."""
        return self.queue.result(self.id, timeout=timeout)  # type: ignore[no-any-return]

    def status(self) -> Status:
        return self.queue.status(self.id)

    def progress(self) -> Any:
        """The last progress its handler reported (``ctx.progress``); None when none, or no row."""
        return self.queue.progress_of(self.id)

    def cancel(self) -> bool:
        """Stop the job while it runs (dead, ``cancelled``; a flow job in any live state): :meth:`echomq.Queue.cancel`."""
        return self.queue.cancel(self.id)


class AsyncJobHandle(Generic[V]):
    """:class:`JobHandle` on an asyncio connection: every method is a coroutine."""

    def __init__(self, queue: aio.Queue, job_id: str, *, created: bool = True) -> None:
        self.queue = queue
        self.id = job_id
        self.created = created

    def __repr__(self) -> str:
        return f"AsyncJobHandle({self.queue.name!r}, {self.id!r})"

    async def get(self, timeout: float | None = None) -> V:
        return await self.queue.result(self.id, timeout=timeout)  # type: ignore[no-any-return]

    async def status(self) -> Status:
        return await self.queue.status(self.id)

    async def progress(self) -> Any:
        return await self.queue.progress_of(self.id)

    async def cancel(self) -> bool:
        return await self.queue.cancel(self.id)
