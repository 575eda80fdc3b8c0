"""The time-driven verbs as a small service: PROMOTE due jobs, STALLED.CHECK expired leases, and
the reaper (:mod:`echomq._core.reaper`) for the leases STALLED.CHECK refuses (lane rows).

Every worker runs them on an interval. That is safe with any number of workers: each
call is one atomic step in the server, bounded by ``limit``, so two workers never move
the same job twice. A run that hits its limit runs again at once (there is more to move).

The reaper runs on the sweep's intervals, and also exactly when its work falls due: each run
reads the earliest lane lease deadline and the earliest held group's time.

PROMOTE is exact as well as periodic: each run also reads when the schedule's head falls
due (one round trip), and the next run comes then. STALLED.CHECK is exact the same way, busy
or idle: it reads the earliest lease deadline and runs again then, so a crashed worker's jobs
run again within a lease of the crash. Its intervals are backstops for a lease another worker
took meanwhile: ``sweep_interval_ms`` while the queue is busy, ``idle_sweep_interval_ms`` once
it is idle. The promote interval is the backstop for a due
time that moved earlier unseen while the queue was busy. An *idle* queue (one a waiting
worker watches) has no interval: a write that brings its due time earlier wakes the waiter
(the wake marker on wire 4; BCLAIM answers empty on wire 6), which calls :meth:`Timers.recheck`,
as does the end of every block (at most ``policy.BLOCK_MAX_MS``), so an idle worker sends
almost nothing.

    timers = Timers([queue], TimerConfig(sweep_interval_ms=2000))
    timers.run_once()          # both verbs on every queue, now: what `emq promote`/`sweep` do
    timers.run_due(now_ms)     # only what is due at now_ms (the worker's loop calls this)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import AbstractSet, Sequence

from ..errors import ConfigurationError
from .policy import next_timer_ms, promote_at_ms
from .._client.queue import LIMIT_MAX, Queue, Sweep
from .._core.reaper import merged
from .._protocol.shown import quoted

#: The reaper's lane part, left out on a queue known never to have had a lane job.
LANES_RECOVERY = frozenset({"lane_reap"})

log = logging.getLogger("echomq.timers")


@dataclass(frozen=True)
class TimerConfig:
    promote_interval_ms: int = 1000  #: a busy queue's backstop between exact promotes (each reads the next due time)
    #: a busy queue's backstop: it is swept when its earliest lease expires (read by the previous
    #: sweep), and at least this often, to see a lease another worker took meanwhile
    sweep_interval_ms: int = 5000
    #: the same backstop once the queue is idle (a waiting worker sends almost nothing)
    idle_sweep_interval_ms: int = 30_000
    max_stalled: int = 3  #: a job whose lease expires this many times goes dead (wire 6 exempts restarts)
    limit: int = 1000  #: the most one call moves

    def __post_init__(self) -> None:
        for name in ("promote_interval_ms", "sweep_interval_ms", "idle_sweep_interval_ms", "max_stalled"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"bad {name} {value!r}: an integer >= 1")
        if not 1 <= self.limit <= LIMIT_MAX:
            raise ConfigurationError(f"bad limit {self.limit!r}: from 1 to {LIMIT_MAX}")


@dataclass
class TimerRun:
    """What one round moved on one queue (``None``: that timer was not due)."""

    queue: str
    promoted: int | None = None
    sweep: Sweep | None = None
    reaped: Sweep | None = None  #: the reaper's run (lane leases)

    @property
    def moved(self) -> bool:
        return bool(self.promoted) or bool(self.sweep) or bool(self.reaped)

    @property
    def recovered(self) -> Sweep:
        """What the sweep and the reaper found, together."""
        return merged([s for s in (self.sweep, self.reaped) if s is not None])


@dataclass
class _Clock:
    last_ms: float | None = None
    saturated: bool = False
    hint_ms: float | None = None  #: a job is known to fall due then (a retry's backoff): run no later

    def due_ms(self, now_ms: float, interval_ms: int, periodic: bool = True) -> float:
        # an idle queue's promote has no interval, but its first run (which reads the head) is at once
        due = next_timer_ms(self.last_ms, now_ms, interval_ms, self.saturated) \
            if periodic or self.saturated or self.last_ms is None else float("inf")
        return due if self.hint_ms is None else min(due, self.hint_ms)

    def ran(self, now_ms: float, interval_ms: int, saturated: bool, hint_ms: float | None = None) -> None:
        """After a run at ``now_ms``; ``hint_ms``: when the next is known to be due. A run the hint
        brought forward keeps the interval's rhythm, so the promote and sweep backstops stay together."""
        if next_timer_ms(self.last_ms, now_ms, interval_ms, self.saturated) <= now_ms:
            self.last_ms = now_ms
        self.saturated = saturated
        self.hint_ms = hint_ms


