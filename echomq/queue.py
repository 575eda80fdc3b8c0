"""The job-core API of one queue: one method per verb, the same on wire 4 and wire 6.

Deciding what to send (argument checks, key building, reply decoding) lives in the
pure helpers below; :class:`Connection` only sends. Token-fenced verbs that answer
``0`` raise :class:`LeaseLost`: a caller that thought it held the job must not carry
on as if it did. ``extend_many`` and ``complete_many`` report per job instead (0 or
False for a lost lease), because a batch is partly lost by nature.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from valkey.exceptions import ResponseError

from . import errors
from .connection import Call, Connection, as_refusal, build_call
from .events import DEFAULT_MAXLEN, Event, decode_event, encode_progress
from .ids import uuid7
from .keys import STATE_SETS, Keyspace, State, check_job_id
from .results import (MAX_RESULT_BYTES, ROW_FIELDS, Completed, Failed, Seen, Status, Unknown, decide_result,
                      encode_result, status_of)
from .serializers import JSON, Serializer, encode

I64_MAX = 2**63 - 1
#: The largest payload a Queue sends by default (1 MiB): a job queue carries references to
#: large data, not the data; ``Queue(..., max_payload_bytes=...)`` changes it, None lifts it.
MAX_PAYLOAD_BYTES = 1 << 20
PRIORITY_MAX = 2**31 - 1
LIMIT_MAX = 10_000
EXTENDS_MAX = 1_000


def check_int(name: str, value: Any, low: int, high: int = I64_MAX) -> int:
    """A SPEC §3 number: an int in [low, high] (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.ConfigurationError(f"bad {name} {value!r}: expected an integer from {low} to {high}")
    return value


def encode_payload(serializer: Serializer, payload: Any, max_bytes: int | None) -> bytes:
    """The payload as the bytes a job stores, refused client-side (:class:`PayloadError`) when the
    serializer cannot encode it or it is over ``max_bytes``."""
    return encode(serializer, payload, max_bytes, what="payload", limit="max_payload_bytes",
                  hint=": keep large data elsewhere and enqueue a reference to it, or raise the limit")


@dataclass(frozen=True)
class Enqueued:
    id: str
    created: bool  #: False when the id already had a row (idempotent enqueue: nothing written)


@dataclass(frozen=True)
class Job:
    """A claimed job. ``token`` is the fencing token (attempts as text) every settle presents."""

    queue: str
    id: str
    payload: Any
    raw_payload: bytes | None
    attempt: int

    @property
    def token(self) -> str:
        return str(self.attempt)

    @property
    def idempotency_key(self) -> str:
        """Stable per attempt: use it for downstream writes a retry must not repeat."""
        return f"{self.id}:{self.attempt}"


@dataclass(frozen=True)
class Counts:
    pending: int
    active: int
    scheduled: int
    dead: int
    paused: bool

    @property
    def total(self) -> int:
        return self.pending + self.active + self.scheduled + self.dead


@dataclass(frozen=True)
class Sweep:
    """What one STALLED.CHECK moved."""

    recovered: list[str]
    exempt: list[str]  #: restart-caused expiries (wire 6 only): recovered without counting a stall
    dead: list[str]

    def __len__(self) -> int:
        return len(self.recovered) + len(self.exempt) + len(self.dead)


JobRef = Job | str


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ref(job: JobRef, token: str | int | None) -> tuple[str, str]:
    """(id, token) from a Job, or from an id and an explicit token."""
    if isinstance(job, Job):
        return job.id, job.token if token is None else str(token)
    if token is None:
        raise errors.ConfigurationError(f"job {job!r}: pass the Job, or its id with token=")
    return check_job_id(job), str(token)


class Queue:
    """One queue on one connection: ``Queue(conn, "emails")``."""

    def __init__(self, connection: Connection, name: str, *, serializer: Serializer = JSON,
                 max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        self.connection = connection
        self.keys = Keyspace(name)
        self.name = name
        self.serializer = serializer
        self.max_payload_bytes = None if max_payload_bytes is None else check_int(
            "max_payload_bytes", max_payload_bytes, 1)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, wire={self.connection.wire})"

    # -- building calls (pure) ------------------------------------------------
    def call(self, verb: str, *argv: Any) -> Call:
        return build_call(verb, self.keys, argv)

    def encode(self, payload: Any) -> bytes:
        """The payload's bytes, checked client-side: encodable and within ``max_payload_bytes``."""
        return encode_payload(self.serializer, payload, self.max_payload_bytes)

    def _send(self, verb: str, *argv: Any) -> Any:
        return self.connection.send(self.call(verb, *argv))

    def _enqueue_call(self, payload: Any, job_id: str | None, priority: int) -> Call:
        job_id = check_job_id(job_id) if job_id is not None else uuid7()
        check_int("priority", priority, 0, PRIORITY_MAX)
        return self.call("enqueue", job_id, self.encode(payload), priority)

    # -- admission ------------------------------------------------------------
    def enqueue(self, payload: Any, *, id: str | None = None, priority: int = 0) -> Enqueued:
        """Add a job to pending. Lower priority numbers are served first; equal ones FIFO."""
        call = self._enqueue_call(payload, id, priority)
        return Enqueued(call.argv[0], self.connection.send(call) == 1)

    def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0) -> list[Enqueued]:
        """Enqueue many jobs in one pipelined round trip (each is its own atomic enqueue)."""
        calls = [self._enqueue_call(payload, None, priority) for payload in payloads]
        replies = self.connection.send_many(calls)
        _raise_first(replies)
        return [Enqueued(call.argv[0], reply == 1) for call, reply in zip(calls, replies)]

    def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, priority: int = 0) -> Enqueued:
        """Add a job that becomes ready ``delay_ms`` from now (server clock), via PROMOTE."""
        job_id = check_job_id(id) if id is not None else uuid7()
        check_int("delay_ms", delay_ms, 0)
        check_int("priority", priority, 0, PRIORITY_MAX)
        reply = self._send("schedule", job_id, self.encode(payload), delay_ms, priority)
        return Enqueued(job_id, reply == 1)

    # -- the lease --------------------------------------------------------------
    def claim(self, lease_ms: int) -> Job | None:
        """Take the head of pending under a lease of ``lease_ms``; None when there is nothing to take."""
        check_int("lease_ms", lease_ms, 1)
        if self.connection.wire == 4 and self.connection.paused(self.keys):
            return None
        return self.decode_claim(self._send("claim", lease_ms))

    def claim_many(self, count: int, lease_ms: int) -> list[Job]:
        """Claim up to ``count`` jobs in one pipelined round trip, each its own atomic CLAIM.

        Fewer come back when pending runs short (or a head is a ghost); none while paused.
        """
        check_int("count", count, 1, LIMIT_MAX)
        check_int("lease_ms", lease_ms, 1)
        if self.connection.wire == 4 and self.connection.paused(self.keys):
            return []
        replies = self.connection.send_many([self.call("claim", lease_ms)] * count)
        _raise_first(replies)
        return [job for job in map(self.decode_claim, replies) if job is not None]

    def decode_claim(self, reply: Sequence[Any]) -> Job | None:
        if not reply:
            return None
        job_id, raw, attempts = reply
        payload = None if raw is None else self.serializer.loads(raw)
        return Job(self.name, _text(job_id), payload, raw, int(attempts))

    def extend(self, job: JobRef, lease_ms: int, *, token: str | int | None = None) -> int:
        """Renew the lease to now + ``lease_ms``; returns the new deadline (ms, server clock)."""
        job_id, token = _ref(job, token)
        check_int("lease_ms", lease_ms, 1)
        return self._fenced(self.call("extend", job_id, token, lease_ms))

    def extend_many(self, jobs: Sequence[JobRef | tuple[str, str]], lease_ms: int) -> list[int]:
        """Renew many leases in one EXTENDS; each answer is the new deadline, or 0 for a lost lease."""
        check_int("lease_ms", lease_ms, 1)
        pairs = [job if isinstance(job, tuple) else _ref(job, None) for job in jobs]
        answers: list[int] = []
        for start in range(0, len(pairs), EXTENDS_MAX):
            chunk = pairs[start : start + EXTENDS_MAX]
            flat = [part for pair in chunk for part in pair]
            answers += [int(a) for a in self._send("extends", lease_ms, *flat)]
        return answers

    # -- settling ---------------------------------------------------------------
    # Each fenced settle is built in one place (``*_call``, pure), then sent alone by the
    # method of the same name, or with others in one round trip by ``settle_many``.
    def complete_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        return self.call("complete", *_ref(job, token))

    def fail_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                  token: str | int | None = None) -> Call:
        job_id, token = _ref(job, token)
        check_int("max_attempts", max_attempts, 1)
        check_int("backoff_ms", backoff_ms, 0)
        return self.call("fail", job_id, token, error, max_attempts, backoff_ms)

    def delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        job_id, token = _ref(job, token)
        check_int("delay_ms", delay_ms, 0)
        return self.call("delay", job_id, token, delay_ms)

    def requeue_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        return self.call("requeue", *_ref(job, token))

    def publish_call(self, job: JobRef, result: bytes, *, retention_ms: int, token: str | int | None = None) -> Call:
        """COMPLETE with the outcome told (the bus): ``result`` (already encoded) kept as the job's
        completed record for ``retention_ms`` (0: no record)."""
        job_id, token = _ref(job, token)
        check_int("retention_ms", retention_ms, 0)
        return self.call("publish", job_id, token, result, retention_ms)

    def failures_incr_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                           traceback: str = "", token: str | int | None = None) -> Call:
        """FAIL with the bus: the traceback kept beside ``last_error``, a death told."""
        fail = self.fail_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token)
        return self.call("failures_incr", *fail.argv, traceback)

    def complete(self, job: JobRef, *, token: str | int | None = None) -> None:
        """Done: the row is deleted and counted. Raises LeaseLost if the token no longer holds."""
        self._fenced(self.complete_call(job, token=token))

    def complete_many(self, jobs: Sequence[JobRef]) -> list[bool]:
        """Complete many jobs in one pipelined round trip; False where the lease was lost."""
        replies = self.connection.send_many([self.complete_call(job) for job in jobs])
        _raise_first(replies)
        return [reply == 1 for reply in replies]

    def fail(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
             token: str | int | None = None) -> State:
        """Record a failure: back to pending (no backoff), to schedule (backoff) or dead (out of budget)."""
        call = self.fail_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token)
        return State(_text(self._fenced(call)))

    def delay(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> int:
        """Put a held job back to wait ``delay_ms``; returns its due time (ms, server clock)."""
        return self._fenced(self.delay_call(job, delay_ms, token=token))

    def publish(self, job: JobRef, result: Any = None, *, retention_ms: int, token: str | int | None = None) -> None:
        """Complete and keep ``result`` (encoded by this queue's serializer, at most 1 MiB) for
        ``retention_ms``; a :meth:`result` waiter is woken. Raises LeaseLost if the token no longer
        holds, PayloadError (nothing sent) if the result cannot be encoded."""
        data = encode_result(self.serializer, result, MAX_RESULT_BYTES)
        self._fenced(self.publish_call(job, data, retention_ms=retention_ms, token=token))

    def progress(self, job: JobRef, value: Any, *, token: str | int | None = None) -> None:
        """Report a held job's progress (JSON, at most 64 KiB): kept in its row as ``progress`` and,
        when events are on, appended as a ``progress`` event. Raises LeaseLost for a holder whose
        lease is gone: it cannot write."""
        job_id, token = _ref(job, token)
        self._fenced(self.call("append", job_id, token, encode_progress(value)))

    def requeue(self, job: JobRef, *, token: str | int | None = None) -> None:
        """Release a held job to pending without spending any budget."""
        self._fenced(self.requeue_call(job, token=token))

    def settle_many(self, calls: Sequence[Call]) -> list[Any]:
        """Send fenced calls (from the ``*_call`` builders) in one pipelined round trip.

        Each answer is the verb's reply, a :class:`LeaseLost` where it answered 0, or the
        server's refusal -- returned, not raised: a batch is partly lost by nature.
        """
        return [_fence(call, reply) for call, reply in zip(calls, self.connection.send_many(calls))]

    def settle_and_claim(self, calls: Sequence[Call], count: int, lease_ms: int) -> tuple[list[Any], list[Job]]:
        """Settle ``calls`` (as :meth:`settle_many`) and claim up to ``count`` more jobs, in the
        fewest round trips the wire allows: one on wire 6 (the settles, then the claims, one
        pipeline); two on wire 4, whose claim must follow its own pause read (SPEC §4), so
        the pause read rides with the settles and the claims follow unless paused. A worker
        that settles a batch and claims the next pays one round trip per batch, not two
        (three on wire 4). ``count`` 0 only settles. Returns (settle answers, claimed jobs).
        """
        check_int("count", count, 0, LIMIT_MAX)
        check_int("lease_ms", lease_ms, 1)
        claims = [self.call("claim", lease_ms)] * count
        conn = self.connection
        if conn.wire == 6 or not count:
            replies = conn.send_many([*calls, *claims]) if calls or claims else []
            settled, claimed = replies[: len(calls)], replies[len(calls):]
        else:
            settled, paused = conn.send_many_and_read_pause(calls, self.keys)
            claimed = [] if paused else conn.send_many(claims)
        _raise_first(claimed)
        answers = [_fence(call, reply) for call, reply in zip(calls, settled)]
        return answers, [job for job in map(self.decode_claim, claimed) if job is not None]

    def _fenced(self, call: Call) -> Any:
        reply = _fence(call, self.connection.send(call))
        if isinstance(reply, errors.LeaseLost):
            raise reply
        return reply

    # -- time-driven and recovery -----------------------------------------------
    def promote(self, limit: int = 1000) -> int:
        """Move up to ``limit`` due scheduled jobs to pending; returns how many moved."""
        return int(self._send("promote", check_int("limit", limit, 1, LIMIT_MAX)))

    def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        """Move a scheduled job's due time to now + ``delay_ms``; None when no row."""
        check_job_id(job_id)
        check_int("delay_ms", delay_ms, 0)
        return int(self._send("reschedule", job_id, delay_ms)) or None

    def reprocess(self, job_id: str) -> bool:
        """Send a dead job back to pending with a full retry and stall budget again (``attempts``,
        the token, goes on); False when it is not in dead."""
        return self._send("reprocess", check_job_id(job_id)) == 1

    def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """Recover up to ``limit`` expired leases; a job that stalls ``max_stalled`` times goes dead."""
        check_int("max_stalled", max_stalled, 1)
        check_int("limit", limit, 1, LIMIT_MAX)
        recovered, exempt, dead = self._send("stalled_check", max_stalled, limit)
        return Sweep([_text(i) for i in recovered], [_text(i) for i in exempt], [_text(i) for i in dead])

    # -- control: remove, cancel, purge, drain (SPEC §9.4: optional tokens on wire 6) ------------
    def remove(self, job_id: str) -> State | None:
        """Delete a pending, scheduled or dead job (row and set membership in one step); returns
        the state it was removed from, None when there is no row. An active job is refused
        (:class:`StateError`): cancel it instead."""
        reply = self._send("remove", check_job_id(job_id))
        return None if reply == 0 else State(_text(reply))

    def cancel(self, job_id: str) -> bool:
        """Revoke an active job's lease: it goes dead with ``last_error`` ``cancelled``, its holder's
        settle is refused and its handler sees ``ctx.lost`` at the next renewal. False when there
        is no row; a job that is not active is refused (:class:`StateError`)."""
        return self._send("cancel", check_job_id(job_id)) == 1

    def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        """Delete up to ``limit`` dead jobs that died at least ``older_than_ms`` ago (server clock),
        oldest first; returns how many left dead. Call again while it returns ``limit``."""
        check_int("older_than_ms", older_than_ms, 0)
        return int(self._send("purge", older_than_ms, check_int("limit", limit, 1, LIMIT_MAX)))

    def drain(self, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` jobs from the head of pending; returns how many left pending.
        Call again while it returns ``limit``."""
        return int(self._send("drain", check_int("limit", limit, 1, LIMIT_MAX)))

    # -- pause ----------------------------------------------------------------
    def pause(self) -> None:
        """Hold claims (enqueue and schedule still admit jobs)."""
        with _plain():
            self.connection.client.hset(self.keys.meta, "paused", 1)

    def resume(self) -> None:
        with _plain():
            self.connection.client.hdel(self.keys.meta, "paused")

    # -- following a job: status, result, events (the bus) ------------------------
    def _seen(self, job_id: str) -> Seen:
        """One round trip: the row's state/last_error/traceback and the completed record."""
        with _plain():
            pipe = self.connection.client.pipeline(transaction=False)
            pipe.hmget(self.keys.job(job_id), *ROW_FIELDS)
            pipe.hgetall(self.keys.done(job_id))
            row, record = pipe.execute()
        return Seen.of(row, record)

    def status(self, job_id: str) -> Status:
        """pending, active, scheduled, dead, completed (within its retention) or unknown."""
        return status_of(self._seen(check_job_id(job_id)))

    def result(self, job_id: str, *, timeout: float | None = None) -> Any:
        """The job's result, waiting up to ``timeout`` seconds (None: no limit) for it to finish.

        Raises :class:`JobFailed` (``last_error``, ``traceback``) when it is dead,
        :class:`JobNotFound` when there is no such job (or its record expired), and
        :class:`TimeoutError` when the time runs out. The wait is woken by the job's outcome
        channel (subscribed before the first read, so no completion slips between), not by polling.
        """
        check_job_id(job_id)
        if timeout is not None and not timeout >= 0:
            raise errors.ConfigurationError(f"bad timeout {timeout!r}: seconds >= 0, or None")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.connection.outcome_listener(self.keys.outcome(job_id)) as wait:
            while True:
                verdict = decide_result(self._seen(job_id))
                if isinstance(verdict, Completed):
                    return self.serializer.loads(verdict.raw)
                if isinstance(verdict, Failed):
                    raise errors.JobFailed(job_id, verdict.last_error, verdict.traceback)
                if isinstance(verdict, Unknown):
                    raise errors.JobNotFound(f"no job {job_id!r} in queue {self.name!r} (never enqueued, or its "
                                             "result's retention has passed)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"job {job_id!r} is still {verdict.status.value} after {timeout:g} s")
                wait(left)

    def enable_events(self, maxlen: int = DEFAULT_MAXLEN) -> None:
        """Turn this queue's event stream on, bounded to ``maxlen`` entries (the verbs read it)."""
        with _plain():
            self.connection.client.hset(self.keys.meta, "events", check_int("maxlen", maxlen, 1))

    def disable_events(self) -> None:
        """Turn the event stream off (what it holds stays until deleted)."""
        with _plain():
            self.connection.client.hdel(self.keys.meta, "events")

    def events(self, since: str | None = None, *, follow: bool = False, block_ms: int = 1000,
               count: int = 100) -> Iterator[Event]:
        """The queue's events after ``since`` (a stream id; None: from the oldest kept; ``"$"``:
        only new ones), oldest first. With ``follow`` it waits for new ones (XREAD BLOCK, ``block_ms``
        per wait) and never ends: break out of the loop."""
        client = self.connection.client
        last = "0-0" if since is None else _last_id(client, self.keys.events) if since == "$" else since
        while True:
            with _plain():
                if follow:
                    reply = client.xread({self.keys.events: last}, count=count, block=block_ms)
                    entries = reply[0][1] if reply else []
                else:
                    entries = client.xrange(self.keys.events, min="(" + last, count=count)
            for stream_id, fields in entries:
                event = decode_event(stream_id, fields)
                last = event.stream_id
                yield event
            if not follow and len(entries) < count:
                return

    # -- reading ----------------------------------------------------------------
    def counts(self) -> Counts:
        pending, active, scheduled, dead, paused = self._send("counts")
        return Counts(pending, active, scheduled, dead, paused == 1)

    def state(self, job_id: str) -> State | None:
        reply = self._send("state", check_job_id(job_id))
        return None if reply is None else State(_text(reply))

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's row, fields as text and the payload deserialized; None when there is no row."""
        key = self.keys.job(check_job_id(job_id))
        with _plain():
            row = self.connection.client.hgetall(key)
        if not row:
            return None
        fields = {_text(k): v for k, v in row.items()}
        raw = fields.pop("payload", None)
        decoded: dict[str, Any] = {k: _text(v) for k, v in fields.items()}
        decoded["payload"] = None if raw is None else self.serializer.loads(raw)
        return decoded

    def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        """A page of (id, score) from the set of ``state``, lowest score first."""
        try:
            key = self.keys.key(STATE_SETS[State(state)])
        except ValueError:
            raise errors.ConfigurationError(f"bad state {state!r}: one of {[s.value for s in State]}") from None
        check_int("offset", offset, 0)
        check_int("count", count, 1)  # count 0 would ask ZRANGE for offset..offset-1: all of it at offset 0
        with _plain():
            rows = self.connection.client.zrange(key, offset, offset + count - 1, withscores=True)
        return [(_text(member), score) for member, score in rows]

    def metrics(self) -> dict[str, int]:
        client = self.connection.client
        with _plain():
            return {name: int(client.hget(self.keys.metrics(name), "count") or 0) for name in ("completed", "failed")}


@contextmanager
def _plain() -> Iterator[None]:
    """Plain commands (pause, the reads) answer in the same error tree as the verbs."""
    try:
        yield
    except ResponseError as exc:
        raise as_refusal(exc) from exc


def _fence(call: Call, reply: Any) -> Any:
    """A fenced verb's reply, with its 0 (no row, or the token does not match) made a LeaseLost."""
    if not isinstance(reply, Exception) and reply == 0:
        return errors.LeaseLost(call.verb.name, _text(call.argv[0]), _text(call.argv[1]))
    return reply


def _last_id(client: Any, key: str) -> str:
    """The newest entry's id: where a ``"$"`` reader starts (read once, so nothing after it is missed)."""
    newest = client.xrevrange(key, count=1)
    return _text(newest[0][0]) if newest else "0-0"


def _raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
