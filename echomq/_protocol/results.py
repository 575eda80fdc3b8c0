"""Following one job by id: its status, its result, and waiting for it.

The decisions here are pure: they read what one round trip saw of a job (its row's
``state``, ``last_error`` and ``traceback``; its completed record) and say what it means.
:class:`~echomq.Queue` does the I/O -- one pipelined read, and for :meth:`Queue.result`
a wait on the job's outcome channel between reads -- so an asyncio twin only swaps the
sending.

Where a job's outcome lives (docs/spec.md §12):

* a job completed with :data:`PUBLISH <echomq._protocol.verbs.BUS>` leaves the completed record
  ``emq:{q}:done:<id>`` (``result``, ``attempts``, ``created``, ``started``,
  ``finished``) for its task's retention (``result_ttl``), then expires;
* a dead job keeps its row (``state dead``, ``last_error``, ``traceback``) until it is
  purged, removed or reprocessed;
* PUBLISH and COMPLETE SPUBLISH ``completed``, and FAIL, FAILURES.INCR, the sweep and CANCEL
  ``dead`` when they kill, on the job's outcome channel ``emq:{q}:outcome:<id>``: a waiter
  subscribes first, reads, and reads again only when told.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any, Callable, Union

from ..errors import PayloadError, ResultNotKept
from .serializers import Serializer, encode
from .shown import type_name

#: How long a completed job's record (and its result) is kept by default, seconds: long enough for
#: a caller to collect it, short enough that a busy queue's records stay a bounded memory.
DEFAULT_RESULT_TTL_S = 600.0
#: The largest result a worker stores by default (as the payload's limit).
MAX_RESULT_BYTES = 1 << 20

#: How a completed record's ``result`` starts when the handler's return value could not be kept (one the
#: task's serializer refuses, or over :data:`MAX_RESULT_BYTES`): then JSON of what :class:`NotKept` holds.
#: The built-in serializers never write a NUL first (as the trace envelope, echomq._protocol.envelope).
NOT_KEPT = b"\x00emq-not-kept\x00"
#: The longest reason a marker keeps (the serializer's own message can be long).
NOT_KEPT_REASON_CHARS = 1000

#: The row fields and the record a status read asks for, in this order.
ROW_FIELDS = ("state", "last_error", "traceback")


class Status(str, enum.Enum):
    """Where a job is, by id."""

    PENDING = "pending"  #: ready to claim
    ACTIVE = "active"  #: claimed under a lease
    SCHEDULED = "scheduled"  #: due later
    DEAD = "dead"  #: out of budget (or cancelled), kept until purged
    WAITING = "waiting"  #: a flow parent waiting for its children (docs/lanes-and-flows.md)
    COMPLETED = "completed"  #: done, within its retention
    UNKNOWN = "unknown"  #: never seen, or past its retention (or completed with none)


@dataclass(frozen=True)
class Seen:
    """What one read saw of a job: its row's fields (None: no row) and its completed record."""

    row: dict[str, bytes] | None
    record: dict[str, bytes] | None

    @classmethod
    def of(cls, row_values: list[Any], record: dict[Any, Any]) -> "Seen":
        """From ``HMGET row <ROW_FIELDS>`` and ``HGETALL done:<id>``."""
        row = None if row_values[0] is None else {
            name: value for name, value in zip(ROW_FIELDS, row_values) if value is not None}
        done = {(k.decode() if isinstance(k, bytes) else k): v for k, v in record.items()} or None
        return cls(row, done)


def status_of(seen: Seen) -> Status:
    """The row wins (a job enqueued again under the id of a completed one is live); then the
    record; else unknown."""
    if seen.row is not None:
        state = seen.row["state"]
        try:
            return Status(state.decode() if isinstance(state, bytes) else state)
        except ValueError:
            return Status.UNKNOWN
    return Status.COMPLETED if seen.record is not None else Status.UNKNOWN


@dataclass(frozen=True)
class Completed:
    raw: bytes | None  #: the result as the task's serializer wrote it; None: none was kept


@dataclass(frozen=True)
class NotKept:
    """Why a job completed without its result: the returned value's ``type``, its ``size`` in bytes
    when it was over the limit (None: the serializer could not encode it) and the ``reason``."""

    type: str
    size: int | None
    reason: str

    def encode(self) -> bytes:
        return NOT_KEPT + json.dumps({"type": self.type, "size": self.size, "reason": self.reason},
                                     separators=(",", ":")).encode()


def not_kept_of(raw: bytes) -> NotKept | None:
    """The marker a result holds instead of a value (pure); None for a result that was kept."""
    if not raw.startswith(NOT_KEPT):
        return None
    try:
        said = json.loads(raw[len(NOT_KEPT):])
        return NotKept(str(said["type"]), said["size"] if isinstance(said["size"], int) else None,
                       str(said["reason"]))
    except (ValueError, KeyError, TypeError):
        return None  # not a marker of ours: a value that starts with the same bytes


