"""What every family of the queue's operations shares (no I/O): the claimed :class:`Job`, an
operation's shape (:data:`Op`), what a connection tells the operations (:class:`Codec`), and
:class:`QueueBase`: one queue's keys, codec and serializer, how a call is built and how one round
trip is answered. The families (``admission``, ``claims``, ``settles``, ``lanes``, ``flows``,
``bus``, ``control``, ``reads``) each add their operations to it; :class:`~echomq._core.core.QueueCore`
is all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, Protocol, Sequence, TypeVar

from .._protocol import envelope
from .. import errors
from .._protocol.keys import Keyspace, check_job_id
from .._protocol.serializers import JSON, Serializer, encode
from .._protocol.shown import type_name
from .._protocol.verbs import BY_NAME, Call, Claimed, Plain, Throttled, build_call, check_int, text

T = TypeVar("T")
RoundTrip = list["Call | Plain"]
#: An operation: yields round trips, is sent their replies, returns the answer.
Op = Generator[RoundTrip, list[Any], T]


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
    #: EchoMQ's own headers it was enqueued with (its task's name, per-job overrides: the envelope's
    #: ``emq`` object, :mod:`echomq._protocol.envelope`); None for a job enqueued without
    headers: dict[str, Any] | None = None

    @property
    def token(self) -> str:
        return str(self.attempt)

    @property
    def idempotency_key(self) -> str:
        """Stable per attempt: use it for downstream writes a retry must not repeat."""
        return f"{self.id}:{self.attempt}"


JobRef = Job | str


def claimed_job(queue: str, job_id: str, payload: Any, raw: bytes | None, attempt: int,
                trace: dict[str, str] | None, group: str | None) -> Job:
    """``Job(queue, job_id, payload, raw, attempt, trace, group)``, field for field, made as a claim's
    decode makes one a job: the frozen dataclass's __init__ sets each field through
    object.__setattr__, a quarter of the worker's decode of a no-op job."""
    job = object.__new__(Job)
    job.__dict__.update(queue=queue, id=job_id, payload=payload, raw_payload=raw, attempt=attempt, trace=trace,
                        group=group, flow=False, has_children=False, headers=None)
    return job


def lane_of(job: JobRef) -> str | None:
    """The group of a claimed lane job (an id given alone is taken as a flat job)."""
    return job.group if isinstance(job, Job) else None


def id_and_token(job: JobRef, token: str | int | None) -> tuple[str, str]:
    """(id, token) from a Job, or from an id and an explicit token."""
    if isinstance(job, Job):
        return job.id, job.token if token is None else str(token)
    if token is None:
        raise errors.ConfigurationError(f"job {job!r}: pass the Job, or its id with token=")
    return check_job_id(job), str(token)


def raise_first(replies: Sequence[Any]) -> None:
    """Raise the first error reply of a round trip, if any."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


def scored(reply: Sequence[Any]) -> list[tuple[str, float]]:
    """ZRANGE ... WITHSCORES's (id, score) pairs, whatever the protocol (RESP2: one flat list; RESP3: pairs)."""
    pairs = reply if reply and isinstance(reply[0], (list, tuple)) else zip(reply[::2], reply[1::2])
    return [(text(member), float(score)) for member, score in pairs]


def unless_error(answer: Any) -> Any:
    """An answer as it is, or raised when it is an error."""
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


class Codec(Protocol):
    """What the operations read of a connection (no I/O): its wire, and what the node's wire
    serves. Both clients' connections are one (:class:`echomq._client.connection.WireCodec`);
    named here so that this layer imports nothing above it."""

    wire: int

    def supports(self, verb_name: str) -> bool: ...

    def carries(self, verb_name: str, argument: str) -> bool: ...


class QueueBase:
    """One queue: its keys, its connection's codec and its serializer; the calls it builds and how
    one round trip is answered. Every family of operations extends it."""

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

    # -- building calls (pure) --------------------------------------------------
    def call(self, verb: str, *argv: Any) -> Call:
        """A call exactly as given (no argument checks)."""
        return build_call(verb, self.keys, argv)

    def build(self, verb: str, *argv: Any) -> Call:
        """A call with its arguments checked against SPEC §3."""
        return BY_NAME[verb].build(self.keys, *argv)

    def _build_checked_already(self, verb: str, *argv: Any) -> Call:
        return BY_NAME[verb].build_checked_already(self.keys, *argv)

    def encode(self, payload: Any, headers: dict[str, Any] | None = None) -> bytes:
        """The payload's bytes, checked client-side: encodable and within ``max_payload_bytes``
        (then wrapped in the envelope when tracing is on or EchoMQ's own ``headers`` are given:
        docs/observability.md, docs/spec.md §21)."""
        return envelope.wrap(self.name, encode_payload(self.serializer, payload, self.max_payload_bytes), headers)

    def encode_many(self, payloads: Sequence[Any]) -> list[bytes]:
        """Each payload's bytes as :meth:`encode` makes them (no headers), every one checked before
        any is returned: one pass of the serializer, the limit read once, the envelope only where a
        producer hook wraps (a span a job). A payload that does not pass is refused as
        :meth:`encode` refuses it."""
        most = self.max_payload_bytes
        try:
            datas = list(map(self.serializer.dumps, payloads))
            fits = most is None or max(map(len, datas), default=0) <= most
        except (TypeError, ValueError):
            fits = False
        if not fits:  # the first payload that does not pass, refused as one alone would be
            datas = [encode_payload(self.serializer, payload, most) for payload in payloads]
        if envelope.producer is not None:
            datas = [envelope.wrap(self.name, data) for data in datas]
        return datas


    @property
    def _stamp(self) -> int:
        """Lane scripts stamp lease_epoch where the native verbs do (wire 6): the restart exemption."""
        return 1 if self.wire == 6 else 0

    def _rated(self) -> tuple[int, ...]:
        """CLAIM's and BCLAIM's late ``rated``: sent wherever it is carried (a module without
        ``claim.rate`` has no rate limit to hold a claim)."""
        return (1,) if self.codec.carries("claim", "rated") else ()

    def _job(self, claimed: Claimed | Throttled | None) -> Job | None:
        """The Job in a claim's answer (None for a rate limit's wait, or nothing claimed)."""
        if not isinstance(claimed, Claimed):
            return None
        headers, raw = (None, None) if claimed.raw_payload is None else envelope.unwrap(claimed.raw_payload)
        payload = None if raw is None else self.serializer.loads(raw)
        if headers is None:  # the common case: nothing wrapped
            return claimed_job(self.name, claimed.id, payload, raw, claimed.attempt, None, claimed.group)
        return Job(self.name, claimed.id, payload, raw, claimed.attempt, envelope.trace_of(headers), claimed.group,
                   headers=envelope.own_of(headers))

    # -- one round trip ------------------------------------------------------------ ---------------------------------------------------------------
    def _one(self, call: Call) -> Op[Any]:
        (reply,) = yield [call]
        return unless_error(call.verb.answer(call, reply))

    def _plain(self, *args: Any) -> Op[Any]:
        (reply,) = yield [Plain(args)]
        return unless_error(reply)

    def op_server_ms(self) -> Op[int]:
        """The server clock in ms, as the verbs read it (TIME): periodic jobs' ticks and an enqueue's
        ``eta`` are on it."""
        seconds, micros = yield from self._plain("TIME")
        return int(seconds) * 1000 + int(micros) // 1000


def pairs(fields: Any) -> dict[Any, Any]:
    """An entry's (or a hash's) fields as a dict (raw commands answer the flat list)."""
    return fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2]))
