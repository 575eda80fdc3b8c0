"""Tasks: the handler a worker runs for each job of a queue, and what a handler sees.

    app = echomq.App()

    @app.task(queue="emails", max_attempts=5)
    def send_email(payload, ctx):
        mailer.send(payload["to"], idempotency_key=ctx.idempotency_key)

    @app.task(queue="thumbnails")
    async def thumbnail(payload, ctx): ...

One handler per queue (the job core has no task name: the queue is the task). A
handler takes ``(payload)`` or ``(payload, ctx)``. It finishes the job by
returning (COMPLETE; its return value is kept as the job's result for ``result_ttl``
seconds, default 600, where the node serves the bus: ``Queue.result``), raising (FAIL: retried with backoff until ``max_attempts``,
then dead), raising :class:`Retry` (FAIL with its own delay) or :class:`Delay`
(DELAY: run again later, no failure recorded).

A handler enqueues follow-up work through its context, on the worker's own
connection: ``ctx.producer("emails")`` is an :class:`echomq.Queue` in a sync
handler and an :class:`echomq.aio.Queue` (its methods awaited) in an ``async def``
one, so a follow-up enqueue never blocks the event loop every async handler shares.
(``ctx.queue`` is the job's queue name, so the method has its own name.)

If the worker loses the job's lease (the job is re-claimed by someone else, or
cancelled), the outcome is never settled: an ``async def`` handler is cancelled, a
sync handler sees ``ctx.lease_lost`` turn true (``ctx.lost`` is a :class:`threading.Event`).

A handler runs for at most the task's ``timeout`` seconds (default
:data:`DEFAULT_TIMEOUT_S`, 300; ``None``: no limit; ``emq worker --timeout`` overrides
it). Then the attempt fails with :class:`~echomq.JobTimeout` (one attempt spent): an
async handler is cancelled; a sync handler's thread cannot be killed, so it is
abandoned (``ctx.lost`` is set, its outcome dropped, the worker starts a fresh thread
in its place) and runs on until it returns -- unless it runs in the process pool
(``pool="process"``, ``emq worker --pool process``), whose child is killed and replaced.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Concatenate, Coroutine, Generic, ParamSpec, Protocol, TypeVar, overload

from .calling import (UNSET, CallForm, _Unset, call_form, check_max_attempts, check_task_name, own_headers,
                      stored_call)
from .canvas import Caller, Signature
from .cron import Cron
from .handles import AsyncJobHandle, JobHandle
from .producing import Producer, afind, find
from .lifecycle import AppState, Hook, Lifecycle, check_hook
from ..errors import ConfigurationError, LeaseLost, UnsupportedOnWire
from .._protocol.keys import check_partitions, check_queue_name
from .._protocol.results import DEFAULT_RESULT_TTL_S
from .._protocol.serializers import JSON, Serializer
from .policy import MAX_DELAY_MS, Backoff
from .._protocol.rates import RateLimit, parse_rate_limit

if TYPE_CHECKING:
    from .._client.connection import Connection
    from .. import aio


#: where sync handlers may run: on the worker's threads, or in child processes (docs/workers.md)
POOLS = ("thread", "process")

#: A task's default ``timeout``, seconds: long enough for ordinary work, short enough that a hung
#: handler is failed (and, after its budget, dead) within minutes rather than never.
DEFAULT_TIMEOUT_S = 300.0


def check_timeout(timeout: object, what: str) -> float | None:
    """A handler timeout: seconds > 0, or None for no timeout."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ConfigurationError(f"bad timeout {timeout!r} for {what}: seconds > 0, or None for no timeout")
    return float(timeout)


def _good_delay(delay_ms: object) -> bool:
    return isinstance(delay_ms, int) and not isinstance(delay_ms, bool) and 0 <= delay_ms <= MAX_DELAY_MS


class Retry(Exception):
    """Raise from a handler to fail this attempt and retry after ``delay_ms`` (the task's
    backoff when None). It spends one attempt of the budget like any failure."""

    def __init__(self, reason: str = "retry requested", *, delay_ms: int | None = None) -> None:
        super().__init__(reason)
        if delay_ms is not None and not _good_delay(delay_ms):
            raise ConfigurationError(f"bad Retry delay_ms {delay_ms!r}: an integer from 0 to {MAX_DELAY_MS}")
        self.reason = reason
        self.delay_ms = delay_ms