@dataclass(frozen=True)
class Failed:
    last_error: str
    traceback: str | None


@dataclass(frozen=True)
class Waiting:
    status: Status


@dataclass(frozen=True)
class Unknown:
    pass


Verdict = Union[Completed, NotKept, Failed, Waiting, Unknown]


#: how long a waiter whose first read found no job listens for an outcome already sent (a plain
#: COMPLETE keeps neither row nor record: only the channel's word says it completed)
TOLD_GRACE_S = 0.05

# A result waiter counts itself in ``meta waiters`` so that COMPLETE and a killing FAIL tell it
# (docs/spec.md §12). The field expires (HEXPIRE, server clock) WAITER_TTL_S after its last refresh,
# and each live waiter refreshes it every WAITER_REFRESH_S: a waiter that dies without counting
# itself out (SIGKILL, a dropped link, a restart) stops costing settles within WAITER_TTL_S of the
# last live waiter's refresh. (A server without field expiry, Valkey < 9 or Redis < 7.4, keeps such
# a count: `emq doctor` says so.)
WAITER_TTL_S = 30
WAITER_REFRESH_S = 10.0
#: a waiter that cannot count itself (no write on meta) reads its job this often instead; it still
#: hears at once the settles that always tell
UNCOUNTED_READ_S = 1.0
#: the pauses of a waiter whose link failed, before it subscribes and reads again: doubling from
#: the first to the last, while its timeout lasts
RELINK_PAUSE_S = (0.05, 1.0)


def wait_slice_s(counted: int, left_s: float | None) -> float:
    """How long a waiter listens before it reads again (and, counted, refreshes its count):
    ``left_s`` is what its timeout leaves (None: no limit)."""
    slice_s = WAITER_REFRESH_S if counted else UNCOUNTED_READ_S
    return slice_s if left_s is None else min(left_s, slice_s)


def relink_pause_s(failures: int, deadline: float | None, now: float) -> float | None:
    """How long a waiter whose link failed ``failures`` times in a row pauses before it subscribes
    and reads again (a server restarting, a failover); None when its timeout would run out first:
    the link fault is its answer."""
    pause = min(RELINK_PAUSE_S[1], RELINK_PAUSE_S[0] * 2 ** min(failures - 1, 10))
    if deadline is not None and now + pause >= deadline:
        return None
    return pause


def decide_result(seen: Seen, told: bytes | str | None = None) -> Verdict:
    """What a result waiter does after one read: return, raise, or wait for the next word.
    ``told`` is the word the outcome channel last said (None: none yet): a job told
    ``completed`` that left neither row nor record completed keeping no result (COMPLETE, or
    a retention of 0), which is its outcome, None."""
    status = status_of(seen)
    if status is Status.UNKNOWN and seen.row is None and told is not None and _str(told) == "completed":
        return Completed(None)
    if status is Status.COMPLETED:
        raw = seen.record.get("result", b"")  # type: ignore[union-attr]
        return not_kept_of(raw) or Completed(raw)
    if status is Status.DEAD:
        row = seen.row or {}
        tb = row.get("traceback")
        return Failed(_str(row.get("last_error", b"")), None if tb is None else _str(tb))
    if status is Status.UNKNOWN:
        return Unknown()
    return Waiting(status)


def encode_result(serializer: Serializer, value: Any, max_bytes: int | None) -> bytes:
    """A handler's return value as the bytes PUBLISH stores; :class:`PayloadError` when the
    serializer refuses it or it is over ``max_bytes`` (the worker then fails the attempt)."""
    return encode(serializer, value, max_bytes, what="result", limit="a result's limit: docs/results.md")


def keepable_result(serializer: Serializer, value: Any, max_bytes: int) -> tuple[bytes, NotKept | None]:
    """What a worker keeps for a handler's return value: its bytes, or, when the serializer refuses it
    or it is over ``max_bytes``, the :class:`NotKept` marker in their place (and the marker itself).
    The job completes either way: its handler ran and did its work, and running it again could not
    make its return value keepable (docs/results.md)."""
    try:
        return encode_result(serializer, value, max_bytes), None
    except PayloadError as refused:
        not_kept = NotKept(type_name(type(value)), refused.size,
                           str(refused)[:NOT_KEPT_REASON_CHARS])
        return not_kept.encode(), not_kept


def result_value(loads: Callable[[bytes], Any], raw: bytes, job_id: str) -> Any:
    """A kept result decoded by ``loads``; :class:`ResultNotKept` for the marker of one that was not."""
    not_kept = not_kept_of(raw)
    if not_kept is not None:
        raise ResultNotKept(job_id, not_kept.type, not_kept.size, not_kept.reason)
    return loads(raw)


def _str(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
