"""The leases of the jobs a worker holds: renewed on the tick (one EXTENDS per queue), looked at
for a cancel once held past ``policy.CANCEL_CHECK_MS`` (one ZMSCORE per queue), given up when no
renewal reached the server within a lease (the link was down), and the handlers past their timeout
picked out for the executor to fail. A job whose lease is gone is marked lost: its handler is told
(``ctx.lost``; an async one is cancelled) and its outcome is dropped when it comes. What to renew,
look at or give up is decided by :mod:`echomq.worker.policy`; this only performs it."""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from . import policy
from ..errors import CommandRefused, ConnectionFailed
from .._client.queue import Queue
from .._protocol.shown import one_line, quoted
from .config import WorkerConfig
from .held import Held

log = logging.getLogger("echomq.worker")


class Leases:
    """The held jobs' leases (``held``: the worker's, by (queue, id)), and when each look is due."""

    def __init__(self, queues: Mapping[str, Queue], held: dict[tuple[str, str], Held], config: WorkerConfig,
                 clock_ms: Callable[[], float]) -> None:
        self.queues = queues
        self.held = held
        self.lease = config.lease
        self._clock_ms = clock_ms
        self.next_tick: float | None = None  #: the next renewal tick (local ms); set by the first renewal
        #: no handler's timeout nor lease runs out before this local time: the scans wait for it
        #: (set by each scan, brought forward by each claim batch; only ever early, never late)
        self.scan_at = float("inf")
        #: the next look for held jobs cancelled while they run: set by each look, brought forward as scan_at
        self.cancel_check_at = float("inf")

    def claimed(self, sent: float, deadline: float | None) -> None:
        """A claim batch sent at local ``sent``, its handlers' timeout at ``deadline`` (None: none): the
        scan and the cancel look come by then."""
        lease_end = sent + self.lease.lease_ms
        scan_at = lease_end if deadline is None else min(deadline, lease_end)
        if scan_at < self.scan_at:
            self.scan_at = scan_at
        if sent + policy.CANCEL_CHECK_MS < self.cancel_check_at:
            self.cancel_check_at = sent + policy.CANCEL_CHECK_MS

    def next_due_ms(self) -> float:
        """The next renewal tick, scan or cancel look (local ms)."""
        return min(self.next_tick or float("inf"), self.scan_at, self.cancel_check_at)

    def renew(self, now: float) -> None:
        """On the tick, renew every held job that is due, in one EXTENDS per queue."""
        if self.next_tick is None:
            self.next_tick = now + self.lease.renew_every_ms
        if now < self.next_tick:
            return
        self.next_tick = now + self.lease.renew_every_ms
        live = {key: held for key, held in self.held.items() if not held.lease_lost}
        due = policy.select_renewals({key: held.renewed_at for key, held in live.items()}, now, self.lease)
        by_queue: dict[str, list[Held]] = {}
        for key in due:
            by_queue.setdefault(key[0], []).append(live[key])
        for name, batch in by_queue.items():
            sent = self._clock_ms()
            flat = [h for h in batch if not h.job.flow]
            flow = [h for h in batch if h.job.flow]
            answers = self.queues[name].extend_many([h.job for h in flat], self.lease.lease_ms) if flat else []
            if flow:
                answers += self.queues[name].flow_extend_many([h.job for h in flow], self.lease.lease_ms)
            batch = flat + flow
            lost = set(policy.lost_from_extends([h.key for h in batch], answers))
            rows = self._rows_now(name, [h.job.id for h in batch if h.key in lost]) if lost else {}
            for held in batch:
                if held.key in lost:
                    self.lose(held, policy.why_gone(*rows[held.job.id]) if held.job.id in rows else
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
        looked, self.cancel_check_at = policy.select_cancel_checks(running, now)
        by_queue: dict[str, list[Held]] = {}
        for key in looked:
            by_queue.setdefault(key[0], []).append(self.held[key])
        for name, batch in by_queue.items():
            gone = self.queues[name].not_held([held.job for held in batch])
            for held in batch:
                if held.job.id in gone and held.outcome is None:
                    self.lose(held, policy.why_gone(*gone[held.job.id]))

    def _rows_now(self, name: str, job_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """Why these jobs' renewals answered 0, read from their rows; nothing (the plain word) when
        the read fails: the loss stands either way."""
        try:
            return self.queues[name].rows_now(job_ids)
        except (ConnectionFailed, CommandRefused):
            return {}

    def timed_out(self, now: float) -> list[Held]:
        """The running handlers past their timeout at ``now``, earliest first (the executor fails them)."""
        running = {key: held.deadline for key, held in self.held.items() if held.deadline is not None
                   and held.verdict is None and held.outcome is None and not held.lease_lost}
        return [self.held[key] for key in policy.select_timed_out(running, now)]

    def give_up_expired(self, now: float) -> None:
        """Lose the jobs no renewal reached the server for within a whole lease (the link was down)."""
        live = {key: held.renewed_at for key, held in self.held.items() if not held.lease_lost}
        for key in policy.select_expired(live, now, self.lease):
            self.lose(self.held[key], policy.Gone(False, "lease lost (no renewal reached the server within the lease)"))

    def rescan(self) -> None:
        """The next scan: when a held job's timeout or lease runs out first (timed_out, give_up_expired)."""
        live = [h for h in self.held.values() if not h.lease_lost]
        times = [h.renewed_at + self.lease.lease_ms for h in live]
        times += [h.deadline for h in live if h.deadline is not None and h.verdict is None and h.outcome is None]
        self.scan_at = min(times, default=float("inf"))

    def lose(self, held: Held, gone: policy.Gone | None) -> None:
        """Tell the handler its lease is gone; its outcome will be dropped when it finishes.
        (A sync handler that never looks at ``ctx.lease_lost`` keeps its slot until it returns.)"""
        held.mark_lost()
        if held.task.is_async:
            held.cancel_handler()
        if gone is not None:
            held.cancelled = gone.cancelled
            log.warning("job %s/%s attempt %d: %s: its handler is told (ctx.lost%s)", held.job.queue,
                        quoted(held.job.id), held.job.attempt, one_line(str(gone.reason)),
                        ", and cancelled" if held.task.is_async else "")
            # counted as job.lost when its handler finishes and the outcome is dropped
