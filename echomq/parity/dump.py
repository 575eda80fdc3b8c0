"""Dump every key of a node: its type and full content, nothing summarised.

A dump is ``{key: Entry}``. Hash fields and string values stay bytes; zset
members map to their scores (an ``int`` when the score is integral, which every
score the job core writes is); a stream is its entries in order, each ``(id,
fields)``. A key with an expiry (a completed record) carries it as the pseudo-field
``<expires>`` (PEXPIRETIME, ms) of its hash; a zset with one (the rate log), as the
pseudo-member ``<expires>`` scored with it. A queue's completed records as fields, the hash
``emq:{q}:done`` (docs/spec.md §12), keep each field's own expiry: each of its fields is read as
``(value, expiry)`` (HPEXPIRETIME, ms; None without one). The instrument dumps the whole node,
not one queue, so a write to a key nobody expected is seen too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import valkey


@dataclass(frozen=True)
class Entry:
    kind: str  #: the TYPE reply: hash, zset, string, list, set, stream, ...
    value: Any  #: dict for hash/zset, bytes for string, tuple for list, frozenset for set

    def __repr__(self) -> str:
        return f"{self.kind}:{self.value!r}"


Dump = dict[bytes, Entry]
#: The pseudo-field of a hash that carries the key's expiry (no real field has angle brackets).
EXPIRES = b"<expires>"
#: A queue's completed records as fields of one hash, each field with its own expiry.
FIELD_RECORDS = re.compile(rb"^emq:\{[^{}]+\}:done$")


def score(raw: float | bytes | str) -> int | float:
    value = float(raw)
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def dump(client: valkey.Valkey) -> Dump:
    """Every key of the node, with its type, full content and expiry (three round trips; a fourth
    for the field expiries of completed records as fields)."""
    keys = sorted(client.execute_command("KEYS", "*"))
    if not keys:
        return {}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = [k.decode() if isinstance(k, bytes) else k for k in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    for key, kind in zip(keys, kinds):
        pipe.execute_command("PEXPIRETIME", key)
        if kind == "hash":
            pipe.hgetall(key)
        elif kind == "zset":
            pipe.zrange(key, 0, -1, withscores=True)
        elif kind == "string":
            pipe.get(key)
        elif kind == "list":
            pipe.lrange(key, 0, -1)
        elif kind == "set":
            pipe.smembers(key)
        elif kind == "stream":
            pipe.xrange(key)
        else:
            pipe.execute_command("DUMP", key)  # a kind the job core never writes: compare its serialisation
    out: Dump = {}
    replies = pipe.execute(raise_on_error=False)
    for key, kind, expires, content in zip(keys, kinds, replies[0::2], replies[1::2]):
        if kind == "none":
            continue  # deleted between KEYS and TYPE: cannot happen on our own nodes, but not an entry
        if kind == "hash":
            value: Any = dict(content)
            if isinstance(expires, int) and expires >= 0:
                value[EXPIRES] = str(expires).encode()
        elif kind == "zset":
            value = {member: score(s) for member, s in content}
            if isinstance(expires, int) and expires >= 0:
                value[EXPIRES] = expires
        elif kind == "list":
            value = tuple(content)
        elif kind == "set":
            value = frozenset(content)
        elif kind == "stream":
            value = tuple((entry_id, dict(fields)) for entry_id, fields in content)
        else:
            value = content
        out[key] = Entry(kind, value)
    _field_expiries(client, out)
    return out


def _field_expiries(client: valkey.Valkey, out: Dump) -> None:
    """Each field of every completed-records hash in ``out`` as ``(value, its expiry or None)``."""
    hashes = [(key, [f for f in entry.value if f != EXPIRES]) for key, entry in out.items()
              if entry.kind == "hash" and FIELD_RECORDS.match(key)]
    hashes = [(key, fields) for key, fields in hashes if fields]
    if not hashes:
        return
    pipe = client.pipeline(transaction=False)
    for key, fields in hashes:
        pipe.execute_command("HPEXPIRETIME", key, "FIELDS", len(fields), *fields)
    for (key, fields), expiries in zip(hashes, pipe.execute()):
        value = out[key].value
        for field, expires in zip(fields, expiries):
            value[field] = (value[field], expires if expires >= 0 else None)


def server_ms(client: valkey.Valkey) -> int:
    """The server clock in ms, as the scripts compute it from TIME."""
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000
