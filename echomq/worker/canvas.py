"""Calling tasks: ``send_email.delay(payload)``, ``.enqueue(payload, delay=...)``, and calls put
together -- a chain (each step gets the previous step's result), a group (calls side by side) and a
group followed by a step (the step gets the list of their results) -- all on flows
(docs/lanes-and-flows.md "Flows"), sync and asyncio.

    add.s(2, 3)                                   # a call, not yet sent: a Signature
    chain(add.s(2, 3), double.s(), show.s())      # show(double(add(2, 3)))
    group(fetch.s(u) for u in urls).then(merge.s())   # merge([fetch(u1), fetch(u2), ...])

A chain of n steps is one flow of n jobs, admitted in one script call: its last step is the flow's
root, each step the parent of the one before it, so a step runs once the step before it completed
and reads its result (the flow keeps it for its parent: ``ctx.children_results()``). The worker puts
that result first among the step's arguments (its job's ``prev`` header). A group's members are
siblings under the step that follows them, in their order (their ids are minted in it). So a canvas
is what a flow is: at most 10,000 jobs, its steps' tasks share one serializer (a step reads its
children's results with its own), and on a cluster every queue it uses shares one slot
(:class:`~echomq.CrossSlotFlow` otherwise; ``echomq.same_slot_name``). A group alone is not a flow: its
members are admitted side by side in one round trip, each its own job (or flow).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Sequence, TypeVar, Union

from .. import aio
from .._client.partitioned import drive, on
from .._core.core import Enqueued, Op, QueueCore, raise_first
from .._core.flows import Flow, plan
from ..errors import ConfigurationError
from .._protocol.ids import new_id
from .._protocol.verbs import Call
from .calling import PREV_ALL, PREV_ONE, UNSET, JobOptions, _Unset, bind, job_options, own_headers, stored_call
from .handles import AsyncJobHandle, JobHandle
from .policy import Backoff
from .producing import Producer, Sent, asend, send

if TYPE_CHECKING:
    from .._client.queue import Queue

V = TypeVar("V", covariant=True)
W = TypeVar("W")
#: a chain step's stand-in for the result it will get, when its call is checked at build
_PREVIOUS = object()


class Caller:
    """A task as its app sends it: what ``.delay``, ``.enqueue``, ``.s`` and their awaitable twins do
    (set on the decorated function by ``@app.task``)."""

    def __init__(self, producer: Producer, task: Sent, check_timeout: Callable[[object, str], float | None]) -> None:
        self.producer = producer
        self.task = task
        self.check_timeout = check_timeout

    def delay(self, *args: Any, **kwargs: Any) -> JobHandle[Any]:
        """Send a job of this task with these arguments, now; its handle."""
        return self.s(*args, **kwargs).enqueue()

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncJobHandle[Any]:
        return await self.s(*args, **kwargs).aenqueue()

    def enqueue(self, *args: Any, delay: float | timedelta | None = None, eta: datetime | None = None,
                priority: int = 0, id: str | None = None, unique_for: float | None = None, group: str | None = None,
                max_attempts: int | None = None, backoff: Backoff | None = None,
                timeout: float | None | _Unset = UNSET) -> JobHandle[Any]:
        """Send a job of this task with these positional arguments and per-job options (keyword
        arguments of the handler: ``task.s(...).enqueue(...)``)."""
        return Signature(self, args, {}).enqueue(delay=delay, eta=eta, priority=priority, id=id, unique_for=unique_for,
                                                 group=group, max_attempts=max_attempts, backoff=backoff,
                                                 timeout=timeout)

    async def aenqueue(self, *args: Any, delay: float | timedelta | None = None, eta: datetime | None = None,
                       priority: int = 0, id: str | None = None, unique_for: float | None = None,
                       group: str | None = None, max_attempts: int | None = None, backoff: Backoff | None = None,
                       timeout: float | None | _Unset = UNSET) -> AsyncJobHandle[Any]:
        return await Signature(self, args, {}).aenqueue(
            delay=delay, eta=eta, priority=priority, id=id, unique_for=unique_for, group=group,
            max_attempts=max_attempts, backoff=backoff, timeout=timeout)

    def s(self, *args: Any, **kwargs: Any) -> Signature[Any]:
        """A call of this task, not yet sent: for :func:`chain` and :func:`group` (and ``.enqueue()``)."""
        return Signature(self, args, kwargs)


@dataclass(frozen=True)
class Signature(Generic[V]):
    """A call of a task, not yet sent (``task.s(*args, **kwargs)``). As a chain's step after the first
    its arguments are the ones after the previous step's result."""

    caller: Caller
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: JobOptions = field(default_factory=JobOptions)  #: what ``set`` gave it

    @property
    def task(self) -> Sent:
        return self.caller.task

    def __repr__(self) -> str:
        called = [*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())]
        return f"{self.task.name}.s({', '.join(called)})"

    def set(self, *, priority: int = 0, max_attempts: int | None = None, backoff: Backoff | None = None,
            timeout: float | None | _Unset = UNSET) -> Signature[V]:
        """This call with its own priority and overrides of its task's policy (as a step of a canvas too)."""
        return replace(self, options=job_options(self.task.name, priority=priority, max_attempts=max_attempts,
                                                 backoff=backoff, timeout=timeout,
                                                 check_timeout=self.caller.check_timeout))

    def then(self, step: Signature[W]) -> Chain[W]:
        """A chain: ``step`` runs once this call completed, its result first among ``step``'s arguments."""
        return Chain((self, step))

    def _options(self, given: dict[str, Any]) -> JobOptions:
        options = job_options(self.task.name, check_timeout=self.caller.check_timeout, **given)
        own = self.options
        return replace(options, priority=options.priority or own.priority,
                       max_attempts=options.max_attempts if options.max_attempts is not None else own.max_attempts,
                       backoff=options.backoff or own.backoff,
                       timeout=options.timeout if options.timeout is not UNSET else own.timeout)

    def _stored(self) -> tuple[Any, bool]:
        args, kwargs = bind(self.task.form, self.task.name, self.args, self.kwargs)
        return stored_call(self.task.form, args, kwargs)

    def enqueue(self, **options: Any) -> JobHandle[V]:
        """Send this call now (the per-job options of ``task.enqueue``); its handle."""
        chosen = self._options(options)
        payload, args_form = self._stored()
        return send(self.caller.producer, self.task, payload, args_form, chosen)

    async def aenqueue(self, **options: Any) -> AsyncJobHandle[V]:
        chosen = self._options(options)
        payload, args_form = self._stored()
        return await asend(self.caller.producer, self.task, payload, args_form, chosen)

    def delay(self) -> JobHandle[V]:
        return self.enqueue()

    async def adelay(self) -> AsyncJobHandle[V]:
        return await self.aenqueue()


