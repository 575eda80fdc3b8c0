"""How a task is called: its handler's calling convention, the headers a job carries for it, the
per-job options checked before anything is sent, and what the worker makes of a job's headers.
Pure: no I/O.

**Two kinds of job.** A job enqueued without a task's name (``Queue.enqueue``, ``emq enqueue``, a
flow's ``Flow`` node) is run as ever: its queue's one task gets ``(payload, ctx)[:arity]``. A job
made by a task (``send_email.delay(...)``, ``.enqueue(...)``, ``.s(...)``) names it in its envelope
(:mod:`echomq._protocol.envelope`, ``emq.task``) and carries the *call*:

* a handler whose call is **one argument** (``def send_email(payload)``, ``(payload, ctx)``) stores
  that argument as the payload itself, encoded by the task's serializer: the job reads as one
  enqueued with ``Queue.enqueue`` would;
* any other call (``def add(x, y)``, defaults, ``*args``, keyword arguments) stores
  ``{"args": [...], "kwargs": {...}}`` and says so (``emq.args``).

**The context.** A handler's parameter annotated :class:`~echomq.JobContext` (or
``AsyncJobContext``), or one named ``ctx`` with no annotation, is its context: the worker passes it
and a caller never does (``send_email.delay(payload)`` for ``def send_email(payload, ctx)``).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ..errors import ConfigurationError, UnknownTask
from .._protocol.envelope import TASK_NAME_MAX, task_named
from .._protocol.shown import quoted
from .._protocol.keys import check_job_id
from .._protocol.verbs import PRIORITY_MAX, check_int
from .policy import MAX_DELAY_MS, Backoff

#: the name a handler's context parameter has when it is not annotated
CONTEXT_NAME = "ctx"
#: the class names a context parameter is annotated with (a string annotation is read by its last part)
CONTEXT_TYPES = ("JobContext", "AsyncJobContext")
#: a chain step's first argument: its one child's result (``one``), or its children's in order (``all``)
PREV_ONE, PREV_ALL = "one", "all"


T = TypeVar("T")


class _Unset(enum.Enum):
    UNSET = "unset"


#: an option not given (``timeout=None`` means "no limit", so None cannot mean "not given")
UNSET = _Unset.UNSET


def check_task_name(name: object) -> str:
    """A task's name: 1 to TASK_NAME_MAX printable characters, no spaces (shown by ``emq inspect``,
    the dashboard and the worker's metrics; a job's header carries it)."""
    if not isinstance(name, str) or not 0 < len(name) <= TASK_NAME_MAX or not name.isprintable() or " " in name:
        raise ConfigurationError(f"bad task name {name!r}: 1 to {TASK_NAME_MAX} printable characters, no spaces")
    return name


# -- the calling convention -------------------------------------------------------------------


def _is_context(param: inspect.Parameter) -> bool:
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return param.name == CONTEXT_NAME
    if isinstance(annotation, str):
        return annotation.strip("'\"").rsplit(".", 1)[-1] in CONTEXT_TYPES
    return isinstance(annotation, type) and any(c.__name__ in CONTEXT_TYPES for c in annotation.__mro__)


@dataclass(frozen=True)
class CallForm:
    """How a handler is called for a job that names its task (read once, when it is registered)."""

    #: the call a caller makes: the handler's parameters but its context; None when the handler's
    #: signature cannot be read (a builtin): any arguments are taken
    signature: inspect.Signature | None
    context: str | None = None  #: the context parameter's name (None: the handler takes none)
    #: the context's place among the positional parameters (None: keyword-only): it is passed there when
    #: it is positional-only or a positional argument comes after it (arq's ``f(ctx, url)``), else by name
    context_at: int | None = None
    single: str | None = None  #: the call's one parameter when it is one argument: the payload is that argument
    context_positional_only: bool = False


def call_form(fn: Callable[..., Any]) -> CallForm:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return CallForm(None)
    params = list(signature.parameters.values())
    contexts = [p for p in params if _is_context(p) and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(contexts) > 1:
        raise ConfigurationError(f"the handler {getattr(fn, '__qualname__', fn)!r} has two context parameters "
                                 f"({', '.join(p.name for p in contexts)}): it takes one")
    context = contexts[0] if contexts else None
    rest = [p for p in params if p is not context]
    one = rest[0] if len(rest) == 1 else None
    single = one.name if one is not None and one.kind in (one.POSITIONAL_ONLY, one.POSITIONAL_OR_KEYWORD) \
        and one.default is one.empty else None
    if context is None:
        return CallForm(signature.replace(parameters=rest), None, None, single)
    positional = context.kind in (context.POSITIONAL_ONLY, context.POSITIONAL_OR_KEYWORD)
    return CallForm(signature.replace(parameters=rest), context.name, params.index(context) if positional else None,
                    single, context.kind is context.POSITIONAL_ONLY)


def bind(form: CallForm, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...],
                                                                                              dict[str, Any]]:
    """A call checked against the handler's parameters before anything is sent: the arguments as
    given, or :class:`ConfigurationError` naming the call the handler takes."""
    if form.signature is None:
        return tuple(args), dict(kwargs)
    try:
        bound = form.signature.bind(*args, **kwargs)
    except TypeError as exc:
        hint = "" if form.context is not None or "missing" not in str(exc) else (
            f" (a handler's context, which the worker passes, is its parameter named {CONTEXT_NAME} or annotated "
            "echomq.JobContext)")
        raise ConfigurationError(f"task {name} is called as {name}{form.signature}: {exc}{hint}") from None
    return tuple(bound.args), dict(bound.kwargs)


def stored_call(form: CallForm, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
    """What a job stores for a bound call: (the payload, whether it is the args form)."""
    if form.single is not None:
        return (args[0] if args else kwargs[form.single]), False
    return {"args": list(args), "kwargs": dict(kwargs)}, True


# -- per-job options ----------------------------------------------------------------------------


@dataclass(frozen=True)
class JobOptions:
    """A job's options, checked: where and when it is admitted, and its overrides of the task's policy."""

    delay_ms: int | None = None
    at_ms: int | None = None  #: ``eta`` as Unix ms (compared with the server's clock when admitted)
    priority: int = 0
    id: str | None = None
    unique_for: float | None = None
    group: str | None = None
    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | None | _Unset = UNSET


def _delay_ms(delay: object) -> int | None:
    if delay is None:
        return None
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_DELAY_MS / 1000:
        raise ConfigurationError(f"bad delay {delay!r}: seconds (or a timedelta) from 0 to {MAX_DELAY_MS // 1000}")
    return round(seconds * 1000) or None


def _at_ms(eta: object) -> int | None:
    if eta is None:
        return None
    if not isinstance(eta, datetime):
        raise ConfigurationError(f"bad eta {eta!r}: a datetime with a timezone")
    if eta.tzinfo is None or eta.utcoffset() is None:
        raise ConfigurationError(f"eta {eta.isoformat()} is a naive datetime: which zone it is in is unknown; give it "
                                 "one (datetime.now(timezone.utc) + timedelta(...), or a zone's tzinfo)")
    return math.floor(eta.timestamp() * 1000)


def check_max_attempts(max_attempts: object, what: str) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigurationError(f"bad max_attempts {max_attempts!r} for {what}: an integer >= 1")
    return max_attempts


def job_options(what: str, *, delay: float | timedelta | None = None, eta: datetime | None = None, priority: int = 0,
                id: str | None = None, unique_for: float | None = None, group: str | None = None,
                max_attempts: int | None = None, backoff: Backoff | None = None,
                timeout: float | None | _Unset = UNSET,
                check_timeout: Callable[[object, str], float | None]) -> JobOptions:
    """Every option checked, each refusal naming the option and what it takes (nothing is sent)."""
    if delay is not None and eta is not None:
        raise ConfigurationError("delay= and eta= both given: a job is due once (give one)")
    delay_ms, at_ms = _delay_ms(delay), _at_ms(eta)
    check_int("priority", priority, 0, PRIORITY_MAX)
    if id is not None:
        check_job_id(id)
    if unique_for is not None:
        if id is None:
            raise ConfigurationError("unique_for= needs the job's id=: the window keeps that id out")
        if isinstance(unique_for, bool) or not isinstance(unique_for, (int, float)) or not unique_for >= 0:
            raise ConfigurationError(f"bad unique_for {unique_for!r}: seconds >= 0")
    if group is not None and (delay_ms is not None or at_ms is not None):
        raise ConfigurationError(f"a lane job (group {group!r}) cannot be delayed at enqueue: it waits in its group's "
                                 "lane (leave out the delay, or the group)")
    if max_attempts is not None:
        check_max_attempts(max_attempts, what)
    if backoff is not None and not isinstance(backoff, Backoff):
        raise ConfigurationError(f"bad backoff {backoff!r} for {what}: an echomq.Backoff(base_ms=..., max_ms=...)")
    if timeout is not UNSET:
        timeout = check_timeout(timeout, what)
    return JobOptions(delay_ms, at_ms, priority, id, unique_for, group, max_attempts, backoff, timeout)


# -- the headers a job carries, and the worker's reading of them -----------------------------------


def own_headers(task: str, args_form: bool, options: JobOptions = JobOptions(),
                prev: str | None = None) -> dict[str, Any]:
    """EchoMQ's own headers for a task's job: its name, its call's form, its overrides."""
    own: dict[str, Any] = {"task": task}
    if args_form:
        own["args"] = 1
    if prev is not None:
        own["prev"] = prev
    if options.max_attempts is not None:
        own["max_attempts"] = options.max_attempts
    if options.backoff is not None:
        own["backoff"] = dataclasses.asdict(options.backoff)
    if options.timeout is not UNSET:
        own["timeout"] = options.timeout
    return own


