"""The job-core API of one queue: one method per verb, the same on wire 4 and wire 6.

Deciding what to send (argument checks, key building, reply decoding) lives in the
pure helpers below; :class:`Connection` only sends. Token-fenced verbs that answer
``0`` raise :class:`LeaseLost`: a caller that thought it held the job must not carry
on as if it did. ``extend_many`` and ``complete_many`` report per job instead (0 or
False for a lost lease), because a batch is partly lost by nature.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from valkey.exceptions import NoScriptError, ResponseError

from . import errors
from .connection import Call, Connection, as_refusal, build_call
from .ids import uuid7
from .keys import MAX_TRACEBACK_BYTES, STATE_SETS, Keyspace, State, check_job_id
from .serializers import JSON, Serializer

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
    try:
        data = serializer.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise errors.PayloadError(f"the payload cannot be encoded by {type(serializer).__name__}: {exc}") from exc
    if max_bytes is not None and len(data) > max_bytes:
        raise errors.PayloadError(
            f"the payload is {len(data)} bytes, over the limit of {max_bytes} (max_payload_bytes): keep large "
            "data elsewhere and enqueue a reference to it, or raise the limit"
        )
    return data


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


def check_traceback(traceback: str) -> None:
    """FAIL's traceback: text of at most MAX_TRACEBACK_BYTES in UTF-8 (:func:`echomq.policy.describe_traceback`
    keeps a longer one's tail)."""
    try:
        size = len(traceback.encode())
    except (AttributeError, UnicodeEncodeError) as exc:
        raise errors.ConfigurationError(f"bad traceback: UTF-8 text, got {type(traceback).__name__} ({exc})") from exc
    if size > MAX_TRACEBACK_BYTES:
        raise errors.ConfigurationError(f"bad traceback of {size} bytes: at most {MAX_TRACEBACK_BYTES} in UTF-8 "
                                        "(keep its tail: echomq.policy.describe_traceback)")


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
        self.claim_paused = False  #: wire 4: the pause read of the last settle_and_claim that claimed
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

    def bclaim(self, lease_ms: int, timeout_ms: int) -> Job | None:
        """CLAIM, but while the queue is empty or paused wait up to ``timeout_ms`` for a job
        (EMQ.BCLAIM, wire 6 with the ``claim.block`` token); None when none came. It also answers
        None early when the schedule's head moved earlier (a waiter recomputes its timers).
        Wire 4 cannot block inside a script: a wire-4 worker waits on the wake marker instead."""
        check_int("lease_ms", lease_ms, 1)
        check_int("timeout_ms", timeout_ms, 0)
        if self.connection.wire == 4:
            raise errors.UnsupportedOnWire("bclaim needs wire 6 (trafikey): on wire 4 wait on the wake marker "
                                           f"{self.keys.wake} (BZPOPMIN), then claim")
        return self.decode_claim(self._send("bclaim", lease_ms, timeout_ms))

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
                  token: str | int | None = None, traceback: str | None = None) -> Call:
        job_id, token = _ref(job, token)
        check_int("max_attempts", max_attempts, 1)
        check_int("backoff_ms", backoff_ms, 0)
        argv = [job_id, token, error, max_attempts, backoff_ms]
        if traceback is not None:
            check_traceback(traceback)
            # a wire-6 module that predates fail.traceback gets five ARGV: last_error is still written
            if self.connection.carries("fail", "traceback"):
                argv.append(traceback)
        return self.call("fail", *argv)

    def delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        job_id, token = _ref(job, token)
        check_int("delay_ms", delay_ms, 0)
        return self.call("delay", job_id, token, delay_ms)

    def requeue_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        return self.call("requeue", *_ref(job, token))

    def complete(self, job: JobRef, *, token: str | int | None = None) -> None:
        """Done: the row is deleted and counted. Raises LeaseLost if the token no longer holds."""
        self._fenced(self.complete_call(job, token=token))

    def complete_many(self, jobs: Sequence[JobRef]) -> list[bool]:
        """Complete many jobs in one pipelined round trip; False where the lease was lost."""
        replies = self.connection.send_many([self.complete_call(job) for job in jobs])
        _raise_first(replies)
        return [reply == 1 for reply in replies]

    def fail(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
             token: str | int | None = None, traceback: str | None = None) -> State:
        """Record a failure: back to pending (no backoff), to schedule (backoff) or dead (out of budget).

        ``error`` becomes the row's ``last_error``; ``traceback`` (at most 8 KiB of UTF-8, ``""``
        for none) its ``traceback`` field, written in the same step. A wire-6 module whose
        EMQ.VERSION lacks ``fail.traceback`` is sent the failure without it."""
        call = self.fail_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token,
                              traceback=traceback)
        return State(_text(self._fenced(call)))

    def delay(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> int:
        """Put a held job back to wait ``delay_ms``; returns its due time (ms, server clock)."""
        return self._fenced(self.delay_call(job, delay_ms, token=token))

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
            self.claim_paused = paused
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

    def promote_and_next_due(self, limit: int = 1000) -> tuple[int, int | None]:
        """PROMOTE, then read when the schedule's head falls due, in one round trip: (moved,
        ms from now (server clock) until the head is due, None when the schedule is empty).
        The worker promotes again then: a delayed job runs at its due time, not an interval later."""
        command = self.connection.command_args(self.call("promote", check_int("limit", limit, 1, LIMIT_MAX)))
        for _ in range(2):
            # on the queue's own node: a cluster pipeline refuses TIME, which has no key
            pipe = self.connection.node_client(self.keys).pipeline(transaction=False)
            pipe.execute_command(*command)
            pipe.zrange(self.keys.schedule, 0, 0, withscores=True)
            pipe.time()
            moved, head, now = pipe.execute(raise_on_error=False)
            if not isinstance(moved, NoScriptError):
                break
            self.connection.load_scripts()  # NOSCRIPT: it did not run; load and send again, once
        for reply in (moved, head, now):
            if isinstance(reply, ResponseError):
                raise as_refusal(reply)
        seconds, micros = now
        return int(moved), None if not head else int(head[0][1]) - (seconds * 1000 + micros // 1000)

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
        """Release claims. On wire 4 it then writes the wake marker, so a worker blocked on this
        queue claims at once (wire 6's blocked claimers hear the HDEL by themselves)."""
        client = self.connection.client
        with _plain():
            client.hdel(self.keys.meta, "paused")  # a refusal (a wrong-typed meta) stops here: no marker
            if self.connection.wire == 4:
                client.zadd(self.keys.wake, {"w": 0})

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


def _raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
