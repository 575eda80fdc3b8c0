"""The queue's core, with no I/O: what each method sends and what its replies mean.

Every :class:`echomq.Queue` method (and its coroutine twin in :class:`echomq.aio.Queue`)
is one *operation* here: a generator that yields a round trip -- a list of
:class:`~echomq._protocol.verbs.Call` and :class:`~echomq._protocol.verbs.Plain` commands, sent together
-- receives their replies (error replies as exception objects), and returns the
method's answer. The two queues only drive these generators over their connection,
one blocking, one awaiting, so both build the same calls, check the same limits and
answer and raise the same way (httpx's ``BaseClient``/``Client``/``AsyncClient``
split). Argument limits and reply decoding live in the verb rows (:mod:`echomq._protocol.verbs`).

Token-fenced verbs that answer ``0`` (or, on wire 6, refuse a row that is no longer
active) raise :class:`LeaseLost`: a caller that thought it held the job must not
carry on as if it did. ``extend_many``, ``complete_many`` and ``settle_many`` report
per job instead, because a batch is partly lost by nature.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable, Generator, Iterable, Protocol, Sequence, TypeVar

from .._protocol import envelope
from .. import errors
from .workers import op_workers
from .._protocol.events import DEFAULT_MAXLEN, Event, decode_event, decode_progress, encode_progress
from .._protocol.ids import new_id
from .._protocol.keys import STATE_SETS, Keyspace, State, check_job_id
from .._protocol.results import (MAX_RESULT_BYTES, ROW_FIELDS, WAITER_TTL_S, Completed, Failed, NotKept, Seen, Status,
                                 Unknown, Waiting, decide_result, encode_result, result_value, status_of)
from .._protocol.rates import RateLimit, parse_rate_limit
from .._protocol.serializers import JSON, Serializer, encode
from .._protocol.shown import type_name
from .._protocol.verbs import (
    BY_NAME, CLAIMS_MAX, EVENTS_MAX, EXTENDS_MAX_PAIRS, LIMIT_MAX, NO_LANES, Admission, Call, Claimed, Counts, Plain,
    Sweep, Throttled, build_call, check_int, check_traceback, text,
)

T = TypeVar("T")
CLAIMS = BY_NAME["claims"]  #: its answer is a list of CLAIM answers (``_jobs`` flattens it)
NOT_A_FLOW_JOB = f"EMQSTATE {BY_NAME['flow_cancel'].label} row is not a flow job"  #: flow_cancel's refusal of a flat row
RoundTrip = list["Call | Plain"]
#: An operation: yields round trips, is sent their replies, returns the answer.
Op = Generator[RoundTrip, list[Any], T]


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


@dataclass(frozen=True)
class Job:
    """A claimed job. ``token`` is the fencing token (attempts as text) every settle presents."""

    queue: str
    id: str
    payload: Any
    raw_payload: bytes | None  #: as the serializer wrote it (a trace envelope taken off)
    attempt: int
    trace: dict[str, str] | None = None  #: the trace context it was enqueued with (echomq.otel), if any
    group: str | None = None  #: a lane job's group: its settles are the lane scripts (docs/lanes-and-flows.md)
    flow: bool = False  #: a flow job (claimed by flow_claim): renewed and settled by the flow scripts
    has_children: bool = False  #: a flow parent, claimed once its children finished

    @property
    def token(self) -> str:
        return str(self.attempt)

    @property
    def idempotency_key(self) -> str:
        """Stable per attempt: use it for downstream writes a retry must not repeat."""
        return f"{self.id}:{self.attempt}"


JobRef = Job | str


def _lane_of(job: JobRef) -> str | None:
    """The group of a claimed lane job (an id given alone is taken as a flat job)."""
    return job.group if isinstance(job, Job) else None
@dataclass(frozen=True)
class Children:
    """What a flow parent's children left it: their results (decoded with the reading queue's
    serializer) and, under ``on_child_failure="continue"``, the errors of those that died, by child id."""

    results: dict[str, Any]
    failures: dict[str, str]


def _ref(job: JobRef, token: str | int | None) -> tuple[str, str]:
    """(id, token) from a Job, or from an id and an explicit token."""
    if isinstance(job, Job):
        return job.id, job.token if token is None else str(token)
    if token is None:
        raise errors.ConfigurationError(f"job {job!r}: pass the Job, or its id with token=")
    return check_job_id(job), str(token)


def due_in_ms(head: Sequence[Any], now: Sequence[Any]) -> int:
    """Ms from ``now`` (a TIME reply) until the schedule's head (ZRANGE 0 0 WITHSCORES) is due."""
    score = head[0][1] if isinstance(head[0], (list, tuple)) else head[1]  # RESP3 pairs or a flat RESP2 list
    seconds, micros = now
    return int(float(score)) - (int(seconds) * 1000 + int(micros) // 1000)


#: The verbs whose calls in one round trip travel as one command of many: the batch verb, and how
#: many of a call's ARGV are its own (the rest, the batch's lead, its calls share): COMPLETE's (id,
#: token) as COMPLETES (docs/spec.md §18), PUBLISH's (id, token, result) as PUBLISHES, one per
#: retention_ms (§19), and ENQUEUE's (id, payload, priority) as ENQUEUES (§20).
BATCHES: dict[str, tuple[str, int]] = {"complete": ("completes", 2), "publish": ("publishes", 3),
                                       "enqueue": ("enqueues", 3)}


def chunked(build: Callable[..., Call], lead: Sequence[Any], parts: Sequence[Any], width: int) -> list[Call]:
    """The batch calls of ``parts`` (each job's ``width`` ARGV, one after another): one call per
    EXTENDS_MAX_PAIRS jobs, each ``build(*lead, *its parts)``."""
    step = width * EXTENDS_MAX_PAIRS
    return [build(*lead, *parts[start:start + step]) for start in range(0, len(parts), step)]


def batched_settles(calls: Sequence[Call], carried: Callable[[str], bool]) -> tuple[list[Call], list[tuple[int, int]]]:
    """What to send for ``calls``: the calls of a verb in :data:`BATCHES` whose batch verb is
    ``carried``, two or more of one kind (verb, keys, lead), as its batches (:func:`chunked`) in the
    place of the first; every other call as itself. And for each call, where its reply is: (the
    sent call's index, the call's place in that batch's reply, or -1 for the whole reply)."""
    kinds: dict[tuple[Any, ...], tuple[list[int], list[Any]]] = {}  # each kind's calls, and their own ARGV in a row
    if len(calls) > 1:
        for i, call in enumerate(calls):
            name = call.verb.name
            batch = BATCHES.get(name)
            if batch is not None:
                argv, width = call.argv, batch[1]
                kind = (name, call.keys, argv[width:])
                found = kinds.get(kind)
                if found is None:
                    kinds[kind] = ([i], [*argv[:width]])
                else:
                    found[0].append(i)
                    found[1].extend(argv[:width])
    first = {found[0][0]: (kind, *found) for kind, found in kinds.items()
             if len(found[0]) > 1 and carried(BATCHES[kind[0]][0])}
    if not first:
        return list(calls), [(i, -1) for i in range(len(calls))]
    sent: list[Call] = []
    # each call's route, set for a whole batch at its kind's first call (its members come later in calls):
    # a worker's round trip is mostly one batch, so most calls are routed in that one inner loop
    routes: list[Any] = [None] * len(calls)
    for i, call in enumerate(calls):
        if i in first:  # the kind's first call: its batches go here
            kind, members, parts = first[i]
            name, width = BATCHES[kind[0]]
            verb, keys = BY_NAME[name], call.keys
            opened = len(sent)
            sent += chunked(lambda *argv: Call(verb, keys, argv), kind[2], parts, width)
            for n, m in enumerate(members):
                routes[m] = (opened + n // EXTENDS_MAX_PAIRS, n % EXTENDS_MAX_PAIRS)
        elif routes[i] is None:
            routes[i] = (len(sent), -1)
            sent.append(call)
    return sent, routes


def settle_answers(calls: Sequence[Call], routes: Sequence[tuple[int, int]], replies: Sequence[Any]) -> list[Any]:
    """Each job's answer from the ``replies`` to what :func:`batched_settles` sent for ``calls``: a
    call's own reply, or its element of its batch's, answered by its own verb; a batch call among
    ``calls`` (COMPLETES, PUBLISHES: :meth:`Queue.completion_calls`) answers once for each of its
    jobs. A batch refused whole (an error, not a list) answers that refusal for each of its jobs."""
    answers: list[Any] = []
    for call, (k, at) in zip(calls, routes):
        reply = replies[k]
        if at >= 0:  # a verb of BATCHES answers no list (Verb.answer's per_pair): its answer_to, a call less
            answers.append(call.verb.answer_to(call.argv, reply[at] if type(reply) is list else reply))
        elif call.verb.per_pair is None:
            answers.append(call.verb.answer(call, reply))
        elif isinstance(reply, Exception):
            lead, width = call.verb.repeated
            answers += [reply] * ((len(call.argv) - lead) // width)
        else:
            answers += call.verb.answer(call, reply)
    return answers


def raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def scored(reply: Sequence[Any]) -> list[tuple[str, float]]:
    """ZRANGE ... WITHSCORES's (id, score) pairs, whatever the protocol (RESP2: one flat list; RESP3: pairs)."""
    pairs = reply if reply and isinstance(reply[0], (list, tuple)) else zip(reply[::2], reply[1::2])
    return [(text(member), float(score)) for member, score in pairs]


def _raised(answer: Any) -> Any:
    if isinstance(answer, Exception):
        raise answer
    return answer


#: The largest payload a Queue sends by default (1 MiB): a job queue carries references to
#: large data, not the data; ``Queue(..., max_payload_bytes=...)`` changes it, None lifts it.
MAX_PAYLOAD_BYTES = 1 << 20


def encode_payload(serializer: Serializer, payload: Any, max_bytes: int | None) -> bytes:
    """The payload as the bytes a job stores, refused client-side (:class:`PayloadError`) when the
    serializer cannot encode it or it is over ``max_bytes``."""
    return encode(serializer, payload, max_bytes, what="payload", limit="max_payload_bytes",
                  hint=": keep large data elsewhere and enqueue a reference to it, or raise the limit")


@dataclass(frozen=True)
class GroupCounts:
    """One lane group as :meth:`Queue.groups` reads it."""

    waiting: int  #: in its lane, not started (a retry waiting out its backoff included)
    running: int  #: started and not settled
    paused: bool
    limit: int  #: k: how many may run at once (its own, else the queue's, else 1)


@dataclass(frozen=True)
class Done:
    """A result waiter's read found the job completed: its result, decoded."""

    value: Any


def check_connection(given: Any, expected: type, what: str, opened_by: str, takes: str = "conn, name") -> None:
    """``given`` must be a connection of ``expected``'s kind (pure): a URL, a raw client or the other
    client's connection is refused with a TypeError naming ``opened_by``, the call that opens one (as
    given, it failed later, on its first use, with an AttributeError that named neither)."""
    if isinstance(given, expected):
        return
    if isinstance(given, str):
        kind = f"the {'URL' if '://' in given else 'string'} {given[:80]!r}"
    else:
        kind = f"a value of type {type_name(type(given))}"
    raise TypeError(f"{what} takes a connection, not {kind}: open one with conn = {opened_by}, then {what}({takes})")


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


def op_enqueued(calls: Sequence[Call], carried: Callable[[str], bool]) -> Op[list[Enqueued]]:
    """Send enqueue calls (of one queue or of several) in one round trip, a queue's ENQUEUEs as its
    ENQUEUES where the connection carries it (:func:`batched_settles`): each one's :class:`Enqueued`."""
    sent, routes = batched_settles(calls, carried)
    answers = settle_answers(calls, routes, (yield sent) if sent else [])
    raise_first(answers)
    return [Enqueued(call.argv[0], answer) for call, answer in zip(calls, answers)]


class Codec(Protocol):
    """What the operations read of a connection (no I/O): its wire, and what the node's wire
    serves. Both clients' connections are one (:class:`echomq._client.connection.WireCodec`);
    named here so that this layer imports nothing above it."""

    wire: int

    def supports(self, verb_name: str) -> bool: ...

    def carries(self, verb_name: str, argument: str) -> bool: ...


class QueueCore:
    """One queue's calls and answers; :class:`echomq.Queue` and :class:`echomq.aio.Queue` send them."""

    wire: int

    def __init__(self, name: str, codec: Codec, serializer: Serializer = JSON,
                 max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        self.keys = Keyspace(name)
        self.name = name
        self.codec = codec  #: the connection's wire and tokens: what a call may carry (no I/O here)
        self.wire = codec.wire
        self.serializer = serializer
        self.max_payload_bytes = None if max_payload_bytes is None else check_int(
            "max_payload_bytes", max_payload_bytes, 1)
        self.claim_paused = False  #: wire 4: the pause read of the last settle_and_claim that claimed
        #: the last claims' rate-limit wait (ms, server clock): the queue's rate limit held at least
        #: one of them; None when none was held (docs/spec.md §13)
        self.claim_wait_ms: int | None = None
        #: the last lane claims found a queue that never had a lane job (LANE_CLAIM answered 0)
        self.no_lanes = False
        #: the last flow claim found nothing: the ms until a flow retry falls due, 0 while flows are
        #: under way without one (a parent waits, a flow lease is held), None when there is no flow work
        self.flow_due_ms: int | None = None

    # -- building calls (pure) --------------------------------------------------
    def call(self, verb: str, *argv: Any) -> Call:
        """A call exactly as given (no argument checks)."""
        return build_call(verb, self.keys, argv)

    def build(self, verb: str, *argv: Any) -> Call:
        """A call with its arguments checked against SPEC §3."""
        return BY_NAME[verb].build(self.keys, *argv)

    def _build_checked_already(self, verb: str, *argv: Any) -> Call:
        return BY_NAME[verb].build_checked_already(self.keys, *argv)

    def encode(self, payload: Any) -> bytes:
        """The payload's bytes, checked client-side: encodable and within ``max_payload_bytes``
        (then wrapped in a trace envelope when tracing is on: docs/observability.md)."""
        return envelope.wrap(self.name, encode_payload(self.serializer, payload, self.max_payload_bytes))

    def enqueue_call(self, payload: Any, *, id: str | None = None, priority: int = 0, group: str | None = None) -> Call:
        if group is None:
            return self.build("enqueue", new_id() if id is None else id, self.encode(payload), priority)
        return self.build("lane_enqueue", new_id() if id is None else id, self.encode(payload), group, priority)

    def complete_call(self, job: JobRef, *, token: str | int | None = None, checked_already: bool = False) -> Call:
        """COMPLETE. ``checked_already``: ``job`` is a Job this process claimed, so its id and token are
        not checked again (the worker's settles)."""
        build = self._build_checked_already if checked_already else self.build
        if _lane_of(job):  # a lane job's completion: no record kept
            return build("lane_complete", *_ref(job, token), b"", 0)
        return build("complete", *_ref(job, token))

    def fail_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                  token: str | int | None = None, traceback: str | None = None) -> Call:
        return self._failure("fail", job, error, max_attempts, backoff_ms, token, traceback)

    def failures_incr_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                           token: str | int | None = None, traceback: str | None = None) -> Call:
        """FAIL with the bus (FAIL's arguments): a death is told on the job's outcome channel."""
        return self._failure("failures_incr", job, error, max_attempts, backoff_ms, token, traceback)

    def _failure(self, verb: str, job: JobRef, error: str, max_attempts: int, backoff_ms: int,
                 token: str | int | None, traceback: str | None) -> Call:
        argv = [*_ref(job, token), error, max_attempts, backoff_ms]
        if _lane_of(job):  # a lane job's failure: the lane script (no outcome is published)
            return self.build("lane_fail", *argv, traceback or "")  # always sent: '' for none
        # a wire-6 module that predates fail.traceback gets five ARGV: last_error is still written
        if traceback is not None and self.codec.carries(verb, "traceback"):
            argv.append(traceback)
        elif traceback is not None:
            check_traceback(traceback)  # refused the same whether or not it is sent
        return self.build(verb, *argv)

    def publish_call(self, job: JobRef, result: bytes, *, retention_ms: int, token: str | int | None = None,
                     checked_already: bool = False) -> Call:
        """COMPLETE with the outcome told (the bus): ``result`` (already encoded) kept as the job's
        completed record for ``retention_ms`` (0: no record). A lane job's is LANE_COMPLETE, which
        keeps the record and tells the outcome the same way. ``checked_already``: ``job`` is a Job this
        process claimed, ``result`` came from ``keepable_result`` (echomq/_protocol/results.py) and
        ``retention_ms`` from a Task, so none is checked again (the worker's settles)."""
        if checked_already:  # a Job claimed here (the worker's every completion): its id and token as claimed
            claimed: Job = job  # type: ignore[assignment]
            return BY_NAME["lane_complete" if claimed.group else "publish"].build_checked_already(
                self.keys, claimed.id, claimed.token, result, retention_ms)
        return self.build("lane_complete" if _lane_of(job) else "publish", *_ref(job, token), result, retention_ms)

    def flow_complete_call(self, job: JobRef, result: bytes, *, retention_ms: int,
                           token: str | int | None = None) -> Call:
        """FLOW_COMPLETE: a flow job's PUBLISH; ``result`` (already encoded) goes to its parent,
        and is kept as its completed record for ``retention_ms`` (0: no record)."""
        return self.build("flow_complete", *_ref(job, token), result, retention_ms)

    def flow_fail_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                       token: str | int | None = None, traceback: str | None = None) -> Call:
        """FLOW_FAIL: a flow job's FAILURES.INCR; a death is told to its parent."""
        return self.build("flow_fail", *_ref(job, token), error, max_attempts, backoff_ms, traceback or "")

    def flow_delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        """FLOW_DELAY: a flow job's DELAY (to flow:schedule for ``delay_ms``, no budget spent)."""
        return self.build("flow_delay", *_ref(job, token), delay_ms)

    def flow_release_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        """FLOW_RELEASE: a flow job's REQUEUE (back to flow:pending, nothing counted)."""
        return self.build("flow_release", *_ref(job, token))

    def append_call(self, job: JobRef, value: Any, *, token: str | int | None = None) -> Call:
        """APPEND: a held job's progress (any JSON value, at most 64 KiB encoded). A claimed lane or
        flow job's goes through ``lane_append`` or ``flow_append``, fenced where its lease is held."""
        verb = "lane_append" if _lane_of(job) else "flow_append" if isinstance(job, Job) and job.flow else "append"
        return self.build(verb, *_ref(job, token), encode_progress(value))

    def delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        if _lane_of(job):  # back to its place in its lane; the group waits delay_ms
            return self.build("lane_release", *_ref(job, token), delay_ms)
        return self.build("delay", *_ref(job, token), delay_ms)

    def requeue_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        if _lane_of(job):
            return self.build("lane_release", *_ref(job, token), 0)
        return self.build("requeue", *_ref(job, token))

    @property
    def _stamp(self) -> int:
        """Lane scripts stamp lease_epoch where the native verbs do (wire 6): the restart exemption."""
        return 1 if self.wire == 6 else 0

    def _lane_claim_calls(self, count: int, lease_ms: int) -> list[Call]:
        return [self.build("lane_claim", lease_ms, self._stamp)] * count

    def _rated(self) -> tuple[int, ...]:
        """CLAIM's and BCLAIM's late ``rated``: sent wherever it is carried (a module without
        ``claim.rate`` has no rate limit to hold a claim)."""
        return (1,) if self.codec.carries("claim", "rated") else ()

    def _claim_calls(self, count: int, lease_ms: int) -> list[Call]:
        """``count`` flat claims: CLAIMS calls of up to CLAIMS_MAX jobs each where the connection
        carries the verb (one command for the batch), else ``count`` CLAIMs."""
        if count > 1 and self.codec.supports("claims"):
            return [self.build("claims", lease_ms, min(CLAIMS_MAX, count - start), *self._rated())
                    for start in range(0, count, CLAIMS_MAX)]
        return [self.build("claim", lease_ms, *self._rated())] * count

    def bclaim_call(self, lease_ms: int, timeout_ms: int) -> Call:
        return self.build("bclaim", lease_ms, timeout_ms, *self._rated())

    def _job(self, claimed: Claimed | Throttled | None) -> Job | None:
        if not isinstance(claimed, Claimed):
            return None
        trace, raw = (None, None) if claimed.raw_payload is None else envelope.unwrap(claimed.raw_payload)
        payload = None if raw is None else self.serializer.loads(raw)
        return Job(self.name, claimed.id, payload, raw, claimed.attempt, trace, claimed.group)

    def claimed(self, reply: Sequence[Any] | int) -> Job | Throttled | None:
        """The job in a CLAIM or BCLAIM reply (a waiter reads BCLAIM's on a socket of its own), or
        the rate limit's wait."""
        answer = BY_NAME["claim"].decode(reply)
        return answer if isinstance(answer, Throttled) else self._job(answer)

    def _jobs(self, calls: Sequence[Call], replies: Sequence[Any]) -> list[Job]:
        """The jobs claimed; :attr:`claim_wait_ms` says whether the rate limit held any claim."""
        raise_first(replies)
        answers: list[Any] = []
        for call, reply in zip(calls, replies):
            answer = call.verb.answer(call, reply)
            if call.verb is CLAIMS:  # CLAIMS answers a list of CLAIM answers
                answers += answer
            else:
                answers.append(answer)
        waits = [answer.wait_ms for answer in answers if isinstance(answer, Throttled)]
        self.claim_wait_ms = min(waits) if waits else None
        self.no_lanes = any(answer is NO_LANES for answer in answers)  # identity: `in` would call each Claimed's __eq__
        jobs = (self._job(answer) for answer in answers)
        return [job for job in jobs if job is not None]

    def _pause_read(self) -> Plain:
        return Plain(("HGET", self.keys.meta, "paused"))

    def _paused_claims(self, paused: Any, replies: Sequence[Any]) -> list[Any]:
        """Wire 4's claim replies read beside their pause read, sent in the same round trip (SPEC §4):
        any non-nil reply, an error reply included, means paused. A paused queue's scripts read the
        pause themselves and claim nothing; a refusal of a meta the pause read could not read either
        is that read's, not raised. A claim made as the queue was resumed in between stands."""
        self.claim_paused = paused is not None
        if not self.claim_paused:
            return list(replies)
        return [[] if isinstance(reply, Exception) else reply for reply in replies]

    # -- operations ---------------------------------------------------------------
    def _one(self, call: Call) -> Op[Any]:
        (reply,) = yield [call]
        return _raised(call.verb.answer(call, reply))

    def _plain(self, *args: Any) -> Op[Any]:
        (reply,) = yield [Plain(args)]
        return _raised(reply)

    def unique_call(self, payload: Any, *, id: str | None, priority: int = 0, unique_for: float | None = None,
                    replace: bool = False, delay_ms: int | None = None, group: str | None = None) -> Call:
        """ENQUEUE.UNIQUE (docs/spec.md §14): an enqueue (``delay_ms`` None) or a schedule that
        keeps the id out for ``unique_for`` seconds after the job completes, and with ``replace``
        replaces a waiting job's payload (and, given ``delay_ms``, its due time); with ``group``,
        lane_enqueue_unique, its lane job twin (enqueue only: a lane job waits in its lane)."""
        if id is None:
            raise errors.ConfigurationError("unique_for= and replace= need the job's id=")
        window, replacing = unique_ms(unique_for), int(bool(replace))
        if group is not None:
            return self.build("lane_enqueue_unique", id, self.encode(payload), group, priority, window, replacing)
        return self.build("enqueue_unique", id, self.encode(payload), priority, window, replacing,
                          *([] if delay_ms is None else [delay_ms]))

    def _admit(self, call: Call) -> Op[Enqueued]:
        if call.verb.name not in ("enqueue_unique", "lane_enqueue_unique"):
            return Enqueued(call.argv[0], (yield from self._one(call)))
        reason = yield from self._one(call)
        return Enqueued(call.argv[0], reason is Admission.CREATED, reason)

    def op_enqueue(self, payload: Any, id: str | None, priority: int, unique_for: float | None = None,
                   replace: bool = False, group: str | None = None) -> Op[Enqueued]:
        if unique_for is None and not replace:
            return (yield from self._admit(self.enqueue_call(payload, id=id, priority=priority, group=group)))
        call = self.unique_call(payload, id=id, priority=priority, unique_for=unique_for, replace=replace, group=group)
        return (yield from self._admit(call))

    def op_enqueue_many(self, payloads: Iterable[Any], priority: int, group: str | None = None) -> Op[list[Enqueued]]:
        return (yield from op_enqueued([self.enqueue_call(payload, priority=priority, group=group)
                                        for payload in payloads], self.codec.supports))

    def op_schedule(self, payload: Any, delay_ms: int, id: str | None, priority: int,
                    unique_for: float | None = None, replace: bool = False) -> Op[Enqueued]:
        if unique_for is None and not replace:
            call = self.build("schedule", new_id() if id is None else id, self.encode(payload), delay_ms, priority)
        else:
            call = self.unique_call(payload, id=id, priority=priority, unique_for=unique_for, replace=replace,
                                    delay_ms=delay_ms)
        return (yield from self._admit(call))

    def op_claim(self, lease_ms: int) -> Op[Job | None]:
        jobs = yield from self.op_claim_many(1, lease_ms)
        return jobs[0] if jobs else None

    def op_bclaim(self, lease_ms: int, timeout_ms: int) -> Op[Job | None]:
        if self.wire == 4:
            raise errors.UnsupportedOnWire("bclaim needs wire 6 (trafikey): on wire 4 wait on the wake marker "
                                           f"{self.keys.wake} (BZPOPMIN), then claim")
        call = self.bclaim_call(lease_ms, timeout_ms)
        jobs = self._jobs([call], (yield [call]))
        return jobs[0] if jobs else None

    def op_claim_many(self, count: int, lease_ms: int) -> Op[list[Job]]:
        check_int("count", count, 1, LIMIT_MAX)
        calls = self._claim_calls(count, lease_ms)
        if self.wire == 4:
            paused, *replies = yield [self._pause_read(), *calls]
            return self._jobs(calls, self._paused_claims(paused, replies))
        return self._jobs(calls, (yield calls))

    def op_extend(self, job: JobRef, lease_ms: int, token: str | int | None) -> Op[int]:
        if not _lane_of(job):
            return (yield from self._one(self.build("extend", *_ref(job, token), lease_ms)))
        job_id, held = _ref(job, token)
        (deadline,) = yield from self._one(self.build("lane_extends", lease_ms, self._stamp, job_id, held))
        if not deadline:
            raise errors.LeaseLost("lane_extends", job_id, held, None)
        return deadline

    def op_extend_many(self, jobs: Sequence[JobRef | tuple[str, str]], lease_ms: int) -> Op[list[int]]:
        """EXTENDS for the flat jobs and LANE_EXTENDS for the lane jobs, in one round trip; the
        answers in the order of ``jobs``."""
        check_int("lease_ms", lease_ms, 1)
        lanes = [not isinstance(job, tuple) and bool(_lane_of(job)) for job in jobs]
        pairs = [job if isinstance(job, tuple) else _ref(job, None) for job in jobs]
        calls: list[Call] = []
        for verb, lead, lane in (("extends", (lease_ms,), False), ("lane_extends", (lease_ms, self._stamp), True)):
            mine = [pair for pair, is_lane in zip(pairs, lanes) if is_lane is lane]
            calls += [self.call(verb, *lead, *[part for pair in mine[start:start + EXTENDS_MAX_PAIRS] for part in pair])
                      for start in range(0, len(mine), EXTENDS_MAX_PAIRS)]
        replies = (yield calls) if calls else []  # at most 1000 pairs a command: one per chunk
        raise_first(replies)
        answers = [answer for call, reply in zip(calls, replies) for answer in call.verb.answer(call, reply)]
        flat, lane = iter(answers[:lanes.count(False)]), iter(answers[lanes.count(False):])
        return [next(lane) if is_lane else next(flat) for is_lane in lanes]

    def op_fenced(self, call: Call) -> Op[Any]:
        return (yield from self._one(call))

    def op_complete_many(self, jobs: Sequence[JobRef]) -> Op[list[bool]]:
        """COMPLETE each job; the flat ones as COMPLETES, one command per EXTENDS_MAX_PAIRS
        (docs/spec.md §18). Each job's answer as its COMPLETE's, in the order of ``jobs``."""
        batched = self._batched(jobs)
        if batched is None:
            answers = yield from self.op_settle_many([self.complete_call(job) for job in jobs])
        else:
            answers = yield from self._complete_batched(jobs, batched)
        raise_first([a for a in answers if not isinstance(a, errors.LeaseLost)])
        return [answer is True for answer in answers]

    def _batched(self, jobs: Sequence[JobRef]) -> list[bool] | None:
        """Which of ``jobs`` travel in COMPLETES: the flat ones, when there are several and the
        connection carries the verb (wire 4 always; wire 6 when EMQ.VERSION lists ``completes``);
        None when none does. A lane or flow job keeps its own verb (``complete_call``)."""
        if len(jobs) < 2 or not self.codec.supports("completes"):
            return None
        flat = [not _lane_of(job) and not (isinstance(job, Job) and job.flow) for job in jobs]
        return flat if flat.count(True) > 1 else None

    def _complete_batched(self, jobs: Sequence[JobRef], batched: list[bool]) -> Op[list[Any]]:
        """The answers to ``jobs``, the ``batched`` ones sent as COMPLETES (:func:`chunked`, each pair
        checked as its COMPLETE's would be), the others each as its own verb, in one round trip. A
        per-job call is not built for a batched job: settle_many's grouping of calls would cost each
        a Call more (+22 % of the bare batched loop's client, counted)."""
        pairs = [part for job, batch in zip(jobs, batched) if batch for part in _ref(job, None)]
        batches = chunked(partial(self.build, "completes"), (), pairs, 2)
        answers = yield from self.op_settle_many(
            batches + [self.complete_call(job) for job, batch in zip(jobs, batched) if not batch])
        each, alone = iter(answers[:len(pairs) // 2]), iter(answers[len(pairs) // 2:])
        return [next(each) if batch else next(alone) for batch in batched]

    def completion_calls(self, parts: Sequence[Any], retention_ms: int | None) -> list[Call]:
        """The calls that complete flat jobs this process claimed (the worker's settles), from their
        ARGV one after another: (id, token) pairs, or with ``retention_ms`` (id, token, result)
        triples whose results ``keepable_result`` (echomq/_protocol/results.py) made. Several jobs travel as
        COMPLETES or PUBLISHES, one call per EXTENDS_MAX_PAIRS; one job, or a node without the
        batch verb, as single COMPLETEs or PUBLISHes. None is checked again, and no Call is built
        a job (a Call a job, grouped by :func:`batched_settles`, cost the worker 10 % more
        instructions a job: 132.3k against 120.2k, counted side by side); their answers come back
        one a job (:func:`settle_answers`)."""
        single, lead = ("complete", ()) if retention_ms is None else ("publish", (retention_ms,))
        batch, width = BATCHES[single]
        if len(parts) > width and self.codec.supports(batch):
            return chunked(partial(BY_NAME[batch].build_checked_already, self.keys), lead, parts, width)
        one = BY_NAME[single].build_checked_already
        return [one(self.keys, *parts[at:at + width], *lead) for at in range(0, len(parts), width)]

    def op_settle_many(self, calls: Sequence[Call]) -> Op[list[Any]]:
        """Each job's answer, in one round trip; the calls that batch (:func:`batched_settles`)
        sent as their batch verb, and a batch call's jobs answered one by one (:func:`settle_answers`)."""
        sent, routes = batched_settles(calls, self.codec.supports)
        replies = (yield sent) if sent else []
        return settle_answers(calls, routes, replies)

    def op_lane_claim_many(self, count: int, lease_ms: int) -> Op[list[Job]]:
        """Up to ``count`` LANE_CLAIMs in one round trip: each the next job of the group whose turn it is."""
        check_int("count", count, 1, LIMIT_MAX)
        calls = self._lane_claim_calls(count, lease_ms)
        return self._jobs(calls, (yield calls))

    def op_settle_and_claim(self, calls: Sequence[Call], count: int, lease_ms: int,
                            lanes: int = 0) -> Op[tuple[list[Any], list[Job]]]:
        """Settle ``calls`` (their batches as :meth:`op_settle_many` sends them), then ``count`` flat
        claims and ``lanes`` lane claims, in one round trip (on wire 4 the flat claims ride with their
        pause read: :meth:`_paused_claims`; a lane claim reads the pause itself)."""
        check_int("count", count, 0, LIMIT_MAX)
        check_int("lanes", lanes, 0, LIMIT_MAX)
        check_int("lease_ms", lease_ms, 1)
        claims = self._claim_calls(count, lease_ms)
        lane_claims = self._lane_claim_calls(lanes, lease_ms)
        settles, routes = batched_settles(calls, self.codec.supports)
        ahead = [*settles, *lane_claims]  # what goes before the flat claims
        if self.wire == 6 or not count:
            replies = (yield [*ahead, *claims]) if ahead or claims else []
            sent, claimed = replies[: len(ahead)], replies[len(ahead):]
        else:
            replies = yield [*ahead, self._pause_read(), *claims]
            sent = replies[: len(ahead)]
            claimed = self._paused_claims(replies[len(ahead)], replies[len(ahead) + 1:])
        answers = settle_answers(calls, routes, sent)
        return answers, self._jobs([*lane_claims, *claims], [*sent[len(settles):], *claimed])

    # -- lanes: a group's switches and its counts (docs/lanes-and-flows.md) --------------
    def op_pause_group(self, group: str) -> Op[None]:
        yield from self._one(self.build("lane_pause", group))

    def op_resume_group(self, group: str) -> Op[bool]:
        return (yield from self._one(self.build("lane_resume", group)))

    def op_set_lane_limit(self, k: int | None, group: str | None = None) -> Op[None]:
        """At most ``k`` jobs of ``group`` (None: of every group without its own) at once; k None
        removes the setting (back to the queue's, or to 1)."""
        if k is not None:
            check_int("k", k, 1, LIMIT_MAX)
        yield from self._one(self.build("lane_limit", k or 0, group))

    def op_lanes_waiting(self) -> Op[int]:
        """Groups that may start a job now or once a backoff passes (a paused one does not count)."""
        ready, held = yield [Plain(("ZCARD", self.keys.key(Keyspace.LANES_READY))),
                             Plain(("ZCARD", self.keys.key(Keyspace.LANES_HELD)))]
        raise_first([ready, held])
        return ready + held

    def op_groups(self) -> Op[dict[str, GroupCounts]]:
        """Every group with jobs waiting or running, or paused: its counts (two round trips)."""
        names, paused = yield [Plain(("SMEMBERS", self.keys.key(Keyspace.LANES_GROUPS))),
                               Plain(("SMEMBERS", self.keys.key(Keyspace.LANES_PAUSED)))]
        raise_first([names, paused])
        return (yield from self._group_counts(sorted({text(g) for g in names} | {text(g) for g in paused})))

    def op_group_page(self, most: int) -> Op[tuple[int, dict[str, GroupCounts]]]:
        """How many groups have jobs waiting or running, and the first ``most`` of them by name with
        their counts: a read bounded by ``most`` however many groups there are (the dashboard's)."""
        check_int("most", most, 1, LIMIT_MAX)
        groups = self.keys.key(Keyspace.LANES_GROUPS)
        total, names = yield [Plain(("SCARD", groups)), Plain(("SORT_RO", groups, "ALPHA", "LIMIT", 0, most))]
        raise_first([total, names])
        return total, (yield from self._group_counts([text(g) for g in names]))

    def _group_counts(self, groups: list[str]) -> Op[dict[str, GroupCounts]]:
        """``groups``' counts, in their order, in one round trip."""
        running, limits, paused = (self.keys.key(name) for name in (Keyspace.LANES_RUNNING, Keyspace.LANES_LIMIT,
                                                                    Keyspace.LANES_PAUSED))
        default, *replies = yield [Plain(("HGET", self.keys.meta, "lane_limit"))] + [
            Plain(cmd) for g in groups for cmd in (("ZCARD", self.keys.lane(g)), ("HGET", running, g),
                                                   ("SISMEMBER", paused, g), ("HGET", limits, g))]
        raise_first([default, *replies])
        return {g: GroupCounts(waiting, int(run or 0), bool(is_paused), int(k or default or 1))
                for g, (waiting, run, is_paused, k) in zip(groups, zip(*[iter(replies)] * 4))}

    def op_not_held(self, jobs: Sequence[Job]) -> Op[dict[str, tuple[str | None, str | None]]]:
        """Which of ``jobs`` (claimed by the caller) are no longer in their lease set (``active``,
        ``lanes:active``, ``flow:active``): a cancel or the sweep took them. One ZMSCORE per set in
        one round trip, and only when some are gone, their rows (:meth:`op_rows_now`) in a second."""
        held: dict[str, list[str]] = {}
        for job in jobs:
            where = self.keys.key(Keyspace.FLOW_ACTIVE) if job.flow else \
                self.keys.key(Keyspace.LANES_ACTIVE) if job.group is not None else self.keys.active
            held.setdefault(where, []).append(job.id)
        replies = (yield [Plain(("ZMSCORE", where, *ids)) for where, ids in held.items()]) if held else []
        raise_first(replies)
        gone = [job_id for ids, scores in zip(held.values(), replies) for job_id, score in zip(ids, scores)
                if score is None]
        return (yield from self.op_rows_now(gone)) if gone else {}

    def op_rows_now(self, job_ids: Sequence[str]) -> Op[dict[str, tuple[str | None, str | None]]]:
        """Each job's row as it is now: its ``state`` and ``last_error`` (None: not there), one round trip."""
        rows = (yield [Plain(("HMGET", self.keys.job(job_id), "state", "last_error")) for job_id in job_ids]) \
            if job_ids else []
        raise_first(rows)
        return {job_id: (None if state is None else text(state), None if error is None else text(error))
                for job_id, (state, error) in zip(job_ids, rows)}

    def op_flow_claim(self, count: int, lease_ms: int) -> Op[list[Job]]:
        """Up to ``count`` flow jobs under a lease (FLOW_CLAIM), each marked :attr:`Job.flow`."""
        claimed = yield from self._one(self.build("flow_claim", check_int("lease_ms", lease_ms, 1),
                                                  check_int("count", count, 1, LIMIT_MAX)))
        self.flow_due_ms = claimed.wait_ms if isinstance(claimed, Throttled) else None
        return [] if isinstance(claimed, Throttled) else [
            replace(self._job(one), flow=True, has_children=parent) for one, parent in claimed]

    def op_flow_extend_many(self, jobs: Sequence[JobRef], lease_ms: int) -> Op[list[int]]:
        check_int("lease_ms", lease_ms, 1)
        pairs = [_ref(job, None) for job in jobs]
        calls = [self.call("flow_extends", lease_ms, *[part for pair in pairs[at:at + EXTENDS_MAX_PAIRS] for part in pair])
                 for at in range(0, len(pairs), EXTENDS_MAX_PAIRS)]
        replies = (yield calls) if calls else []
        raise_first(replies)
        return [answer for call, reply in zip(calls, replies) for answer in call.verb.answer(call, reply)]

    def op_flow_reap(self, max_stalled: int, limit: int) -> Op[Sweep]:
        return (yield from self._one(self.build("flow_reap", max_stalled, limit)))

    def op_children(self, parent_ids: Sequence[str], decoded: bool = True) -> Op[list[Children]]:
        """Flow parents' children's results and, under ``continue``, their errors, by child id, in
        one round trip. Each result decoded (:class:`ResultNotKept` for one its child could not
        keep), or with ``decoded`` False as stored, for a reader that decodes it later itself."""
        reads = [Plain(("HGETALL", key(check_job_id(parent))))
                 for parent in parent_ids for key in (self.keys.flow_results, self.keys.flow_failures)]
        replies = (yield reads) if reads else []
        raise_first(replies)
        loads = self.serializer.loads
        return [Children({text(k): result_value(loads, v, text(k)) if decoded else v for k, v in _pairs(results).items()},
                         {text(k): text(v) for k, v in _pairs(failures).items()})
                for results, failures in zip(replies[::2], replies[1::2])]

    def op_promote(self, limit: int) -> Op[int]:
        return (yield from self._one(self.build("promote", limit)))

    def _and_head(self, call: Call, set_key: str) -> Op[tuple[Any, int | None]]:
        """``call``, then the head of ``set_key`` and the server clock in the same round trip:
        (its answer, ms from now until the head's score, None when the set is empty)."""
        reply, head, now = yield [call, Plain(("ZRANGE", set_key, 0, 0, "WITHSCORES")), Plain(("TIME",))]
        raise_first([head, now])
        return _raised(call.verb.answer(call, reply)), None if not head else due_in_ms(head, now)

    def op_server_ms(self) -> Op[int]:
        """The server clock in ms, as the verbs read it (TIME): periodic jobs' ticks are on it."""
        seconds, micros = yield from self._plain("TIME")
        return int(seconds) * 1000 + int(micros) // 1000

    def op_promote_and_next_due(self, limit: int) -> Op[tuple[int, int | None]]:
        return (yield from self._and_head(self.build("promote", limit), self.keys.schedule))

    def op_stalled_check_and_next_expiry(self, max_stalled: int, limit: int) -> Op[tuple[Sweep, int | None]]:
        return (yield from self._and_head(self.build("stalled_check", max_stalled, limit), self.keys.active))

    def op_reschedule(self, job_id: str, delay_ms: int) -> Op[int | None]:
        return (yield from self._one(self.build("reschedule", job_id, delay_ms)))

    def op_reprocess(self, job_id: str) -> Op[bool]:
        """A dead job back to work, its budgets refilled: a flat row by REPROCESS; a lane row, which
        REPROCESS refuses on both wires, by lane_reprocess at its lane's tail (a second round trip
        only for lane rows)."""
        try:
            return (yield from self._one(self.build("reprocess", job_id)))
        except errors.StateError as refused:
            if refused.reply != errors.LANE_ROW:
                raise
        return (yield from self._one(self.build("lane_reprocess", job_id)))

    def op_remove(self, job_id: str) -> Op[State | None]:
        """A waiting or dead job deleted: a flat row by REMOVE; a lane row, which REMOVE refuses on
        both wires, by lane_remove (a second round trip only for lane rows). A flow job is not
        removed (its parent would wait for it forever): cancel it."""
        try:
            return (yield from self._one(self.build("remove", job_id)))
        except errors.StateError as refused:
            if refused.reply == errors.FLOW_CHILD:
                raise errors.StateError(f"{errors.FLOW_CHILD}: a flow job is not removed (its parent waits for "
                                        "it); cancel it (Queue.cancel): it dies and its parent is told") from None
            if refused.reply != errors.LANE_ROW:
                raise
        return (yield from self._one(self.build("lane_remove", job_id)))

    def op_cancel(self, job_id: str) -> Op[bool]:
        """A job stopped from outside, dead with ``cancelled``: an active flat row by CANCEL; a lane
        row, which CANCEL refuses on both wires, by lane_cancel; a flow job by flow_cancel, in any
        state but dead (its parent told). The second round trip is only for refused rows: a flat
        row's own refusal is the one raised."""
        try:
            return (yield from self._one(self.build("cancel", job_id)))
        except errors.StateError as refused:
            if refused.reply == errors.LANE_ROW:
                return (yield from self._one(self.build("lane_cancel", job_id)))
            try:
                return (yield from self._one(self.build("flow_cancel", job_id)))
            except errors.StateError as not_flow:
                if not_flow.reply == NOT_A_FLOW_JOB:
                    raise refused from None
                raise

    def op_purge(self, older_than_ms: int, limit: int) -> Op[int]:
        check_int("older_than_ms", older_than_ms, 0)  # the verb's age_ms, named for the caller
        return (yield from self._one(self.build("purge", older_than_ms, limit)))

    def op_drain(self, limit: int) -> Op[int]:
        return (yield from self._one(self.build("drain", limit)))

    def op_drain_lanes(self, limit: int) -> Op[int]:
        """Delete up to ``limit`` lane jobs waiting in their groups' lanes, each by LANE_REMOVE (so a
        lane left empty leaves the round, as a removal does): the groups, their lanes' heads, then the
        removals, three round trips. Returns how many were deleted; a job started meanwhile (LANE_REMOVE
        refuses an active row) is left to run."""
        check_int("limit", limit, 1, LIMIT_MAX)
        groups = yield from self._plain("SMEMBERS", self.keys.key(Keyspace.LANES_GROUPS))
        heads = (yield [Plain(("ZRANGE", self.keys.lane(text(g)), 0, limit - 1)) for g in sorted(groups)]) if groups else []
        raise_first(heads)
        calls = [self.build("lane_remove", text(job_id)) for head in heads for job_id in head][:limit]
        replies = (yield calls) if calls else []
        answers = [call.verb.answer(call, reply) for call, reply in zip(calls, replies)]
        raise_first([a for a in answers if isinstance(a, Exception) and not isinstance(a, errors.StateError)])
        return sum(1 for a in answers if isinstance(a, State))

    def op_stalled_check(self, max_stalled: int, limit: int) -> Op[Sweep]:
        return (yield from self._one(self.build("stalled_check", max_stalled, limit)))

    def op_pause(self) -> Op[None]:
        yield from self._plain("HSET", self.keys.meta, "paused", 1)

    def op_set_rate_limit(self, rate: str | RateLimit | None) -> Op[None]:
        """The queue's rate limit (every claim on either wire checks it, docs/spec.md §13), or
        None to lift it."""
        parsed = None if rate is None else parse_rate_limit(rate)
        if not self.codec.carries("claim", "rated"):
            raise errors.UnsupportedOnWire("a rate limit needs a node whose EMQ.VERSION lists claim.rate: "
                                           "upgrade the trafikey module (an older one would ignore it)")
        if parsed is None:
            yield from self._plain("HDEL", self.keys.meta, "rate_limit", "rate_window")
        else:
            yield from self._plain("HSET", self.keys.meta, "rate_limit", parsed.limit, "rate_window", parsed.window_ms)

    def op_rate_limit(self) -> Op[RateLimit | None]:
        """The queue's rate limit as its meta holds it (None: none)."""
        limit, window = yield from self._plain("HMGET", self.keys.meta, "rate_limit", "rate_window")
        if limit is None or int(limit) <= 0:
            return None
        return RateLimit(int(limit), int(window))

    def op_resume(self) -> Op[None]:
        yield from self._plain("HDEL", self.keys.meta, "paused")  # a refusal (a wrong-typed meta) stops here
        if self.wire == 4:
            # a worker blocked on the wake marker claims at once; wire 6's blocked claimers hear the HDEL
            yield from self._plain("ZADD", self.keys.wake, 0, "w")

    # -- following a job: status, result, events (the bus, docs/spec.md §12) --------
    def op_seen(self, job_id: str) -> Op[Seen]:
        """One round trip: the row's state, last_error and traceback, and the completed record."""
        row, record = yield [Plain(("HMGET", self.keys.job(job_id), *ROW_FIELDS)),
                             Plain(("HGETALL", self.keys.done(job_id)))]
        raise_first([row, record])
        if not isinstance(record, dict):  # a client without the HGETALL callback answers the flat list
            record = dict(zip(record[::2], record[1::2]))
        return Seen.of(row, record)

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

    def op_publish(self, job: JobRef, result: Any, retention_ms: int, token: str | int | None) -> Op[None]:
        data = encode_result(self.serializer, result, MAX_RESULT_BYTES)
        yield from self._one(self.publish_call(job, data, retention_ms=retention_ms, token=token))

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
        return [decode_event(stream_id, _pairs(fields)) for stream_id, fields in entries]

    def op_last_event_id(self) -> Op[str]:
        """The newest entry's id: where a ``"$"`` reader starts (read once, so nothing after it is missed)."""
        newest = yield from self._plain("XREVRANGE", self.keys.events, "+", "-", "COUNT", 1)
        return text(newest[0][0]) if newest else "0-0"

    def op_counts(self) -> Op[Counts]:
        return (yield from self._one(self.call("counts")))

    def op_state(self, job_id: str) -> Op[State | None]:
        return (yield from self._one(self.build("state", job_id)))

    def op_job(self, job_id: str) -> Op[dict[str, Any] | None]:
        row = yield from self._plain("HGETALL", self.keys.job(check_job_id(job_id)))
        if not row:
            return None
        if not isinstance(row, dict):  # a client without the HGETALL callback answers the flat list
            row = dict(zip(row[::2], row[1::2]))
        fields = {text(k): v for k, v in row.items()}
        raw = fields.pop("payload", None)
        decoded: dict[str, Any] = {k: text(v) for k, v in fields.items()}
        decoded["payload"] = None if raw is None else self.serializer.loads(envelope.unwrap(raw)[1])
        return decoded

    def op_ids(self, state: State | str, offset: int, count: int) -> Op[list[tuple[str, float]]]:
        try:
            key = self.keys.key(STATE_SETS[State(state)])
        except ValueError:
            raise errors.ConfigurationError(f"bad state {state!r}: one of {[s.value for s in State]}") from None
        check_int("offset", offset, 0)
        check_int("count", count, 1)  # count 0 would ask ZRANGE for offset..offset-1: all of it at offset 0
        return scored((yield from self._plain("ZRANGE", key, offset, offset + count - 1, "WITHSCORES")))

    def op_metrics(self) -> Op[dict[str, int]]:
        names = ("completed", "failed")
        replies = yield [Plain(("HGET", self.keys.metrics(name), "count")) for name in names]
        raise_first(replies)
        counts = {}
        for name, reply in zip(names, replies):
            try:
                counts[name] = int(reply or 0)
            except ValueError:  # a count written by hand: this queue's numbers cannot be read, the rest can
                raise errors.CounterError(f"EMQ hash value is not an integer: {self.keys.metrics(name)} count "
                                          f"holds {reply!r}") from None
        return counts


def _stream_entries(reply: Any) -> list[Any]:
    """XREAD's entries of its one stream (RESP2: [[key, entries]]; RESP3: {key: entries}); none on a timeout."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(reply.values())[0]
    return reply[0][1]


def _pairs(fields: Any) -> dict[Any, Any]:
    """An entry's (or a hash's) fields as a dict (raw commands answer the flat list)."""
    return fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2]))
