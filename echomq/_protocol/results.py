"""Following one job by id: its status, its result, and waiting for it.

The decisions here are pure: they read what one round trip saw of a job (its row's
``state``, ``last_error`` and ``traceback``; its completed record) and say what it means.
:class:`~echomq.Queue` does the I/O -- one pipelined read, and for :meth:`Queue.result`
a wait on the job's outcome channel between reads -- so an asyncio twin only swaps the
sending.

Where a job's outcome lives (docs/spec.md §12):

* a job completed with :data:`PUBLISH <echomq._protocol.verbs.BUS>` leaves its completed record
  (``result``, ``attempts``, ``created``, ``started``, ``finished``) for its task's retention
  (``result_ttl``), then expires: the field ``<id>`` of the queue's hash ``emq:{q}:done``, packed
  (:func:`unpacked`), on a node with hash field expiry, else the key ``emq:{q}:done:<id>``
  (:data:`RECORD`: the queue's switch, or an older node). A reader reads both and takes the
  newer (:func:`newer_record`);
* a dead job keeps its row (``state dead``, ``last_error``, ``traceback``) until it is
  purged, removed or reprocessed;
* PUBLISH and COMPLETE SPUBLISH ``completed``, and FAIL, FAILURES.INCR, the sweep and CANCEL
  ``dead`` when they kill, on the job's outcome channel ``emq:{q}:outcome:<id>``: a waiter
  subscribes first, reads, and reads again only when told.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Union

from ..errors import ConfigurationError, PayloadError, ResultNotKept
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


# -- where a completed record is kept (docs/spec.md §12, "The completed records") ------------------

#: The queue's switch, ``meta results``: exactly :data:`RECORD` keeps the key of its own per job
#: (``done:<id>``, the layout 0.2.0 reads); absent, or anything else, the field of ``done``.
LAYOUT_FIELD = "results"
FIELDS, RECORD = "fields", "record"
LAYOUTS = (FIELDS, RECORD)
#: The packed record's numbers (attempts, finished, created, started): ASCII decimal, created and
#: started empty when the row had none.
_DECIMAL = re.compile(rb"[0-9]+")
_PACKED_NUMBERS = ("attempts", "finished", "created", "started")


def unpacked(value: bytes) -> dict[str, bytes] | None:
    """A packed record, ``<attempts>,<finished>,<created>,<started>,<result>``, as the fields of a
    ``done:<id>`` hash (created and started left out when empty; the result is every byte after
    the fourth comma, commas and NULs included). None for a value that is not one -- fewer than
    four commas, a number that is not decimal, attempts or finished empty: no record, never an
    error (a raw write can leave anything there)."""
    parts = value.split(b",", 4)
    if len(parts) < 5:
        return None
    numbers = dict(zip(_PACKED_NUMBERS, parts))
    if any(not _DECIMAL.fullmatch(numbers[name]) for name in ("attempts", "finished")):
        return None
    if any(numbers[name] and not _DECIMAL.fullmatch(numbers[name]) for name in ("created", "started")):
        return None
    return {"result": parts[4], **{name: number for name, number in numbers.items() if number}}


@dataclass(frozen=True)
class Record:
    """A job's completed record as a reader takes it: its fields (those of a ``done:<id>`` hash) and
    where it is kept: the field of ``done`` (``in_field``) or the key ``done:<id>``."""

    fields: dict[str, bytes]
    in_field: bool


def newer_record(packed: bytes | None, hashed: dict[Any, Any] | None) -> Record | None:
    """The record a reader takes from what it read of both layouts (pure): ``packed``, the field
    ``<id>`` of ``done`` (None: none); ``hashed``, ``HGETALL done:<id>`` (empty or None: none). Both
    exist when a queue changed layout, or kept records from before an upgrade: the larger
    ``finished`` wins, the field on a tie (a ``done:<id>`` whose ``finished`` is not a number is
    the older). A field that does not unpack is no record."""
    field = None if packed is None else unpacked(packed)
    record = {(k.decode() if isinstance(k, bytes) else k): v for k, v in (hashed or {}).items()} or None
    if field is None:
        return None if record is None else Record(record, in_field=False)
    if record is not None and _finished(record) > int(field["finished"]):
        return Record(record, in_field=False)
    return Record(field, in_field=True)


def _finished(record: dict[str, bytes]) -> int:
    finished = record.get("finished", b"")
    return int(finished) if isinstance(finished, bytes) and _DECIMAL.fullmatch(finished) else -1


@dataclass(frozen=True)
class ResultLayout:
    """Where a queue's next completed records go, and why: its switch (``meta results``) and
    whether the node writes a field with its own expiry (wire 6 always; wire 4 on Valkey >= 9 or
    Redis >= 8)."""

    layout: str  #: :data:`FIELDS` or :data:`RECORD`; :data:`RECORD` when the node's ability is unknown
    switch: str  #: as the queue sets it: :data:`FIELDS` (its default: nothing set) or :data:`RECORD`
    field_expiry: bool | None  #: the node writes fields with their own expiry; None: unknown (INFO refused)
    why: str  #: the reason, for people

    def as_json(self) -> dict[str, Any]:
        return {"layout": self.layout, "switch": self.switch, "field_expiry": self.field_expiry, "why": self.why}


def switch_of(value: bytes | str | None) -> str:
    """The switch a ``meta results`` value sets (pure): :data:`RECORD` for exactly those bytes."""
    return RECORD if value in (RECORD, RECORD.encode()) else FIELDS


def result_layout(switch: str, field_expiry: bool | None) -> ResultLayout:
    """Where the next records of a queue go (pure), the rule every verb that keeps one applies."""
    if switch == RECORD:
        return ResultLayout(RECORD, switch, field_expiry,
                            "the queue's switch says record (meta results): each record a key done:<id>, "
                            "as 0.2.0 reads; emq results-layout -q QUEUE fields turns it back")
    if field_expiry is None:
        return ResultLayout(RECORD, switch, None, "the node's version is unread (INFO refused): fields where it has "
                                                  "hash field expiry (Valkey 9, Redis 8), else a key done:<id>")
    if not field_expiry:
        return ResultLayout(RECORD, switch, False, "the node has no HSETEX (Valkey before 9, Redis before 8): each "
                                                   "record a key done:<id>")
    return ResultLayout(FIELDS, switch, True, "each record a field of the queue's hash done, with its own expiry")


def check_layout(layout: Any) -> str:
    """A layout a queue may be switched to: ``"fields"`` or ``"record"``."""
    if layout not in LAYOUTS:
        raise ConfigurationError(f"bad result layout {layout!r}: \"fields\" (each completed record a field of the "
                                 f"queue's hash done: the default) or \"record\" (a key done:<id> each, as 0.2.0 "
                                 "reads: keep it while a 0.2.0 process reads the queue); docs/results.md")
    return layout


@dataclass(frozen=True)
class Seen:
    """What one read saw of a job: its row's fields (None: no row) and its completed record (the
    fields of a ``done:<id>`` hash, whichever layout kept it)."""

    row: dict[str, bytes] | None
    record: dict[str, bytes] | None

    @classmethod
    def of(cls, row_values: list[Any], packed: bytes | None, record: dict[Any, Any]) -> "Seen":
        """From ``HMGET row <ROW_FIELDS>``, ``HGET done <id>`` and ``HGETALL done:<id>``."""
        row = None if row_values[0] is None else {
            name: value for name, value in zip(ROW_FIELDS, row_values) if value is not None}
        kept = newer_record(packed, record)
        return cls(row, None if kept is None else kept.fields)


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