class Delay(Exception):
    """Raise from a handler to put the job back for ``delay_ms`` without recording a failure
    (DELAY). On wire 4 the next claim still counts towards ``max_attempts``."""

    def __init__(self, delay_ms: int) -> None:
        if not _good_delay(delay_ms):
            raise ConfigurationError(f"bad Delay delay_ms {delay_ms!r}: an integer from 0 to {MAX_DELAY_MS}")
        super().__init__(f"delay {delay_ms} ms")
        self.delay_ms = delay_ms


#: guards the making of a context's ``lost`` Event against the worker marking it lost meanwhile
_LOST_EVENTS = threading.Lock()


@dataclass
class JobContext:
    """What a handler knows about the job it runs."""

    id: str
    queue: str
    attempt: int  #: the fencing token: 1 on the first claim, +1 on every claim after
    producers: Callable[[str, Serializer | None], Any] | None = field(default=None, repr=False)
    #: sends APPEND for this attempt (set by the worker; a coroutine function for an async
    #: handler); raises LeaseLost when the lease is gone
    report: Callable[[Any], Any] | None = field(default=None, repr=False)
    #: a flow parent's children's results and errors (decoded when called), read by the worker when
    #: it claimed the parent; None for any other job
    children: Callable[[], Any] | None = field(default=None, repr=False)
    #: what the app's lifecycle hooks made for the handlers (``ctx.state.db``): the app's :class:`AppState`
    state: AppState = field(default_factory=AppState, repr=False)
    # the lost flag; its Event is made only when a handler asks for ``lost`` (most never do,
    # and an Event per job is a lock and a condition the worker would build for every claim)
    _lost: bool = field(default=False, init=False, repr=False, compare=False)
    _lost_event: threading.Event | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def lost(self) -> threading.Event:
        """A :class:`threading.Event` set once the lease is gone (wait on it, or read ``lease_lost``)."""
        if self._lost_event is None:
            with _LOST_EVENTS:
                if self._lost_event is None:
                    event = threading.Event()
                    if self._lost:
                        event.set()
                    self._lost_event = event
        return self._lost_event

    def mark_lost(self) -> None:
        """The worker's call: the lease is gone (sets ``lost`` too, if a handler made it)."""
        self._lost = True
        with _LOST_EVENTS:  # paired with ``lost``'s check: an Event made meanwhile is set by one side
            event = self._lost_event
        if event is not None:
            event.set()

    def producer(self, queue: str | None = None, *, serializer: Serializer | None = None) -> Any:
        """A producer for ``queue`` (this job's own by default) on the worker's connection: an
        :class:`echomq.Queue` in a sync handler, an :class:`echomq.aio.Queue` in an async one.
        Its serializer is the app's task's for that queue, else JSON, unless given."""
        if self.producers is None:
            raise ConfigurationError("this context has no worker connection: producer() works inside a worker's handler")
        return self.producers(self.queue if queue is None else queue, serializer)

    @property
    def idempotency_key(self) -> str:
        """``"{id}:{attempt}"``: the same for this attempt only. Key downstream writes with it."""
        return f"{self.id}:{self.attempt}"

    @property
    def lease_lost(self) -> bool:
        """True once the worker knows it no longer holds the job: stop, nothing you return counts."""
        return self._lost or (self._lost_event is not None and self._lost_event.is_set())

    def progress(self, value: Any) -> None:
        """Report progress (any JSON value, at most 64 KiB): kept on the job's row and, when the
        queue's events are on, a ``progress`` event. Fenced by this attempt's token: once the lease
        is lost it raises :class:`LeaseLost` and writes nothing."""
        report = self._reporter()
        try:
            report(value)
        except LeaseLost:
            self.mark_lost()
            raise

    def _reporter(self) -> Callable[[Any], Any]:
        if self.report is None:
            raise UnsupportedOnWire("progress needs the bus: this node's trafikey does not list `append` "
                                    "(upgrade the module, or use wire 4)")
        if self.lease_lost:
            raise LeaseLost("progress", self.id, str(self.attempt))
        return self.report

    def children_results(self) -> dict[str, Any]:
        """A flow parent's children's results by child id (decoded with this task's serializer); a
        child that died under ``on_child_failure="ignore"`` or ``"continue"`` has none."""
        return self._flow_children().results

    def children_failures(self) -> dict[str, str]:
        """A flow parent's dead children's errors by child id, under ``on_child_failure="continue"``."""
        return self._flow_children().failures

    def _flow_children(self) -> Any:
        if self.children is None:
            raise ConfigurationError("this job is not a flow parent: only a parent's handler reads its children")
        return self.children()

    def check_lease(self) -> None:
        """Raise :class:`LeaseLost` if the lease is gone (call it between steps of long work)."""
        if self.lease_lost:
            raise LeaseLost("handler", self.id, str(self.attempt))