@dataclass(frozen=True)
class Node:
    """One job of a canvas's flow: its call, whether it takes its children's results first (``prev``:
    a chain step's), and its children (the steps before it)."""

    call: Signature[Any]
    prev: str | None = None
    children: tuple[Node, ...] = ()

    def __post_init__(self) -> None:
        task = self.call.task
        bind(task.form, task.name, (_PREVIOUS, *self.call.args) if self.prev else self.call.args, self.call.kwargs)
        for one in (self, *self.children) if self.children else ():
            if one.call.task.partitions > 1:
                raise ConfigurationError(f"task {one.call.task.name}'s queue {one.call.task.queue!r} is partitioned: "
                                         "a chain is one flow, in one slot, and a partitioned queue spreads over many")
        for child in self.children:
            if child.call.task.serializer != task.serializer:
                raise ConfigurationError(
                    f"task {task.name} reads the result of {child.call.task.name} with its own serializer, and theirs "
                    "differ: a chain's tasks share one serializer")

    def stored(self) -> tuple[Any, bool]:
        """What its job stores (:func:`~echomq.worker.calling.stored_call`); a step that gets a result
        first stores the rest of its call, in the args form."""
        if self.prev is None:
            return self.call._stored()
        return {"args": list(self.call.args), "kwargs": dict(self.call.kwargs)}, True

    def flow(self, core: QueueCore, job_id: str) -> Flow:
        """This node and those below it as a :class:`~echomq.Flow` of payloads already encoded (each
        with its own headers, by its own queue's serializer), ids minted in the members' order."""
        payload, args_form = self.stored()
        task = self.call.task
        mine = QueueCore(task.queue, core.codec, task.serializer, core.max_payload_bytes)
        data = mine.encode(payload, own_headers(task.name, args_form, self.call.options, self.prev))
        kids = [child.flow(core, new_id()) for child in self.children]
        return Flow(task.queue, data, kids, id=job_id, priority=self.call.options.priority)


