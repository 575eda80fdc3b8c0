"""The bus (no I/O): following a job -- its status, its result and the waiters that count
themselves for it, its progress, the queue's events (docs/spec.md §12)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import errors
from .base import Job, JobRef, Op, QueueBase, id_and_token, lane_of, pairs, raise_first
from .workers import op_workers
from .._protocol.events import DEFAULT_MAXLEN, Event, decode_event, decode_progress, encode_progress
from .._protocol.keys import check_job_id
from .._protocol.results import (LAYOUT_FIELD, RECORD, ROW_FIELDS, WAITER_TTL_S, Completed, Failed, NotKept,
                                 ResultLayout, Seen, Status, Unknown, Waiting, check_layout, decide_result,
                                 result_layout, status_of, switch_of)
from .._protocol.servers import writes_fields
from .._protocol.verbs import EVENTS_MAX, Call, Plain, check_int, text


@dataclass(frozen=True)
class Done:
    """A result waiter's read found the job completed: its result, decoded."""

    value: Any


def check_wait(timeout: float | None) -> float | None:
    """A result wait's ``timeout``: seconds >= 0, or None for no limit."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0):
        raise errors.ConfigurationError(f"bad timeout {timeout!r}: seconds >= 0, or None")
    return timeout


def time_left(deadline: float | None, now: float) -> float | None:
    """How long a result waiter may wait for the next word: None for no limit; 0 or less when its
    time has run out (its last read is done: it raises :meth:`QueueCore.op_timed_out`'s error)."""
    return None if deadline is None else deadline - now


def timed_out(job_id: str, waiting: Waiting, timeout: float, queue: str, served: bool | None) -> TimeoutError:
    """A result wait's TimeoutError (pure): where the job still is, and, when no live worker's
    heartbeat names its queue (``served`` False; None: unknown, the workers list was not readable),
    that nobody serves it: a typo'd queue name or a worker that is not running waits in vain."""
    said = f"job {job_id!r} is still {waiting.status.value} after {timeout:g} s"
    if served is False:
        said += (f"; no live worker serves queue {queue!r} (no worker's heartbeat names it: emq workers): start "
                 f"one (emq worker MODULE:APP), or check the queue's name")
    return TimeoutError(said)


class BusOps(QueueBase):
    """A job followed: read, waited for, reported on."""

    def append_call(self, job: JobRef, value: Any, *, token: str | int | None = None) -> Call:
        """APPEND: a held job's progress (any JSON value, at most 64 KiB encoded). A claimed lane or
        flow job's goes through ``lane_append`` or ``flow_append``, fenced where its lease is held."""
        verb = "lane_append" if lane_of(job) else "flow_append" if isinstance(job, Job) and job.flow else "append"
        return self.build(verb, *id_and_token(job, token), encode_progress(value))

    def op_seen(self, job_id: str) -> Op[Seen]:
        """One round trip: the row's state, last_error and traceback, and the completed record in
        either layout (the field of ``done``, the key ``done:<id>``: the newer is taken)."""
        row, packed, record = yield [Plain(("HMGET", self.keys.job(job_id), *ROW_FIELDS)),
                                     Plain(("HGET", self.keys.done_hash, job_id)),
                                     Plain(("HGETALL", self.keys.done(job_id)))]
        raise_first([row, packed, record])
        return Seen.of(row, packed, pairs(record))

    def op_status(self, job_id: str) -> Op[Status]:
        return status_of((yield from self.op_seen(check_job_id(job_id))))

    def op_result_read(self, job_id: str, told: bytes | str | None = None) -> Op[Done | Waiting]:
        """One read of a result waiter, after the outcome channel ``told`` it a word (None: not
        yet): :class:`Done` when completed, :class:`Waiting` while the job is live; raises
        :class:`JobFailed` when it is dead, :class:`JobNotFound` when there is none, and
        :class:`ResultNotKept` when it completed without its result."""
        verdict = decide_result((yield from self.op_seen(job_id)), told)
        if isinstance(verdict, Completed):
            return Done(None if verdict.raw is None else self.serializer.loads(verdict.raw))
        if isinstance(verdict, NotKept):
            raise errors.ResultNotKept(job_id, verdict.type, verdict.size, verdict.reason)
        if isinstance(verdict, Failed):
            raise errors.JobFailed(job_id, verdict.last_error, verdict.traceback)
        if isinstance(verdict, Unknown):
            raise errors.JobNotFound(f"no job {job_id!r} in queue {self.name!r} (never enqueued, or its result's "
                                     "retention has passed)")
        return verdict

    def op_progress_of(self, job_id: str) -> Op[Any]:
        """The last progress reported for a job (the row's ``progress``, decoded); None when none was
        reported or there is no row (a completed job's row is gone, its progress with it)."""
        raw = yield from self._plain("HGET", self.keys.job(check_job_id(job_id)), "progress")
        return None if raw is None else decode_progress(raw)

    def op_timed_out(self, job_id: str, waiting: Waiting, timeout: float) -> Op[TimeoutError]:
        """The error a result wait that ran out of time raises: the workers list read (two round
        trips, only then) says whether any live worker serves this queue."""
        try:
            workers = yield from op_workers()
        except errors.CommandRefused:  # an ACL without read on the workers list: say what is known
            return timed_out(job_id, waiting, timeout, self.name, None)
        return timed_out(job_id, waiting, timeout, self.name, any(self.name in w.queues for w in workers))

    def op_count_waiter(self) -> Op[int]:
        """Count a result waiter in ``meta waiters``: while it is not 0, COMPLETE and a killing FAIL
        tell the outcome channel too (docs/spec.md §12). The field expires (HEXPIRE) WAITER_TTL_S on,
        set before the count (HSETNX 0 first: a 0 tells nothing), so no count is left without an
        expiry; a server without field expiry (Valkey < 9, Redis < 7.4) keeps the count as it is.
        Returns the count added: 1, or 0 when the server refuses the write (an ACL): such a waiter
        reads again every UNCOUNTED_READ_S and hears at once only the settles that always tell."""
        meta = self.keys.meta
        replies = yield [Plain(("HSETNX", meta, "waiters", 0)), Plain(("HEXPIRE", meta, WAITER_TTL_S, "FIELDS", 1,
                                                                      "waiters"))]
        if isinstance(replies[0], Exception):
            return 0
        try:
            yield from self._plain("HINCRBY", meta, "waiters", 1)
        except errors.CommandRefused:
            return 0
        return 1

    def op_keep_waiter(self, counted: int) -> Op[int]:
        """A live waiter's count kept: its field's expiry pushed back WAITER_TTL_S. Counted again when
        the field had expired meanwhile (the waiter stalled; a restart that lost it). Returns the
        waiter's count now."""
        if not counted:
            return 0
        try:
            (kept,) = yield from self._plain("HEXPIRE", self.keys.meta, WAITER_TTL_S, "FIELDS", 1, "waiters")
        except errors.CommandRefused:  # no field expiry here: the count stays as it is
            return counted
        if kept == -2:  # the field is gone, and every count it held with it
            return (yield from self.op_count_waiter())
        return counted

    def op_uncount_waiter(self, counted: int) -> Op[None]:
        """Count a leaving waiter out (its ``counted``), the field's expiry set before the decrement:
        had the field expired, the -1 this leaves tells for at most WAITER_TTL_S (any value but 0
        tells). Advisory: a refusal changes nothing for the waiter."""
        if counted:
            meta = self.keys.meta
            yield [Plain(("HSETNX", meta, "waiters", 0)), Plain(("HEXPIRE", meta, WAITER_TTL_S, "FIELDS", 1, "waiters")),
                   Plain(("HINCRBY", meta, "waiters", -counted))]

    def op_set_result_layout(self, layout: str) -> Op[None]:
        """Where the queue's next completed records go (docs/spec.md §12): ``"record"`` a key
        ``done:<id>`` each, the layout 0.2.0 reads (``meta results record``); ``"fields"``, the
        default, a field of its hash ``done`` where the node has field expiry (the switch removed)."""
        if check_layout(layout) == RECORD:
            yield from self._plain("HSET", self.keys.meta, LAYOUT_FIELD, RECORD)
        else:
            yield from self._plain("HDEL", self.keys.meta, LAYOUT_FIELD)

    def op_result_layout(self) -> Op[ResultLayout]:
        """Where the queue's next completed records go and why: its switch and the node's ability
        (INFO server, read in the same round trip; on wire 6 the module's rule needs none)."""
        switch, info = yield [Plain(("HGET", self.keys.meta, LAYOUT_FIELD)), Plain(("INFO", "server"))]
        raise_first([switch])
        return result_layout(switch_of(switch), writes_fields(self.wire, None if isinstance(info, Exception) else info))

    def op_enable_events(self, maxlen: int = DEFAULT_MAXLEN) -> Op[None]:
        yield from self._plain("HSET", self.keys.meta, "events", check_int("maxlen", maxlen, 1, EVENTS_MAX))

    def op_disable_events(self) -> Op[None]:
        yield from self._plain("HDEL", self.keys.meta, "events")

    def op_events_page(self, last: str, count: int, block_ms: int | None) -> Op[list[Event]]:
        """The events after stream id ``last`` (at most ``count``); with ``block_ms``, waiting that
        long for the first (XREAD BLOCK)."""
        if block_ms is None:
            entries = yield from self._plain("XRANGE", self.keys.events, "(" + last, "+", "COUNT", count)
        else:
            reply = yield from self._plain("XREAD", "COUNT", count, "BLOCK", block_ms, "STREAMS", self.keys.events,
                                           last)
            entries = _stream_entries(reply)
        return [decode_event(stream_id, pairs(fields)) for stream_id, fields in entries]

    def op_last_event_id(self) -> Op[str]:
        """The newest entry's id: where a ``"$"`` reader starts (read once, so nothing after it is missed)."""
        newest = yield from self._plain("XREVRANGE", self.keys.events, "+", "-", "COUNT", 1)
        return text(newest[0][0]) if newest else "0-0"


def _stream_entries(reply: Any) -> list[Any]:
    """XREAD's entries of its one stream (RESP2: [[key, entries]]; RESP3: {key: entries}); none on a timeout."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(reply.values())[0]
    return reply[0][1]
