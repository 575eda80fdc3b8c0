"""Flows: a parent job that runs once all its children have finished (docs/lanes-and-flows.md "Flows").

A flow is a tree of :class:`Flow` nodes: a node with children is a parent, which waits; a leaf is
ready at once. :meth:`echomq.Queue.enqueue_flow` admits the whole tree in one script call
(``flow_enqueue``), so its keys must share one cluster slot. Every flow job is claimed, renewed,
settled and recovered by the flow scripts (``scripts/flow_*.lua``, on both wires): a child's
outcome is told to its parent in the same atomic step that settles the child.

The planning here is pure; :class:`~echomq.Queue` sends what it plans. :class:`FlowOps` holds a
flow job's operations once admitted: its claim, renewal and settles, and what a parent's children
left it. The reaper's one entry point for flow leases is :meth:`echomq.Queue.reap_flows` (``flow_reap``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from valkey.crc import key_slot

from .admission import Enqueued
from .base import JobRef, Op, QueueBase, id_and_token, pairs, raise_first
from .claims import Claims
from ..errors import ConfigurationError, CrossSlotFlow
from .._protocol.ids import new_id
from .._protocol.keys import Keyspace, check_job_id
from .._protocol.results import result_value
from .._protocol.verbs import (BY_NAME, EXTENDS_MAX_PAIRS, LIMIT_MAX, PRIORITY_MAX, Call, Plain, Sweep, Throttled, check_int,
                               text)

#: What a parent does when one of its children dies (its retries spent, or stalled past max_stalled):
#: ``fail`` -- the parent dies at once (``last_error`` names the child), its other children run on
#: but tell it nothing; ``ignore`` -- the child counts as finished, with no result; ``continue`` --
#: the child counts as finished and the parent's handler sees its error (``ctx.children_failures()``).
CHILD_FAILURE = ("fail", "ignore", "continue")
#: Where a flow job is, by its row's ``state``: its queue's flow sets (the dead set is the queue's own).
FLOW_STATE_SETS = {"pending": Keyspace.FLOW_PENDING, "active": Keyspace.FLOW_ACTIVE,
                   "scheduled": Keyspace.FLOW_SCHEDULE, "waiting": Keyspace.FLOW_WAITING, "dead": "dead"}
#: The most jobs one flow admits (one script call carries seven arguments per job).
FLOW_MAX_JOBS = LIMIT_MAX
FLOW_ENQUEUE = BY_NAME["flow_enqueue"]


@dataclass(frozen=True)
class Flow:
    """A job of a flow: ``Flow("reports", payload, children=[Flow("pages", p) for p in parts])``.

    A child given as a plain value (not a Flow) is a leaf in its parent's queue. A child may itself
    have children (flows nest). ``on_child_failure`` is read for a parent only (:data:`CHILD_FAILURE`)."""

    queue: str
    payload: Any = None
    children: Sequence[Any] = ()
    id: str | None = None
    priority: int = 0
    on_child_failure: str = "fail"
    _kids: tuple["Flow", ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Keyspace(self.queue)
        check_int("priority", self.priority, 0, PRIORITY_MAX)
        if self.id is not None:
            check_job_id(self.id)
        if self.on_child_failure not in CHILD_FAILURE:
            raise ConfigurationError(f"bad on_child_failure {self.on_child_failure!r}: one of {list(CHILD_FAILURE)}")
        kids = tuple(c if isinstance(c, Flow) else Flow(self.queue, c) for c in self.children)
        object.__setattr__(self, "_kids", kids)


@dataclass(frozen=True)
class Plan:
    """A flow as FLOW_ENQUEUE's call: the root's id, and the queues it uses."""

    root_id: str
    queues: tuple[str, ...]
    call: Call


def slot_of(queue: str) -> int:
    """The cluster slot of every key of ``queue`` (its hashtag is its whole name)."""
    return key_slot(Keyspace(queue).base.encode())


def same_slot_name(prefix: str, queue: str) -> str:
    """A queue name ``<prefix>.<n>`` (the smallest n) whose keys share ``queue``'s cluster slot: how
    a flow may span several queues on a cluster, where each queue's hashtag is its own name."""
    want = slot_of(queue)
    for n in range(1 << 20):
        name = f"{prefix}.{n}"
        if slot_of(name) == want:
            return name
    raise ConfigurationError(f"no name {prefix}.<n> shares the slot of {queue!r}")  # pragma: no cover


def check_one_slot(queues: Sequence[str]) -> None:
    """Refuse (:class:`CrossSlotFlow`) a flow whose queues are on different cluster slots."""
    slots = {queue: slot_of(queue) for queue in queues}
    if len(set(slots.values())) > 1:
        root = queues[0]
        named = ", ".join(f"{q} (slot {s})" for q, s in slots.items())
        raise CrossSlotFlow(
            f"a flow is admitted in one atomic step, so on a cluster its queues must share a slot; {named} do not. "
            f"Put the flow's jobs in one queue, or name the other queues into the root's slot: "
            f"echomq.same_slot_name({queues[-1]!r}, {root!r}) = {same_slot_name(queues[-1], root)!r}")