@dataclass
class AsyncJobContext(JobContext):
    """What an ``async def`` handler knows: the same, but ``await ctx.progress(value)`` sends
    APPEND on the worker's asyncio connection, so the handler's loop runs on while it travels."""

    async def progress(self, value: Any) -> None:  # type: ignore[override]
        report = self._reporter()
        try:
            await report(value)
        except LeaseLost:
            self.mark_lost()
            raise


def _arity(fn: Callable[..., Any]) -> int:
    """How many arguments to pass: 2 (payload, ctx), 1 (payload) or 0."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return min(2, len(positional))


@dataclass(frozen=True)
class Task:
    """A queue's handler and its retry policy."""

    queue: str
    fn: Callable[..., Any]
    max_attempts: int = 3
    backoff: Backoff = Backoff()
    serializer: Serializer = JSON
    timeout: float | None = DEFAULT_TIMEOUT_S  #: seconds a handler may run; then JobTimeout (None: no limit)
    #: seconds a completed job's record and result are kept (``Queue.result``, ``Queue.status``);
    #: 0 keeps none (then the worker completes with plain COMPLETE)
    result_ttl: float = DEFAULT_RESULT_TTL_S
    #: at most this many job starts across every worker of the queue (``"50/s"``, ``"600/m"``,
    #: ``"1000/h"``): a worker sets it on the queue at start; None leaves the queue's as it is
    rate_limit: RateLimit | None = None
    partitions: int = 1  #: sub-queues the queue spreads over (docs/cluster.md "Partitioned queues")
    #: the task's name, carried by each job its ``delay``/``enqueue`` makes (the worker runs it by
    #: that name; ``emq inspect`` shows it): its function's ``__name__`` unless given
    name: str = ""
    #: where a sync handler runs: ``"process"`` in a child process the worker kills past its timeout
    #: (docs/workers.md "The process pool"), ``"thread"``, or None: as the worker's ``pool`` says
    pool: str | None = None
    #: how many of (payload, ctx) the handler takes: the worker passes it ``(payload, ctx)[:arity]``
    #: for a job that names no task
    arity: int = field(init=False, repr=False)
    #: how a job that names this task calls the handler (:mod:`echomq.worker.calling`)
    form: CallForm = field(init=False, repr=False, compare=False)
    is_async: bool = field(init=False, repr=False)  #: an ``async def`` handler, run on the asyncio loop
    #: ``result_ttl`` in ms, as COMPLETE's retention (read for every job the worker settles)
    result_ttl_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        check_max_attempts(self.max_attempts, f"queue {self.queue!r}")
        if not callable(self.fn):
            raise ConfigurationError(f"the handler for queue {self.queue!r} is not callable: {self.fn!r}")
        named = self.name or getattr(self.fn, "__name__", type(self.fn).__name__)
        object.__setattr__(self, "name", check_task_name(named))
        object.__setattr__(self, "timeout", check_timeout(self.timeout, f"queue {self.queue!r}"))
        ttl = self.result_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 <= ttl < 2**40:
            raise ConfigurationError(f"bad result_ttl {ttl!r} for queue {self.queue!r}: seconds >= 0 (0 keeps none)")
        if self.rate_limit is not None:
            object.__setattr__(self, "rate_limit", parse_rate_limit(self.rate_limit))
        check_partitions(self.queue, self.partitions)
        if self.pool not in POOLS + (None,):
            raise ConfigurationError(f"bad pool {self.pool!r} for queue {self.queue!r}: one of {', '.join(POOLS)}, "
                                     "or None (the worker's)")
        if self.rate_limit is not None and self.partitions > 1:
            raise ConfigurationError(f"queue {self.queue!r}: a rate limit is one queue's, and a partitioned queue's "
                                     "partitions are queues of their own: rate_limit with partitions > 1 is not supported")
        # read the signature once, not per job
        object.__setattr__(self, "arity", _arity(self.fn))
        object.__setattr__(self, "form", call_form(self.fn))
        object.__setattr__(self, "is_async", asyncio.iscoroutinefunction(self.fn))
        if self.is_async and self.pool == "process":
            raise ConfigurationError(f"queue {self.queue!r}: pool='process' runs sync handlers; an async def handler "
                                     "runs on the worker's asyncio loop, where its timeout cancels it (drop pool=)")
        object.__setattr__(self, "result_ttl_ms", int(self.result_ttl * 1000))

    def on(self, connection: Any) -> Any:
        """This task's :class:`~echomq.Queue` on ``connection`` (to enqueue jobs for it); a
        :class:`~echomq.PartitionedQueue` (declaring its N) when it has partitions."""
        from .._client.partitioned import PartitionedQueue
        from .._client.queue import Queue

        if self.partitions == 1:
            return Queue(connection, self.queue, serializer=self.serializer)
        return PartitionedQueue(connection, self.queue, partitions=self.partitions, serializer=self.serializer)


