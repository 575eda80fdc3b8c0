"""Admin steps: branding a node, and what the admin surfaces (``emq``, the dashboard) share --
durations as people type them, and a bounded verb repeated until it runs dry."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import valkey
from valkey.cluster import ValkeyCluster
from valkey.exceptions import ResponseError

from .._client.connection import BRANDS, brand_unreadable, open_client, plain_commands, read_brand, served_tokens
from ..errors import BrandError, ConfigurationError
from .._protocol.keys import VERSION_KEY

#: What a wire-6 brand refused for want of trafikey offers instead.
BRAND_WIRE_4 = "brand it for wire 4 (emq brand URL --wire 4)"
#: The keys EchoMQ writes: every queue's (``emq:{q}:...``) and the node-wide ones (``{emq}:...``).
DATA_PATTERNS = ("emq:*", "{emq}:*")
#: How many of a node's EchoMQ keys a refused re-brand names.
SHOWN_KEYS = 3


def brand_node(client: valkey.Valkey | ValkeyCluster, wire: int, *, replace: bool = False) -> bytes:
    """Brand the node for ``wire`` (4 or 6), once. Refuses to overwrite the other brand.

    Re-branding a node with its own brand is a no-op, so this is safe to repeat. Wire 6 is refused
    on a node (on a cluster: any primary) without trafikey's job-core verbs: every wire-6 call
    would fail there, and the brand would refuse wire 4. ``replace=True`` overwrites another
    brand, only while the node holds no EchoMQ data (a wrong brand, given by mistake). A link fault
    is :class:`~echomq.ConnectionFailed`.
    """
    if wire not in BRANDS:
        raise ConfigurationError(f"bad wire {wire!r}: brand a node for wire 4 or 6")
    with plain_commands("the brand"):
        return apply_brand(client, wire, replace)


def apply_brand(client: valkey.Valkey | ValkeyCluster, wire: int, replace: bool) -> bytes:
    want = BRANDS[wire]
    if wire == 6:
        served_tokens(client, instead=BRAND_WIRE_4)  # read-only: refused before any write
    try:
        if client.set(VERSION_KEY, want, nx=True):
            return want
    except ResponseError as exc:  # MOVED: a plain client of a cluster node that does not hold the key
        raise brand_unreadable(exc) from exc
    have = read_brand(client)
    refused = brand_refusal(have, wire, replace, echomq_keys(client) if replace and have != want else [])
    if refused is not None:
        raise refused
    if have != want:
        client.set(VERSION_KEY, want)
    return want


@dataclass(frozen=True)
class Branded:
    """A node branded by :func:`brand_url`, and where the brand is."""

    brand: bytes
    primaries: int | None = None  #: on a Valkey Cluster: how many primaries it has (None: one node)
    holder: str | None = None  #: on a Valkey Cluster: the primary that holds the brand's key


def brand_url(url: str, wire: int, *, replace: bool = False, cluster: bool | str = "auto") -> Branded:
    """:func:`brand_node` on the node at ``url`` (``emq brand``); on a Valkey Cluster the brand is
    one key for the whole cluster, written on the primary of its slot."""
    with open_client(url, cluster) as client:
        brand = brand_node(client, wire, replace=replace)
        if isinstance(client, ValkeyCluster):
            return Branded(brand, len(client.get_primaries()), client.get_node_from_key(VERSION_KEY).name)
        return Branded(brand)


def brand_refusal(have: bytes | None, wire: int, replace: bool, data: Sequence[bytes]) -> BrandError | None:
    """Why the node, branded ``have``, keeps its brand when asked for ``wire`` (None: it may take it).
    ``data``: EchoMQ keys the node holds (read only for a replace)."""
    want = BRANDS[wire]
    if have == want:
        return None
    shown = "unbranded" if have is None else repr(have.decode(errors="replace"))
    if not replace:
        return BrandError(
            f"the node is already branded {shown}; a node serves one wire. Use another node for wire {wire}; "
            f"or, if that brand is a mistake and the node holds no EchoMQ data, replace it: "
            f"emq brand URL --wire {wire} --replace (echomq.brand_node(client, {wire}, replace=True))"
        )
    if data:
        return BrandError(
            f"the node holds EchoMQ data ({', '.join(repr(k.decode(errors='replace')) for k in data)}), so its "
            f"brand {shown} stays: those jobs belong to that wire. Use another node for wire {wire}, or empty "
            "this one of EchoMQ keys first"
        )
    return None


def echomq_keys(client: valkey.Valkey | ValkeyCluster, shown: int = SHOWN_KEYS) -> list[bytes]:
    """Up to ``shown`` keys EchoMQ wrote on the node (every primary of a cluster), the brand aside."""
    found: list[bytes] = []
    for pattern in DATA_PATTERNS:
        for key in client.scan_iter(match=pattern, count=1000):
            key = key if isinstance(key, bytes) else key.encode()
            if key != VERSION_KEY.encode() and key not in found:
                found.append(key)
                if len(found) == shown:
                    return found
    return found


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
