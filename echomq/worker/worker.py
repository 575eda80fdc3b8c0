"""The worker: claim -> run -> renew -> settle, on one connection, until told to stop.

One control thread does every server call, one small step at a time
(:meth:`Worker.step`); handlers run elsewhere -- sync ones on a pool of daemon
threads, ``async def`` ones on an asyncio loop in a thread of its own -- and hand
their outcome back through a queue. What each step sends is decided by the pure
functions of :mod:`echomq.worker.policy`; this module only performs the calls.

A step, in order:

1. **settle and claim**, per queue in one round trip (two on wire 4, whose claim
   follows its pause read): what finished is settled -- return -> PUBLISH with the result
   (COMPLETE when the task keeps none or the node has no bus), raise -> FAILURES.INCR with the
   traceback (FAIL without the bus; backoff with jitter, the task's ``max_attempts``), :class:`~echomq.Retry` ->
   FAIL with its delay, :class:`~echomq.Delay` -> DELAY -- and the slots it frees are
   filled with a pipelined batch of claims while the queue is busy. A job whose lease
   was lost is dropped, never settled; a settle the server fences off is logged.
   A queue whose claim came back empty is **idle**: the worker stops claiming it and a
   waiter (:mod:`echomq.worker.waiter`, a thread with a connection of its own) blocks on the
   server for it -- BZPOPMIN on its wake marker (wire 4) or EMQ.BCLAIM (wire 6) -- and
   wakes this thread the moment it can be served. (A wire-6 node without the
   ``claim.block`` token is polled instead: single claims spaced by an adaptive back-off.)
2. **renew** on the tick: one EXTENDS per queue for every held job that is due; a 0
   marks that job lost (its async handler is cancelled, ``ctx.lease_lost`` turns true). Between
   ticks, jobs held past ``policy.CANCEL_CHECK_MS`` are looked at that often (one ZMSCORE per
   queue): one a cancel took is lost the same way, within half a second of the cancel.
3. **time out and give up**: a handler past its task's ``timeout`` is failed with
   :class:`~echomq.JobTimeout` (an async one cancelled, a sync one abandoned to its
   thread); jobs no renewal reached the server for in a whole lease (the link was
   down) are marked lost the same way as a 0.
4. **timers**: PROMOTE when the schedule's head falls due (each promote reads it) and
   STALLED.CHECK on its interval (:mod:`echomq.worker.timers`); the periodic jobs of the
   queues served, each tick enqueued once across every worker (:mod:`echomq.worker.cron`).

Shutdown (SIGTERM/SIGINT, or :meth:`Worker.stop`): stop claiming, let running jobs
finish for up to ``grace_s`` while still renewing and settling them, then REQUEUE
what is still held (both wires: no budget spent). A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import signal
import threading
import time
import weakref
from bisect import bisect_right
from collections import defaultdict, deque
from contextlib import contextmanager
from concurrent.futures import CancelledError as FutureCancelled, Future
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import repeat
from queue import SimpleQueue
from traceback import format_exception
from typing import Any, Awaitable, Callable, Iterator, Sequence

from valkey.crc import key_slot

from .. import aio, hooks
from ..admin import doctor
from . import policy, waiter
from .._client.connection import TRANSPORT_ERRORS, Call, Connection
from ..errors import (CommandRefused, ConfigurationError, ConnectionFailed, EchoMQError, JobTimeout, LeaseLost,
                      PayloadError)
from .heartbeat import Heartbeat, HeartbeatConfig
from .._protocol.ids import minted_ms_of
from .._protocol.keys import State
from .._client.partitioned import PartitionedQueue, drive, op_declare
from .policy import IdlePolicy, LeasePolicy
from .._core.core import Children
from .._client.queue import LIMIT_MAX, Job, Queue, Sweep
from .._protocol.results import MAX_RESULT_BYTES, NotKept, keepable_result, result_value
from .._protocol.serializers import JSON, RAW, Serializer
from .._protocol.shown import one_line, quoted
from .tasks import App, AsyncJobContext, Delay, JobContext, Retry, Task, check_timeout
from .timers import TimerConfig, Timers
from .cron import CronTimer

log = logging.getLogger("echomq.worker")

#: The server link failed (the send path maps every link fault to this): the step is abandoned
#: and retried after a pause.
LINK_ERRORS = (ConnectionFailed,)
LINK_RETRY_MS = (100, 5000)
PROMOTE_SLACK_MS = 5
#: what an async handler's future raises once the worker cancelled it (its own task's, or its future's)
CANCELLED = (asyncio.CancelledError, FutureCancelled)
#: A waiter's block that must end (CLIENT UNBLOCK found it between blocks) is tried again this soon.
INTERRUPT_RETRY_MS = 20
#: How long shutdown waits for wire 6's blocked claims to answer (a job they took is requeued).
WAITER_STOP_S = 2.0
#: A relaying worker's pool runs handlers quicker than this one after another on the thread already
#: awake (a wake and a GIL hand-off cost tens of µs); slower ones, mostly waiting on I/O, get a
#: thread each at once. Judged by a moving average of their times, each counted at most twice this,
#: so that one quick handler the OS preempted does not spread the next batch.
QUICK_HANDLER_S = 100e-6


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 10  #: jobs held (and handlers running) at once in this process
    claim_batch: int = 10  #: the most claims pipelined in one round trip
    grace_s: float = 10.0  #: how long running jobs may finish after a stop signal
    lease: LeasePolicy = field(default_factory=LeasePolicy)
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    timers: TimerConfig = field(default_factory=TimerConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)  #: the workers list (`emq workers`)
    burst: bool = False  #: stop once the queues are empty (:meth:`Worker.drained`)
    timeout_s: float | None = None  #: overrides every task's ``timeout`` (``emq worker --timeout``)
    #: while a queue is busy, the longest wait between two polls of its flow sets that give nothing
    #: (they back off as ``idle`` does, up to this); an idle queue's are polled when its waiter's
    #: block ends (docs/lanes-and-flows.md "The worker")
    flow_poll_max_ms: int = 5000
    #: how long a finished handler's settle may wait for the rest of its claim batch (others still
    #: running that started less than this ago), so quick jobs settle together in one step (0: at once)
    settle_wait_ms: float = 1.0
    #: claim this many jobs, settle them, then stop (``emq worker --max-jobs``: a process that leaks
    #: starts afresh under its supervisor); None: no limit
    max_jobs: int | None = None

    def __post_init__(self) -> None:
        check_timeout(self.timeout_s, "the worker")
        if not 0 <= self.settle_wait_ms <= 1000:
            raise ConfigurationError(f"bad settle_wait_ms {self.settle_wait_ms!r}: from 0 to 1000 ms")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"bad concurrency {self.concurrency!r}: an integer >= 1")
        if not isinstance(self.claim_batch, int) or not 1 <= self.claim_batch <= LIMIT_MAX:
            raise ConfigurationError(f"bad claim_batch {self.claim_batch!r}: from 1 to {LIMIT_MAX}")
        if not self.grace_s >= 0:
            raise ConfigurationError(f"bad grace_s {self.grace_s!r}: seconds >= 0")
        if self.max_jobs is not None and (isinstance(self.max_jobs, bool) or not isinstance(self.max_jobs, int)
                                          or self.max_jobs < 1):
            raise ConfigurationError(f"bad max_jobs {self.max_jobs!r}: an integer >= 1, or None")


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
    deadline: float | None = None  #: local ms when the handler's timeout runs out (None: no timeout)
    future: Future | None = None  #: an async handler's (cancelled when its lease is lost or it times out)
    #: the handler's outcome, once it returned or raised
    outcome: policy.Outcome | None = None
    #: an outcome the worker decided itself (a timeout, an undecodable payload): it wins over the
    #: handler's, which is dropped whenever it comes
    verdict: policy.Outcome | None = None
    ended_s: float | None = None  #: when its outcome was known (returned, raised, timed out): set before it is settled
    not_kept: NotKept | None = None  #: its return value could not be kept: why (the completion keeps a marker)
    claimed_at: float = 0.0  #: local ms when its claim was sent: from when it is looked at for a cancel
    cancelled: bool = False  #: someone cancelled it while it ran (its outcome is dropped, and said so)
    _lost: bool = False  #: the lost flag of a job whose handler takes no context

    @property
    def lease_lost(self) -> bool:
        """The worker knows it no longer holds the job: its context's ``lease_lost`` (which a handler's
        refused progress report sets too), or its own flag when the handler takes no context."""
        return self._lost if self.ctx is None else self.ctx.lease_lost

    def mark_lost(self) -> None:
        """The lease is gone: the handler's context says so from now (``ctx.lease_lost``, ``ctx.lost``)."""
        if self.ctx is None:
            self._lost = True
        else:
            self.ctx.mark_lost()