@dataclass
class Timers:
    queues: Sequence[Queue]
    config: TimerConfig = field(default_factory=TimerConfig)

    def __post_init__(self) -> None:
        self._promote = {q.name: _Clock() for q in self.queues}
        self._sweep = {q.name: _Clock() for q in self.queues}
        self._reap = {q.name: _Clock() for q in self.queues}
        #: (the idle queues, the earliest due time) as last computed: it holds until a clock changes
        #: (a run, a hint) or the idle queues do, so the worker's every step compares one number
        self._earliest: tuple[frozenset[str], float] | None = None

    def next_due_ms(self, now_ms: float, idle: AbstractSet[str] = frozenset()) -> float:
        """The earliest local time at which some timer is due (``idle``: queues promoted only when
        known to be due, see the module's docstring)."""
        if self._earliest is not None and self._earliest[0] == idle:
            return self._earliest[1]  # one computed as "now" then is still due now
        times = [c.due_ms(now_ms, self.config.promote_interval_ms, name not in idle)
                 for name, c in self._promote.items()]
        times += [c.due_ms(now_ms, self._sweep_interval_ms(name, idle))
                  for clocks in (self._sweep, self._reap) for name, c in clocks.items()]
        earliest = min(times, default=float("inf"))
        self._earliest = (frozenset(idle), earliest)
        return earliest

    def expect_due(self, queue: str, at_ms: float) -> None:
        """A job of ``queue`` falls due at local time ``at_ms``: promote then rather than a whole
        interval later (the worker calls this after a FAIL or DELAY with a short wait, and with
        the current time when a wake says the schedule's head may have moved: :meth:`recheck`).
        The reaper runs then too: a lane group held by a retry's backoff takes its turn again."""
        for clock in (self._promote[queue], self._reap[queue]):
            clock.hint_ms = at_ms if clock.hint_ms is None else min(clock.hint_ms, at_ms)
        self._earliest = None

    def run_due(self, now_ms: float, idle: AbstractSet[str] = frozenset(),
                lane_less: AbstractSet[str] = frozenset()) -> list[TimerRun]:
        """Every timer that is due at ``now_ms``. ``lane_less``: queues known never to have had a
        lane job (the worker's last lane claim said so): their reaper leaves the lanes out."""
        if now_ms < self.next_due_ms(now_ms, idle):
            return []
        self._earliest = None  # the clocks below move
        runs = []
        for queue in self.queues:
            run = TimerRun(queue.name)
            promote, sweep = self._promote[queue.name], self._sweep[queue.name]
            if promote.due_ms(now_ms, self.config.promote_interval_ms, queue.name not in idle) <= now_ms:
                run.promoted, due_in = self.promote_and_next_due(queue)
                promote.ran(now_ms, self.config.promote_interval_ms, run.promoted >= self.config.limit,
                            promote_at_ms(now_ms, due_in))
            interval = self._sweep_interval_ms(queue.name, idle)
            if sweep.due_ms(now_ms, interval) <= now_ms:
                run.sweep, expires_in = self.sweep_and_next_expiry(queue)
                # swept again when the earliest lease runs out, busy or idle: a crashed worker's leases
                # are recovered as they expire, and a queue that goes idle keeps the time its busy
                # sweep read (else its next sweep waited for the idle backstop, 30 s)
                sweep.ran(now_ms, interval, len(run.sweep) >= self.config.limit, promote_at_ms(now_ms, expires_in))
            reap = self._reap[queue.name]
            if reap.due_ms(now_ms, interval) <= now_ms:
                without = LANES_RECOVERY if queue.name in lane_less else frozenset()
                run.reaped, due_in = self.reap_and_next_due(queue, without)
                # exact whether idle or busy: a held group's time is not a lease a renewal moves on
                reap.ran(now_ms, interval, len(run.reaped) >= self.config.limit, promote_at_ms(now_ms, due_in))
            runs.append(run)
        return runs

    def _sweep_interval_ms(self, queue: str, idle: AbstractSet[str]) -> int:
        return self.config.idle_sweep_interval_ms if queue in idle else self.config.sweep_interval_ms

    def run_once(self) -> list[TimerRun]:
        """Both verbs and the reaper on every queue, once, regardless of the intervals."""
        return [TimerRun(q.name, self.promote(q), self.sweep(q), self.reap(q)) for q in self.queues]

    def recheck(self, queue: str, now_ms: float) -> None:
        """The schedule's head of ``queue`` may have moved earlier: promote (and read it) now."""
        self.expect_due(queue, now_ms)

    def busy_again(self, queue: str, now_ms: float) -> None:
        """``queue`` leaves idle (a waiter's wake, or a job its block took): its sweep keeps the busy
        interval from its last run even if the queue goes idle again first. Another worker may take
        leases in the burst and crash; an idle sweep's last read saw none of them, and the idle
        backstop (``idle_sweep_interval_ms``, 30 s) would leave them that long."""
        clock = self._sweep[queue]
        due = next_timer_ms(clock.last_ms, now_ms, self.config.sweep_interval_ms, clock.saturated)
        clock.hint_ms = due if clock.hint_ms is None else min(clock.hint_ms, due)
        self._earliest = None

    def promote(self, queue: Queue) -> int:
        return self._promoted(queue, queue.promote(self.config.limit))

    def promote_and_next_due(self, queue: Queue) -> tuple[int, int | None]:
        moved, due_in = queue.promote_and_next_due(self.config.limit)
        return self._promoted(queue, moved), due_in

    @staticmethod
    def _promoted(queue: Queue, moved: int) -> int:
        if moved:
            log.info("promote %s: %d due job(s) moved to pending", queue.name, moved)
        return moved

    def sweep(self, queue: Queue) -> Sweep:
        return self._swept(queue, queue.stalled_check(self.config.max_stalled, self.config.limit))

    def sweep_and_next_expiry(self, queue: Queue) -> tuple[Sweep, int | None]:
        found, expires_in = queue.stalled_check_and_next_expiry(self.config.max_stalled, self.config.limit)
        return self._swept(queue, found), expires_in

    def reap(self, queue: Queue) -> Sweep:
        return self.reap_and_next_due(queue)[0]

    def reap_and_next_due(self, queue: Queue, without: AbstractSet[str] = frozenset()) -> tuple[Sweep, int | None]:
        found, due_in = queue.reap_and_next_due(self.config.max_stalled, self.config.limit, without)
        return self._swept(queue, found, "reaper"), due_in

    def _swept(self, queue: Queue, found: Sweep, who: str = "sweep") -> Sweep:
        if found.recovered:
            log.warning("%s %s: %d expired lease(s) recovered (counted as stalls): %s",
                        who, queue.name, len(found.recovered), _some(found.recovered))
        if found.exempt:
            log.info("%s %s: %d lease(s) expired across a server restart, recovered without a stall: %s",
                     who, queue.name, len(found.exempt), _some(found.exempt))
        if found.dead:
            log.error("%s %s: %d job(s) stalled %d times and went dead: %s",
                      who, queue.name, len(found.dead), self.config.max_stalled, _some(found.dead))
        return found


def _some(ids: Sequence[str], shown: int = 5) -> str:
    head = ", ".join(map(quoted, ids[:shown]))  # quoted: an id cannot end the log line (echomq._protocol.shown)
    return head + (f" and {len(ids) - shown} more" if len(ids) > shown else "")