class BadHeaders(ValueError):
    """A job's own headers (or its stored call) cannot be read: the job goes dead at once."""


@dataclass(frozen=True)
class Overrides:
    """A job's own policy, from its headers: each None when the task's holds (``timeout`` UNSET)."""

    max_attempts: int | None = None
    backoff: Backoff | None = None
    timeout: float | None | _Unset = UNSET


NO_OVERRIDES = Overrides()


def overrides_of(own: Mapping[str, Any], check_timeout: Callable[[object, str], float | None]) -> Overrides:
    """The overrides a job's headers carry, checked as a caller's options are (they come from the
    job, which anyone who may write the queue wrote): :class:`BadHeaders` when one is malformed."""
    if "max_attempts" not in own and "backoff" not in own and "timeout" not in own:
        return NO_OVERRIDES
    try:
        max_attempts = None if own.get("max_attempts") is None else check_max_attempts(own["max_attempts"], "the job")
        backoff = own.get("backoff")
        if backoff is not None:
            if not isinstance(backoff, dict) or set(backoff) - {f.name for f in dataclasses.fields(Backoff)}:
                raise ConfigurationError(f"bad backoff {backoff!r}: base_ms, factor, max_ms, jitter")
            backoff = Backoff(**backoff)
        timeout = check_timeout(own["timeout"], "the job") if "timeout" in own else UNSET
    except (ConfigurationError, TypeError) as exc:
        raise BadHeaders(f"the job's own headers cannot be read: {exc}") from None
    return Overrides(max_attempts, backoff, timeout)


