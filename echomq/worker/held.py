"""A job a worker holds (:class:`Held`): its claim, its handler's future and outcome, and its
lease's bookkeeping -- the one record every part of the worker reads and writes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable

from . import calling, policy
from .._client.queue import Job, Queue
from .._protocol.results import NotKept
from .jobstats import TaskStats
from .tasks import JobContext, Task


#: a held job's call: its handler (a stored call's keyword arguments bound) and its positional arguments
Run = tuple["Held", Callable[..., Any], tuple[Any, ...]]


@dataclass(eq=False, slots=True)
class Held:
    """A job this worker holds: the claim, its handler's future and its lease bookkeeping."""

    queue: Queue
    task: Task
    job: Job
    key: tuple[str, str]  #: (queue, id): its place in ``Worker.held``
    #: what the handler sees; None for a handler that takes no context (arity < 2): nothing could read
    #: one, and a JobContext a job cost ~2.5k instructions. The lost flag is then this record's own
    ctx: JobContext | None
    renewed_at: float  #: local ms when the claim or the last renewal that reached the server was sent
    started_s: float  #: when its claim batch was handed to the handlers (time.monotonic)
    stats: TaskStats  #: its task's figures on its queue (found once a claim batch): its settle counts there
    deadline: float | None = None  #: local ms when the handler's timeout runs out (None: no timeout)
    #: local ms when its claim was sent: from when it is looked at for a cancel (given by position where
    #: a claim batch's records are made: a keyword costs the call its matching, a job)
    claimed_at: float = 0.0
    #: an async handler's task, made on ``on_loop`` (cancelled when its lease is lost or it times out)
    future: asyncio.Task[Any] | None = None
    on_loop: asyncio.AbstractEventLoop | None = None  #: the loop an async handler runs on, set before it starts
    #: the handler's outcome, once it returned or raised
    outcome: policy.Outcome | None = None
    #: an outcome the worker decided itself (a timeout, an undecodable payload): it wins over the
    #: handler's, which is dropped whenever it comes
    verdict: policy.Outcome | None = None
    ended_s: float | None = None  #: when its outcome was known (returned, raised, timed out): set before it is settled
    not_kept: NotKept | None = None  #: its return value could not be kept: why (the completion keeps a marker)
    cancelled: bool = False  #: someone cancelled it while it ran (its outcome is dropped, and said so)
    #: the job's own retry budget, backoff and timeout, from its headers (each over its task's)
    overrides: calling.Overrides = calling.NO_OVERRIDES
    _lost: bool = False  #: the lost flag of a job whose handler takes no context

    @property
    def lease_lost(self) -> bool:
        """The worker knows it no longer holds the job: its context's ``lease_lost`` (which a handler's
        refused progress report sets too), or its own flag when the handler takes no context."""
        return self._lost if self.ctx is None else self.ctx.lease_lost

    def cancel_handler(self) -> None:
        """Cancel an async handler, from any thread: on its loop, after the call that makes its task (the
        loop runs calls in the order they were asked for), so that a cancel asked before its task exists
        still reaches it."""
        if self.on_loop is not None:
            self.on_loop.call_soon_threadsafe(self._cancel_task)

    def _cancel_task(self) -> None:
        """On its loop: the cancel goes after the task's first step (queued when it was made), so that a
        handler cancelled before it ran is still started and cancelled at its first ``await``, as any other."""
        if self.future is not None and self.on_loop is not None:
            self.on_loop.call_soon(self.future.cancel)

    def mark_lost(self) -> None:
        """The lease is gone: the handler's context says so from now (``ctx.lease_lost``, ``ctx.lost``)."""
        if self.ctx is None:
            self._lost = True
        else:
            self.ctx.mark_lost()
