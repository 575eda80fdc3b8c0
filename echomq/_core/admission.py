"""Admission (no I/O): a job into its queue -- ENQUEUE, SCHEDULE, their unique twin
ENQUEUE.UNIQUE (docs/spec.md §14), and a lane job's (``lane_enqueue``, with ``group``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .. import errors
from .base import Op, QueueBase, raise_first
from .batching import batched_settles, settle_answers
from .._protocol.ids import new_id
from .._protocol.verbs import Admission, Call, check_arg


@dataclass(frozen=True)
class Enqueued:
    id: str
    created: bool  #: False when nothing was made: the id had a row, or is within its unique window
    #: why: created, exists, replaced (debounce) or unique (within the window); a plain
    #: enqueue's is CREATED or EXISTS, read from ``created``
    reason: Admission = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.reason is None:
            object.__setattr__(self, "reason", Admission.CREATED if self.created else Admission.EXISTS)


def unique_ms(unique_for: float | None) -> int:
    """``unique_for`` (seconds, >= 0; None: no window) as ENQUEUE.UNIQUE's unique_ms."""
    if unique_for is None:
        return 0
    if isinstance(unique_for, bool) or not isinstance(unique_for, (int, float)) or not unique_for >= 0:
        raise errors.ConfigurationError(f"bad unique_for {unique_for!r}: seconds >= 0")
    return round(unique_for * 1000)


#: enqueue_many's shape: jobs per ENQUEUES, and ENQUEUES per round trip (pipeline depth), measured
#: side by side on both wires by bench/bulk_enqueue.py (docs/benchmarks.md, *Bulk enqueue: batch
#: size and pipeline depth*: every shape of 250-1000 by 1-all within a few % of this one)
ENQUEUES_SIZE = 500
ENQUEUES_DEPTH = 8


def op_enqueued(calls: Sequence[Call], carried: Callable[[str], bool], batch: int = ENQUEUES_SIZE,
                depth: int = ENQUEUES_DEPTH) -> Op[list[Enqueued]]:
    """Send enqueue calls (of one queue or of several), a queue's ENQUEUEs as its ENQUEUES of
    ``batch`` where the connection carries it (:func:`batched_settles`), ``depth`` such commands a
    round trip: each one's :class:`Enqueued`. Every round trip is sent before the first refusal is
    raised, as when they all went in one."""
    answers: list[Any] = []
    step = batch * depth
    for start in range(0, len(calls), step):
        part = calls[start:start + step]
        sent, routes = batched_settles(part, carried, batch)
        answers += settle_answers(part, routes, (yield sent))
    raise_first(answers)
    return [Enqueued(call.argv[0], answer) for call, answer in zip(calls, answers)]


class AdmissionOps(QueueBase):
    """Enqueue and schedule, one job or many."""

    def enqueue_call(self, payload: Any, *, id: str | None = None, priority: int = 0, group: str | None = None,
                     headers: dict[str, Any] | None = None) -> Call:
        return self.admission_call(self.encode(payload, headers), id=id, priority=priority, group=group)

    def admission_call(self, data: bytes, *, id: str | None, priority: int = 0, delay_ms: int | None = None,
                       unique_for: float | None = None, replace: bool = False, group: str | None = None) -> Call:
        """The one call that admits a job whose stored bytes are ``data``: ENQUEUE, SCHEDULE (after
        ``delay_ms``), LANE_ENQUEUE (``group``), or with ``unique_for`` or ``replace`` their unique
        twins (docs/spec.md §14), which need the job's id: ENQUEUE.UNIQUE keeps the id out for
        ``unique_for`` seconds after the job completes and with ``replace`` gives a waiting job the new
        payload (and, given ``delay_ms``, its due time); LANE_ENQUEUE.UNIQUE is its lane job twin. A
        lane job waits in its lane: it takes no delay."""
        if group is not None and delay_ms is not None:
            raise errors.ConfigurationError(f"a lane job (group {group!r}) cannot be delayed at enqueue: it waits in "
                                            "its group's lane (leave out the delay, or the group)")
        if unique_for is None and not replace:
            if group is None and delay_ms is None and id is None:  # an id of ours: only the priority is the caller's
                return self._build_checked_already("enqueue", new_id(), data, check_arg("priority", priority))
            job_id = new_id() if id is None else id
            if group is not None:
                return self.build("lane_enqueue", job_id, data, group, priority)
            if delay_ms is None:
                return self.build("enqueue", job_id, data, priority)
            return self.build("schedule", job_id, data, delay_ms, priority)
        if id is None:
            raise errors.ConfigurationError("unique_for= and replace= need the job's id=")
        window, replacing = unique_ms(unique_for), int(bool(replace))
        if group is not None:
            return self.build("lane_enqueue_unique", id, data, group, priority, window, replacing)
        return self.build("enqueue_unique", id, data, priority, window, replacing, *([] if delay_ms is None else
                                                                                   [delay_ms]))

    def _admit(self, call: Call) -> Op[Enqueued]:
        if call.verb.name not in ("enqueue_unique", "lane_enqueue_unique"):
            return Enqueued(call.argv[0], (yield from self._one(call)))
        reason = yield from self._one(call)
        return Enqueued(call.argv[0], reason is Admission.CREATED, reason)

    def op_enqueue(self, payload: Any, id: str | None, priority: int, unique_for: float | None = None,
                   replace: bool = False, group: str | None = None,
                   headers: dict[str, Any] | None = None) -> Op[Enqueued]:
        return (yield from self.op_admit(self.encode(payload, headers), id=id, priority=priority, unique_for=unique_for,
                                         replace=replace, group=group))

    def op_admit(self, data: bytes, *, id: str | None = None, priority: int = 0, delay_ms: int | None = None,
                 at_ms: int | None = None, unique_for: float | None = None, replace: bool = False,
                 group: str | None = None) -> Op[Enqueued]:
        """Admit a job whose stored bytes are ``data`` (:meth:`admission_call`), now, after ``delay_ms``,
        or at ``at_ms`` (Unix ms, compared with the server's clock: TIME is read first, one round trip
        more, so no client clock sets its due time; a time past is now)."""
        if at_ms is not None:
            self.admission_call(data, id=id, priority=priority, delay_ms=0, unique_for=unique_for, replace=replace,
                                group=group)  # refused before the clock is read
            delay_ms = max(0, at_ms - (yield from self.op_server_ms())) or None
        call = self.admission_call(data, id=id, priority=priority, delay_ms=delay_ms, unique_for=unique_for,
                                   replace=replace, group=group)
        return (yield from self._admit(call))

    def op_enqueue_many(self, payloads: Iterable[Any], priority: int, group: str | None = None) -> Op[list[Enqueued]]:
        return (yield from op_enqueued([self.enqueue_call(payload, priority=priority, group=group)
                                        for payload in payloads], self.codec.supports))

    def op_schedule(self, payload: Any, delay_ms: int, id: str | None, priority: int,
                    unique_for: float | None = None, replace: bool = False,
                    headers: dict[str, Any] | None = None) -> Op[Enqueued]:
        check_arg("delay_ms", delay_ms)  # a schedule needs its delay: op_admit reads None as now
        return (yield from self.op_admit(self.encode(payload, headers), id=id, priority=priority, delay_ms=delay_ms,
                                         unique_for=unique_for, replace=replace))
