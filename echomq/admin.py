"""Admin steps that write outside a queue: branding a node."""

from __future__ import annotations

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
