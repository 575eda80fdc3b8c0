"""OpenTelemetry traces for EchoMQ, built on :mod:`echomq.hooks` and the trace envelope.

    pip install "echomq[otel]"

    from echomq import otel
    otel.instrument()  # once per process: producers and workers alike

What it records (docs/observability.md):

* ``create <queue>``, a PRODUCER span for every payload enqueued or scheduled, a child of
  the span current where ``enqueue`` was called. It lasts no time: it marks the message,
  and its context is what the job carries (its trace envelope) to whoever runs it.
* ``emq <verb>``, a CLIENT span for every round trip that carries an enqueue or schedule
  (``verbs=`` to choose others), from ``verb.start`` to ``verb.stop`` or ``verb.error``.
* ``process <queue>``, a CONSUMER span for every job a worker runs, from ``job.claimed`` to
  its outcome (``job.completed``, ``job.retried`` ...), whose parent is the job's
  ``create`` span: the enqueue and the run are one trace across processes. A job enqueued
  without tracing starts a trace of its own. While its handler runs (``job.started`` to
  ``job.returned``, on the handler's thread or task) it is the current span: spans the
  handler opens are its children, and jobs it produces carry its context.
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any, Callable, Iterable

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(f"echomq.otel needs opentelemetry-api: pip install 'echomq[otel]' ({exc})") from exc

from . import __version__, hooks
from ._protocol import envelope

__all__ = ["instrument", "PRODUCING"]

PRODUCING = ("enqueue", "schedule")  #: the verbs whose round trips get a CLIENT span by default
SYSTEM = "echomq"

#: outcome event -> (the span's status, the data field that says why)
OUTCOMES: dict[str, tuple[StatusCode, str | None]] = {
    "job.completed": (StatusCode.OK, None),
    "job.retried": (StatusCode.ERROR, "error"),
    "job.dead": (StatusCode.ERROR, "error"),
    "job.delayed": (StatusCode.UNSET, None),
    "job.lost": (StatusCode.ERROR, "reason"),
    "job.requeued": (StatusCode.UNSET, None),
    "job.abandoned": (StatusCode.ERROR, "reason"),
}

_uninstrument: Callable[[], None] | None = None


def instrument(tracer_provider: Any = None, *, verbs: Iterable[str] = PRODUCING) -> Callable[[], None]:
    """Trace this process's enqueues and job runs; returns the function that stops it. A second
    call replaces the first."""
    global _uninstrument
    if _uninstrument is not None:
        _uninstrument()
    tracer = trace.get_tracer("echomq", __version__, tracer_provider=tracer_provider)
    traced_verbs = frozenset(verbs)
    round_trip: contextvars.ContextVar[Any] = contextvars.ContextVar("echomq_otel_round_trip", default=None)
    runs: dict[tuple[int, str, str, int], Any] = {}
    lock = threading.Lock()

    def create(queue: str) -> envelope.Carrier:
        span = tracer.start_span(f"create {queue}", kind=SpanKind.PRODUCER, attributes={
            "messaging.system": SYSTEM, "messaging.operation.type": "create", "messaging.destination.name": queue})
        carrier: envelope.Carrier = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        span.end()
        return carrier

    def verb_start(event: str, data: dict[str, Any]) -> None:
        named = [verb for verb in data["verbs"] if verb in traced_verbs]
        if named:
            round_trip.set(tracer.start_span(f"emq {named[0]}", kind=SpanKind.CLIENT, attributes={
                "db.system.name": "valkey", "echomq.verbs": list(data["verbs"]), "echomq.wire": data["wire"]}))

    def verb_end(event: str, data: dict[str, Any]) -> None:
        span = round_trip.get()
        if span is None:
            return
        round_trip.set(None)
        if event == "verb.error":
            span.record_exception(data["error"])
            span.set_status(Status(StatusCode.ERROR, str(data["error"])))
        span.end()

    def key(data: dict[str, Any]) -> tuple[int, str, str, int]:
        return id(data["worker"]), data["queue"], data["id"], data["attempt"]

    def claimed(event: str, data: dict[str, Any]) -> None:
        parent = propagate.extract(data["trace"]) if data["trace"] else Context()
        attributes = {"messaging.system": SYSTEM, "messaging.operation.type": "process",
                      "messaging.destination.name": data["queue"], "messaging.message.id": data["id"],
                      "echomq.attempt": data["attempt"]}
        if data["waited_s"] is not None:
            attributes["echomq.waited_s"] = data["waited_s"]
        span = tracer.start_span(f"process {data['queue']}", context=parent, kind=SpanKind.CONSUMER,
                                 attributes=attributes)
        with lock:
            runs[key(data)] = span

    # around the handler, on its own thread or in its own task: its run's span is the current one,
    # so spans it opens are children, and a job it produces (ctx.producer) joins the trace
    handler_context: contextvars.ContextVar[object | None] = contextvars.ContextVar("echomq_otel_handler",
                                                                                    default=None)

    def started(event: str, data: dict[str, Any]) -> None:
        with lock:
            span = runs.get(key(data))
        if span is not None:
            handler_context.set(otel_context.attach(trace.set_span_in_context(span)))

    def returned(event: str, data: dict[str, Any]) -> None:
        token = handler_context.get()
        if token is not None:
            handler_context.set(None)
            otel_context.detach(token)

    def ended(event: str, data: dict[str, Any]) -> None:
        with lock:
            span = runs.pop(key(data), None)
        if span is None:
            return
        code, why = OUTCOMES[event]
        span.set_attribute("echomq.outcome", event.removeprefix("job."))
        span.set_status(Status(code, str(data[why]) if why and code is StatusCode.ERROR else None))
        span.end()

    offs = [hooks.subscribe("verb.start", verb_start), hooks.subscribe("verb.stop", verb_end),
            hooks.subscribe("verb.error", verb_end), hooks.subscribe("job.claimed", claimed),
            hooks.subscribe("job.started", started), hooks.subscribe("job.returned", returned),
            *(hooks.subscribe(event, ended) for event in OUTCOMES)]
    envelope.set_producer(create)

    def uninstrument() -> None:
        global _uninstrument
        envelope.set_producer(None)
        for off in offs:
            off()
        if _uninstrument is uninstrument:
            _uninstrument = None

    _uninstrument = uninstrument
    return uninstrument
