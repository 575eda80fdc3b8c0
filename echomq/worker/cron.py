"""Periodic jobs: schedules, their ticks, and the small service every worker runs to enqueue them.

    app.cron("*/5 * * * *", queue="reports", payload={"kind": "daily"})
    @app.task(queue="cleanup", cron="@every 30s")
    def cleanup(payload, ctx): ...

An expression is a standard 5-field cron line, a 6-field one whose first field is the
seconds, or ``@every <duration>`` (``500ms``, ``10s``, ``5m``, ``1h30m``; ticks at whole
multiples of the duration since the Unix epoch, so every worker agrees on them). Cron lines
are read by `croniter <https://github.com/kiorky/croniter>`_, in UTC.

**Exactly once.** A tick is the pair (schedule, the tick's time on the *server* clock); its
job id is ``cron:<schedule id>:<tick ms>``. Every worker that runs the schedule enqueues the
latest due tick through EMQ.ENQUEUE.UNIQUE with a unique window of at least the time to the
next tick, so however many workers (and restarts, and failovers) propose it, one job is
made: while the tick's job exists its row refuses the id, and once it completed its unique
window does until a later tick is the latest. (A tick whose dead job an operator removes
within its period may be admitted again: removal forgets the id.)

**Missed ticks** (nobody running, the server down): no catch-up. A worker enqueues only the
latest tick at or before the server's now, so after downtime the most recent missed tick
runs once and the older ones are skipped.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Sequence

from croniter import croniter

from .._client.partitioned import drive, on
from ..errors import ConfigurationError
from .._protocol.keys import check_job_id, check_queue_name
from .._protocol.shown import quoted

if TYPE_CHECKING:
    from .._client.queue import Queue

log = logging.getLogger("echomq.cron")

EVERY = re.compile(r"@every\s+((?:\d+(?:ms|s|m|h|d))+)")
UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: the least unique window a tick gets (a tick's job may take a while to be completed)
MIN_WINDOW_MS = 60_000


def every_ms(expr: str) -> int | None:
    """``@every 1h30m`` as ms; None when ``expr`` is not an ``@every``."""
    match = EVERY.fullmatch(expr.strip())
    if match is None:
        return None
    total = sum(int(n) * UNITS_MS[unit] for n, unit in re.findall(r"(\d+)(ms|s|m|h|d)", match.group(1)))
    return total or None


@dataclass(frozen=True)
class Cron:
    """One periodic schedule: enqueue ``payload`` on ``queue`` at every tick of ``expr``."""

    expr: str
    queue: str
    payload: Any = None
    id: str = ""  #: the schedule's name in tick ids; default ``<queue>`` (one schedule per queue)
    task: str | None = None  #: the name of the task whose jobs the ticks are (``app.cron(task=...)``)
    every: int | None = field(init=False, repr=False)  #: ``@every``'s period (ms), None for a cron line

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        object.__setattr__(self, "id", self.id or self.queue)
        check_job_id(self.tick_id(0))
        every = every_ms(self.expr) if self.expr.strip().startswith("@every") else None
        if self.expr.strip().startswith("@every") and every is None:
            raise ConfigurationError(f"bad schedule {self.expr!r}: '@every <duration>', e.g. '@every 30s', '@every 1h30m'")
        if every is None and not (len(self.expr.split()) in (5, 6) and croniter.is_valid(self.expr, **self._seconds())):
            raise ConfigurationError(f"bad cron expression {self.expr!r}: 5 fields (minute hour day month weekday), "
                                     "6 with the seconds first, or '@every <duration>'")
        object.__setattr__(self, "every", every)

    def _seconds(self) -> dict[str, bool]:
        return {"second_at_beginning": True} if len(self.expr.split()) == 6 else {}

    def _iter(self, at_ms: int) -> croniter:
        start = datetime.fromtimestamp(at_ms / 1000, tz=timezone.utc)
        return croniter(self.expr, start, **self._seconds())

    def latest(self, now_ms: int) -> int:
        """The latest tick at or before ``now_ms`` (server ms)."""
        if self.every is not None:
            return now_ms - now_ms % self.every
        nxt = self.next_after(now_ms - 1)  # croniter's prev() skips a tick exactly at now
        return nxt if nxt <= now_ms else int(self._iter(now_ms).get_prev(float) * 1000)

    def next_after(self, at_ms: int) -> int:
        """The first tick after ``at_ms``."""
        if self.every is not None:
            return at_ms - at_ms % self.every + self.every
        return int(self._iter(at_ms).get_next(float) * 1000)

    def window_ms(self, tick_ms: int) -> int:
        """The unique window of tick ``tick_ms``: until the next tick at least (it is counted from
        the job's completion, which comes after the tick), and never under MIN_WINDOW_MS."""
        return max(self.next_after(tick_ms) - tick_ms, MIN_WINDOW_MS)

    def tick_id(self, tick_ms: int) -> str:
        return f"cron:{self.id}:{tick_ms}"


@dataclass
class CronTimer:
    """Enqueues the schedules' due ticks: the service a worker runs beside its other timers.

    ``run_due(local_ms)`` reads the server clock (TIME) only when a tick may be due, proposes
    each schedule's latest tick once, and returns the ids it made; ``next_due_ms()`` is the
    local time of the next tick."""

    schedules: Sequence[Cron]
    queues: dict[str, "Queue"]
    server_ms: Callable[[], int]
    #: what a schedule's ticks store when not its payload alone: (the payload, its job's own headers),
    #: by schedule id (:meth:`echomq.App.tick`: a task's ticks on a queue of several tasks name it)
    ticks: dict[str, tuple[Any, dict[str, Any] | None]] = field(default_factory=dict)
    _proposed: dict[str, int] = field(default_factory=dict)
    _next_local: float = 0.0

    def next_due_ms(self) -> float:
        return self._next_local if self.schedules else float("inf")

    def run_due(self, local_ms: float) -> list[str]:
        if not self.schedules or local_ms < self._next_local:
            return []
        now = self.server_ms()
        made = []
        for cron in self.schedules:
            tick = cron.latest(now)
            if self._proposed.get(cron.id) == tick:
                continue
            queue = self.queues[cron.queue]
            payload, headers = self.ticks.get(cron.id, (cron.payload, None))
            answer = drive(queue.connection, on(queue, queue.op_enqueue(
                payload, cron.tick_id(tick), 0, cron.window_ms(tick) / 1000, headers=headers)))
            self._proposed[cron.id] = tick
            if answer.created:
                log.info("cron %s: tick %d enqueued on %s as %s", cron.id, tick, cron.queue, quoted(answer.id))
                made.append(answer.id)
        soonest = min(cron.next_after(now) for cron in self.schedules)
        self._next_local = local_ms + (soonest - now)
        return made


def describe(schedules: Sequence[Cron], now_ms: int) -> list[dict[str, Any]]:
    """``emq cron list``'s rows: each schedule and its next run (server ms and UTC)."""
    rows = []
    for cron in schedules:
        nxt = cron.next_after(now_ms)
        rows.append({"id": cron.id, "expr": cron.expr, "queue": cron.queue, "next_ms": nxt,
                     "next": datetime.fromtimestamp(nxt / 1000, tz=timezone.utc).isoformat(timespec="milliseconds"),
                     "in_s": round((nxt - now_ms) / 1000, 3)})
    return rows