def _admission(tree: Node, queue: Any, cluster: bool, root_id: str | None = None) -> tuple[QueueCore, Call]:
    """The call that admits ``tree`` and the queue of its root: a flow (FLOW_ENQUEUE, one script
    call) when it has children, else a plain admission of its one job."""
    if not tree.children:
        task, options = tree.call.task, tree.call.options
        core: QueueCore = queue if isinstance(queue, QueueCore) else queue.partition(id=root_id)
        payload, args_form = tree.stored()
        data = core.encode(payload, own_headers(task.name, args_form, options))
        return core, core.admission_call(data, id=root_id, priority=options.priority)
    flow = tree.flow(queue, root_id or new_id())
    return queue, plan(flow, lambda data: data, cluster=cluster).call


def _op_admit_all(calls: Sequence[Call]) -> Op[list[tuple[str, bool]]]:
    """Send admissions (plain ones and flows) in one round trip: each one's (id, created)."""
    replies = yield list(calls)
    raise_first(replies)
    return [(call.argv[1], reply == 1) if call.verb.name == "flow_enqueue" else
            (call.argv[0], bool(call.verb.answer(call, reply))) for call, reply in zip(calls, replies)]


def _producer_of(trees: Sequence[Node]) -> Producer:
    producers = {id(tree.call.caller.producer): tree.call.caller.producer for tree in trees}
    if len(producers) > 1:
        raise ConfigurationError("a group's calls are tasks of one app (each app sends through its own connection)")
    return next(iter(producers.values()))