P = ParamSpec("P")
Q = ParamSpec("Q")
R = TypeVar("R", covariant=True)
V = TypeVar("V", covariant=True)
A = TypeVar("A")
F = TypeVar("F")


class TaskFunction(Protocol, Generic[P, R, Q, V]):
    """What ``@app.task`` returns: the function itself, same signature for type checkers, with
    ``.task`` (its :class:`Task`) and the ways to call it through the queue set: ``delay`` and
    ``adelay`` take the handler's arguments (its context left out), ``enqueue`` and ``aenqueue``
    its positional arguments and the per-job options, ``s`` makes a call for a canvas."""

    task: Task

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def delay(self, *args: Q.args, **kwargs: Q.kwargs) -> JobHandle[V]: ...

    async def adelay(self, *args: Q.args, **kwargs: Q.kwargs) -> AsyncJobHandle[V]: ...

    def enqueue(self, *args: Any, delay: float | timedelta | None = None, eta: datetime | None = None,
                priority: int = 0, id: str | None = None, unique_for: float | None = None, group: str | None = None,
                max_attempts: int | None = None, backoff: Backoff | None = None,
                timeout: float | None | _Unset = UNSET) -> JobHandle[V]: ...

    async def aenqueue(self, *args: Any, delay: float | timedelta | None = None, eta: datetime | None = None,
                       priority: int = 0, id: str | None = None, unique_for: float | None = None,
                       group: str | None = None, max_attempts: int | None = None, backoff: Backoff | None = None,
                       timeout: float | None | _Unset = UNSET) -> AsyncJobHandle[V]: ...

    def s(self, *args: Any, **kwargs: Any) -> Signature[V]: ...


