"""Default job ids: UUIDv7 text, strictly increasing within a process.

ZPOPMIN serves equal priorities in lexicographic id order, so time-ordered ids make
equal priorities FIFO. Within one millisecond the 12-bit ``rand_a`` field is used as
a counter (RFC 9562 §6.2, method 1); when it runs out the timestamp is advanced by
one, so the sequence never goes backwards even if the wall clock does.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0


def _next_stamp() -> tuple[int, int]:
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms:
            _last_ms, _counter = now, int.from_bytes(os.urandom(2), "big") & 0x1FF  # leave room to count up
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms, _counter = _last_ms + 1, 0
        return _last_ms, _counter


def uuid7() -> str:
    """A new UUIDv7 as text; each call's value sorts after the previous one's."""
    ms, counter = _next_stamp()
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


def uuid7_ms(text: str) -> int | None:
    """The Unix ms a UUIDv7 was minted at (its 48-bit timestamp), None for any other id.

    It is the minting process's wall clock: for an id from :func:`uuid7`, the producer's
    clock when ``enqueue``/``schedule`` built the call.
    """
    try:
        value = uuid.UUID(text)
    except ValueError:
        return None
    if value.version != 7 or value.variant != uuid.RFC_4122 or len(text) != 36:
        return None
    return value.int >> 80