@dataclass(frozen=True)
class Group:
    """Calls side by side (``group(a.s(1), b.s(2))``): alone, each is sent as its own job (or flow)
    in one round trip; followed by a step (``.then(step)``), the step gets the list of their results."""

    members: tuple[Signature[Any] | Chain[Any], ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ConfigurationError("an empty group: give it at least one call (task.s(...))")
        for member in self.members:
            if not isinstance(member, (Signature, Chain)):
                raise ConfigurationError(f"a group's member is a call (task.s(...)) or a chain, not {member!r}")

    def then(self, step: Signature[W]) -> Chain[W]:
        """``step`` runs once every member completed, the list of their results (in the members'
        order) first among its arguments."""
        return Chain((self, step))

    def _trees(self) -> list[Node]:
        return [member._tree() if isinstance(member, Chain) else Node(member) for member in self.members]

    def enqueue(self) -> list[JobHandle[Any]]:
        """Send every member now, in one round trip: each one's handle (a chain's: its last step's)."""
        trees = self._trees()
        producer = _producer_of(trees)
        built = [_admission(tree, producer.queue(tree.call.task), producer.connection.cluster) for tree in trees]
        created = drive(producer.connection, on(None, _op_admit_all([call for _, call in built])))
        return [JobHandle(core, job_id, created=made)  # type: ignore[arg-type]
                for (core, _), (job_id, made) in zip(built, created)]

    async def aenqueue(self) -> list[AsyncJobHandle[Any]]:
        trees = self._trees()
        producer = _producer_of(trees)
        connection = await producer.aconnection()
        built = [_admission(tree, await producer.aqueue(tree.call.task), connection.cluster) for tree in trees]
        created = await aio.drive(connection, on(None, _op_admit_all([call for _, call in built])))
        return [AsyncJobHandle(core, job_id, created=made)  # type: ignore[arg-type]
                for (core, _), (job_id, made) in zip(built, created)]


Step = Union[Signature[Any], Group, "Chain[Any]"]


@dataclass(frozen=True)
class Chain(Generic[V]):
    """Steps one after another (``chain(a.s(1), b.s(), c.s())``): each runs once the one before it
    completed and gets its result first (after a group: the list of its members' results)."""

    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        flat: list[Signature[Any] | Group] = []
        for step in self.steps:
            if isinstance(step, Chain):
                flat += step.steps  # type: ignore[arg-type]
            elif isinstance(step, (Signature, Group)):
                flat.append(step)
            else:
                raise ConfigurationError(f"a chain's step is a call (task.s(...)), a group or a chain, not {step!r}")
        if not flat:
            raise ConfigurationError("an empty chain: give it at least one call (task.s(...))")
        if isinstance(flat[-1], Group):
            raise ConfigurationError("a chain ends with a call: a group at its end has no step to gather its results "
                                     "(add .then(task.s()), or send the group alone)")
        if any(isinstance(step, Group) for step in flat[1:]):
            raise ConfigurationError(
                "a group cannot follow a step in a chain: each of its members would need the step's result, and a "
                "flow job has one parent (let the step enqueue the group itself)")
        object.__setattr__(self, "steps", tuple(flat))
        self._tree()  # every call checked now, before anything is sent

    def then(self, step: Signature[W]) -> Chain[W]:
        return Chain((self, step))

    def _tree(self) -> Node:
        first, *rest = self.steps
        if isinstance(first, Group):  # a group's step comes next (a chain ends with a call)
            gather, *rest = rest
            tree = Node(gather, PREV_ALL, tuple(first._trees()))  # type: ignore[arg-type]
        else:
            tree = Node(first)  # type: ignore[arg-type]
        for step in rest:
            tree = Node(step, PREV_ONE, (tree,))  # type: ignore[arg-type]
        return tree

    def enqueue(self, *, id: str | None = None) -> JobHandle[V]:
        """Send the chain now, as one flow (one script call); the handle of its last step's job
        (``id``: that job's id)."""
        tree = self._tree()
        producer = tree.call.caller.producer
        core, call = _admission(tree, producer.queue(tree.call.task), producer.connection.cluster, id)
        ((job_id, made),) = drive(producer.connection, on(None, _op_admit_all([call])))
        return JobHandle(core, job_id, created=made)  # type: ignore[arg-type]

    async def aenqueue(self, *, id: str | None = None) -> AsyncJobHandle[V]:
        tree = self._tree()
        producer = tree.call.caller.producer
        connection = await producer.aconnection()
        core, call = _admission(tree, await producer.aqueue(tree.call.task), connection.cluster, id)
        ((job_id, made),) = await aio.drive(connection, on(None, _op_admit_all([call])))
        return AsyncJobHandle(core, job_id, created=made)  # type: ignore[arg-type]


def chain(*steps: Signature[Any] | Group | Chain[Any]) -> Chain[Any]:
    """Steps one after another: ``chain(a.s(1), b.s(), c.s())`` runs ``c(b(a(1)))``, one job each, as
    one flow (``group(...)`` first: the next step gets its members' results as a list)."""
    return Chain(steps)


def group(*members: Signature[Any] | Chain[Any] | Iterable[Signature[Any] | Chain[Any]]) -> Group:
    """Calls side by side: ``group(a.s(1), a.s(2))`` or ``group(a.s(n) for n in range(10))``."""
    if len(members) == 1 and not isinstance(members[0], (Signature, Chain)):
        members = tuple(members[0])  # type: ignore[arg-type]
    return Group(tuple(members))  # type: ignore[arg-type]
