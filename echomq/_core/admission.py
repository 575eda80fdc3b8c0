"""Admission (no I/O): a job into its queue -- ENQUEUE, SCHEDULE, their unique twin
ENQUEUE.UNIQUE (docs/spec.md §14), and a lane job's (``lane_enqueue``, with ``group``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .. import errors
from .base import Op, QueueBase, RoundTrip, raise_first
from .batching import batched_settles, settle_answers
from .._protocol.ids import new_id, new_ids
from .._protocol.keys import Keyspace
from .._protocol.verbs import BY_NAME, Admission, Call, check_arg


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    created: bool  #: False when nothing was made: the id had a row, or is within its unique window
    #: why: created, exists, replaced (debounce) or unique (within the window); a plain
    #: enqueue's is CREATED or EXISTS, read from ``created``
    reason: Admission = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.reason is None:
            object.__setattr__(self, "reason", Admission.CREATED if self.created else Admission.EXISTS)


def enqueued_of(ids: Sequence[str], answers: Sequence[bool]) -> list[Enqueued]:
    """Each plain enqueue's :class:`Enqueued` (``answers``: created or not; refusals raised before),
    made field by field through the slots: the frozen __init__'s own sets and __post_init__ cost
    twice as much, once a job of ``enqueue_many``."""
    made, set_id, set_created, set_reason = object.__new__, _ID.__set__, _CREATED.__set__, _REASON.__set__
    out = []
    for job_id, created in zip(ids, answers):
        one = made(Enqueued)
        set_id(one, job_id)
        set_created(one, created)
        set_reason(one, Admission.CREATED if created else Admission.EXISTS)
        out.append(one)
    return out


_ID, _CREATED, _REASON = Enqueued.__dict__["id"], Enqueued.__dict__["created"], Enqueued.__dict__["reason"]


def unique_ms(unique_for: float | None) -> int:
    """``unique_for`` (seconds, >= 0; None: no window) as ENQUEUE.UNIQUE's unique_ms."""
    if unique_for is None:
        return 0
    if isinstance(unique_for, bool) or not isinstance(unique_for, (int, float)) or not unique_for >= 0:
        raise errors.ConfigurationError(f"bad unique_for {unique_for!r}: seconds >= 0")
    return round(unique_for * 1000)


#: jobs per ENQUEUES in enqueue_many, measured side by side on both wires by bench/bulk_enqueue.py
#: (docs/benchmarks.md, *Bulk enqueue: batch size and pipeline depth*). Every command goes in one
#: round trip, which the connection streams (``echomq._client.connection.streamed``).
ENQUEUES_SIZE = 500
_ENQUEUES = BY_NAME["enqueues"]


def op_enqueued(calls: Sequence[Call], carried: Callable[[str], bool], batch: int = ENQUEUES_SIZE
                ) -> Op[list[Enqueued]]:
    """Send admission calls of any kind (lane jobs; plain ones where the node lacks ENQUEUES), a
    queue's ENQUEUEs as its ENQUEUES of ``batch`` where the connection carries it
    (:func:`batched_settles`), all in one round trip: each one's :class:`Enqueued`. The first
    refusal is raised once every call was answered."""
    sent, routes = batched_settles(calls, carried, batch)
    answers = settle_answers(calls, routes, (yield sent))
    raise_first(answers)
    return enqueued_of([call.argv[0] for call in calls], answers)


def enqueues_calls(queues: Sequence[tuple[Keyspace, Sequence[int]]], ids: Sequence[str], datas: Sequence[bytes],
                   priority: int, batch: int = ENQUEUES_SIZE) -> tuple[RoundTrip, list[Sequence[int]]]:
    """ENQUEUES straight from the jobs (pure: no ENQUEUE call a job): for each queue, its jobs
    (their places in ``ids`` and ``datas``, each job's default id and stored bytes) ``batch`` a
    command, every value checked already (``priority`` once); and each command's jobs."""
    sent: RoundTrip = []
    members: list[Sequence[int]] = []
    for keyspace, places in queues:
        for start in range(0, len(places), batch):
            part = places[start:start + batch]
            argv: list[Any] = []
            for i in part:
                argv += (ids[i], datas[i], priority)
            sent.append(_ENQUEUES.build_checked_already(keyspace, *argv))
            members.append(part)
    return sent, members


def enqueues_answers(count: int, members: Sequence[Sequence[int]], replies: Sequence[Any]) -> list[Any]:
    """Each of ``count`` jobs' answer from the replies to :func:`enqueues_calls`' commands: created
    or not, or its refusal (its own element's, or its command's when refused whole)."""
    answers: list[Any] = [None] * count
    for part, reply in zip(members, replies):
        if type(reply) is list:
            for i, one in zip(part, reply):
                answers[i] = one if isinstance(one, Exception) else one == 1
        else:
            for i in part:
                answers[i] = reply
    return answers


def op_enqueues(queues: Sequence[tuple[Keyspace, Sequence[int]]], ids: Sequence[str], datas: Sequence[bytes],
                priority: int, batch: int = ENQUEUES_SIZE) -> Op[list[Enqueued]]:
    """Plain jobs into their queues as ENQUEUES (:func:`enqueues_calls`), in one round trip: each
    job's :class:`Enqueued`, in the order of ``ids``; the first refusal raised once all were answered."""
    sent, members = enqueues_calls(queues, ids, datas, priority, batch)
    answers = enqueues_answers(len(ids), members, (yield sent))
    raise_first(answers)
    return enqueued_of(ids, answers)


def op_enqueue_into(queues: Sequence[tuple[AdmissionOps, Sequence[int]]], payloads: Sequence[Any], priority: int,
                    group: str | None = None, batch: int = ENQUEUES_SIZE) -> Op[list[Enqueued]]:
    """``payloads`` into their queues (each queue with its payloads' places), in one round trip:
    every payload encoded and checked before anything is sent; plain jobs, two or more, as
    ENQUEUES where the connection carries it (:func:`op_enqueues`, their ids minted in the
    payloads' order), any other as its own call (:func:`op_enqueued`); ``batch`` jobs an ENQUEUES."""
    if not payloads:
        return []
    datas: list[bytes] = [b""] * len(payloads)
    queue_of: list[AdmissionOps] = [queues[0][0]] * len(payloads)
    for queue, places in queues:
        for i, data in zip(places, queue.encode_many([payloads[i] for i in places])):
            datas[i] = data
            queue_of[i] = queue
    carried = queue_of[0].codec.supports
    if group is None and len(payloads) > 1 and carried("enqueues"):
        priority = check_arg("priority", priority)
        return (yield from op_enqueues([(queue.keys, places) for queue, places in queues], new_ids(len(datas)), datas,
                                       priority, batch))
    return (yield from op_enqueued([queue.admission_call(data, id=None, priority=priority, group=group)
                                    for queue, data in zip(queue_of, datas)], carried, batch))


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
        payloads = list(payloads)
        return (yield from op_enqueue_into([(self, range(len(payloads)))], payloads, priority, group))

    def op_schedule(self, payload: Any, delay_ms: int, id: str | None, priority: int,
                    unique_for: float | None = None, replace: bool = False,
                    headers: dict[str, Any] | None = None) -> Op[Enqueued]:
        check_arg("delay_ms", delay_ms)  # a schedule needs its delay: op_admit reads None as now
        return (yield from self.op_admit(self.encode(payload, headers), id=id, priority=priority, delay_ms=delay_ms,
                                         unique_for=unique_for, replace=replace))
