"""One instrumentation point: subscribe to what EchoMQ does, by event name.

    from echomq import hooks

    def on_stop(event, data):
        print(event, data["verbs"], data["duration_s"])

    unsubscribe = hooks.subscribe("verb.stop", on_stop)

The one send path of each connection (sync and asyncio) emits the ``verb.*``
events, the worker emits the ``job.*`` events; docs/hooks.md is the catalogue of
every event and its fields. A subscriber runs inline on the thread (or event loop)
that emitted, so it must be quick; one that raises is logged and never breaks the
call it observes. With no subscriber for an event, emitting it costs a dict lookup.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

log = logging.getLogger("echomq.hooks")

Subscriber = Callable[[str, dict[str, Any]], None]

#: Every event and the fields its data carries (docs/hooks.md explains each).
EVENTS: dict[str, tuple[str, ...]] = {
    "verb.start": ("verbs", "wire"),
    "verb.stop": ("verbs", "wire", "duration_s"),
    "verb.error": ("verbs", "wire", "error", "duration_s"),
    "job.claimed": ("worker", "queue", "id", "attempt", "waited_s", "trace"),
    "job.started": ("worker", "queue", "id", "attempt"),
    "job.returned": ("worker", "queue", "id", "attempt"),
    "job.completed": ("worker", "queue", "id", "attempt", "duration_s"),
    "job.retried": ("worker", "queue", "id", "attempt", "error", "backoff_ms", "duration_s"),
    "job.dead": ("worker", "queue", "id", "attempt", "error", "max_attempts", "duration_s"),
    "job.delayed": ("worker", "queue", "id", "attempt", "delay_ms", "duration_s"),
    "job.lost": ("worker", "queue", "id", "attempt", "reason"),
    "job.requeued": ("worker", "queue", "id", "attempt"),
    "job.abandoned": ("worker", "queue", "id", "attempt", "reason"),
    "sweep.stalled": ("worker", "queue", "id"),
    "sweep.recovered": ("worker", "queue", "id"),
    "sweep.stalled_dead": ("worker", "queue", "id"),
}

_subscribers: dict[str, tuple[Subscriber, ...]] = {}
_prefixes: dict[str, int] = {}
_lock = threading.Lock()


def subscribe(event: str, fn: Subscriber) -> Callable[[], None]:
    """Call ``fn(event, data)`` on every ``event``; returns the function that unsubscribes it."""
    if event not in EVENTS:
        raise ValueError(f"no hook event {event!r}: one of {sorted(EVENTS)} (docs/hooks.md)")
    with _lock:
        _subscribers[event] = (*_subscribers.get(event, ()), fn)
        _recount()

    def unsubscribe() -> None:
        with _lock:
            left = list(_subscribers.get(event, ()))
            if fn in left:
                left.remove(fn)
            _subscribers[event] = tuple(left)
            _recount()

    return unsubscribe


def _recount() -> None:
    global heard
    counts: dict[str, int] = {}
    for event, fns in _subscribers.items():
        family = event.split(".", 1)[0]
        counts[family] = counts.get(family, 0) + len(fns)
    _prefixes.clear()
    _prefixes.update(counts)
    heard = frozenset(event for event, fns in _subscribers.items() if fns)


def wanted(family: str) -> bool:
    """Whether anyone listens to an event of ``family`` ("verb", "job"): skip building the data if not."""
    return _prefixes.get(family, 0) > 0


#: the events someone subscribes to (``event in hooks.heard``: skip building its data if not; a
#: test of a set the worker makes twice a job, where a call would cost more than the test)
heard: frozenset[str] = frozenset()


def listened(event: str) -> bool:
    """Whether anyone subscribes to ``event``: skip building its data if not."""
    return event in heard


def emit(event: str, **data: Any) -> None:
    for fn in _subscribers.get(event, ()):
        try:
            fn(event, data)
        except Exception:  # an observer's fault must not break the call it observes
            log.exception("hook subscriber %r failed on %s", fn, event)
