"""Every error EchoMQ raises, one base class, one class per SPEC error code.

    EchoMQError
    ├── ConfigurationError        bad input to the library (queue name, id, numbers)
    │   └── CrossSlotFlow         a flow whose queues would cross cluster slots
    ├── ServerNotFound            no valkey-server binary to start
    ├── ServerStartError          the embedded server did not come up
    │   └── PortInUse             another process holds the port it was given
    ├── ConnectionFailed          no Valkey answers at the URL, or the link failed (refused, reset, timeout)
    ├── BrandError                the node is unbranded or carries the other wire's brand
    ├── WireError                 the node cannot serve the wire asked for (no module, missing tokens)
    ├── UnsupportedOnWire         a verb or script the connection's wire does not carry
    ├── LeaseLost                 a token-fenced verb answered 0 or EMQSTATE: the caller no longer holds the job
    ├── JobFailed                 Queue.result: the job is dead (last_error, traceback)
    ├── JobNotFound               Queue.result: no such job (never seen, or past its retention)
    ├── ResultNotKept             Queue.result: the job completed, but its return value could not be kept
    ├── UnknownTask               a job names a task the worker's app has not (dead at once, never retried)
    ├── StartupFailed             a worker's @app.on_startup hook raised: it claimed nothing and stops
    └── CommandRefused            the server refused a verb; `code` is the reply's first word
        ├── ShapeError            EMQSHAPE
        ├── LayoutError           EMQLAYOUT
        ├── ArgumentError         EMQARG
        ├── PermissionDenied      NOPERM
        ├── WrongType             WRONGTYPE
        ├── StateError            EMQSTATE
        ├── CounterError          EMQ (not an integer / would overflow)
        └── HostError             EMQHOST
"""

from __future__ import annotations

__all__ = [
    "ArgumentError", "BrandError", "CommandRefused", "ConfigurationError", "ConnectionFailed", "CounterError",
    "CrossSlotFlow", "EchoMQError", "HostError", "JobFailed", "JobNotFound", "JobTimeout", "LayoutError", "LeaseLost",
    "PayloadError", "PermissionDenied", "PortInUse", "ResultNotKept", "ServerNotFound", "ServerStartError", "ShapeError",
    "StartupFailed", "StateError", "UnknownTask", "UnsupportedOnWire", "WireError", "WrongType",
]


class EchoMQError(Exception):
    """The base of every EchoMQ error."""


class ConfigurationError(EchoMQError, ValueError):
    """Bad input to the library: the message names the value and what is accepted."""


class CrossSlotFlow(ConfigurationError):
    """A flow whose queues are on different cluster slots: it cannot be admitted in one step
    (docs/lanes-and-flows.md "Flows on a cluster"); nothing was sent."""


class ServerNotFound(EchoMQError):
    pass


class ServerStartError(EchoMQError):
    pass


class PortInUse(ServerStartError):
    """The port asked for is held by a process the embedded server did not start; nothing was started."""

    def __init__(self, port: int) -> None:
        super().__init__(f"port {port} on 127.0.0.1 is already in use by another process: "
                         "pick another port, or leave it out for a free one")
        self.port = port


class ConnectionFailed(EchoMQError):
    pass


class BrandError(EchoMQError):
    pass


class WireError(EchoMQError):
    pass


class UnsupportedOnWire(EchoMQError):
    pass


class LeaseLost(EchoMQError):
    """The job's token no longer matches (or the row is gone, or is no longer active): someone
    else holds it, or it settled. ``refusal`` is the server's EMQSTATE refusal when wire 6
    refused the settle of a row that is not active (wire 4 answers 0 there), else None."""

    def __init__(self, verb: str, job_id: str, token: str, refusal: "CommandRefused | None" = None) -> None:
        why = f" ({refusal.reply})" if refusal is not None else ""
        super().__init__(f"{verb}: lease lost for job {job_id!r} (token {token}): the job is no longer held "
                         f"with this token{why}")
        self.verb = verb
        self.job_id = job_id
        self.token = token
        self.refusal = refusal


