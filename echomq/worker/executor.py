"""The executor: runs the handlers of claimed jobs and hands their outcomes to the settles.

A claim batch is held (:class:`~echomq.worker.held.Held`, one a job) and handed to the handlers at
once: sync ones on a pool of daemon threads, ``async def`` ones on an asyncio loop of their own
(:mod:`echomq.worker.pool`), the batch in one call there (its thread woken once a batch, each handler
a task of that loop, no Future of another thread's a job). Each outcome comes back on the thread that
ran the handler, into :attr:`Executor.finished`, for the loop's next exchange to settle -- a sync one
at once, the async ones that ended in one pass of their loop together, under one lock; the handler
thread that ends the last running handler may run that exchange itself (the loop's relay). A
handler past its timeout is failed here with :class:`~echomq.JobTimeout`, whichever comes first
deciding.

A handler's call becomes its outcome in :mod:`echomq.worker.outcomes`, which also keeps a process
the handler forked out of the worker.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from functools import partial
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence

from .. import aio, hooks
from . import calling, policy
from .._client.connection import Connection
from .._client.partitioned import PartitionedQueue
from .._client.queue import Job, Queue
from .._core.core import Children
from ..errors import JobTimeout, PayloadError, UnknownTask
from .._protocol.keys import parent_queue
from .._protocol.results import result_value
from .._protocol.serializers import JSON, Serializer
from .._protocol.shown import one_line, quoted
from .config import WorkerConfig
from .children import CONTEXT, ChildLimits, ProcessPool, Request, task_runs_in_process
from .held import Held, Run
from .producers import producer_of, serializer_of
from .leases import Leases
from .outcomes import outcome_of, raised
from .pool import AsyncRunner, DaemonPool
from .jobstats import JobStats, TaskStats
from .tallies import Events, Tally, waited_in_pending_s
from .tasks import App, AsyncJobContext, JobContext, Task, check_timeout

log = logging.getLogger("echomq.worker")



def count_claims(first: TaskStats, others: Mapping[TaskStats, list[tuple[Job, float | None]]], jobs: Sequence[Job],
                 waits: list[float | None]) -> None:
    """A claim batch's claims and pending waits, each under the task its job runs: ``others`` those of the
    jobs that run another task than the queue's first, the rest under ``first`` (a batch of plain jobs
    by the batch, as ever)."""
    if not others:  # the common case: the whole batch the first task's
        first.counts["claimed"] += len(jobs)
        first.waited.observe_many([waited_s for waited_s in waits if waited_s is not None])
        return
    moved = {id(job) for pairs in others.values() for job, _ in pairs}
    first.counts["claimed"] += len(jobs) - len(moved)
    first.waited.observe_many([waited_s for job, waited_s in zip(jobs, waits)
                               if waited_s is not None and id(job) not in moved])
    for stats, pairs in others.items():
        stats.counts["claimed"] += len(pairs)
        stats.waited.observe_many([waited_s for _, waited_s in pairs if waited_s is not None])


class Executor:
    """Runs handlers for one worker: holds each claim batch's jobs in ``held`` (the worker's, by
    (queue, id)), starts their handlers, and gathers their outcomes."""

    def __init__(self, app: App, connection: Connection, layouts: Mapping[str, list[str]], config: WorkerConfig,
                 held: dict[tuple[str, str], Held], leases: Leases, tally: Tally, stats: JobStats, events: Events,
                 wake: threading.Event, clock_ms: Callable[[], float]) -> None:
        self.app = app
        self.connection = connection
        self.layouts = layouts
        self.config = config
        self.held = held
        self.leases = leases
        self.tally = tally
        self.stats = stats
        self.events = events
        self.wake = wake  #: the control loop's: set when an outcome is to be settled now
        self._clock_ms = clock_ms
        #: a handler's outcome and a timeout's verdict are decided under it: whichever comes first wins
        self.outcomes = threading.Lock()
        #: held jobs whose outcome is known, for the next exchange to settle (appended under outcomes)
        self.finished: list[Held] = []
        # handlers started and ended (the latter counted under outcomes): the difference is how many
        # still run; with the youngest one's start they say when to settle (policy.settle_at_ms)
        self.started = 0
        self.ended = 0
        self.youngest_start: float | None = None
        #: the settle of the outcomes already in was due when the loop last looked: a finished handler
        #: wakes it then; else the loop's wait ends by itself when the settle falls due
        self.settle_due = True
        #: the loop's relay while relays are on (None: off): the handler thread that ends the last running
        #: handler runs it, settling what finished and claiming the next batch itself
        self.relay: Callable[[], None] | None = None
        self._progress = connection.supports("append")  #: ctx.progress sends APPEND
        #: ``ctx.producer`` for sync (False) and async (True) handlers
        self._producers = {is_async: self._make_producers(is_async) for is_async in (False, True)}
        self.pool: DaemonPool | None = None
        #: the process pool (echomq.worker.children), started with the worker when a task runs in it
        self.children: ProcessPool | None = None
        self._async: AsyncRunner | None = None
        #: (on the runner's loop) async outcomes of this pass of it, recorded together at the next (_record_ended)
        self._ended_on_loop: list[tuple[Held, policy.Outcome]] = []
        self._aio: aio.Connection | None = None  #: async handlers' producers, on the runner's loop
        #: each queue's tasks by name: a job that names its task runs that one (echomq.worker.calling)
        self._named = {task.queue: app.named.get(task.queue) or {task.name: task} for task in app.tasks.values()}

    def settle_at(self, now: float) -> float:
        """When to settle the outcomes already in (policy.settle_at_ms)."""
        return policy.settle_at_ms(now, self.started - self.ended, self.youngest_start, self.config.settle_wait_ms)

    def take_finished(self) -> list[Held]:
        """The outcomes in, to settle now."""
        with self.outcomes:
            finished, self.finished = self.finished, []
        return finished

    @property
    def queued(self) -> bool:
        """Jobs wait in the pool for a thread."""
        return self.pool is not None and self.pool.queued

    def start(self, task: Task, queue: Queue, jobs: Sequence[Job], sent: float,
              children: dict[str, Children] | None = None) -> None:
        """Start the handlers of ``jobs``, claimed from ``queue`` (sent at local ms ``sent``); ``children``:
        what each flow parent's children left it, by the parent's id. A claim batch is handed to the
        handler threads at once (one lock, not one a job)."""
        # one task, one claim: the whole batch shares its deadline and its next scan
        timeout_s = self.config.timeout_of(task)
        deadline = None if timeout_s is None else sent + timeout_s * 1000
        self.leases.claimed(sent, deadline)
        # the batch's clocks, read once: its wall time (the pending waits) and its handlers' start
        claimed_s, started_s = time.time(), time.monotonic()
        self.tally.claimed += len(jobs)
        waits = waited_in_pending_s(jobs, claimed_s)
        # the queue's tasks by name (a task its app does not list runs alone: the parts' tests start one)
        named = self._named.get(task.queue) or {task.name: task}
        one = task if len(named) == 1 else None  # what a job that names no task runs, as ever
        runs = self._hold(task, named, one, queue, jobs, sent, deadline, children, waits, started_s)
        if not runs:
            return
        self.started += len(runs)
        self.youngest_start = started_ms = self._clock_ms()
        self.settle_due = self.settle_at(started_ms) <= started_ms  # not yet, unless settle_wait_ms is 0
        told = "job.started" in hooks.heard  # read once a batch: the common case pays nothing a job
        if one is not None:  # one task: the batch's handlers are all sync, or all async
            self._run_all(runs, task.is_async, told)
            return
        for is_async in (False, True):  # jobs of several tasks: each run as its own handler is
            some = [run for run in runs if run[0].task.is_async is is_async]
            if some:
                self._run_all(some, is_async, told)

    def _run_all(self, runs: list[Run], is_async: bool, told: bool) -> None:
        if is_async:
            self._run_async(runs, told)
        elif self.children is not None and any(task_runs_in_process(run[0].task, self.config.pool) for run in runs):
            in_child = [run for run in runs if task_runs_in_process(run[0].task, self.config.pool)]
            self.children.threads.submit_all(self._run_in_child, in_child)
            if len(in_child) < len(runs):
                self._run_all([run for run in runs if run not in in_child], is_async, told)
        else:
            if self.pool is None:
                # relaying, jobs queued behind a slow handler get threads when the control thread looks in
                self.pool = DaemonPool(self.config.concurrency,
                                       self.config.settle_wait_ms / 1000 if self.relay is not None else None)
            self.pool.submit_all(self._run_sync_told if told else self._run_sync, runs)

    def _hold(self, task: Task, named: Mapping[str, Task], one: Task | None, queue: Queue, jobs: Sequence[Job],
              sent: float, deadline: float | None, children: dict[str, Children] | None, waits: list[float | None],
              started_s: float) -> list[Run]:
        """Hold a claim batch's jobs and build their handlers' calls; a job no handler can take (a
        payload that cannot be decoded, a task its queue has not, headers that cannot be read) has
        none (it is finished already: dead at once, not the worker's failure). ``task``: its queue's
        (first) task, ``named``: all its tasks by name, ``one``: its one task (None: it has several);
        ``waits``: each one's pending wait, ``started_s``: the monotonic time their handlers start. Each job is counted (its claim, its wait, later its
        settle: ``Held.stats``) under the task it runs; one that runs none, under the queue's first."""
        claimed_heard, loads = "job.claimed" in hooks.heard, task.serializer.loads  # read once a batch
        first = self.stats.of(parent_queue(queue.name), task.name)  # a partition counts as its queue
        #: the jobs that run another of the queue's tasks, by that task's figures (with their waits)
        others: dict[TaskStats, list[tuple[Job, float | None]]] = {}
        runs: list[Run] = []
        # a context is built only for a handler that takes one: nothing could ever read it (Held.ctx); a
        # plain job's handler is the queue's one task, read once a batch
        plain_ctx = one is not None and one.arity == 2
        holding, run = self.held, runs.append  # (read once a batch)
        for job, waited_s in zip(jobs, waits):
            if claimed_heard:  # counted by the batch (start)
                self.events.tell("job.claimed", job, waited_s=waited_s, trace=job.trace)
            own = job.headers
            if own is None and one is not None:  # the common case, as before headers: its queue's one task
                runs_task, by_name = one, False
                ctx = self._context(one, queue, job, children) if plain_ctx else None
                held = Held(queue, one, job, (job.queue, job.id), ctx, sent, started_s, first, deadline, sent)
            else:
                try:
                    runs_task, overrides, by_name = calling.job_run(named, task.queue, own, check_timeout)
                except (UnknownTask, calling.BadHeaders) as exc:
                    self._cannot_run(Held(queue, task, job, (job.queue, job.id), None, sent, started_s, first,
                                          claimed_at=sent), exc)
                    continue
                stats = first
                if runs_task is not task:
                    stats = self.stats.of(parent_queue(queue.name), runs_task.name)
                    others.setdefault(stats, []).append((job, waited_s))
                # the handler gets (payload, ctx)[:arity], or the job's call and its context where it takes one
                takes_ctx = runs_task.form.context is not None if by_name else runs_task.arity == 2
                ctx = self._context(runs_task, queue, job, children) if takes_ctx else None
                held = Held(queue, runs_task, job, (job.queue, job.id), ctx, sent, started_s, stats, deadline,
                            claimed_at=sent, overrides=overrides)
                if runs_task is not task or overrides.timeout is not calling.UNSET:
                    held.deadline = self._deadline(held, sent)
            holding[held.key] = held
            try:
                payload = None if job.raw_payload is None else loads(job.raw_payload)
            except Exception as exc:  # a payload this task cannot read fails this job (dead at once), not the worker
                self._cannot_run(held, PayloadError(
                    f"the payload cannot be decoded by the task's serializer ({type(task.serializer).__name__}): "
                    f"{type(exc).__name__}: {exc}"))
                continue
            if not by_name:
                run((held, runs_task.fn, (payload, ctx)[:runs_task.arity]))
                continue
            own = own or {}  # (it names its task)
            try:
                left = children.get(job.id) if children and "prev" in own else None
                results = None if left is None else {child: result_value(loads, raw, child)
                                                     for child, raw in left.results.items()}
                args, kwargs = calling.named_call(runs_task.form, own, payload, ctx, results)
            except Exception as exc:  # the job's call cannot be read (nor a previous step's result): dead at once
                self._cannot_run(held, exc)
                continue
            runs.append((held, partial(runs_task.fn, **kwargs) if kwargs else runs_task.fn, tuple(args)))
        count_claims(first, others, jobs, waits)
        return runs

    def _context(self, task: Task, queue: Queue, job: Job, children: dict[str, Children] | None) -> JobContext:
        """What ``job``'s handler sees: its context, its progress reporter, a flow parent's children."""
        is_async = task.is_async
        ctx = (AsyncJobContext if is_async else JobContext)(job.id, task.queue, job.attempt, self._producers[is_async],
                                                            state=self.app.lifecycle.state)
        if children and (left := children.get(job.id)) is not None:
            # decoded when the handler asks, in its own thread: a result its serializer cannot read is its error
            loads = task.serializer.loads
            ctx.children = lambda raw=left: Children(
                {child: result_value(loads, result, child) for child, result in raw.results.items()}, raw.failures)
        if self._progress or job.flow or job.group is not None:
            # one APPEND (lane_append, flow_append: scripts on both wires): a sync handler sends it from
            # its own thread on the connection's pool, an async one awaits it on the asyncio connection
            # (the loop's other handlers run on)
            ctx.report = self._async_report(queue.name, job) if is_async else partial(queue.progress, job)
        return ctx

    def _cannot_run(self, held: Held, error: BaseException) -> None:
        """A job no attempt could run: finished at once with ``error`` (dead, never retried); headers
        that cannot be read are a payload that cannot be (the envelope is in the payload's bytes)."""
        held.verdict = policy.Undecodable(PayloadError(str(error)) if isinstance(error, calling.BadHeaders) else error)
        log.error("job %s/%s: %s", held.job.queue, quoted(held.job.id), one_line(policy.describe_error(error)))
        held.ended_s = held.started_s
        self.held[held.key] = held
        with self.outcomes:
            self.finished.append(held)

    def timeout_of(self, held: Held) -> float | None:
        """A job's timeout: its own (from its headers), else the worker's, else its task's."""
        own = held.overrides.timeout
        return self.config.timeout_of(held.task) if own is calling.UNSET else own

    def _deadline(self, held: Held, sent: float) -> float | None:
        """The local ms ``held``'s handler times out at (claim sent at ``sent``), looked at by the scans."""
        timeout_s = self.timeout_of(held)
        deadline = None if timeout_s is None else sent + timeout_s * 1000
        self.leases.claimed(sent, deadline)
        return deadline

    def _run_sync(self, held: Held, handler: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], None] | None:
        """On a handler thread: run the handler and hand its outcome back (returns the relay, if this
        thread is to run it)."""
        return self.done(held, outcome_of(handler, *args), relay=True)

    def _run_sync_told(self, held: Held, handler: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], None] | None:
        """:meth:`_run_sync` between ``job.started`` and ``job.returned``, told on the handler's own
        thread: a subscriber may set a context there for the handler (the trace's span, say)."""
        self.events.tell("job.started", held.job)
        try:
            outcome = outcome_of(handler, *args)
        finally:
            self.events.tell("job.returned", held.job)
        return self.done(held, outcome, relay=True)

    def _run_in_child(self, held: Held, handler: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], None] | None:
        """On a thread of the process pool: the handler run in a child; its outcome handed back as a
        thread's is. Past its timeout the child is killed: the executor's JobTimeout is the outcome."""
        ctx, told = held.ctx, "job.started" in hooks.heard
        children: Any = None
        if ctx is not None and ctx.children is not None:
            try:
                children = ctx.children()
            except Exception as exc:  # the handler's error when it reads them, as on a thread
                children = exc
        def sent(value: Any) -> Any:  # the context stays here: the child puts its own in its place
            return CONTEXT if ctx is not None and value is ctx else value

        keywords = handler.keywords if isinstance(handler, partial) else {}
        request = Request(held.task.queue, held.task.name, held.job, tuple(map(sent, args)),
                          {name: sent(value) for name, value in keywords.items()},
                          ctx is not None and ctx.report is not None, children)
        if told:
            self.events.tell("job.started", held.job)
        try:
            outcome = self.children.run(request, lambda: held.verdict is not None,  # type: ignore[union-attr]
                                        lambda: held.lease_lost)
        finally:
            if told:
                self.events.tell("job.returned", held.job)
        return None if outcome is None else self.done(held, outcome, relay=True)

    async def _told(self, held: Held, coro: Awaitable[Any]) -> Any:
        """An async handler between ``job.started`` and ``job.returned``, told in its own task."""
        self.events.tell("job.started", held.job)
        try:
            return await coro
        finally:
            self.events.tell("job.returned", held.job)

    def _run_async(self, runs: list[Run], told: bool) -> None:
        """Hand a claim batch's async handlers to their loop in one call: one wake of its thread a batch."""
        if self._async is None:
            self._async = AsyncRunner()
        loop = self._async.loop
        for held, _, _ in runs:
            held.on_loop = loop  # where a cancel goes (Held.cancel_handler), even before its task is made
        loop.call_soon_threadsafe(self._start_on_loop, runs, told)

    def _start_on_loop(self, runs: list[Run], told: bool) -> None:
        """On the handlers' loop: each handler called and made a task of it, its outcome gathered when it ends."""
        create_task = self._async.loop.create_task  # type: ignore[union-attr]
        for held, handler, args in runs:
            try:
                coro = handler(*args)
            except Exception as exc:  # raised before its first await (a bad signature, say): this job's outcome
                self._ended_async(held, raised(exc))
                continue
            held.future = task = create_task(self._told(held, coro) if told else coro)
            task.add_done_callback(partial(self._task_done, held))

    def _task_done(self, held: Held, task: asyncio.Task[Any]) -> None:
        self._ended_async(held, outcome_of(task.result))  # (a cancelled task's result raises CancelledError)

    def _ended_async(self, held: Held, outcome: policy.Outcome) -> None:
        """On the handlers' loop: ``held``'s outcome, recorded with the others that end in this pass of the loop."""
        if not self._ended_on_loop:
            self._async.loop.call_soon(self._record_ended)  # type: ignore[union-attr]
        self._ended_on_loop.append((held, outcome))

    def _record_ended(self) -> None:
        """On the handlers' loop, at the pass after the one its outcomes came in: them all, under one lock
        and at one clock read (each ended within that pass; a handler that holds the loop holds its
        outcome and every other there alike, as it would a Future's callback). Async outcomes wake the
        loop, never relay (the exchange's I/O would hold up the handlers on this loop)."""
        ended, self._ended_on_loop = self._ended_on_loop, []
        ended_s, late = time.monotonic(), []
        with self.outcomes:
            for held, outcome in ended:
                if held.verdict is None:
                    held.ended_s, held.outcome = ended_s, outcome
                    self.finished.append(held)
                else:
                    late.append((held, outcome))
            self.ended += len(ended) - len(late)
            running = self.started - self.ended
        for held, outcome in late:
            self._dropped(held, outcome)
        if len(late) < len(ended) and (running <= 0 or self.settle_due) and not self.wake.is_set():
            self.wake.set()  # as done's

    def _async_report(self, queue: str, job: Job) -> Callable[[Any], Awaitable[None]]:
        """APPEND for an async handler's attempt, on the asyncio connection its producers share."""

        async def report(value: Any) -> None:
            if self._aio is None:
                self._aio = aio.Connection.sharing(self.connection)
            await aio.Queue(self._aio, queue).progress(job, value)

        return report

    def _make_producers(self, is_async: bool) -> Callable[[str, Serializer | None], Any]:
        """``ctx.producer`` for a handler: sync handlers share the worker's connection (valkey-py's
        client is thread-safe); async ones share one asyncio connection to the same node, used
        only on the runner's loop."""

        def sync_queue(name: str, given: Serializer | None) -> Queue | PartitionedQueue:
            return producer_of(self.app, self.connection, self.layouts, name, given)

        if not is_async:
            return sync_queue

        def async_queue(name: str, given: Serializer | None) -> aio.Queue | aio.PartitionedQueue:
            if self._aio is None:
                self._aio = aio.Connection.sharing(self.connection)
            layout, serializer = self.layouts.get(name, [name]), serializer_of(self.app, name, given)
            if len(layout) > 1:
                return aio.PartitionedQueue(self._aio, name, layout, serializer=serializer)
            return aio.Queue(self._aio, name, serializer=serializer)

        return async_queue

    def done(self, held: Held, outcome: policy.Outcome, *, relay: bool = False) -> Callable[[], None] | None:
        """From the thread that ran a sync handler: its outcome, for the next exchange to settle. With
        ``relay`` (a pool thread), the last running handler's returns the relay for that thread to run.
        A lock and a clock read a job: a sync handler's end is decided against its timeout as it returns
        (held back for the rest of its claim batch, run after it on this thread, it could lose to a
        timeout it beat), and its run time is its own."""
        ended_s = time.monotonic()
        with self.outcomes:
            late = held.verdict is not None
            if not late:
                held.ended_s, held.outcome = ended_s, outcome
                self.ended += 1
                self.finished.append(held)
            running = self.started - self.ended
        if late:
            self._dropped(held, outcome)
            return None
        if running <= 0:
            relay_to = self.relay
            if relay and relay_to is not None:
                return relay_to
        elif not self.settle_due:
            return None  # not yet due: the loop's wait ends by itself when it falls due (Loop.next_due)
        # the last of its batch to end, or the settle already due: wake the loop (set, it is not yet
        # cleared: the step it wakes reads this outcome)
        if not self.wake.is_set():
            self.wake.set()
        return None

    @staticmethod
    def _dropped(held: Held, outcome: policy.Outcome) -> None:
        """A handler's outcome after a timeout's verdict (which failed it already): dropped."""
        if not (isinstance(outcome, policy.Raised) and isinstance(outcome.error, asyncio.CancelledError)):
            # (an async handler the timeout cancelled did not finish: it stopped, as told)
            log.info("job %s/%s attempt %d: the timed-out handler finished after all; its outcome is dropped",
                     held.job.queue, quoted(held.job.id), held.job.attempt)

    def time_out(self, held: Held) -> None:
        """Fail a handler past its timeout with JobTimeout (settled by the next exchange), unless its own
        outcome came first: an async one is cancelled; a sync one is abandoned to its thread, and a
        fresh thread takes its place in the pool. Either way the lease is no longer renewed and the
        handler's own outcome is dropped."""
        timeout_s = self.timeout_of(held)
        with self.outcomes:
            if held.outcome is not None:
                return  # it returned just now: settled with its own outcome
            held.verdict = policy.Raised(JobTimeout(timeout_s))
            held.ended_s = time.monotonic()
            self.ended += 1
            self.finished.append(held)
        held.mark_lost()
        in_child = self.children is not None and task_runs_in_process(held.task, self.config.pool)
        if held.task.is_async:
            held.cancel_handler()
        elif self.pool is not None and not in_child:  # a child is killed by the thread that waits on it
            self.pool.replace_one()
        log.error("job %s/%s attempt %d: the handler ran past its timeout of %g s: failed with JobTimeout%s",
                  held.job.queue, quoted(held.job.id), held.job.attempt, timeout_s,
                  "" if held.task.is_async else "; its child process is killed" if in_child
                  else "; its thread is abandoned and runs on until it returns")

    def run_on_loop(self, coro: Any) -> Any:
        """``coro`` run to its end on the async handlers' loop (started if it was not): a lifecycle hook's."""
        if self._async is None:
            self._async = AsyncRunner()
        return self._async.submit(coro).result()

    def start_children(self, served: Iterable[Task]) -> None:
        """The process pool and its children, ready, when a task ``served`` runs in it (StartupFailed if a
        child's startup hook raised)."""
        if not any(task_runs_in_process(task, self.config.pool) for task in served):
            return
        limits = ChildLimits(self.config.max_jobs_per_child, self.config.max_memory_per_child_mb)
        self.children = ProcessPool(self.app, self.connection, self.layouts, self.config.concurrency, limits)
        self.children.start()

    def close(self) -> None:
        """Sleeping handler threads end now, running ones after their handler; the process pool's
        children stop (a busy one is killed); the asyncio runner stops, its connection closed first."""
        if self.pool:
            self.pool.shutdown()
        if self.children is not None:
            self.children.close()
            self.children = None
        if self._async:
            if self._aio is not None:
                self._async.close(self._aio)
            self._async.shutdown()
