"""The trace envelope: how a trace context travels inside a job without any verb knowing.

A job has no header field, and adding one would change ENQUEUE and CLAIM on both wires. So
the context rides in the payload's bytes, wrapped around what the serializer produced:

    b"\\x00emq-trace\\x00" + JSON of the carrier (e.g. {"traceparent": "00-…"}) + b"\\x00" + payload

Only a producer with tracing on (``echomq.otel.instrument()``, which installs the
``producer`` below) wraps; every reader unwraps, with or without OpenTelemetry installed
(``Queue.claim``, the worker, ``Queue.job``, the dashboard and ``emq inspect``), so a job
enqueued with tracing runs on a worker without it and the handler sees its payload as sent.
The built-in serializers' output never starts with a NUL byte (JSON text cannot), and
JSON holds no raw NUL, so the first NUL after the carrier ends it. A raw payload of
your own that starts with the 11 magic bytes and a JSON object would be misread: use
another first byte. Versions of EchoMQ before the envelope hand it to the handler as
it is: turn tracing on in producers once every consumer reads it.
"""

from __future__ import annotations

import json
from typing import Callable

MAGIC = b"\x00emq-trace\x00"

Carrier = dict[str, str]

#: called once per payload being enqueued, with the queue's name: the carrier to wrap it
#: in, or None for none (set by echomq.otel; None: nothing is ever wrapped)
producer: Callable[[str], Carrier | None] | None = None


def set_producer(fn: Callable[[str], Carrier | None] | None) -> None:
    global producer
    producer = fn


def wrap(queue: str, data: bytes) -> bytes:
    """The payload's bytes as stored: wrapped when the producer gives a carrier."""
    carrier = producer(queue) if producer is not None else None
    if not carrier:
        return data
    return MAGIC + json.dumps(carrier, separators=(",", ":"), sort_keys=True).encode() + b"\x00" + data


def unwrap(data: bytes) -> tuple[Carrier | None, bytes]:
    """(the carrier, the payload as the serializer wrote it); (None, data) when not wrapped."""
    if not data.startswith(MAGIC):
        return None, data
    end = data.find(b"\x00", len(MAGIC))
    try:
        carrier = json.loads(data[len(MAGIC):end]) if end > 0 else None
    except ValueError:
        carrier = None
    if not isinstance(carrier, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in carrier.items()):
        return None, data  # not an envelope of ours: the payload is what it is
    return carrier, data[end + 1:]