class JobFailed(EchoMQError):
    """The job went dead: ``last_error`` and, when the worker stored one, ``traceback``."""

    def __init__(self, job_id: str, last_error: str, traceback: str | None) -> None:
        super().__init__(f"job {job_id!r} failed: {last_error}")
        self.job_id = job_id
        self.last_error = last_error
        self.traceback = traceback


class JobNotFound(EchoMQError, LookupError):
    """No row and no completed record: never enqueued, or completed past its retention."""


class ResultNotKept(EchoMQError):
    """The job completed (its handler ran once and returned), but its return value could not be kept:
    one its task's serializer cannot encode, or over the result limit. ``type`` is the value's type,
    ``size`` its encoded bytes when it was too large (None when it could not be encoded), ``reason``
    the serializer's or the limit's word. The job is not run again for it."""

    def __init__(self, job_id: str, type_name: str, size: int | None, reason: str) -> None:
        super().__init__(f"job {job_id!r} completed, but its result was not kept: {reason} (a {type_name} "
                         f"returned); return what the task's serializer encodes, within its limit (large data: "
                         "store it elsewhere and return a reference)")
        self.job_id = job_id
        self.type = type_name
        self.size = size
        self.reason = reason


class JobTimeout(EchoMQError):
    """A handler ran past its task's ``timeout``: the attempt is failed with this error (one
    attempt spent) and the handler's own outcome, whenever it comes, is dropped."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the handler ran past its timeout of {timeout_s:g} s")
        self.timeout_s = timeout_s


class StartupFailed(EchoMQError):
    """An ``@app.on_startup`` hook raised: the worker claimed nothing and stops (``emq worker``
    exits 1 with this line; the hook's traceback is in the log)."""


class PayloadError(EchoMQError):
    """A payload the serializer cannot handle: refused client-side when it cannot be encoded or
    is over ``max_payload_bytes``; a job whose payload its task cannot decode goes dead at once,
    since no retry can read it. ``size``: the encoded bytes of a value refused as too large (None
    when it could not be encoded)."""

    def __init__(self, message: str, *, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size


class UnknownTask(EchoMQError):
    """A job names a task (its envelope's header) that the worker's app does not have on the job's
    queue, or names none on a queue of several tasks: no worker of that app can run it, so it goes
    dead at once with this error (``max_attempts`` is not consulted); ``emq reprocess`` runs it again
    once a worker that has the task serves the queue."""


class CommandRefused(EchoMQError):
    """An error reply from the server; ``code`` is its first word, ``reply`` the whole text."""

    code = ""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class ShapeError(CommandRefused):
    code = "EMQSHAPE"


class LayoutError(CommandRefused):
    code = "EMQLAYOUT"


class ArgumentError(CommandRefused):
    code = "EMQARG"


class PermissionDenied(CommandRefused):
    code = "NOPERM"


class WrongType(CommandRefused):
    code = "WRONGTYPE"


class StateError(CommandRefused):
    code = "EMQSTATE"


#: The refusal of a flat verb given a lane row (docs/spec.md §16): both wires answer it.
LANE_ROW = "EMQSTATE lane row is not native"
#: ... given a flow child (docs/spec.md §15), on both wires.
FLOW_CHILD = "EMQSTATE flow child is not native"


class CounterError(CommandRefused):
    code = "EMQ"


class HostError(CommandRefused):
    code = "EMQHOST"


REFUSALS: dict[str, type[CommandRefused]] = {
    cls.code: cls
    for cls in (ShapeError, LayoutError, ArgumentError, PermissionDenied, WrongType, StateError, CounterError, HostError)
}


def refusal(reply: str) -> CommandRefused:
    """The typed error for an error reply, by its first word (unknown codes stay CommandRefused)."""
    code = reply.split(" ", 1)[0]
    cls = REFUSALS.get(code, CommandRefused)
    err = cls(reply)
    if cls is CommandRefused:
        err.code = code
    return err
