"""The worker: claim -> run -> renew -> settle, on one connection, until told to stop.

:class:`Worker` is a composition of small parts, each in a module of its own (Oban's producer,
executor and watchman):

* :mod:`~echomq.worker.loop` -- the control thread's steps: exchanges (settle and claim in one
  round trip per queue), flow claims, relays, the wait between steps;
* :mod:`~echomq.worker.pacing` -- when each queue is claimed next and how many (no I/O);
* :mod:`~echomq.worker.executor` -- the handlers run, on a thread pool or an asyncio loop
  (:mod:`~echomq.worker.pool`), their outcomes gathered (:mod:`~echomq.worker.outcomes`);
* :mod:`~echomq.worker.settling` -- what each outcome becomes on the server, and its answer recorded;
* :mod:`~echomq.worker.leases` -- renewal, the look for cancels, timeouts, leases given up;
* :mod:`~echomq.worker.waiting` -- the waiters that block while queues are idle, and their reports;
* :mod:`~echomq.worker.shutdown` -- stop, grace, requeue (the watchman);
* :mod:`~echomq.worker.tallies` -- what the worker counts, times and tells the hooks;

beside the services every worker runs: the timers (PROMOTE, STALLED.CHECK, the reaper), the
periodic jobs and the heartbeat. What each part decides is a pure function of
:mod:`echomq.worker.policy`; the parts only perform it.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import Callable, Sequence

from ..admin import doctor
from .._client.connection import TRANSPORT_ERRORS, Connection
from .._client.partitioned import drive, op_declare
from .._client.queue import Queue
from ..errors import ConfigurationError
from .._protocol.serializers import RAW
from .config import WorkerConfig
from .cron import CronTimer
from .executor import Executor
from .heartbeat import Heartbeat
from .held import Held
from .leases import Leases
from .loop import Loop
from .outcomes import running_worker
from .pacing import Pacing
from .settling import Settler
from .shutdown import Watchman
from .jobstats import JobStats, Timings
from .tallies import Events, Tally
from .tasks import App, Task
from .timers import Timers
from .waiting import Waiting

__all__ = ["Tally", "Worker", "WorkerConfig"]

log = logging.getLogger("echomq.worker")


def names_served(tasks: dict[str, Task]) -> set[str]:
    """The queue names of the tasks served (a partitioned task's own name, not its partitions')."""
    return {task.queue for task in tasks.values()}


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
        self.config = config = config or WorkerConfig()
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
        # the services every worker runs beside its jobs
        self.timers = Timers(list(self.queues.values()), config.timers)
        self.cron = self._periodic_jobs()
        #: what its jobs came to, per queue and task: the heartbeat publishes it, --metrics-port exports it
        self.stats = JobStats()
        self.timings = Timings(self.stats)  #: every task's histograms read as one
        self.heartbeat = Heartbeat(connection.client, queues=names, concurrency=config.concurrency,
                                   wire=connection.wire, config=config.heartbeat, stats=self.stats)
        #: the node serves the bus: completions keep results and failures their tracebacks
        self.bus = connection.supports("publish") and connection.supports("failures_incr")
        # what it did, and the jobs it holds, by (queue, id): every part reads them
        self.tally = Tally()
        self.events = Events(self, self.tally, self.stats)
        self.held: dict[tuple[str, str], Held] = {}
        wake = threading.Event()  #: ends the control thread's wait: an outcome to settle, a report, a stop
        # its parts
        self.pacing = Pacing(names, config)
        self.leases = Leases(self.queues, self.held, config, clock_ms)
        self.executor = Executor(app, connection, self.layouts, config, self.held, self.leases, self.tally,
                                 self.stats, self.events, wake, clock_ms)
        self.settler = Settler(self.queues, self.held, bus=self.bus, rand=rand, tally=self.tally, stats=self.stats,
                               events=self.events, timers=self.timers, pacing=self.pacing, clock_ms=clock_ms)
        self.waiting = Waiting(connection, self.queues, self.tasks, config, self.pacing, self.executor, self.events,
                               self.timers, wake, clock_ms)
        self.loop = Loop(config=config, queues=self.queues, tasks=self.tasks, held=self.held, tally=self.tally,
                         events=self.events, pacing=self.pacing, executor=self.executor, settler=self.settler,
                         leases=self.leases, waiting=self.waiting, timers=self.timers, cron=self.cron,
                         heartbeat=self.heartbeat, wake=wake, clock_ms=clock_ms)
        self.watchman = Watchman(config=config, queues=self.queues, held=self.held, tally=self.tally,
                                events=self.events, pacing=self.pacing, executor=self.executor, leases=self.leases,
                                waiting=self.waiting, loop=self.loop, heartbeat=self.heartbeat, wake=wake,
                                clock_ms=clock_ms, after_last_settle=self._run_shutdown_hooks)
        #: what the app's shutdown hooks raised when this worker last stopped (each logged); empty: none
        self.shutdown_errors: list[BaseException] = []

    def _periodic_jobs(self) -> CronTimer:
        """The periodic jobs of the queues served, encoded with their task's serializer (echomq.worker.cron)."""
        schedules = [s for s in self.app.schedules if s.queue in self.queues]
        partitioned = [s.id for s in self.app.schedules
                       if s.queue in names_served(self.tasks) and s.queue not in self.queues]
        if partitioned:
            raise ConfigurationError(f"schedule(s) {partitioned} enqueue on a partitioned queue: periodic jobs take a "
                                     "plain queue (give the ticks a queue of their own)")
        producers = {s.queue: Queue(self.connection, s.queue, serializer=self.tasks[s.queue].serializer)
                     for s in schedules}
        return CronTimer(schedules, producers, next(iter(self.queues.values())).server_ms)

    # -- running ----------------------------------------------------------------
    def run(self, *, install_signals: bool | None = None) -> Tally:
        """Work until stopped (signal or :meth:`stop`), then shut down; returns the tally.

        SIGTERM/SIGINT handlers are installed when this runs on the main thread (or when
        ``install_signals`` says so); from another thread, stop it with :meth:`stop`.
        """
        if install_signals is None:
            install_signals = threading.current_thread() is threading.main_thread()
        if install_signals:
            self.watchman.install_signals()
        log.info("worker %d: queues %s on wire %d, concurrency %d, lease %d ms",
                 os.getpid(), ", ".join(self.queues), self.connection.wire, self.config.concurrency,
                 self.config.lease.lease_ms)
        loop = self.loop
        with running_worker():
            self._start_up()
            try:
                self._say_eviction()
                self._set_rate_limits()
                self.waiting.start()
                loop.relay_from_handlers(self.config.settle_wait_ms > 0)
                while True:
                    with loop.taking_baton():
                        if loop.relay_error is not None:
                            raise loop.relay_error
                        next_ms = self.step()
                        if self.config.burst and not self.stopping and self.drained():
                            self._stop_drained()
                        if self.watchman.grace_over():
                            break
                    loop.wait(next_ms)
            finally:
                with loop.taking_baton():
                    loop.relay_from_handlers(False)  # outcomes from here on wake the control thread
                    self.shutdown()
        return self.tally

    def step(self) -> float:
        """One pass of the loop (:meth:`Loop.step`); returns the local time (ms) at which the next one is due."""
        return self.loop.step()

    def drained(self) -> bool:
        """Nothing held or left to settle, and every queue empty (:meth:`Loop.drained`): a burst's end."""
        return self.loop.drained()

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running jobs get ``grace_s`` to finish. Safe from any thread."""
        self.watchman.stop(reason)

    def shutdown(self) -> None:
        """Settle what finished, then release what is still held (REQUEUE, on both wires)."""
        self.watchman.shut_down()

    @property
    def stopping(self) -> bool:
        """No more claims: a stop was asked, or ``max_jobs`` reached."""
        return self.pacing.stopping

    @property
    def blocking(self) -> bool:
        """Idle queues are waited on (a waiter each), not polled: set when :meth:`run` starts the waiters."""
        return self.pacing.blocking

    # -- at start ---------------------------------------------------------------
    def _start_up(self) -> None:
        """The app's startup hooks (echomq.worker.lifecycle), then the process pool's children, before
        the first claim: one that fails stops the worker here (StartupFailed), with nothing claimed
        (the children failing, the shutdown hooks undo what the startup hooks made)."""
        self.shutdown_errors = []
        try:
            self.app.lifecycle.start(self.executor.run_on_loop)
            try:
                self.executor.start_children(self.tasks.values())
            except BaseException:
                self._run_shutdown_hooks()
                raise
        except BaseException:
            self.executor.close()
            raise

    def _run_shutdown_hooks(self) -> None:
        """After the last settle, before the handlers' loop closes: the app's shutdown hooks."""
        self.shutdown_errors = self.app.lifecycle.stop(self.executor.run_on_loop)

    def _say_eviction(self) -> None:
        """An error in the log at start when a node may evict keys (an evicted row or set is a lost
        job), decided as `emq doctor` decides it. Unread (an ACL without CONFIG, a link fault) is
        left to `emq doctor`."""
        for name, node in doctor.primaries(self.connection.client):
            try:
                eviction = doctor.answered(node.config_get, "maxmemory-policy")
            except TRANSPORT_ERRORS:
                return
            if isinstance(eviction, Exception):
                continue
            check = doctor.check_eviction(eviction.get("maxmemory-policy", "?"))
            if check.level is doctor.Level.ERROR:
                log.error("worker %d: %s%s", os.getpid(), f"{name}: " if name else "", check.detail)

    def _set_rate_limits(self) -> None:
        """Each task's ``rate_limit`` onto its queue's meta, at start (a task without one leaves the
        queue's as it is: ``emq rate-limit`` sets it for every worker)."""
        for name, task in self.tasks.items():
            if task.rate_limit is not None:
                self.queues[name].set_rate_limit(task.rate_limit)
                log.info("worker %d: queue %s: at most %s job starts", os.getpid(), name, task.rate_limit)

    def _stop_drained(self) -> None:
        """A burst worker's queues are empty: stop, naming the paused queues whose jobs it left."""
        paused = ", ".join(f"{name} ({n} pending)" for name, n in self.loop.paused_pending.items())
        self.stop("burst: the queues are empty" + (f"; paused, so not run: {paused} (emq resume "
                                                   "-q QUEUE, then run again)" if paused else ""))
