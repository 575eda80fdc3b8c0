"""What a server is, from INFO server (pure): Valkey or Redis, its version, and what that lets the
verbs do."""

from __future__ import annotations

import re
from typing import Any, Mapping

#: The first servers whose scripts write a hash field with its own expiry in one command (HSETEX),
#: so keep completed records as fields (docs/spec.md §12): the scripts test
#: ``server.VALKEY_VERSION_NUM`` (Valkey) or ``redis.REDIS_VERSION_NUM`` (Redis) the same way.
HSETEX_VERSION = {"valkey": (9, 0), "redis": (8, 0)}


def server_kind(info_server: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
    """("valkey" or "redis", its version) from INFO server (Valkey reports a ``redis_version`` too)."""
    kind = "valkey" if info_server.get("valkey_version") or info_server.get("server_name") == "valkey" else "redis"
    text = str(info_server.get("valkey_version") or info_server.get("redis_version") or "0")
    return kind, tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def writes_fields(wire: int, info_server: Mapping[str, Any] | None) -> bool | None:
    """Whether the node keeps completed records as fields with their own expiry: trafikey (wire 6)
    runs on Valkey 9.1 only, so always; the scripts where the server has HSETEX. None: unknown
    (``info_server`` None: INFO was refused)."""
    if wire == 6:
        return True
    if info_server is None:
        return None
    kind, version = server_kind(info_server)
    return version >= HSETEX_VERSION[kind]