def stored_arguments(payload: Any, own: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The call a job stored: ``{"args", "kwargs"}`` in the args form, else the payload as the one argument."""
    if not own.get("args"):
        return [payload], {}
    if not isinstance(payload, dict) or not isinstance(payload.get("args"), list) \
            or not isinstance(payload.get("kwargs", {}), dict):
        raise BadHeaders('the job says its payload is a call ({"args": [...], "kwargs": {...}}), and it is not one')
    return list(payload["args"]), dict(payload.get("kwargs", {}))


def previous(own: Mapping[str, Any], results: Mapping[str, Any] | None) -> list[Any]:
    """A chain step's first argument, from its flow children's results by child id: none when the
    job is no step (no ``prev``); its one child's result (``one``); or every child's, in the order of
    their ids, which the canvas minted in its members' order (``all``)."""
    prev = own.get("prev")
    if prev is None:
        return []
    if results is None or prev not in (PREV_ONE, PREV_ALL):
        raise BadHeaders(f"the job takes its flow children's results first (prev {prev!r}), and it is not a flow "
                         "parent whose children completed")
    ordered = [results[child] for child in sorted(results)]
    if prev == PREV_ALL:
        return [ordered]
    if len(ordered) != 1:
        raise BadHeaders(f"the job takes its one child's result, and {len(ordered)} children left one")
    return ordered


def handler_call(form: CallForm, args: list[Any], kwargs: dict[str, Any], ctx: Any) -> tuple[list[Any],
                                                                                             dict[str, Any]]:
    """The handler's arguments for a job's call, its context put where the handler takes it."""
    if form.context is None:
        return args, kwargs
    if form.context_at is not None and (form.context_positional_only or len(args) > form.context_at):
        return [*args[:form.context_at], ctx, *args[form.context_at:]], kwargs
    return args, {**kwargs, form.context: ctx}


def task_for(named: Mapping[str, T], queue: str, own: Mapping[str, Any] | None) -> T:
    """The task a claimed job runs: the one its headers name, else its queue's one task.
    :class:`UnknownTask` when the worker's app has no task of that name on the queue, or the job
    names none and the queue has several: no retry could run it."""
    name = task_named(own)
    if name is None:
        if len(named) == 1:
            return next(iter(named.values()))
        raise UnknownTask(f"the job names no task, and queue {queue!r} has {len(named)} ({', '.join(sorted(named))}): "
                          "enqueue it through one (task.delay(...)), or give the queue one task")
    found = named.get(name)
    if found is None:
        raise UnknownTask(f"no task {quoted(name)} on queue {queue!r} in this worker's app (it has "
                          f"{', '.join(sorted(named))}): run a worker whose app has it, or check the name; then "
                          "emq reprocess runs the job again")
    return found


def named_call(form: CallForm, own: Mapping[str, Any], payload: Any, ctx: Any,
               results: Mapping[str, Any] | None) -> tuple[list[Any], dict[str, Any]]:
    """The handler's arguments for a job that names its task: its stored call, a chain step's
    previous result(s) first, its context where it takes it. :class:`BadHeaders` when the job's
    call cannot be read."""
    args, kwargs = stored_arguments(payload, own)
    return handler_call(form, [*previous(own, results), *args], kwargs, ctx)


def job_run(named: Mapping[str, T], queue: str, own: Mapping[str, Any] | None,
            check_timeout: Callable[[object, str], float | None]) -> tuple[T, Overrides, bool]:
    """What a worker runs for a claimed job: its task (:func:`task_for`), the job's overrides of that
    task's policy, and whether the handler takes the job's stored call (:func:`named_call`: the job
    names its task) or, as ever, ``(payload, ctx)[:arity]``. :class:`UnknownTask` or
    :class:`BadHeaders`: no attempt could run it (dead at once)."""
    task = task_for(named, queue, own)
    if not own:
        return task, NO_OVERRIDES, False
    return task, overrides_of(own, check_timeout), task_named(own) is not None