class TaskDecorator(Protocol):
    """``@app.task(...)``: the decorator it returns (for type checkers a handler's context, annotated,
    is left out of ``delay``'s arguments when it is the second of two parameters or the first)."""

    @overload
    def __call__(self, fn: Callable[[A, JobContext], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[[A, JobContext], Coroutine[Any, Any, F], [A], F]: ...

    @overload
    def __call__(self, fn: Callable[[A, AsyncJobContext], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[[A, AsyncJobContext], Coroutine[Any, Any, F], [A], F]: ...

    @overload
    def __call__(self, fn: Callable[[A, JobContext], F], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[[A, JobContext], F, [A], F]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[AsyncJobContext, Q], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[Concatenate[AsyncJobContext, Q], Coroutine[Any, Any, F], Q, F]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, Q], F], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[Concatenate[JobContext, Q], F, Q, F]: ...

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
                 ) -> TaskFunction[P, Coroutine[Any, Any, F], P, F]: ...

    @overload
    def __call__(self, fn: Callable[P, F], /) -> TaskFunction[P, F, P, F]: ...


class App:
    """The task registry a worker serves (``emq worker mymodule:app``), and the way its producers call
    its tasks: ``App(url=...)`` (or ``app.connect(...)``, or ``EMQ_URL``) says where its node is, and
    ``send_email.delay(payload)`` sends a job there (docs/workers.md "Calling a task"). ``queue``:
    where a task that names no queue goes (several tasks share it, each by its name), as Celery's
    default queue; without it each such task has a queue of its function's name."""

    def __init__(self, name: str = "echomq", *, url: str | None = None, wire: int | str = "auto",
                 queue: str | None = None, **connect_options: Any) -> None:
        self.name = name
        #: the queue of every ``@app.task`` that names none (None: the function's name)
        self.queue = None if queue is None else check_queue_name(queue)
        #: each queue's first task: the queue's own settings (serializer, partitions, rate limit) are its
        self.tasks: dict[str, Task] = {}
        self.named: dict[str, dict[str, Task]] = {}  #: each queue's tasks by name (a worker runs a job by its name)
        self.schedules: list[Cron] = []  #: periodic jobs (:meth:`cron`), enqueued by the workers (echomq.worker.cron)
        self.producer = Producer(url, wire, **connect_options)  #: where its tasks' jobs are sent
        #: the hooks each worker process runs at its start and end (:meth:`on_startup`, :meth:`on_shutdown`)
        self.lifecycle = Lifecycle()

    @property
    def state(self) -> AppState:
        """What the lifecycle hooks made for the handlers (a handler reads it as ``ctx.state`` too)."""
        return self.lifecycle.state

    def on_startup(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(state)`` (or ``hook()``; sync or ``async def``) once in each worker
        process before its first claim (docs/workers.md "Lifecycle hooks"). One that raises stops the worker."""
        self.lifecycle.startup.append(check_hook(hook, "on_startup"))
        return hook

    def on_shutdown(self, hook: Hook) -> Hook:
        """Decorator: run ``hook(state)`` (or ``hook()``) once in each worker process after its last settle."""
        self.lifecycle.shutdown.append(check_hook(hook, "on_shutdown"))
        return hook

    def __repr__(self) -> str:
        return f"App({self.name!r}, queues={sorted(self.tasks)})"

    # -- its node ------------------------------------------------------------------
    def connect(self, where: str | Connection | aio.Connection | None = None, *, wire: int | str = "auto",
                **connect_options: Any) -> App:
        """Where the app's tasks are sent: a URL (opened at the first call; ``wire``, ``cluster`` and
        valkey-py's options as :func:`echomq.connect` takes them), or a connection of yours to use
        (an :class:`echomq.Connection`, or an :class:`echomq.aio.Connection` for the awaitables),
        which the app never closes. Closes what the app opened before (its asyncio connection must
        be closed first: ``await app.aclose()``)."""
        self.producer.configure(where, wire, connect_options)
        return self

    def close(self) -> None:
        """Close the blocking connection the app opened (the next call opens one again)."""
        self.producer.close_sync()

    async def aclose(self) -> None:
        """Close the asyncio connection the app opened, in the event loop that opened it."""
        await self.producer.aclose()

    def job(self, job_id: str) -> JobHandle[Any] | None:
        """A handle to the job ``job_id`` in whichever of the app's queues holds it (its row, or its
        completed record): one round trip (on a cluster, one per node). None when none does; refused
        when two queues hold that id."""
        return find(self.producer, list(self.tasks.values()), job_id)

    async def ajob(self, job_id: str) -> AsyncJobHandle[Any] | None:
        """:meth:`job` on the app's asyncio connection."""
        return await afind(self.producer, list(self.tasks.values()), job_id)

    # -- its tasks -------------------------------------------------------------------
    def handler(self, queue: str, fn: Callable[..., Any], *, max_attempts: int = 3,
                backoff: Backoff | None = None, serializer: Serializer = JSON,
                timeout: float | None = DEFAULT_TIMEOUT_S, result_ttl: float = DEFAULT_RESULT_TTL_S,
                partitions: int = 1, rate_limit: str | RateLimit | None = None, name: str | None = None,
                pool: str | None = None) -> Task:
        """Register ``fn`` as the handler of ``queue``, which has none yet (the one-handler form:
        every job of the queue runs it; ``partitions`` > 1: a partitioned queue, every partition
        served by this handler). Several tasks share a queue through ``@app.task(queue=...)``."""
        if queue in self.tasks:
            raise ConfigurationError(f"queue {queue!r} already has a handler: {self.tasks[queue].name} (several tasks "
                                     f"share a queue through @app.task(queue={queue!r}), each with its own name)")
        return self._register(Task(queue, fn, max_attempts, backoff or Backoff(), serializer, timeout,
                                   result_ttl=result_ttl, partitions=partitions, rate_limit=rate_limit,
                                   name=name or "", pool=pool))

    def _register(self, task: Task) -> Task:
        """``task`` among its queue's tasks: its name free there, and the queue's own settings as the
        queue's first task has them (one serializer, one layout, one rate limit a queue)."""
        tasks = self.named.setdefault(task.queue, {})
        if task.name in tasks:
            raise ConfigurationError(f"queue {task.queue!r} already has a task named {task.name!r}: give this one "
                                     "its own name (@app.task(name=...))")
        first = self.tasks.get(task.queue)
        if first is not None:
            for setting in ("serializer", "partitions", "rate_limit"):
                mine, theirs = getattr(task, setting), getattr(first, setting)
                if mine != theirs and not (setting == "rate_limit" and mine is None):
                    raise ConfigurationError(
                        f"task {task.name} has {setting} {mine!r}, and queue {task.queue!r}'s first task {first.name} "
                        f"{theirs!r}: the tasks of one queue share its {setting}")
        tasks[task.name] = task
        self.tasks.setdefault(task.queue, task)
        return task

    def cron(self, expr: str, *, queue: str | None = None, payload: Any = None, id: str | None = None,
             task: Task | TaskFunction[Any, Any, Any, Any] | None = None) -> Cron:
        """A periodic job: ``payload`` enqueued on ``queue`` at every tick of ``expr`` (5-field cron,
        6 with the seconds first, or ``@every <duration>``), exactly once per tick across every
        worker that serves ``queue`` (docs/scheduling.md). ``id`` names the schedule (default: the
        queue's name); two schedules of one app need two ids. With ``task`` (a task of this app), its
        jobs are that task's: its queue, and on a queue of several tasks its name (``payload`` is then
        its one argument, for a task that takes one)."""
        named = None if task is None else getattr(task, "task", task)
        if named is not None:
            if not isinstance(named, Task) or self.named.get(named.queue, {}).get(named.name) is not named:
                raise ConfigurationError(f"app.cron(task=...) takes a task of this app, not {task!r}")
            if queue is not None and queue != named.queue:
                raise ConfigurationError(f"task {named.name} is of queue {named.queue!r}, not {queue!r}: leave out "
                                         "queue=")
            if named.form.single is None and payload is not None:
                raise ConfigurationError(f"task {named.name} takes no one argument: its ticks carry no payload")
            queue = named.queue
        if queue is None:
            raise ConfigurationError("app.cron needs queue= (or task=)")
        schedule = Cron(expr, queue, payload, id or "", None if named is None else named.name)
        if any(s.id == schedule.id for s in self.schedules):
            raise ConfigurationError(f"schedule id {schedule.id!r} is taken: give this one its own id= "
                                     "(app.cron(expr, task=..., id=...))")
        self.schedules.append(schedule)
        return schedule

    def tick(self, schedule: Cron) -> tuple[Any, dict[str, Any] | None]:
        """What a schedule's jobs store (read when a worker starts, the app complete): the payload
        as ever; or, for a task's schedule on a queue of several tasks, where a job must name its
        task, the task's call (its payload as its one argument, else no argument) and its headers."""
        tasks = self.named.get(schedule.queue, {})
        if schedule.task is None or len(tasks) < 2:
            return schedule.payload, None
        task = tasks[schedule.task]
        args = (schedule.payload,) if task.form.single is not None else ()
        payload, args_form = stored_call(task.form, args, {})
        return payload, own_headers(task.name, args_form)

    @overload
    def task(self, fn: Callable[[A, JobContext], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[[A, JobContext], Coroutine[Any, Any, F], [A], F]: ...

    @overload
    def task(self, fn: Callable[[A, AsyncJobContext], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[[A, AsyncJobContext], Coroutine[Any, Any, F], [A], F]: ...

    @overload
    def task(self, fn: Callable[[A, JobContext], F], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[[A, JobContext], F, [A], F]: ...

    @overload
    def task(self, fn: Callable[Concatenate[AsyncJobContext, Q], Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[Concatenate[AsyncJobContext, Q], Coroutine[Any, Any, F], Q, F]: ...

    @overload
    def task(self, fn: Callable[Concatenate[JobContext, Q], F], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[Concatenate[JobContext, Q], F, Q, F]: ...

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, F]], /  # type: ignore[overload-overlap]
             ) -> TaskFunction[P, Coroutine[Any, Any, F], P, F]: ...

    @overload
    def task(self, fn: Callable[P, F], /) -> TaskFunction[P, F, P, F]: ...

    @overload
    def task(self, fn: None = None, /, *, queue: str | None = None, name: str | None = None, max_attempts: int = 3,
             backoff: Backoff | None = None, serializer: Serializer = JSON,
             timeout: float | None = DEFAULT_TIMEOUT_S, result_ttl: float = DEFAULT_RESULT_TTL_S,
             partitions: int = 1, rate_limit: str | RateLimit | None = None,
             cron: str | None = None, pool: str | None = None) -> TaskDecorator: ...

    def task(self, fn: Callable[..., Any] | None = None, /, *, queue: str | None = None, name: str | None = None,
             max_attempts: int = 3, backoff: Backoff | None = None, serializer: Serializer = JSON,
             timeout: float | None = DEFAULT_TIMEOUT_S, result_ttl: float = DEFAULT_RESULT_TTL_S,
             partitions: int = 1, rate_limit: str | RateLimit | None = None, cron: str | None = None,
             pool: str | None = None) -> Any:
        """Decorator: ``@app.task`` (the queue is the app's ``queue``, else the function's name) or
        ``@app.task(queue=...)``.
        Several tasks may share a queue, each by its name (``name``: its function's ``__name__``
        unless given). With ``cron``, the task also runs periodically (:meth:`cron`, payload None).

        The decorated function is returned unchanged -- type checkers keep its signature -- with
        ``.task`` set to its :class:`Task` and ``delay``, ``adelay``, ``enqueue``, ``aenqueue`` and
        ``s`` to call it through its queue (:class:`TaskFunction`).
        """

        def register(fn: Callable[..., Any]) -> Any:
            task = self._register(Task(queue or self.queue or fn.__name__, fn, max_attempts, backoff or Backoff(), serializer,
                                       timeout, result_ttl=result_ttl, partitions=partitions, rate_limit=rate_limit,
                                       name=name or "", pool=pool))
            caller = Caller(self.producer, task, check_timeout)
            fn.task = task  # type: ignore[attr-defined]
            for method in ("delay", "adelay", "enqueue", "aenqueue", "s"):
                setattr(fn, method, getattr(caller, method))
            if cron is not None:
                self.cron(cron, task=task)
            return fn

        if isinstance(fn, str):  # @app.task("emails"): Celery's spelling names the task, ours the queue
            raise ConfigurationError(f"@app.task({fn!r}) takes the queue by keyword: write "
                                     f"@app.task(queue={fn!r}) (or name={fn!r} for the task's name)")
        if fn is not None and not callable(fn):
            raise ConfigurationError(f"@app.task decorates a function, not {type(fn).__name__}: "
                                     "write @app.task or @app.task(queue=...) above a def")
        return register(fn) if fn is not None else register
