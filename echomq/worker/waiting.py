"""Waiting while queues are idle: the worker's waiters (:mod:`echomq.worker.waiter`, a thread and a
socket each) armed on the idle queues, and their reports read back on the control thread.

A waiter blocks on the server -- BZPOPMIN on wake markers (wire 4, and wire 6's lanes), EMQ.BCLAIM
(wire 6) -- and reports how its block ended: a wake or a block's end claims the queue afresh
(:class:`~echomq.worker.pacing.Pacing`), a job BCLAIM took is started like any claimed one (or
released at once after a stop), a rate limit's wait is waited out, a head read sets the promote.
A wire-6 node without the ``claim.block`` token has no waiters: idle queues are polled.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from queue import SimpleQueue
from typing import Callable, Mapping

from valkey.crc import key_slot

from . import policy, waiter
from .._client.connection import Connection
from .._client.queue import Queue
from ..errors import ConnectionFailed, EchoMQError
from .._protocol.shown import quoted
from .config import WorkerConfig
from .executor import Executor
from .pacing import Pacing
from .tallies import Events
from .tasks import Task
from .timers import Timers

log = logging.getLogger("echomq.worker")

#: A waiter's block that must end (CLIENT UNBLOCK found it between blocks) is tried again this soon.
INTERRUPT_RETRY_MS = 20
#: How long shutdown waits for wire 6's blocked claims to answer (a job they took is requeued).
WAITER_STOP_S = 2.0


class Waiting:
    """A worker's waiters: armed on its idle queues, their reports read and acted on."""

    def __init__(self, connection: Connection, queues: Mapping[str, Queue], tasks: Mapping[str, Task],
                 config: WorkerConfig, pacing: Pacing, executor: Executor, events: Events, timers: Timers,
                 wake: threading.Event, clock_ms: Callable[[], float]) -> None:
        self.connection = connection
        self.queues = queues
        self.tasks = tasks
        self.lease_ms = config.lease.lease_ms
        self.pacing = pacing
        self.executor = executor
        self.events = events
        self.timers = timers
        self.wake = wake  #: the control loop's: a report wakes it
        self._clock_ms = clock_ms
        self.reports: SimpleQueue[waiter.Report] = SimpleQueue()
        self.waiters: list[waiter.Waiter] = []
        #: a burst worker found its queues empty while a claiming block was out: none is re-armed until
        #: each has answered (Loop.drained)
        self.confirming_empty = False

    def start(self) -> None:
        """Start the waiters, or, on a wire-6 node without ``claim.block``, say that idle queues are polled."""
        self.pacing.blocking = self.connection.wire == 4 or self.connection.supports("bclaim")
        if not self.pacing.blocking:
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
                              lease_ms=self.lease_ms, report=self.report, clock_ms=self._clock_ms)
            w.start()
            self.waiters.append(w)

    def report(self, report: waiter.Report) -> None:
        """From a waiter's thread: its block ended."""
        self.reports.put(report)
        self.wake.set()

    def read(self, now: float) -> None:
        """Act on every report in."""
        pacing, timers = self.pacing, self.timers
        while not self.reports.empty():
            report = self.reports.get()
            pacing.poll_flows(waiter.flow_poll_triggers(report), now)
            if isinstance(report, waiter.Woken):
                for name in report.queues:
                    # a marker means claimable, or the schedule's head moved earlier: claim, and re-read it
                    pacing.woken(name, marker=True)
                    pacing.paused.discard(name)
                    timers.recheck(name, now)
                    timers.busy_again(name, now)
            elif isinstance(report, waiter.TimedOut):
                for name in () if report.interrupted else report.queues:  # interrupted: just re-armed
                    # claim once: a plain HDEL resume writes no marker, and another waiter (a frozen
                    # process, say) may have taken a wake it never acted on (a lane script's, too)
                    pacing.woken(name)
                    if name not in pacing.paused:
                        timers.recheck(name, now)  # an idle queue's promote backstop
            elif isinstance(report, waiter.Recheck):
                timers.recheck(report.queue, now)
            elif isinstance(report, waiter.RateWait):
                pacing.rate_wait(report.queue, now, report.wait_ms)
            elif isinstance(report, waiter.HeadRead):
                timers.expect_due(report.queue, now + max(0, report.due_in_ms) + policy.PROMOTE_SLACK_MS)
            elif pacing.stopping:
                self.release(report)
            else:
                pacing.busy(report.queue)  # it had a job: more may follow, claimed in batches
                timers.busy_again(report.queue, now)
                self.executor.start(self.tasks[report.queue], self.queues[report.queue], [report.job], report.at_ms)

    def release(self, report: waiter.Claimed) -> None:
        """A blocked claim answered with a job after the stop: straight back to pending (wire 6)."""
        try:
            self.queues[report.queue].requeue(report.job)
            self.events.emit("job.requeued", report.job, self.tasks[report.queue])
            log.info("worker %d: stopping: requeued %s/%s, which a blocked claim took", os.getpid(),
                     report.queue, quoted(report.job.id))
        except (EchoMQError, ConnectionFailed) as exc:
            self.events.emit("job.abandoned", report.job, self.tasks[report.queue], reason=f"could not requeue ({exc})")
            log.warning("worker %d: stopping: could not requeue %s/%s (%s); left to lease expiry", os.getpid(),
                        report.queue, quoted(report.job.id), exc)

    def arm(self, capacity: int) -> None:
        """Have every waiter block on its idle queues (``capacity`` slots free), or end a block that no
        longer fits."""
        for w in self.waiters:
            stopping = self.pacing.stopping or (self.confirming_empty and not w.markers)
            wanted = policy.to_wait(list(w.queues), self.pacing.idle, capacity=capacity, stopping=stopping)
            if w.busy:
                if not w.unblocked and (w.interrupting or
                                        policy.interrupt_waiter(w.blocked_on, wanted, claims=not w.markers)):
                    w.interrupting = not w.interrupt()  # not found blocked: try again shortly
            elif wanted:
                w.request(wanted, policy.block_timeout_ms(paused=any(name in self.pacing.paused for name in wanted)))

    def watched(self, name: str) -> bool:
        """A waiter blocks on ``name`` now."""
        return any(w.busy and name in w.blocked_on for w in self.waiters)

    def interrupting(self) -> bool:
        """A block must end that was not found blocked: the loop tries again in INTERRUPT_RETRY_MS."""
        return any(w.busy and w.interrupting for w in self.waiters)

    def claims_in_flight(self) -> bool:
        """A claiming block (wire 6's BCLAIM) has not answered yet: it may hold a job."""
        return any(w.requested != w.answered for w in self.waiters if not w.markers)

    def stop(self) -> None:
        """End every block. Wire 6's may hold a job: wait for their answers and requeue what they took."""
        deadline = time.monotonic() + WAITER_STOP_S
        for w in self.waiters:
            w.close()
            while w.busy and w.is_alive() and time.monotonic() < deadline:
                w.interrupt()
                w.join(INTERRUPT_RETRY_MS / 1000)
                if w.markers:
                    break  # nothing to release: a marker waiter may end with its timeout
        self.read(self._clock_ms())
        self.waiters.clear()
