"""Rate limits: ``"50/s"``, ``"600/m"``, ``"1000/h"`` as starts per window (docs/scheduling.md).

A queue's rate limit lives in its meta (``rate_limit`` starts per ``rate_window`` ms) and every
claim on either wire checks it in the server, atomically with the pop, against a sliding log of
the queue's starts (docs/spec.md §13). This module only reads and writes the text form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigurationError

#: The window of each unit, ms.
WINDOWS = {"s": 1000, "m": 60_000, "h": 3_600_000}
#: The most starts one window may allow: the server's log holds at most this many entries.
RATE_MAX = 10_000
RATE_WINDOW_MAX = 86_400_000  #: the longest window the server accepts, ms (a day)
_TEXT = re.compile(r"^\s*(\d+)\s*/\s*([smh])\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` job starts in any ``window_ms`` (a sliding window, on the server clock)."""

    limit: int
    window_ms: int

    def __post_init__(self) -> None:
        for name, value, high in (("limit", self.limit, RATE_MAX), ("window_ms", self.window_ms, RATE_WINDOW_MAX)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise ConfigurationError(f"bad rate limit: {name} {value!r} is not an integer from 1 to {high}")

    def __str__(self) -> str:
        unit = next((u for u, ms in WINDOWS.items() if ms == self.window_ms), None)
        return f"{self.limit}/{unit}" if unit else f"{self.limit} per {self.window_ms} ms"

    @property
    def per_second(self) -> float:
        return self.limit * 1000 / self.window_ms


def parse_rate_limit(value: str | RateLimit) -> RateLimit:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` (N from 1 to 10000), or a :class:`RateLimit` as is."""
    if isinstance(value, RateLimit):
        return value
    match = _TEXT.match(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigurationError(f"bad rate limit {value!r}: starts per second, minute or hour, as '50/s', "
                                 "'600/m' or '1000/h'")
    return RateLimit(int(match[1]), WINDOWS[match[2]])
