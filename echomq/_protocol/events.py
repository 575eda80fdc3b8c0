"""A queue's event stream: what happened to its jobs, in order (docs/spec.md §12).

Events are off until a queue turns them on (``Queue.enable_events(maxlen)``, ``emq events
--enable``): then the verbs that move a job append one entry to ``emq:{q}:events`` in
the same step as the move, bounded to ``maxlen`` entries (XADD MAXLEN, exact). An entry
is ``type``, ``id``, ``attempt``, and ``error``, ``state`` or ``progress`` where there is
one; its stream id carries the server time (ms) it was written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .verbs import text

#: The kinds an entry's ``type`` names.
KINDS = ("enqueued", "claimed", "progress", "completed", "retried", "failed", "dead", "stalled", "recovered",
         "removed", "promoted", "delayed", "requeued", "rescheduled", "reprocessed")
#: A queue's default bound when events are turned on.
DEFAULT_MAXLEN = 10_000


@dataclass(frozen=True)
class Event:
    """One entry of a queue's event stream."""

    stream_id: str  #: the entry's id, ``<ms>-<seq>``: pass it as ``since`` to read on from here
    type: str
    job_id: str
    attempt: int
    error: str | None = None
    state: str | None = None
    progress: Any = None  #: the value ``ctx.progress`` reported (JSON)

    @property
    def time_ms(self) -> int:
        """When it was written, ms, server clock."""
        return int(self.stream_id.split("-", 1)[0])


def decode_event(stream_id: bytes | str, fields: dict[Any, Any]) -> Event:
    f = {_s(k): v for k, v in fields.items()}
    progress = f.get("progress")
    return Event(
        stream_id=_s(stream_id),
        type=_s(f.get("type", b"")),
        job_id=text(f.get("id", b"")),
        attempt=int(attempt) if (attempt := _s(f.get("attempt", b""))).isdigit() else 0,  # a raw XADD's too
        error=None if f.get("error") is None else _s(f["error"]),
        state=None if f.get("state") is None else _s(f["state"]),
        progress=None if progress is None else decode_progress(progress),
    )


def encode_progress(value: Any) -> bytes:
    """Progress travels as JSON text, so any reader (``emq events``) can show it."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def decode_progress(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads: the text
        return _s(raw)


def _s(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
