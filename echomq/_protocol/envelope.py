"""The envelope: a job's headers (its trace context, its task's name, per-job overrides), carried
inside its payload's bytes without any verb knowing (SPEC §9.7).

A job has no header field, and adding one would change ENQUEUE and CLAIM on both wires. So the
headers ride in the payload's bytes, wrapped around what the serializer produced:

    b"\\x00emq-trace\\x00" + JSON of the headers + b"\\x00" + payload

The headers are one JSON object. Its string values are the trace carrier (``{"traceparent":
"00-…"}``, written when a producer has tracing on: ``echomq.otel.instrument()`` installs the
``producer`` below); the key ``"emq"`` holds EchoMQ's own headers, an object (:data:`OWN`):
``task`` (the task's name), ``args`` (the payload is ``{"args": [...], "kwargs": {...}}``),
``prev`` (a chain step takes its flow children's results first), and the overrides of the
task's policy ``max_attempts``, ``backoff`` and ``timeout``. A job enqueued without any of them
(``Queue.enqueue``, tracing off) is not wrapped at all: its bytes are the serializer's, as ever.

Every reader unwraps (``Queue.claim``, the worker, ``Queue.job``, the dashboard and ``emq
inspect``), and a header a reader does not know is kept and ignored. The built-in serializers'
output never starts with a NUL byte (JSON text cannot), and JSON holds no raw NUL, so the first
NUL after the headers ends them. A raw payload of your own that starts with the 11 magic bytes
and a JSON object would be misread: use another first byte.

**Older readers.** Versions of EchoMQ before the envelope hand it to the handler as it is; those
before EchoMQ's own headers take only string values for an envelope, so a job carrying ``"emq"``
(an object) is read by them as a payload that does not decode: it goes dead at once
(``PayloadError``), never to the wrong handler. Hence the upgrade order (README): workers first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

MAGIC = b"\x00emq-trace\x00"
#: the key of EchoMQ's own headers in the envelope's object
OWN = "emq"

Carrier = dict[str, str]
#: the envelope's object: the trace carrier's string entries, and EchoMQ's own under :data:`OWN`
Headers = dict[str, Any]

#: called once per payload being enqueued, with the queue's name: the carrier to wrap it
#: in, or None for none (set by echomq.otel; None: nothing is ever wrapped)
producer: Callable[[str], Carrier | None] | None = None
#: the longest task name a header is read as naming (a longer one names no task: it is refused)
TASK_NAME_MAX = 200


def set_producer(fn: Callable[[str], Carrier | None] | None) -> None:
    global producer
    producer = fn


def wrap(queue: str, data: bytes, own: Mapping[str, Any] | None = None) -> bytes:
    """The payload's bytes as stored: wrapped when the producer gives a carrier or the job has
    headers of EchoMQ's own (``own``); else ``data`` itself."""
    carrier = producer(queue) if producer is not None else None
    if not carrier and not own:
        return data
    headers: Headers = {**(carrier or {}), **({OWN: dict(own)} if own else {})}
    return MAGIC + json.dumps(headers, separators=(",", ":"), sort_keys=True).encode() + b"\x00" + data


def unwrap(data: bytes) -> tuple[Headers | None, bytes]:
    """(the headers, the payload as the serializer wrote it); (None, data) when not wrapped. An
    object is an envelope of ours when its values are strings but for :data:`OWN`, an object."""
    if not data.startswith(MAGIC):
        return None, data
    end = data.find(b"\x00", len(MAGIC))
    try:
        headers = json.loads(data[len(MAGIC):end]) if end > 0 else None
    except ValueError:
        headers = None
    if not isinstance(headers, dict) or not all(isinstance(v, dict) if k == OWN else isinstance(v, str)
                                                for k, v in headers.items()):
        return None, data  # not an envelope of ours: the payload is what it is
    return headers, data[end + 1:]


def trace_of(headers: Headers | None) -> Carrier | None:
    """The trace carrier among ``headers`` (their string entries); None when there is none."""
    if not headers:
        return None
    carrier = {k: v for k, v in headers.items() if k != OWN}
    return carrier or None


def own_of(headers: Headers | None) -> dict[str, Any] | None:
    """EchoMQ's own headers (the :data:`OWN` object); None when the job has none."""
    return headers.get(OWN) if headers else None


def task_named(own: Mapping[str, Any] | None) -> str | None:
    """The task a job's own headers name, as stored: None when they name none. A name that is not
    a string of 1 to TASK_NAME_MAX characters is returned as its JSON text, which no task has (the
    worker refuses it as unknown, and shows it)."""
    if not own or "task" not in own:
        return None
    name = own["task"]
    if isinstance(name, str) and 0 < len(name) <= TASK_NAME_MAX:
        return name
    return json.dumps(name)[:TASK_NAME_MAX]


@dataclass(frozen=True)
class JobHeaders:
    """What a stored payload says besides itself: its task's name, its trace context, and every
    header as stored (the ones no reader knows included)."""

    task: str | None
    trace: Carrier | None
    own: dict[str, Any]  #: EchoMQ's own headers as stored ({} when none)
    all: Headers  #: the envelope's whole object ({} when the payload is not wrapped)


def read_headers(stored: bytes | None) -> tuple[JobHeaders, bytes | None]:
    """A stored payload's headers and its payload as the serializer wrote it: the one reading of a
    job's task name and headers (``emq inspect``, the dashboard)."""
    headers, payload = (None, None) if stored is None else unwrap(stored)
    own = own_of(headers) or {}
    return JobHeaders(task_named(own), trace_of(headers), own, headers or {}), payload