class _DaemonPool:
    """A fixed pool of daemon threads: a handler stuck past shutdown cannot keep the process alive
    (the standard ThreadPoolExecutor joins its threads at exit). No Future per call: the callable
    given reports its own outcome (a Future is a condition and two locks for every job). A callable
    may return another, run once its thread counts as free: what that one submits is left to this
    thread (the worker's relay) instead of waking another.

    Threads are woken one at a time: a submit wakes a sleeping thread only when no awake one is
    free to take the job, and a thread that takes a job wakes the next while work is still
    queued. With ``spread_after_s`` that chain runs only while handlers take
    ``QUICK_HANDLER_S`` or more; quick ones run on the thread already awake instead of others
    waking (a context switch and a GIL hand-off each) for a short job, and the owner calls
    :meth:`spread` now and then, which wakes threads for work that has waited ``spread_after_s``
    (its thread is held up by a handler slower than the ones before it)."""

    def __init__(self, size: int, spread_after_s: float | None = None) -> None:
        self._spread_after_s = spread_after_s
        self._moved_at = 0.0  #: (spread_after_s) when queued work last started, or began to queue
        self._took_s = 0.0  #: (spread_after_s) how long handlers lately ran: each capped, averaged
        self._mutex = threading.Lock()
        self._work: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._sleeping: list[threading.Lock] = []  #: each sleeping thread's own lock: released, it wakes
        self._free = 0  #: threads awake and not running a handler (they take queued work before sleeping)
        self._closed = False
        self._threads: list[threading.Thread] = []
        for _ in range(size):
            self._add()

    def submit_all(self, fn: Callable[..., None], calls: Sequence[tuple[Any, ...]]) -> None:
        """``fn(*args)`` for each ``args`` of ``calls``, queued at once (one lock for a claim batch)."""
        with self._mutex:
            if not self._work:
                self._moved_at = time.monotonic()
            self._work.extend(zip(repeat(fn), calls))
            if not self._free:
                self._wake_one()  # it, or spread(), wakes the next while work is queued

    def replace_one(self) -> None:
        """One more thread, in place of one running an abandoned (timed out) handler: Python
        cannot stop a thread, so that one runs on until its handler returns."""
        self._add()

    def _add(self) -> None:
        thread = threading.Thread(target=self._run, name=f"emq-handler-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        with self._mutex:
            self._free += 1  # it takes work, or sleeps, as soon as it runs
        thread.start()

    def _wake_one(self) -> None:
        """Under the mutex: a sleeping thread, if any, wakes (counted free from now)."""
        if self._sleeping:
            self._free += 1
            self._sleeping.pop().release()  # the last to sleep: the likeliest still in the CPU's caches

    def _run(self) -> None:
        me = threading.Lock()
        me.acquire()
        counted_free = True  # by _add or _wake_one; not while it runs a handler
        took = None  # how long the callable it last ran took (capped): averaged in at the next turn
        while True:
            with self._mutex:
                if took is not None:
                    self._took_s += (took - self._took_s) / 4
                    took = None
                if counted_free:
                    self._free -= 1  # it takes work, sleeps or ends now
                if self._closed:
                    return
                if self._work:
                    item = self._work.popleft()
                    quick = self._spread_after_s is not None and self._took_s < QUICK_HANDLER_S
                    if self._spread_after_s is not None:
                        self._moved_at = time.monotonic()
                    if self._work and not self._free and not quick:
                        self._wake_one()  # the next queued job needs a thread of its own
                else:
                    self._sleeping.append(me)
                    item = None
            if item is None:
                me.acquire()  # until a submit or the shutdown releases it (_wake_one counts it free)
                counted_free = True
                continue
            counted_free = False
            fn, args = item
            try:
                started = time.monotonic()
                then = fn(*args)
                took = min(time.monotonic() - started, 2 * QUICK_HANDLER_S)
                if then is not None:
                    with self._mutex:
                        self._free += 1
                    counted_free = True
                    then()
            except BaseException:  # the callables report their own outcome: this is a bug, and the thread lives on
                log.exception("worker %d: a handler thread's task failed", os.getpid())

    @property
    def queued(self) -> bool:
        return bool(self._work)

    def spread(self) -> None:
        """Wake a thread for each queued job that has waited ``spread_after_s`` with no free one."""
        after_s = self._spread_after_s
        if after_s is not None and self._work and time.monotonic() - self._moved_at >= after_s:
            with self._mutex:
                while self._sleeping and len(self._work) > self._free:
                    self._wake_one()

    def shutdown(self) -> None:
        """Sleeping threads end now, running ones after their handler; queued work is not started."""
        with self._mutex:
            self._closed = True
            while self._sleeping:
                self._wake_one()


class _AsyncRunner:
    """An asyncio loop on a daemon thread for ``async def`` handlers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="emq-asyncio", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, connection: "aio.Connection", timeout_s: float = 2.0) -> None:
        """Close the async handlers' connection on its own loop (a stuck handler cannot hold this up)."""
        try:
            self.submit(connection.aclose()).result(timeout_s)
        except Exception as exc:
            log.warning("worker %d: closing the async handlers' connection: %s", os.getpid(), exc)

    def shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def names_served(tasks: dict[str, Task]) -> set[str]:
    """The queue names of the tasks served (a partitioned task's own name, not its partitions')."""
    return {task.queue for task in tasks.values()}


#: Worker.run()s going on in this process: a process forked meanwhile is a handler's (or a library's) fork
_running = 0
#: this process is such a fork: it must never go back into the worker's code (its sockets are the parent's)
_forked_from_worker = False
#: the SIGTERM/SIGINT handlers workers installed (a fork puts back the defaults of these only)
_signal_handlers: "weakref.WeakSet[Callable[..., Any]]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a process forked while a worker ran: the worker's SIGTERM/SIGINT handlers only set the
    stop flag of a loop this process does not run, so they go back to the defaults (SIGTERM ends
    it); and :func:`outcome_of` ends it where its handler returns, before it could settle through
    the parent's connection or take more jobs. No orphan copy of the worker is left behind."""
    global _forked_from_worker
    if not _running:
        return
    _forked_from_worker = True
    for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(signum) in _signal_handlers:
            signal.signal(signum, default)


os.register_at_fork(after_in_child=_after_fork_in_child)


def indented_traceback(error: BaseException) -> str:
    """A handler's traceback for the log: every line indented and escaped (echomq._protocol.shown), so its
    message, which a job's data may fill, cannot pass for a log line of its own."""
    shown = "".join(format_exception(error)).rstrip("\n").split("\n")
    return "\n".join("    " + one_line(line) for line in shown)


def _leave_fork(status: int) -> None:
    os.write(2, f"echomq worker: process {os.getpid()}, forked by a handler, came back to the worker: it exits "
                f"here ({status}); a forked child must exit or exec itself\n".encode())
    os._exit(status)


def outcome_of(call: Callable[..., Any], *args: Any) -> policy.Outcome:
    """``call(*args)`` -- a sync handler, or a finished async one's ``future.result`` -- as an
    outcome (a returned Retry/Delay counts as raised; a cancelled future's error is raised). In a
    process a handler forked, the handler's return ends that process (:func:`_after_fork_in_child`)."""
    try:
        value = call(*args)
    except BaseException as exc:  # the handler's outcome, whatever it is
        if _forked_from_worker:
            _leave_fork(1)
        return raised(exc)
    if _forked_from_worker:
        _leave_fork(0)
    if value is None:
        return policy.RETURNED_NOTHING
    return raised(value) if isinstance(value, (Retry, Delay)) else policy.Returned(value)


def raised(error: BaseException) -> policy.Outcome:
    """What a handler's exception asks for."""
    if isinstance(error, Retry):
        return policy.RetryAsked(error.reason, error.delay_ms)
    if isinstance(error, Delay):
        return policy.DelayAsked(error.delay_ms)
    return policy.Raised(error)


class Worker:
    """Runs ``app``'s handlers for jobs of its queues (all of them unless ``queues`` is given)."""

    def __init__(self, app: App, connection: Connection, *, queues: Sequence[str] | None = None,
                 config: WorkerConfig | None = None, rand: Callable[[], float] = random.random,
                 clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        names = list(queues) if queues else list(app.tasks)
        unknown = [name for name in names if name not in app.tasks]
        if unknown or not names:
            raise ConfigurationError(
                f"no handler for queue(s) {unknown}; the app has {sorted(app.tasks)}" if unknown
                else "the app has no tasks: register a handler with @app.task"
            )
        self.app = app
        self.connection = connection
        self.config = config or WorkerConfig()
        # the app's partitioned queues are declared (recorded, or refused if that would strand jobs), so
        # handlers' producers may trust each task's layout; a served one is served as its sub-queues,
        # each its own queue here (one settle-and-claim exchange and one waiter each, taking turns)
        #: each task's queues: the queue itself, or its partitions as recorded
        self.layouts = {task.queue: drive(connection, op_declare(connection, task.queue, task.partitions))
                        if task.partitions > 1 else [task.queue] for task in app.tasks.values()}
        self.tasks = {sub: app.tasks[name] for name in names for sub in self.layouts[name]}
        names = list(self.tasks)
        # claims read raw bytes: the task's serializer decodes per job, so a bad payload fails one job
        self.queues = {name: Queue(connection, name, serializer=RAW) for name in names}
        self.timers = Timers(list(self.queues.values()), self.config.timers)
        # periodic jobs of the queues served, encoded with their task's serializer (echomq.worker.cron)
        schedules = [s for s in app.schedules if s.queue in self.queues]
        partitioned = [s.id for s in app.schedules if s.queue in names_served(self.tasks) and s.queue not in self.queues]
        if partitioned:
            raise ConfigurationError(f"schedule(s) {partitioned} enqueue on a partitioned queue: periodic jobs take a "
                                     "plain queue (give the ticks a queue of their own)")
        producers = {s.queue: Queue(connection, s.queue, serializer=self.tasks[s.queue].serializer) for s in schedules}
        self.cron = CronTimer(schedules, producers, next(iter(self.queues.values())).server_ms)
        self.heartbeat = Heartbeat(connection.client, queues=names, concurrency=self.config.concurrency,
                                   wire=connection.wire, config=self.config.heartbeat)
        #: the node serves the bus: completions keep results and failures their tracebacks
        self.bus = connection.supports("publish") and connection.supports("failures_incr")
        self.tally = Tally()
        self.timings = Timings()
        #: each task's result when its handler returns nothing, as its serializer encoded it
        self._nothing_encoded: dict[str, bytes] = {}
        self.held: dict[tuple[str, str], Held] = {}
        self._rand = rand
        self._clock_ms = clock_ms
        #: a handler's outcome and a timeout's verdict are decided under it: whichever comes first wins
        self._outcomes = threading.Lock()
        #: held jobs whose outcome is known, for the next exchange to settle (appended under _outcomes)
        self._finished: list[Held] = []
        # handlers started and ended (the latter counted under _outcomes): the difference is how many
        # still run; with the youngest one's start they say when to settle (policy.settle_at_ms)
        self._started = 0
        self._ended = 0
        self._youngest_start: float | None = None
        #: the settle of the outcomes already in was due when the loop last looked (_next_due, _start): a
        #: finished handler wakes it then; else the loop's wait ends by itself when the settle falls due
        self._settle_due = True
        #: no handler's timeout nor lease runs out before this local time: the scans wait for it
        #: (set by each scan, brought forward by each start; only ever early, never late)
        self._scan_at = float("inf")
        #: the next look for held jobs cancelled while they run (check_cancels): set by each look,
        #: brought forward by each start, as _scan_at
        self._cancel_check_at = float("inf")
        self._progress = connection.supports("append")  #: ctx.progress sends APPEND
        #: ``ctx.producer`` for sync (False) and async (True) handlers
        self._producers = {is_async: self._make_producers(is_async) for is_async in (False, True)}
        self._unsettled: list[Held] = []
        self._wake = threading.Event()
        #: the loop's state is changed by one thread at a time, the one holding this: the control
        #: thread for a step, or a handler thread for a relay (_relay)
        self._baton = threading.Lock()
        #: run() is on (and settle_wait_ms > 0): the handler thread that ends the last running handler
        #: settles what finished and claims the next batch itself, the control thread sleeping on
        self._relaying = False
        self._relays = 0  #: relays so far: while they go on, the control thread looks in (_wait)
        self._looking = False  #: the control thread's wait ends by settle_wait_ms: a relay need not wake it
        #: the last _next_due was a settle's (this local time), the next other due time _timer_due
        self._settle_wake, self._timer_due = -1.0, float("inf")
        #: the control thread waits for the baton: relays leave the next exchange to it (a lock is not
        #: fair, and relays in a row would otherwise keep it from its step: its renewals, say)
        self._baton_wanted = False
        self._relay_error: BaseException | None = None  #: a relay's unexpected error: run() raises it
        # waiting instead of polling (set by run(); steps driven by hand poll): BZPOPMIN on wire 4,
        # BCLAIM on wire 6 when the node lists claim.block
        self.blocking = False
        self._idle: set[str] = set()  #: queues whose last claim came back empty: a waiter watches them
        self._paused: set[str] = set()  #: wire 4: idle queues whose last claim read the pause flag
        self._reports: SimpleQueue[waiter.Report] = SimpleQueue()
        self._waiters: list[waiter.Waiter] = []
        self._empty_polls = {name: 0 for name in names}
        #: whether the last flat and the last lane claims of each queue gave jobs (policy.split_claims)
        self._found = {name: (True, True) for name in names}
        self._rounds = {name: 0 for name in names}  #: claim rounds per queue: whose turn a lone claim is
        self._no_lanes: set[str] = set()  #: queues whose last lane claim said they never had a lane job
        self._next_poll = {name: 0.0 for name in names}
        #: flow jobs are claimed from their own sets (FLOW_CLAIM), which no blocking claim serves: a busy
        #: queue's are polled with the idle back-off (at once again while they give jobs, or after a flow
        #: job settles here); an idle one's when its waiter's block ends (policy.flow_poll_triggers)
        self._empty_flow_polls = {name: 0 for name in names}
        self._next_flow_poll = {name: 0.0 for name in names}
        self._flow_idle = replace(self.config.idle, max_ms=max(self.config.idle.min_ms, self.config.flow_poll_max_ms))
        self._next_tick: float | None = None
        self._turn = 0
        self._link_down_until = 0.0
        self._link_failures = 0
        self._stop_at: float | None = None
        #: no more claims (a signal, stop(), max_jobs, shutdown): set by _stop_claiming with _stop_at,
        #: a plain attribute as the loop reads it several times a step
        self.stopping = False
        #: a burst worker found its queues empty while a claiming block was out: none is re-armed until
        #: each has answered (drained)
        self._confirming_empty = False
        self._paused_pending: dict[str, int] = {}  #: paused queues with jobs pending, at the last look (burst)
        self._signals = 0
        self._pool: _DaemonPool | None = None
        self._async: _AsyncRunner | None = None
        self._aio: aio.Connection | None = None  #: async handlers' producers, on the runner's loop

    # -- running ----------------------------------------------------------------
    def run(self, *, install_signals: bool | None = None) -> Tally:
        """Work until stopped (signal or :meth:`stop`), then shut down; returns the tally.

        SIGTERM/SIGINT handlers are installed when this runs on the main thread (or when
        ``install_signals`` says so); from another thread, stop it with :meth:`stop`.
        """
        global _running, _forked_from_worker
        if install_signals is None:
            install_signals = threading.current_thread() is threading.main_thread()
        if install_signals:
            self._install_signals()
        log.info("worker %d: queues %s on wire %d, concurrency %d, lease %d ms",
                 os.getpid(), ", ".join(self.queues), self.connection.wire, self.config.concurrency,
                 self.config.lease.lease_ms)
        _running, _forked_from_worker = _running + 1, False  # a fork that runs a worker of its own is one
        try:
            self._say_eviction()
            self._set_rate_limits()
            self._start_waiters()
            self._relaying = self.config.settle_wait_ms > 0
            while True:
                with self._taking_baton():
                    if self._relay_error is not None:
                        raise self._relay_error
                    next_ms = self.step()
                    if self.config.burst and not self.stopping and self.drained():
                        paused = ", ".join(f"{name} ({n} pending)" for name, n in self._paused_pending.items())
                        self.stop("burst: the queues are empty" + (f"; paused, so not run: {paused} (emq resume "
                                                                   "-q QUEUE, then run again)" if paused else ""))
                    if self.stopping and (not self.held or self._clock_ms() >= self._stop_at):
                        break
                self._wait(next_ms)
        finally:
            try:
                with self._taking_baton():
                    self._relaying = False  # outcomes from here on wake the control thread
                    self.shutdown()
            finally:
                _running -= 1
        return self.tally

    @contextmanager
    def _taking_baton(self) -> Iterator[None]:
        """The control thread's hold on the baton: relays stop and let it have it."""
        self._baton_wanted = True
        with self._baton:
            self._baton_wanted = False
            yield

    def _wait(self, next_ms: float) -> None:
        """Sleep until local ``next_ms``, or a wake. While relays may run (jobs held), a wait that
        ends is a look before it is a step: the step comes only once an outcome's settle is due (a
        relayed batch's slow handler left quick ones unsettled) or a due time besides the settles
        (``_next_timer``); a look wakes threads for jobs held up behind a slow handler. It looks in
        every ``settle_wait_ms`` while relays go on or jobs wait in the pool."""
        look_ms, seen = self.config.settle_wait_ms, -1
        timer_due = self._timer_due if next_ms == self._settle_wake else next_ms  # never later than this
        while True:
            wait_ms = next_ms - self._clock_ms()
            relayed = self._relaying and bool(self.held)
            looking = relayed and (wait_ms <= look_ms or self._relays != seen
                                   or (self._pool is not None and self._pool.queued))
            seen, self._looking = self._relays, looking
            if self._wake.wait(max(0.0, min(wait_ms, look_ms) if looking else wait_ms) / 1000) or not relayed:
                return
            if self._pool is not None:
                self._pool.spread()
            if not self._baton.acquire(blocking=False):
                next_ms = self._clock_ms() + look_ms  # a relay holds it: look again then
                continue
            try:
                now = self._clock_ms()
                settle_at, at_once = self._settle_check(now)
                if at_once:
                    return
                timer_due = min(timer_due, self._next_timer(now, settle_at))
            finally:
                self._baton.release()
            if timer_due <= now:
                return
            next_ms = timer_due if self._settle_due else min(timer_due, settle_at)

    def _relay(self) -> None:
        """On the handler thread that ended the last running handler, once free: settle what finished
        and claim the next batch here (one ``exchange``, as a step would), so that quick jobs run
        with no hand-off between threads. What a step does besides goes to the control thread (woken
        for it): a stop, a waiter's report, a queue that went idle (its waiter is armed), a claim
        that found nothing, a broken link (the step retries with its back-off), and relays starting
        while it does not look in."""
        if self._baton_wanted or not self._baton.acquire(blocking=False):
            self._wake.set()  # the control thread is stepping, or about to: it settles this outcome too
            return
        try:
            if not self._relaying or self.stopping or not self._reports.empty():
                self._wake.set()
                return
            idle = set(self._idle)
            try:
                claimed = self.exchange(self._clock_ms())
            except (*LINK_ERRORS, CommandRefused):
                claimed = 0  # what it settled is unsettled again (exchange): the step sends it
            except BaseException as exc:  # a bug: the control thread raises it, as its own step would
                self._relay_error, claimed = exc, 0
            self._relays += 1
            if not claimed or not self._idle <= idle or not self._looking:
                self._wake.set()  # (not looking: it sleeps on, maybe for seconds; it looks in from its next wait)
        finally:
            self._baton.release()

    def _say_eviction(self) -> None:
        """An error in the log at start when a node may evict keys (an evicted row or set is a lost
        job), decided as `emq doctor` decides it. Unread (an ACL without CONFIG, a link fault) is
        left to `emq doctor`."""
        for name, node in doctor.primaries(self.connection.client):
            try:
                policy = doctor.answered(node.config_get, "maxmemory-policy")
            except TRANSPORT_ERRORS:
                return
            if isinstance(policy, Exception):
                continue
            check = doctor.check_eviction(policy.get("maxmemory-policy", "?"))
            if check.level is doctor.Level.ERROR:
                log.error("worker %d: %s%s", os.getpid(), f"{name}: " if name else "", check.detail)

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running jobs get ``grace_s`` to finish. Safe from any thread."""
        if self._stop_at is None or self._stop_at == math.inf:  # a retiring worker's jobs get the grace now
            self._stop_claiming(self._clock_ms() + self.config.grace_s * 1000)
            log.info("worker %d: %s: no more claims; %d job(s) held, waiting up to %.1fs for them",
                     os.getpid(), reason, len(self.held), self.config.grace_s)
        self._wake.set()

    def _stop_claiming(self, at_ms: float) -> None:
        """No claims from here on; the jobs held get until ``at_ms`` (local ms) to finish."""
        self._stop_at = at_ms
        self.stopping = True  # after _stop_at: a thread that reads it true finds the time set

    def _install_signals(self) -> None:
        def on_signal(signum: int, frame: Any) -> None:
            self._signals += 1
            name = signal.Signals(signum).name
            if self._signals > 1:
                # a second signal means now: no grace, no requeue; the leases expire on their own
                os.write(2, f"echomq worker {os.getpid()}: second {name}, exiting at once; "
                            f"{len(self.held)} held job(s) left to lease expiry\n".encode())
                os._exit(128 + signum)
            self.stop(name)

        _signal_handlers.add(on_signal)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)

    def step(self) -> float:
        """One pass of the loop; returns the local time (ms) at which the next one is due."""
        self._wake.clear()
        stopping = self.stopping
        now = self._clock_ms()
        self._read_reports(now)
        if now < self._link_down_until:
            return self._link_down_until
        try:
            self.exchange(now)
            self.claim_flows(self._clock_ms())
            self._retire_when_done()
            now = self._clock_ms()  # one read for the scans and the renewal: no round trip between them
            scan = now >= self._scan_at
            if scan:
                self.time_out(now)
            self.renew(now)
            if now >= self._cancel_check_at:
                self.check_cancels(now)
            if scan:
                self.give_up_expired(self._clock_ms())
                self._scan_at = self._next_scan_ms()
            if not self.stopping:
                for run in self.timers.run_due(self._clock_ms(), self._idle, self._no_lanes):
                    found = run.recovered
                    if run.promoted or found.recovered or found.exempt:
                        self._claim_afresh(run.queue)  # it put jobs in pending itself: claim, no wake needed
                    self._emit_sweep(run.queue, found)
                    if run.reaped:
                        self._next_flow_poll[run.queue] = 0.0  # the reaper may have put flow jobs back
                self.cron.run_due(self._clock_ms())
            self.heartbeat.run_due(self._clock_ms(), held=len(self.held), completed=self.tally.completed,
                                   failed=self.tally.retried + self.tally.dead)
            self._arm_waiters()
            self._link_failures = 0
        except (*LINK_ERRORS, CommandRefused) as exc:
            # the link or the server failed this step: pause and retry; held leases run on meanwhile
            self._link_failures += 1
            pause = min(LINK_RETRY_MS[1], LINK_RETRY_MS[0] * 2 ** min(self._link_failures - 1, 10))
            log.warning("worker %d: step failed (%s: %s); retrying in %d ms", os.getpid(), type(exc).__name__,
                        exc, pause)
            self._link_down_until = self._clock_ms() + pause
            return self._link_down_until
        if self.stopping == stopping:
            # what set the wake during this step (an outcome, a waiter's report) is in the state _next_due
            # reads: a handler that ended while its batch was still being started must not end the next
            # wait at once, before the rest of that batch could end (a stop asked meanwhile does)
            self._wake.clear()
        return self._next_due(self._clock_ms())

    def drained(self) -> bool:
        """Nothing held or left to settle, and every queue empty: nothing pending (a paused queue
        counts as empty) and nothing scheduled -- a retry's backoff or a delay is waited for, the
        timers promote it when due. Jobs other workers hold are theirs; a job one of this worker's
        waiters claimed is not, even before its report is read (a promoted job a BCLAIM took at
        once, say: counts show it nowhere but active)."""
        # read first: when every claiming block has answered, any job one took is in the reports below
        claims_in_flight = any(w.requested != w.answered for w in self._waiters if not w.markers)
        if not self._reports.empty():
            return False  # the next step reads them (a report wakes it); an ended block's answer is no news
        if not self._looks_drained():
            self._confirming_empty = False
            return False
        if claims_in_flight:
            # wire 6: a BCLAIM may have taken a job the counts already show as active, its answer still on
            # the way. End the claiming blocks (re-arming none: _arm_waiters) and look again once answered.
            if not self._confirming_empty:
                self._confirming_empty = True
                self._wake.set()
            return False
        return True

    def _looks_drained(self) -> bool:
        if self.held or self._finished or self._unsettled:
            return False
        if not all(self._came_back_empty(name) for name in self.queues):
            return False  # a queue gave jobs on its last claim (or has not been claimed from): not empty yet
        if not all(polls > 0 for polls in self._empty_flow_polls.values()):
            return False  # likewise its flow sets (a flow parent waiting on its children is not claimable)
        paused: dict[str, int] = {}
        try:
            for name, queue in self.queues.items():
                counts = queue.counts()
                if (counts.pending and not counts.paused) or counts.scheduled or queue.lanes_waiting():
                    return False
                if counts.pending:
                    paused[name] = counts.pending
        except LINK_ERRORS:
            return False
        self._paused_pending = paused  # what the burst's last words name
        return True

    def _came_back_empty(self, name: str) -> bool:
        return name in self._idle if self.blocking else self._empty_polls[name] > 0

    def _settle_at(self, now: float) -> float:
        return policy.settle_at_ms(now, self._started - self._ended, self._youngest_start, self.config.settle_wait_ms)

    def _settle_check(self, now: float) -> tuple[float, bool]:
        """When the outcomes in settle (setting ``_settle_due``), and whether a step is due at once:
        settles to send again, a waiter's report, or a settle due with outcomes in."""
        settle_at = self._settle_at(now)
        self._settle_due = settle_at <= now
        return settle_at, bool(self._unsettled or not self._reports.empty() or (self._settle_due and self._finished))

    def _next_due(self, now: float) -> float:
        settle_at, at_once = self._settle_check(now)
        if at_once:
            return now
        timer = self._next_timer(now, settle_at)
        if settle_at < timer and not self._settle_due:
            # while young handlers run, an outcome does not wake the loop (_done): it settles by then
            self._settle_wake, self._timer_due = settle_at, timer  # a wake for a settle only (_wait)
            return settle_at
        return timer

    def _next_timer(self, now: float, settle_at: float) -> float:
        """The next due time but a settle's: the tick, a scan, claims, polls, the timers, the stop."""
        times = [self._next_tick or float("inf"), self._scan_at, self._cancel_check_at]
        if self.stopping:
            times.append(self._stop_at)
        else:
            if self._capacity() > 0:
                # a claim into slots left free (a lane probe that found none, say) rides with the
                # young batch's settle: at most settle_wait_ms later, one step instead of two
                claim_at = settle_at if settle_at > now else 0.0
                times += [max(self._next_poll[name], claim_at) for name in self.queues if name not in self._idle]
                times += self._next_flow_poll.values()
            if any(w.busy and w.interrupting for w in self._waiters):
                times.append(now + INTERRUPT_RETRY_MS)
            times.append(self.timers.next_due_ms(now, self._idle))
            times.append(self.cron.next_due_ms())
        times.append(self.heartbeat.next_due_ms())
        return min(times)

    def _next_scan_ms(self) -> float:
        """When a held job's timeout or lease runs out first (time_out, give_up_expired)."""
        live = [h for h in self.held.values() if not h.lease_lost]
        times = [h.renewed_at + self.config.lease.lease_ms for h in live]
        times += [h.deadline for h in live if h.deadline is not None and h.verdict is None and h.outcome is None]
        return min(times, default=float("inf"))

    def _capacity(self, settling: int = 0) -> int:
        """How many jobs may be claimed now: free slots (``settling`` jobs are being settled in the
        same exchange: theirs too), within what is left of ``max_jobs``."""
        free = self.config.concurrency - len(self.held) + settling
        if self.config.max_jobs is None:
            return free
        return min(free, self.config.max_jobs - self.tally.claimed)

    def _retire_when_done(self) -> None:
        """With ``max_jobs`` claimed: no more claims, and the jobs held run to their end (no grace:
        a signal still brings one)."""
        if self.config.max_jobs is not None and self.tally.claimed >= self.config.max_jobs and not self.stopping:
            self._stop_claiming(math.inf)
            log.info("worker %d: %d job(s) claimed, its --max-jobs: no more claims; %d held run to their end",
                     os.getpid(), self.tally.claimed, len(self.held))

    # -- 1. settle and 4. claim: one exchange per queue -------------------------------
    def exchange(self, now: float) -> int:
        """Settle what finished and claim into the free slots, per queue in one round trip
        (two on wire 4, whose claim follows its pause read): ``Queue.settle_and_claim``.
        Queues take turns going first, and the first may claim into the slots the others'
        settles free, so a busy queue cannot starve the rest. Returns how many jobs were claimed."""
        batches = self._decide_settles()
        settling = sum(len(batch) for batch, _ in batches.values())  # held, settled in this exchange
        names = list(self.queues)
        self._turn = (self._turn + 1) % len(names)
        order = names[self._turn:] + names[:self._turn]
        claimed = 0
        for at, name in enumerate(order):
            batch, calls = batches.get(name, ((), ()))
            count = 0
            idle = name in self._idle and self._watched(name)  # else an idle queue is polled (_polled)
            if not self.stopping and not idle and now >= self._next_poll[name]:
                # the jobs settled in this exchange free their slots for its claims
                count = policy.claim_batch(self._capacity(settling), self._empty_polls[name],
                                           self.config.claim_batch)
            flat, lanes = policy.split_claims(count, self._capacity(settling), *self._found[name],
                                              self._rounds[name], name in self._no_lanes)
            self._rounds[name] += bool(count)
            if not batch and not count:
                continue
            sent = self._clock_ms()
            try:
                answers, jobs = self.queues[name].settle_and_claim(calls, flat, self.config.lease.lease_ms, lanes)
            except (*LINK_ERRORS, CommandRefused):
                # unknown whether the settles applied: send them again next step (a repeat is fenced by the token)
                self._unsettled += [held for later in order[at:] for held, _ in batches.get(later, ((), ()))[0]]
                raise
            self._settled(name, batch, answers)
            settling -= len(batch)
            if count:
                self._found[name] = found = policy.claims_found(self._found[name], flat, lanes, jobs)
                if lanes:
                    (self._no_lanes.add if jobs.no_lanes else self._no_lanes.discard)(name)
                self._polled(name, now, found=any(found), paused=jobs.paused)
                if jobs.wait_ms is not None:
                    self._rate_wait(name, self._clock_ms(), jobs.wait_ms)
            self._start(self.tasks[name], self.queues[name], jobs, sent)
            claimed += len(jobs)
        return claimed

    def _decide_settles(self) -> dict[str, tuple[list[tuple[Held, policy.Settle]], list[Call]]]:
        """What to send for every finished handler, by queue: the jobs settled, in the order of their
        answers, and the calls that settle them. A flat job's completion builds no call of its own:
        its id, token (and kept result) join its queue's COMPLETES or PUBLISHES
        (``Queue.completion_calls``). Lost ones are dropped here."""
        with self._outcomes:
            done, self._finished = self._unsettled + self._finished, []
        self._unsettled = []
        # by (queue, retention_ms or None): the completed flat jobs and their ARGV one after another
        completed: defaultdict[tuple[str, int | None], tuple[list[Held], list[Any]]] = defaultdict(lambda: ([], []))
        settled: defaultdict[str, list[tuple[Held, policy.Settle, Call]]] = defaultdict(list)  # no list made a job
        for held in done:
            job, task, lost = held.job, held.task, held.lease_lost
            outcome = held.verdict or held.outcome
            result = None
            returned = type(outcome) is policy.Returned  # the common case: decided here, no call made for it
            if returned and (self.bus and task.result_ttl_ms or job.flow):
                # the bytes PUBLISH keeps; for a value the task's serializer refuses, or one over
                # MAX_RESULT_BYTES, a marker saying so: the job completes all the same (its work is
                # done; another run could not keep it either). Nothing returned is encoded once a task
                result = self._nothing_encoded.get(task.queue) if outcome is policy.RETURNED_NOTHING else None
                if result is None:
                    result, held.not_kept = keepable_result(task.serializer, outcome.value, MAX_RESULT_BYTES)
                    if outcome is policy.RETURNED_NOTHING and held.not_kept is None:
                        self._nothing_encoded[task.queue] = result
            if returned and not lost:
                decision: policy.Settle = policy.COMPLETE  # what decide_outcome answers it
            else:
                if not lost and isinstance(outcome, policy.Raised) and log.isEnabledFor(logging.WARNING):
                    log.warning("job %s/%s attempt %d raised:\n%s", job.queue, quoted(job.id), job.attempt,
                                indented_traceback(outcome.error))
                decision = policy.decide_outcome(outcome, lost and held.verdict is None, job.attempt,
                                                 task.max_attempts, task.backoff, self._rand)
            if type(decision) is policy.Drop:
                self.held.pop(held.key, None)
                reason = "cancelled while the handler ran" if held.cancelled else decision.reason
                self._emit("job.lost", job, reason=f"{reason}; its outcome is not settled")
                continue
            if decision is policy.COMPLETE and not job.flow and job.group is None:
                kept = self.bus and task.result_ttl_ms  # then result holds its encoded bytes
                jobs, parts = completed[job.queue, kept or None]
                jobs.append(held)
                parts += (job.id, job.token, result) if kept else (job.id, job.token)
            else:
                settled[job.queue].append((held, decision, self._settle_call(held, decision, result)))
        by_queue: dict[str, tuple[list[tuple[Held, policy.Settle]], list[Call]]] = {}
        for (name, retention_ms), (jobs, parts) in completed.items():
            batch, calls = by_queue.setdefault(name, ([], []))
            batch += zip(jobs, repeat(policy.COMPLETE))
            calls += self.queues[name].completion_calls(parts, retention_ms)
        for name, rest in settled.items():
            batch, calls = by_queue.setdefault(name, ([], []))
            batch += [(held, decision) for held, decision, _ in rest]
            calls += [call for _, _, call in rest]
        return by_queue

    def _settled(self, name: str, batch: Sequence[tuple[Held, policy.Settle]], answers: list[Any]) -> None:
        completed_heard = "job.completed" in hooks.heard  # read once a batch
        durations: list[float] = []  # the run times of the settles the server took: observed together
        for (held, decision), reply in zip(batch, answers):
            if isinstance(reply, Exception):
                self._refused(held, reply)
            else:
                duration_s = held.ended_s - held.started_s
                durations.append(duration_s)
                if decision is policy.COMPLETE:
                    # the common case, here rather than in _record (a call a job): counted, told only if heard
                    self.tally.completed += 1
                    if held.not_kept is not None:
                        log.warning("job %s/%s attempt %d completed, but its result was not kept: %s (a %s "
                                    "returned); Queue.result raises ResultNotKept", held.job.queue,
                                    quoted(held.job.id), held.job.attempt, one_line(held.not_kept.reason),
                                    held.not_kept.type)
                    if completed_heard:
                        self._tell("job.completed", held.job, duration_s=duration_s)
                else:
                    self._record(name, held, decision, reply, duration_s)
            self.held.pop(held.key, None)
            if held.job.flow:  # a parent (in any queue served) may be ready now: poll the flow sets
                self._next_flow_poll = dict.fromkeys(self._next_flow_poll, 0.0)
        self.timings.duration.observe_many(durations)

    def _polled(self, name: str, now: float, *, found: bool, paused: bool) -> None:
        """After a claim: claim again at once while the queue gives jobs; else a waiter watches it
        (or, without one, poll again after a back-off). While every slot is taken no waiter can
        (wire 6's would claim a job the worker cannot take): exchanges poll an idle queue no waiter
        watches with that back-off, so a busy queue cannot keep a quiet one waiting till it drains."""
        if found:
            self._empty_polls[name] = 0
            self._busy(name)
            return
        self._empty_polls[name] += 1
        self._next_poll[name] = now + policy.idle_interval_ms(self.config.idle, self._empty_polls[name])
        if self.blocking:
            # the claim after its next wake is one, not a batch: a wake at a block's timeout (the
            # backstop) usually finds nothing, and a single job is the common reason for a wake
            self._idle.add(name)
            if paused:
                self._paused.add(name)
            else:
                self._paused.discard(name)

    def _watched(self, name: str) -> bool:
        return any(w.busy and name in w.blocked_on for w in self._waiters)

    def _busy(self, name: str) -> None:
        """``name`` has jobs, or may: no waiter watches it, and the exchanges claim it from now on,
        not after the back-off of the empty claims before (``_polled``)."""
        self._idle.discard(name)
        self._next_poll[name] = 0.0

    def _claim_afresh(self, name: str) -> None:
        """Something in ``name`` may be claimable now (a wake, a promote, a block's timeout): claim it,
        each kind as if it had given jobs last time (the lanes unless the queue never had any). What a
        kind's claim found before says nothing now: a lone claim that probes the lanes must not leave
        the queue idle over a flat job, nor a lone flat claim over a lane job."""
        self._busy(name)
        self._found[name] = (True, name not in self._no_lanes)

    def _rate_wait(self, name: str, now: float, wait_ms: int) -> None:
        """The queue's rate limit held a claim: claim it again (a batch) when its window frees, not
        before, and not through a waiter (no write signals a window freeing)."""
        self._idle.discard(name)
        self._empty_polls[name] = 1  # then one claim, not a batch: a window frees a start at a time
        self._next_poll[name] = now + wait_ms

    def _set_rate_limits(self) -> None:
        """Each task's ``rate_limit`` onto its queue's meta, at start (a task without one leaves the
        queue's as it is: ``emq rate-limit`` sets it for every worker)."""
        for name, task in self.tasks.items():
            if task.rate_limit is not None:
                self.queues[name].set_rate_limit(task.rate_limit)
                log.info("worker %d: queue %s: at most %s job starts", os.getpid(), name, task.rate_limit)

    def _settle_call(self, held: Held, decision: policy.Settle, result: bytes | None) -> Call:
        """The call that settles ``held`` as decided; ``result``: a returned value, encoded when kept."""
        queue, job = held.queue, held.job
        if job.flow:
            return self._flow_settle_call(held, decision, result)
        if isinstance(decision, policy.Complete):
            # this worker's own claim, a result keepable_result made and the task's checked retention
            if self.bus and held.task.result_ttl_ms:
                return queue.publish_call(job, result, retention_ms=held.task.result_ttl_ms, checked_already=True)
            return queue.complete_call(job, checked_already=True)
        if isinstance(decision, policy.Fail):
            if self.bus:
                return queue.failures_incr_call(job, decision.error, max_attempts=decision.max_attempts,
                                                backoff_ms=decision.backoff_ms, traceback=decision.traceback)
            return queue.fail_call(job, decision.error, max_attempts=decision.max_attempts,
                                   backoff_ms=decision.backoff_ms, traceback=decision.traceback)
        return queue.delay_call(job, decision.delay_ms)

    def _flow_settle_call(self, held: Held, decision: policy.Settle, result: bytes | None) -> Call:
        """A flow job settles through the flow scripts, which tell its parent (the native COMPLETE
        and FAIL refuse a flow child). Its result always goes (its parent may read it)."""
        queue, job = held.queue, held.job
        if isinstance(decision, policy.Complete):
            return queue.flow_complete_call(job, result, retention_ms=held.task.result_ttl_ms or 0)
        if isinstance(decision, policy.Postpone):
            return queue.flow_delay_call(job, decision.delay_ms)
        return queue.flow_fail_call(job, decision.error, max_attempts=decision.max_attempts,
                                    backoff_ms=decision.backoff_ms, traceback=decision.traceback)

    def claim_flows(self, now: float) -> int:
        """Claim flow jobs into the free slots (FLOW_CLAIM, one round trip per queue that is due);
        returns how many were claimed."""
        claimed = 0
        for name, queue in self.queues.items():
            if self.stopping or self._capacity() <= 0:
                break
            if now < self._next_flow_poll[name]:
                continue
            sent = self._clock_ms()
            jobs = queue.flow_claim(min(self._capacity(), self.config.claim_batch), self.config.lease.lease_ms)
            self._empty_flow_polls[name] = 0 if jobs else self._empty_flow_polls[name] + 1
            self._next_flow_poll[name] = policy.next_flow_poll_ms(
                now, found=bool(jobs), due_ms=jobs.due_ms, idle_blocking=self.blocking and name in self._idle,
                empty_polls=self._empty_flow_polls[name], backoff=self._flow_idle, slack_ms=PROMOTE_SLACK_MS)
            task = self.tasks[name]
            parents = [job for job in jobs if job.has_children]
            # a parent's handler reads what its children left it: read once, before it starts
            ids = [job.id for job in parents]
            left = dict(zip(ids, queue.children_many(ids, decoded=False)))
            self._start(task, queue, jobs, sent, left)
            claimed += len(jobs)
        return claimed

    def _refused(self, held: Held, reply: Exception) -> None:
        """A settle the server refused. The fence (a 0, or wire 6's EMQSTATE for a row no longer active):
        someone else holds the job now, or the sweep moved it; this attempt's outcome is void. Any other
        refusal writes nothing either: the job stays active until its lease runs out."""
        self._emit("job.lost", held.job, reason=f"settle refused, the lease is gone ({reply}); not settled by this worker"
                   if isinstance(reply, LeaseLost) else
                   f"settle refused by the server ({reply}); the sweep recovers it after its lease")

    def _record(self, name: str, held: Held, decision: policy.Fail | policy.Postpone, reply: Any,
                duration_s: float) -> None:
        """A retry's, a death's or a delay's settle the server took: a job scheduled again is expected due
        on ``name``'s timers; the event counted and told (``duration_s``: the attempt's run time)."""
        if isinstance(decision, policy.Postpone) or reply == State.SCHEDULED:
            # promote when it falls due, not a whole interval later (plus slack for the two clocks)
            wait = decision.delay_ms if isinstance(decision, policy.Postpone) else decision.backoff_ms
            self.timers.expect_due(name, self._clock_ms() + wait + PROMOTE_SLACK_MS)
        job = held.job
        if isinstance(decision, policy.Postpone):
            self._emit("job.delayed", job, delay_ms=decision.delay_ms, duration_s=duration_s)
        elif reply == State.DEAD:
            self._emit("job.dead", job, error=decision.error, max_attempts=decision.max_attempts, duration_s=duration_s)
        else:
            self._emit("job.retried", job, error=decision.error, backoff_ms=decision.backoff_ms, duration_s=duration_s)

    def _emit(self, event: str, job: Job, **fields: Any) -> None:
        """Count ``event`` in the tally, then tell the hooks if anyone listens: counted here, not
        by a subscriber, as building an event's data for no listener cost more than counting it.
        The times it carries are observed where they are known; the two events of every job
        (``job.claimed``, ``job.completed``) are counted where they happen, without this call."""
        self.tally.add(event)
        if event in hooks.heard:
            self._tell(event, job, **fields)

    def _tell(self, event: str, job: Job, **fields: Any) -> None:
        hooks.emit(event, worker=self, queue=job.queue, id=job.id, attempt=job.attempt, **fields)

    def _emit_sweep(self, queue: str, found: Sweep) -> None:
        for event, ids in (("sweep.stalled", found.recovered), ("sweep.recovered", found.exempt),
                           ("sweep.stalled_dead", found.dead)):
            for job_id in ids:
                self.tally.add(event)
                hooks.emit(event, worker=self, queue=queue, id=job_id)

    # -- waiting for work: the waiters ------------------------------------------------
    def _start_waiters(self) -> None:
        self.blocking = self.connection.wire == 4 or self.connection.supports("bclaim")
        if not self.blocking:
            log.info("worker %d: the node's EMQ.VERSION lists no claim.block: idle queues are polled",
                     os.getpid())
            return
        # on a cluster, a wire-4 waiter per slot (a BZPOPMIN's keys share one); wire 6's BCLAIM names one queue
        slots = {name: key_slot(q.keys.wake.encode()) for name, q in self.queues.items()} \
            if self.connection.cluster else None
        groups = [(group, False) for group in policy.wait_groups(list(self.queues), one_per_queue=True)] \
            if self.connection.wire == 6 else []
        # the markers: wire 4's only wake; on wire 6 the lane scripts' (BCLAIM never wakes for a lane job)
        groups += [(group, True) for group in policy.wait_groups(list(self.queues), one_per_queue=False, slots=slots)]
        for group, markers in groups:
            w = waiter.Waiter(self.connection, [self.queues[name] for name in group], markers=markers,
                              lease_ms=self.config.lease.lease_ms, report=self._report, clock_ms=self._clock_ms)
            w.start()
            self._waiters.append(w)

    def _report(self, report: waiter.Report) -> None:
        """From a waiter's thread: its block ended."""
        self._reports.put(report)
        self._wake.set()

    def _read_reports(self, now: float) -> None:
        while not self._reports.empty():
            report = self._reports.get()
            for name in waiter.flow_poll_triggers(report):
                self._next_flow_poll[name] = now
            if isinstance(report, waiter.Woken):
                for name in report.queues:
                    # a marker means claimable, or the schedule's head moved earlier: claim, and re-read it
                    self._no_lanes.discard(name)  # the marker may be a lane script's: probe the lanes too
                    self._claim_afresh(name)
                    self._paused.discard(name)
                    self.timers.recheck(name, now)
            elif isinstance(report, waiter.TimedOut):
                for name in () if report.interrupted else report.queues:  # interrupted: just re-armed
                    # claim once: a plain HDEL resume writes no marker, and another waiter (a frozen
                    # process, say) may have taken a wake it never acted on (a lane script's, too)
                    self._no_lanes.discard(name)
                    self._claim_afresh(name)
                    if name not in self._paused:
                        self.timers.recheck(name, now)  # an idle queue's promote backstop
            elif isinstance(report, waiter.Recheck):
                self.timers.recheck(report.queue, now)
            elif isinstance(report, waiter.RateWait):
                self._rate_wait(report.queue, now, report.wait_ms)
            elif isinstance(report, waiter.HeadRead):
                self.timers.expect_due(report.queue, now + max(0, report.due_in_ms) + PROMOTE_SLACK_MS)
            elif self.stopping:
                self._release_claimed(report)
            else:
                self._busy(report.queue)  # it had a job: more may follow, claimed in batches
                self._start(self.tasks[report.queue], self.queues[report.queue], [report.job], report.at_ms)

    def _release_claimed(self, report: waiter.Claimed) -> None:
        """A blocked claim answered with a job after the stop: straight back to pending (wire 6)."""
        try:
            self.queues[report.queue].requeue(report.job)
            self._emit("job.requeued", report.job)
            log.info("worker %d: stopping: requeued %s/%s, which a blocked claim took", os.getpid(),
                     report.queue, quoted(report.job.id))
        except (EchoMQError, *LINK_ERRORS) as exc:
            self._emit("job.abandoned", report.job, reason=f"could not requeue ({exc})")
            log.warning("worker %d: stopping: could not requeue %s/%s (%s); left to lease expiry", os.getpid(),
                        report.queue, quoted(report.job.id), exc)

    def _arm_waiters(self) -> None:
        """Have every waiter block on its idle queues, or end a block that no longer fits."""
        capacity = self._capacity()
        for w in self._waiters:
            stopping = self.stopping or (self._confirming_empty and not w.markers)
            wanted = policy.to_wait(list(w.queues), self._idle, capacity=capacity, stopping=stopping)
            if w.busy:
                if not w.unblocked and (w.interrupting or
                                        policy.interrupt_waiter(w.blocked_on, wanted, claims=not w.markers)):
                    w.interrupting = not w.interrupt()  # not found blocked: try again shortly
            elif wanted:
                w.request(wanted, policy.block_timeout_ms(paused=any(name in self._paused for name in wanted)))

    def _stop_waiters(self) -> None:
        """End every block. Wire 6's may hold a job: wait for their answers and requeue what they took."""
        deadline = time.monotonic() + WAITER_STOP_S
        for w in self._waiters:
            w.close()
            while w.busy and w.is_alive() and time.monotonic() < deadline:
                w.interrupt()
                w.join(INTERRUPT_RETRY_MS / 1000)
                if w.markers:
                    break  # nothing to release: a marker waiter may end with its timeout
        self._read_reports(self._clock_ms())
        self._waiters.clear()

    # -- 2. and 3. leases -----------------------------------------------------------
    def renew(self, now: float) -> None:
        """On the tick, renew every held job that is due, in one EXTENDS per queue."""
        if self._next_tick is None:
            self._next_tick = now + self.config.lease.renew_every_ms
        if now < self._next_tick:
            return
        self._next_tick = now + self.config.lease.renew_every_ms
        live = {key: held for key, held in self.held.items() if not held.lease_lost}
        due = policy.select_renewals({key: held.renewed_at for key, held in live.items()}, now, self.config.lease)
        by_queue: dict[str, list[Held]] = {}
        for key in due:
            by_queue.setdefault(key[0], []).append(live[key])
        for name, batch in by_queue.items():
            sent = self._clock_ms()
            flat = [h for h in batch if not h.job.flow]
            flow = [h for h in batch if h.job.flow]
            answers = self.queues[name].extend_many([h.job for h in flat], self.config.lease.lease_ms) if flat else []
            if flow:
                answers += self.queues[name].flow_extend_many([h.job for h in flow], self.config.lease.lease_ms)
            batch = flat + flow
            lost = set(policy.lost_from_extends([h.key for h in batch], answers))
            rows = self._rows_now(name, [h.job.id for h in batch if h.key in lost]) if lost else {}
            for held in batch:
                if held.key in lost:
                    self._lose(held, policy.why_gone(*rows[held.job.id]) if held.job.id in rows else
                               policy.Gone(False, "lease lost (EXTENDS answered 0: it is no longer held with this token)"))
                else:
                    held.renewed_at = sent

    def check_cancels(self, now: float) -> None:
        """Look whether the jobs held past ``CANCEL_CHECK_MS`` are still held (one ZMSCORE per queue,
        ``Queue.not_held``): one a cancel (or the sweep) took is lost at once, its handler told
        (``ctx.lost``, an async one cancelled), within about that long of the cancel instead of at
        the next renewal. Jobs held for less cost nothing: an idle worker or one of quick jobs sends
        nothing for it."""
        running = {key: held.claimed_at for key, held in self.held.items()
                   if not held.lease_lost and held.outcome is None and held.verdict is None}
        looked, self._cancel_check_at = policy.select_cancel_checks(running, now)
        by_queue: dict[str, list[Held]] = {}
        for key in looked:
            by_queue.setdefault(key[0], []).append(self.held[key])
        for name, batch in by_queue.items():
            gone = self.queues[name].not_held([held.job for held in batch])
            for held in batch:
                if held.job.id in gone and held.outcome is None:
                    self._lose(held, policy.why_gone(*gone[held.job.id]))

    def _rows_now(self, name: str, job_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """Why these jobs' renewals answered 0, read from their rows; nothing (the plain word) when
        the read fails: the loss stands either way."""
        try:
            return self.queues[name].rows_now(job_ids)
        except (*LINK_ERRORS, CommandRefused):
            return {}

    def time_out(self, now: float) -> None:
        """Fail every handler past its timeout with JobTimeout (settled by the next exchange): an
        async one is cancelled; a sync one is abandoned to its thread, and a fresh thread takes
        its place in the pool. Either way the lease is no longer renewed and the handler's own
        outcome is dropped."""
        running = {key: held.deadline for key, held in self.held.items() if held.deadline is not None
                   and held.verdict is None and held.outcome is None and not held.lease_lost}
        for key in policy.select_timed_out(running, now):
            held = self.held[key]
            timeout_s = self._timeout_s(held.task)
            with self._outcomes:
                if held.outcome is not None:
                    continue  # it returned just now: settled with its own outcome
                held.verdict = policy.Raised(JobTimeout(timeout_s))
                held.ended_s = time.monotonic()
                self._ended += 1
                self._finished.append(held)
            held.mark_lost()
            if held.task.is_async:
                held.future.cancel()
            elif self._pool is not None:
                self._pool.replace_one()
            log.error("job %s/%s attempt %d: the handler ran past its timeout of %g s: failed with JobTimeout%s",
                      held.job.queue, quoted(held.job.id), held.job.attempt, timeout_s,
                      "" if held.task.is_async else "; its thread is abandoned and runs on until it returns")

    def _timeout_s(self, task: Task) -> float | None:
        return self.config.timeout_s if self.config.timeout_s is not None else task.timeout

    def give_up_expired(self, now: float) -> None:
        live = {key: held.renewed_at for key, held in self.held.items() if not held.lease_lost}
        for key in policy.select_expired(live, now, self.config.lease):
            self._lose(self.held[key], policy.Gone(False, "lease lost (no renewal reached the server within the lease)"))

    def _lose(self, held: Held, gone: policy.Gone | None) -> None:
        """Tell the handler its lease is gone; its outcome will be dropped when it finishes.
        (A sync handler that never looks at ``ctx.lease_lost`` keeps its slot until it returns.)"""
        held.mark_lost()
        if held.future is not None and held.task.is_async:
            held.future.cancel()
        if gone is not None:
            held.cancelled = gone.cancelled
            log.warning("job %s/%s attempt %d: %s: its handler is told (ctx.lost%s)", held.job.queue,
                        quoted(held.job.id), held.job.attempt, one_line(str(gone.reason)),
                        ", and cancelled" if held.task.is_async else "")
            # counted as job.lost when its handler finishes and the outcome is dropped

    # -- running handlers ------------------------------------------------------------
    def _start(self, task: Task, queue: Queue, jobs: list[Job], sent: float,
               children: dict[str, Children] | None = None) -> None:
        """Start the handlers of ``jobs``, claimed from ``queue`` (sent at local ms ``sent``); ``children``:
        what each flow parent's children left it, by the parent's id. A claim batch is handed to the
        handler threads at once (one lock, not one a job)."""
        # one task, one claim: the whole batch shares its deadline and its next scan
        timeout_s = self._timeout_s(task)
        deadline = None if timeout_s is None else sent + timeout_s * 1000
        lease_end = sent + self.config.lease.lease_ms
        scan_at = lease_end if deadline is None else min(deadline, lease_end)
        if scan_at < self._scan_at:
            self._scan_at = scan_at
        if sent + policy.CANCEL_CHECK_MS < self._cancel_check_at:
            self._cancel_check_at = sent + policy.CANCEL_CHECK_MS
        # the batch's clocks, read once: its wall time (the pending waits) and its handlers' start
        claimed_s, started_s = time.time(), time.monotonic()
        self.tally.claimed += len(jobs)
        waits = waited_in_pending_s(jobs, claimed_s)
        self.timings.waited.observe_many([waited_s for waited_s in waits if waited_s is not None])
        runs = self._hold(task, queue, jobs, sent, deadline, children, waits, started_s)
        if not runs:
            return
        self._started += len(runs)
        self._youngest_start = started_ms = self._clock_ms()
        self._settle_due = self._settle_at(started_ms) <= started_ms  # not yet, unless settle_wait_ms is 0
        told = "job.started" in hooks.heard  # read once a batch: the common case pays nothing a job
        if task.is_async:
            for held, args in runs:
                self._start_async(held, args, told)
        else:
            if self._pool is None:
                # relaying, jobs queued behind a slow handler get threads when the control thread looks in
                self._pool = _DaemonPool(self.config.concurrency,
                                         self.config.settle_wait_ms / 1000 if self._relaying else None)
            self._pool.submit_all(self._run_sync_told if told else self._run_sync, runs)

    def _hold(self, task: Task, queue: Queue, jobs: list[Job], sent: float, deadline: float | None,
              children: dict[str, Children] | None, waits: list[float | None],
              started_s: float) -> list[tuple[Held, tuple[Any, ...]]]:
        """Hold a claim batch's jobs and build their handlers' arguments; a job whose payload cannot be
        decoded has none (it is finished already: dead at once, not the worker's failure). ``waits``:
        each one's pending wait (observed by the batch), ``started_s``: the monotonic time their
        handlers start."""
        is_async = task.is_async
        context, producers = (AsyncJobContext if is_async else JobContext), self._producers[is_async]
        # read once a batch, not once a job
        claimed_heard, loads, progress = "job.claimed" in hooks.heard, task.serializer.loads, queue.progress
        arity = task.arity  # the handler gets (payload, ctx)[:arity]
        # a context (with its progress reporter, a flow parent's children) is built only for a handler
        # that takes one: for one that does not, nothing could ever read it (Held.ctx)
        takes_ctx = arity == 2
        runs = []
        for job, waited_s in zip(jobs, waits):
            if claimed_heard:  # counted by the batch (_start)
                self._tell("job.claimed", job, waited_s=waited_s, trace=job.trace)
            ctx = context(job.id, task.queue, job.attempt, producers) if takes_ctx else None
            if ctx is not None and children and (left := children.get(job.id)) is not None:
                # decoded when the handler asks, in its own thread: a result its serializer cannot read is its error
                ctx.children = lambda raw=left: Children(
                    {child: result_value(loads, result, child) for child, result in raw.results.items()}, raw.failures)
            if ctx is not None and (self._progress or job.flow or job.group is not None):
                # one APPEND (lane_append, flow_append: scripts on both wires): a sync handler sends it from
                # its own thread on the connection's pool, an async one awaits it on the asyncio connection
                # (the loop's other handlers run on)
                ctx.report = self._async_report(queue.name, job) if is_async else partial(progress, job)
            held = Held(queue, task, job, (job.queue, job.id), ctx, sent, started_s, deadline, claimed_at=sent)
            self.held[held.key] = held
            try:
                payload = None if job.raw_payload is None else loads(job.raw_payload)
            except Exception as exc:  # a payload this task cannot read fails this job (dead at once), not the worker
                held.verdict = policy.Undecodable(PayloadError(
                    f"the payload cannot be decoded by the task's serializer ({type(task.serializer).__name__}): "
                    f"{type(exc).__name__}: {exc}"))
                log.error("job %s/%s: %s", job.queue, quoted(job.id), one_line(str(held.verdict.error)))
                held.ended_s = held.started_s
                with self._outcomes:
                    self._finished.append(held)
                continue
            runs.append((held, (payload, ctx)[:arity]))
        return runs

    def _run_sync(self, held: Held, args: tuple[Any, ...]) -> Callable[[], None] | None:
        """On a handler thread: run the handler and hand its outcome back (returns the relay, if this
        thread is to run it)."""
        return self._done(held, outcome_of(held.task.fn, *args), relay=True)

    def _run_sync_told(self, held: Held, args: tuple[Any, ...]) -> Callable[[], None] | None:
        """:meth:`_run_sync` between ``job.started`` and ``job.returned``, told on the handler's own
        thread: a subscriber may set a context there for the handler (the trace's span, say)."""
        self._tell("job.started", held.job)
        try:
            outcome = outcome_of(held.task.fn, *args)
        finally:
            self._tell("job.returned", held.job)
        return self._done(held, outcome, relay=True)

    async def _told(self, held: Held, coro: Awaitable[Any]) -> Any:
        """An async handler between ``job.started`` and ``job.returned``, told in its own task."""
        self._tell("job.started", held.job)
        try:
            return await coro
        finally:
            self._tell("job.returned", held.job)

    def _start_async(self, held: Held, args: tuple[Any, ...], told: bool) -> None:
        if self._async is None:
            self._async = _AsyncRunner()
        try:
            coro = held.task.fn(*args)
        except Exception as exc:  # raised before its first await (a bad signature, say): this job's outcome
            self._done(held, raised(exc))
            return
        held.future = self._async.submit(self._told(held, coro) if told else coro)
        held.future.add_done_callback(lambda future, held=held: self._done(held, outcome_of(future.result, 0)))

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

        def serializer_of(name: str, given: Serializer | None) -> Serializer:
            task = self.app.tasks.get(name)
            return given or (task.serializer if task else JSON)

        def layout_of(name: str) -> list[str]:
            return self.layouts.get(name, [name])  # declared by __init__

        def sync_queue(name: str, given: Serializer | None) -> Queue | PartitionedQueue:
            if len(layout_of(name)) == 1:
                return Queue(self.connection, name, serializer=serializer_of(name, given))
            return PartitionedQueue(self.connection, name, partitions=len(layout_of(name)),
                                    serializer=serializer_of(name, given))

        if not is_async:
            return sync_queue

        def async_queue(name: str, given: Serializer | None) -> aio.Queue | aio.PartitionedQueue:
            if self._aio is None:
                self._aio = aio.Connection.sharing(self.connection)
            if len(layout_of(name)) > 1:
                return aio.PartitionedQueue(self._aio, name, layout_of(name), serializer=serializer_of(name, given))
            return aio.Queue(self._aio, name, serializer=serializer_of(name, given))

        return async_queue

    def _done(self, held: Held, outcome: policy.Outcome, *, relay: bool = False) -> Callable[[], None] | None:
        """From the thread that ran the handler: its outcome, for the next exchange to settle. With
        ``relay`` (a pool thread), the last running handler's returns the relay for that thread to run."""
        ended_s = time.monotonic()
        with self._outcomes:
            late = held.verdict is not None
            if not late:
                held.ended_s, held.outcome = ended_s, outcome
                self._ended += 1
                self._finished.append(held)
            running = self._started - self._ended
        if late:  # timed out: already failed; this late outcome is dropped
            if not (isinstance(outcome, policy.Raised) and isinstance(outcome.error, CANCELLED)):
                # (an async handler the timeout cancelled did not finish: it stopped, as told)
                log.info("job %s/%s attempt %d: the timed-out handler finished after all; its outcome is dropped",
                         held.job.queue, quoted(held.job.id), held.job.attempt)
            return None
        if running <= 0 and relay and self._relaying:
            return self._relay
        # the last of its batch to end, or the settle already due: wake the loop (set, it is not yet
        # cleared: the step it wakes reads this outcome); not yet due, the loop's wait ends by itself
        # when it falls due (_next_due), so no clock is read here
        if (running <= 0 or self._settle_due) and not self._wake.is_set():
            self._wake.set()
        return None

    # -- shutdown ----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Settle what finished, then release what is still held (REQUEUE, on both wires)."""
        if self._stop_at is None:
            self._stop_claiming(self._clock_ms())  # no claims from here on, whatever brought us here
        self._stop_waiters()
        try:
            self.exchange(self._clock_ms())
        except (EchoMQError, *LINK_ERRORS) as exc:
            log.warning("worker %d: could not settle finished jobs at shutdown: %s", os.getpid(), exc)
        still = [held for held in self.held.values() if not held.lease_lost]
        for held in still:
            self._lose(held, None)  # first: its outcome must never be settled now (logged below, all at once)
        if still:
            self._requeue(still)
        else:
            log.info("worker %d: stopped with nothing held", os.getpid())
        self.held.clear()
        try:
            self.heartbeat.remove()
        except LINK_ERRORS as exc:
            log.warning("worker %d: could not remove its heartbeat record (it expires by itself): %s", os.getpid(), exc)
        if self._pool:
            self._pool.shutdown()
        if self._async:
            if self._aio is not None:
                self._async.close(self._aio)
            self._async.shutdown()
        log.info("worker %d: done: %s", os.getpid(), self.tally)

    def _requeue(self, still: list[Held]) -> None:
        by_queue: dict[str, list[Held]] = {}
        for held in still:
            by_queue.setdefault(held.job.queue, []).append(held)
        for name, batch in by_queue.items():
            try:
                queue = self.queues[name]
                replies = queue.settle_many([queue.flow_release_call(h.job) if h.job.flow else queue.requeue_call(h.job)
                                             for h in batch])
            except LINK_ERRORS as exc:
                for held in batch:
                    self._emit("job.abandoned", held.job, reason=f"REQUEUE failed ({exc})")
                log.warning("worker %d: REQUEUE failed (%s): %d job(s) left to lease expiry", os.getpid(), exc,
                            len(batch))
                continue
            for held, reply in zip(batch, replies):
                if reply is True:
                    self._emit("job.requeued", held.job)
                else:
                    self._emit("job.abandoned", held.job, reason=f"REQUEUE answered {reply}")
            ok = [h.job.id for h, reply in zip(batch, replies) if reply is True]
            log.warning("worker %d: requeued %d job(s) still held at the end of the grace period: %s",
                        os.getpid(), len(ok), ", ".join(map(quoted, ok)))
