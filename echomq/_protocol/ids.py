"""Default job ids: 16 characters of ``0-9A-Za-z``, strictly increasing within a process.

ZPOPMIN serves equal priorities in lexicographic id order, so time-ordered ids make
equal priorities FIFO. An id is two fixed-width base-62 numbers in an alphabet that
sorts in ASCII order, so text order is number order:

* 8 characters: the Unix ms it was minted at (room until the year 8000);
* 8 characters: ``tag * COUNTER_SPAN + counter``. The tag is drawn at random once per
  process (again in a forked child), the counter numbers the ids of one millisecond.

Two processes' ids differ whenever their tags do (``TAG_SPAN`` ≈ 2^36.6 values); within a
process (time, counter) only grows. When the counter runs out the time is advanced by one,
so the sequence never goes backwards even if the wall clock does. Short, because each
queued job holds its id twice (its row's key and its pending member); docs/benchmarks.md,
*Memory per queued job*, measures the formats weighed and why 16 and not fewer.

Before these ids the default was UUIDv7 text; :func:`minted_ms` still reads those, so
jobs queued by an older client keep their waited time.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Iterable

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # ASCII order
TIME_CHARS = 8
TAIL_CHARS = 8
COUNTER_SPAN = 2048  #: ids per millisecond per process before the time is advanced
TAG_SPAN = len(ALPHABET) ** TAIL_CHARS // COUNTER_SPAN
#: a 16-character id of the default shape reads as a time only in this window (ms): other
#: ids of that shape (a user's own) mostly fall outside it and give None
MINTED_FROM_MS, MINTED_BEFORE_MS = 1_577_836_800_000, 4_102_444_800_000  # 2020-01-01, 2100-01-01

#: each ASCII byte's value as a digit (ALPHABET's characters; minted_ms reads no other byte)
_DIGIT = [0] * 128
for _value, _char in enumerate(ALPHABET):
    _DIGIT[ord(_char)] = _value
#: the time part minted_ms read last, and its value: a claim batch's ids, minted together by
#: one producer's batch, mostly share their millisecond
_last_read: tuple[str, int | None] = ("", None)
_lock = threading.Lock()
_last_ms = 0
_counter = 0
_tag = 0


#: the text of the ms new_id minted last, and each counter's tail under this process's tag: a
#: producer's batch mints many ids a millisecond, each then two lookups instead of 16 digits
_time_text: tuple[int, str] = (-1, "")
_tails: dict[int, str] = {}


def _draw_tag() -> None:
    global _tag
    _tag = int.from_bytes(os.urandom(8), "big") % TAG_SPAN
    _tails.clear()


_draw_tag()
os.register_at_fork(after_in_child=_draw_tag)  # a forked child must not mint its parent's ids


def _next_stamps(count: int) -> list[tuple[int, range]]:
    """``count`` stamps in a row, taken under one hold of the lock, as (ms, its counters) runs:
    each stamp after the one before, and after every stamp this process took before them."""
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms:
            _last_ms, _counter = now, -1
        runs = []
        while count:
            if _counter + 1 == COUNTER_SPAN:
                _last_ms, _counter = _last_ms + 1, -1
            take = min(count, COUNTER_SPAN - 1 - _counter)  # what this ms has left
            runs.append((_last_ms, range(_counter + 1, _counter + 1 + take)))
            _counter += take
            count -= take
        return runs


def fixed_width(value: int, width: int, alphabet: str = ALPHABET) -> str:
    """``value`` in base ``len(alphabet)``, ``width`` digits with leading zeros: text order is number order."""
    out = []
    for _ in range(width):
        value, digit = divmod(value, len(alphabet))
        out.append(alphabet[digit])
    return "".join(reversed(out))


def new_id() -> str:
    """A new default job id; each call's value sorts after the previous one's in this process."""
    return new_ids(1)[0]


def new_ids(count: int) -> list[str]:
    """``count`` new default job ids, in the order they sort: a batch's ids, minted under one hold
    of the lock (:func:`new_id`'s, ``count`` times over)."""
    global _time_text
    ids = []
    for ms, counters in _next_stamps(count):
        minted = _time_text
        if minted[0] != ms:
            minted = _time_text = (ms, fixed_width(ms, TIME_CHARS))
        head, tails = minted[1], _tails
        for counter in counters:
            tail = tails.get(counter)
            if tail is None:
                tail = tails[counter] = fixed_width(_tag * COUNTER_SPAN + counter, TAIL_CHARS)
            ids.append(head + tail)
    return ids


def minted_ms(text: str) -> int | None:
    """The Unix ms a default id was minted at, None when the id does not say.

    Reads the ids :func:`new_id` makes and the UUIDv7 text that was the default before
    (its 48-bit timestamp). It is the minting process's wall clock: for a default id, the
    producer's clock when ``enqueue``/``schedule`` built the call. An id of your own of
    either shape counts from the time it encodes.
    """
    return minted_ms_of((text,))[0]


def minted_ms_of(texts: Iterable[str]) -> list[int | None]:
    """:func:`minted_ms` of each of ``texts``, in one call: the worker reads every id of a claim batch."""
    global _last_read
    last_head, last_ms = _last_read  # one read: another thread may replace the pair meanwhile
    minted: list[int | None] = []
    add, size = minted.append, TIME_CHARS + TAIL_CHARS  # (read once a call: a claim batch's ids are read in a loop)
    for text in texts:
        if len(text) != size:
            add(_uuid7_ms(text))
        elif not (text.isascii() and text.isalnum()):
            # ALPHABET's characters are the ASCII letters and digits, checked by two C calls
            add(None)
        else:
            head = text[:TIME_CHARS]
            if head != last_head:  # the digits read as bytes (no hashing)
                b, d = head.encode(), _DIGIT  # TIME_CHARS == 8 digits of base 62 == len(ALPHABET)
                ms = (((((((d[b[0]] * 62 + d[b[1]]) * 62 + d[b[2]]) * 62 + d[b[3]]) * 62 + d[b[4]]) * 62 + d[b[5]])
                       * 62 + d[b[6]]) * 62 + d[b[7]])
                last_head, last_ms = head, ms if MINTED_FROM_MS <= ms < MINTED_BEFORE_MS else None
            add(last_ms)
    _last_read = last_head, last_ms
    return minted


def _uuid7_ms(text: str) -> int | None:
    if len(text) != 36:  # what the canonical text's length alone refuses, refused without a parse
        return None
    try:
        value = uuid.UUID(text)
    except ValueError:
        return None
    if value.version != 7 or value.variant != uuid.RFC_4122 or len(text) != 36:
        return None
    return value.int >> 80
