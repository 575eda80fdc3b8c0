"""Shutdown: stop, grace, requeue -- the :class:`Watchman` (Oban's name for the part that sees a
queue's jobs out when it stops).

A stop (SIGTERM/SIGINT, :meth:`Watchman.stop`, a burst that found its queues empty) ends the
claims; the jobs held get ``grace_s`` to finish, still renewed and settled meanwhile. Then what
finished is settled and what is still held is released with REQUEUE (a flow job with
FLOW_RELEASE), on both wires: no budget spent. A second signal exits at once, the leases left to
expire. A worker retiring at ``max_jobs`` stops claiming with no grace limit: its jobs run to their end.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from typing import Any, Callable, Mapping

from .._client.queue import Queue
from ..errors import ConnectionFailed, EchoMQError
from .._protocol.shown import quoted
from .config import WorkerConfig
from .executor import Executor
from .outcomes import restore_at_fork
from .heartbeat import Heartbeat
from .held import Held
from .leases import Leases
from .loop import Loop
from .pacing import Pacing
from .tallies import Events, Tally
from .waiting import Waiting

log = logging.getLogger("echomq.worker")


class Watchman:
    """How one worker stops: the stop asked, the grace waited out, the jobs still held released."""

    def __init__(self, *, config: WorkerConfig, queues: Mapping[str, Queue], held: dict[tuple[str, str], Held],
                 tally: Tally, events: Events, pacing: Pacing, executor: Executor, leases: Leases, waiting: Waiting,
                 loop: Loop, heartbeat: Heartbeat, wake: threading.Event, clock_ms: Callable[[], float],
                 after_last_settle: Callable[[], None] = lambda: None) -> None:
        self.config = config
        self.queues = queues
        self.held = held
        self.tally = tally
        self.events = events
        self.pacing = pacing
        self.executor = executor
        self.leases = leases
        self.waiting = waiting
        self.loop = loop
        self.heartbeat = heartbeat
        self.wake = wake
        self._clock_ms = clock_ms
        self.signals = 0  #: SIGTERM/SIGINT received: the second exits at once
        #: run once everything is settled or requeued, before the handlers' pool and loop close (the app's
        #: shutdown hooks)
        self.after_last_settle = after_last_settle

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running jobs get ``grace_s`` to finish. Safe from any thread."""
        stop_at = self.pacing.stop_at
        if stop_at is None or stop_at == math.inf:  # a retiring worker's jobs get the grace now
            self.pacing.stop_claiming(self._clock_ms() + self.config.grace_s * 1000)
            log.info("worker %d: %s: no more claims; %d job(s) held, waiting up to %.1fs for them",
                     os.getpid(), reason, len(self.held), self.config.grace_s)
        self.wake.set()

    def install_signals(self) -> None:
        """SIGTERM and SIGINT stop the worker; a second one exits at once."""
        def on_signal(signum: int, frame: Any) -> None:
            self.signals += 1
            name = signal.Signals(signum).name
            if self.signals > 1:
                # a second signal means now: no grace, no requeue; the leases expire on their own
                os.write(2, f"echomq worker {os.getpid()}: second {name}, exiting at once; "
                            f"{len(self.held)} held job(s) left to lease expiry\n".encode())
                os._exit(128 + signum)
            self.stop(name)

        restore_at_fork(on_signal)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)

    def grace_over(self) -> bool:
        """The loop may end: stopping, and nothing held or the grace is over."""
        return self.pacing.stopping and (not self.held or self._clock_ms() >= self.pacing.stop_at)

    def shut_down(self) -> None:
        """Settle what finished, then release what is still held (REQUEUE, on both wires)."""
        if self.pacing.stop_at is None:
            self.pacing.stop_claiming(self._clock_ms())  # no claims from here on, whatever brought us here
        self.waiting.stop()
        try:
            self.loop.exchange(self._clock_ms())
        except (EchoMQError, ConnectionFailed) as exc:
            log.warning("worker %d: could not settle finished jobs at shutdown: %s", os.getpid(), exc)
        still = [held for held in self.held.values() if not held.lease_lost]
        for held in still:
            self.leases.lose(held, None)  # first: its outcome must never be settled now (logged below, all at once)
        if still:
            self.requeue(still)
        else:
            log.info("worker %d: stopped with nothing held", os.getpid())
        self.held.clear()
        try:
            self.heartbeat.remove()
        except ConnectionFailed as exc:
            log.warning("worker %d: could not remove its heartbeat record (it expires by itself): %s", os.getpid(), exc)
        try:
            self.after_last_settle()
        finally:
            self.executor.close()
        log.info("worker %d: done: %s", os.getpid(), self.tally)

    def requeue(self, still: list[Held]) -> None:
        """Release ``still`` to pending (REQUEUE; FLOW_RELEASE for a flow job), one round trip per queue:
        each job requeued, or abandoned to its lease's expiry when the release failed."""
        by_queue: dict[str, list[Held]] = {}
        for held in still:
            by_queue.setdefault(held.job.queue, []).append(held)
        for name, batch in by_queue.items():
            try:
                queue = self.queues[name]
                replies = queue.settle_many([queue.flow_release_call(h.job) if h.job.flow else queue.requeue_call(h.job)
                                             for h in batch])
            except ConnectionFailed as exc:
                for held in batch:
                    self.events.emit("job.abandoned", held.job, held.task, reason=f"REQUEUE failed ({exc})")
                log.warning("worker %d: REQUEUE failed (%s): %d job(s) left to lease expiry", os.getpid(), exc,
                            len(batch))
                continue
            for held, reply in zip(batch, replies):
                if reply is True:
                    self.events.emit("job.requeued", held.job, held.task)
                else:
                    self.events.emit("job.abandoned", held.job, held.task, reason=f"REQUEUE answered {reply}")
            ok = [h.job.id for h, reply in zip(batch, replies) if reply is True]
            log.warning("worker %d: requeued %d job(s) still held at the end of the grace period: %s",
                        os.getpid(), len(ok), ", ".join(map(quoted, ok)))