def plan(root: Flow, encode: Callable[[Any], bytes], *, cluster: bool) -> Plan:
    """FLOW_ENQUEUE's call for ``root``: every job once, each parent before its children, ids
    minted where not given; refused client-side when an id repeats, the flow is too large, or (on
    a cluster) it would cross slots."""
    queues: list[str] = []
    argv: list[Any] = []
    ids: set[str] = set()
    todo: list[tuple[Flow, int]] = [(root, 0)]
    while todo:
        node, parent = todo.pop(0)
        job_id = node.id or new_id()
        if job_id in ids:
            raise ConfigurationError(f"job id {job_id!r} is twice in the flow: a flow's ids are unique")
        ids.add(job_id)
        if len(ids) > FLOW_MAX_JOBS:
            raise ConfigurationError(f"a flow holds at most {FLOW_MAX_JOBS} jobs: split it into nested flows "
                                     "enqueued one after another, or into several flows")
        if node.queue not in queues:
            queues.append(node.queue)
        position = len(ids)
        argv += [queues.index(node.queue) + 1, job_id, encode(node.payload), node.priority, parent,
                 len(node._kids), node.on_child_failure]
        todo += [(kid, position) for kid in node._kids]
    if cluster:
        check_one_slot(queues)
    keys = tuple(Keyspace(q).base for q in queues)
    return Plan(argv[1], tuple(queues), Call(FLOW_ENQUEUE, keys, tuple(argv)))


def op_enqueue_flow(flow_plan: Plan) -> Op[Enqueued]:
    """Admit a planned flow: :class:`~echomq.Enqueued` of its root (``created`` False when the root's
    id has a row: nothing was written)."""
    (reply,) = yield [flow_plan.call]
    raise_first([reply])
    return Enqueued(flow_plan.root_id, reply == 1)


@dataclass(frozen=True)
class Children:
    """What a flow parent's children left it: their results (decoded with the reading queue's
    serializer) and, under ``on_child_failure="continue"``, the errors of those that died, by child id."""

    results: dict[str, Any]
    failures: dict[str, str]


class FlowOps(QueueBase):
    """A flow job's claim, renewal and settles (the flow scripts, on both wires), and its children's results."""

    def flow_complete_call(self, job: JobRef, result: bytes, *, retention_ms: int,
                           token: str | int | None = None) -> Call:
        """FLOW_COMPLETE: a flow job's PUBLISH; ``result`` (already encoded) goes to its parent,
        and is kept as its completed record for ``retention_ms`` (0: no record)."""
        return self.build("flow_complete", *id_and_token(job, token), result, retention_ms)

    def flow_fail_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                       token: str | int | None = None, traceback: str | None = None) -> Call:
        """FLOW_FAIL: a flow job's FAILURES.INCR; a death is told to its parent."""
        return self.build("flow_fail", *id_and_token(job, token), error, max_attempts, backoff_ms, traceback or "")

    def flow_delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        """FLOW_DELAY: a flow job's DELAY (to flow:schedule for ``delay_ms``, no budget spent)."""
        return self.build("flow_delay", *id_and_token(job, token), delay_ms)

    def flow_release_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        """FLOW_RELEASE: a flow job's REQUEUE (back to flow:pending, nothing counted)."""
        return self.build("flow_release", *id_and_token(job, token))

    def op_flow_claim(self, count: int, lease_ms: int) -> Op[Claims]:
        """Up to ``count`` flow jobs under a lease (FLOW_CLAIM), each marked :attr:`Job.flow`; with none,
        :attr:`Claims.due_ms` says when to look again."""
        claimed = yield from self._one(self.build("flow_claim", check_int("lease_ms", lease_ms, 1),
                                                  check_int("count", count, 1, LIMIT_MAX)))
        if isinstance(claimed, Throttled):
            return Claims(due_ms=claimed.wait_ms)
        return Claims(replace(self._job(one), flow=True, has_children=parent) for one, parent in claimed)

    def op_flow_extend_many(self, jobs: Sequence[JobRef], lease_ms: int) -> Op[list[int]]:
        check_int("lease_ms", lease_ms, 1)
        held = [id_and_token(job, None) for job in jobs]
        calls = [self.call("flow_extends", lease_ms, *[part for pair in held[at:at + EXTENDS_MAX_PAIRS] for part in pair])
                 for at in range(0, len(held), EXTENDS_MAX_PAIRS)]
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
        return [Children({text(k): result_value(loads, v, text(k)) if decoded else v for k, v in pairs(results).items()},
                         {text(k): text(v) for k, v in pairs(failures).items()})
                for results, failures in zip(replies[::2], replies[1::2])]
