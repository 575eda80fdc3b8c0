"""Admin steps: branding a node, and what the admin surfaces (``emq``, the dashboard) share --
durations as people type them, and a bounded verb repeated until it runs dry."""

from __future__ import annotations

import re
from typing import Callable

import valkey
from valkey.exceptions import ResponseError

from .connection import BRANDS, brand_unreadable, read_brand
from .errors import BrandError, ConfigurationError
from .keys import VERSION_KEY


def brand_node(client: valkey.Valkey, wire: int) -> bytes:
    """Brand the node for ``wire`` (4 or 6), once. Refuses to overwrite the other brand.

    Re-branding a node with its own brand is a no-op, so this is safe to repeat.
    """
    if wire not in BRANDS:
        raise ConfigurationError(f"bad wire {wire!r}: brand a node for wire 4 or 6")
    want = BRANDS[wire]
    try:
        if client.set(VERSION_KEY, want, nx=True):
            return want
    except ResponseError as exc:  # MOVED: a plain client of a cluster node that does not hold the key
        raise brand_unreadable(exc) from exc
    have = read_brand(client)
    if have != want:
        raise BrandError(
            f"the node is already branded {have!r}; a node serves one wire. "
            f"Use another node for wire {wire}, or delete {VERSION_KEY} by hand if you are sure it holds no jobs"
        )
    return want


DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d)")
DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` as milliseconds (ValueError otherwise)."""
    found = DURATION.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a duration: a whole number with ms, s, m, h or d, e.g. 7d")
    return int(found[1]) * DURATION_MS[found[2]]


def in_batches(step: Callable[[], int], size: int) -> int:
    """Call a bounded verb (purge, drain) until a call moves fewer than ``size``; the total moved."""
    total = 0
    while True:
        moved = step()
        total += moved
        if moved < size:
            return total
