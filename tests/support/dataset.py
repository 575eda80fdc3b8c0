"""What a node holds, read and compared: a dump of one queue's keys (or of every key), DEBUG DIGEST,
the "dataset unchanged" check (:class:`unchanged`), a refusal that must write nothing
(:func:`refused`), and the builders of an expected state as :func:`dump` shows it (K, R, Z, H).
The servers run with debug commands enabled (``EmbeddedServer``)."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import pytest
import valkey

from echomq._protocol.keys import Keyspace
from echomq._protocol.results import unpacked

from .waiting import Client, server_ms


def dump_key(client: Client, key: bytes) -> tuple:
    kind = client.type(key).decode()
    if kind == "hash":
        return kind, dict(sorted(client.hgetall(key).items()))
    if kind == "zset":
        return kind, client.zrange(key, 0, -1, withscores=True)
    if kind == "string":
        return kind, client.get(key)
    if kind == "list":
        return kind, client.lrange(key, 0, -1)
    if kind == "set":
        return kind, sorted(client.smembers(key))
    if kind == "stream":  # the entries' fields in order; their ids are server times
        return kind, [fields for _, fields in client.xrange(key)]
    return kind, None


def dump(client: Client, keyspace: Keyspace | None = None) -> dict[bytes, tuple]:
    """Every key (of one queue, or of the node) with its type and full content."""
    pattern = keyspace.pattern() if keyspace else "*"
    return {key: dump_key(client, key) for key in sorted(client.scan_iter(match=pattern, count=1000))}


def core_dump(client: Client, keyspace: Keyspace) -> dict[bytes, tuple]:
    """One queue's keys without wire 4's wake marker (SPEC §9.3), which must be the one-member
    marker when present: the job core's dataset, the same on both wires. When the marker is
    written is checked by the parity instrument and tests/test_blocking_worker.py."""
    keys = dump(client, keyspace)
    marker = keys.pop(keyspace.wake.encode(), None)
    assert marker in (None, ("zset", [(b"w", 0.0)])), f"not the wake marker: {marker}"
    return keys


#: A row's time fields (SPEC §9: created, started = the last claim, failed = the last failure),
#: written by the verbs on the server clock.
TIME_FIELDS = (b"created", b"started", b"failed", b"finished")
TIME = b"<time>"
#: A completed record's retention in tests on the shared session servers: longer than the session,
#: so no record expires inside another test's unchanged() block (an expiry changes DEBUG DIGEST).
KEEP_MS = 24 * 3600 * 1000


def mask_times(state: dict[bytes, tuple], now_ms: int, window_ms: int = 600_000) -> dict[bytes, tuple]:
    """``state`` (a :func:`dump`) with every row's time fields checked to be a server time from
    the last ``window_ms`` up to ``now_ms``, then shown as ``<time>``: the dump stays comparable
    as a whole while the field's presence (and sanity) is still asserted."""
    for key, (kind, value) in state.items():
        if kind == "hash" and key.endswith(b"}:done"):  # completed records as fields: their packed times
            for field, packed in value.items():
                value[field] = _masked_record(packed, now_ms, window_ms, (key, field))
        elif kind == "hash" and (b":job:" in key or b":done:" in key or b":unique:" in key):  # a row, a record, a window
            for name in TIME_FIELDS:
                if name in value:
                    assert now_ms - window_ms <= int(value[name]) <= now_ms, (key, name, value[name], now_ms)
                    value[name] = TIME
    return state


def _masked_record(packed: bytes, now_ms: int, window_ms: int, where: tuple) -> bytes:
    """A packed record (``attempts,finished,created,started,result``, docs/spec.md §12) with its
    times checked as :func:`mask_times` checks a row's, then shown as ``<time>`` (an empty created
    or started stays empty); a value that is no packed record stays as it is."""
    if unpacked(packed) is None:
        return packed
    attempts, *times, result = packed.split(b",", 4)
    for time in filter(None, times):
        assert now_ms - window_ms <= int(time) <= now_ms, (where, packed[:80], now_ms)
    return b",".join([attempts, *(TIME if time else b"" for time in times), result])


def snap(queue: Any) -> dict[bytes, tuple]:
    """A queue's job-core dataset (:func:`core_dump`), its rows' time fields checked and masked
    (:func:`mask_times`): what the conformance and script-edge tests compare whole."""
    client = queue.connection.client
    return mask_times(core_dump(client, queue.keys), server_ms(client))


# --------------------------------------------------------------------------- an expected state, as dump() shows it


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def K(queue: Any, suffix: str) -> bytes:
    """The key ``suffix`` of ``queue`` (a Queue or an aio one), as a dump's key."""
    return queue.keys.key(suffix).encode()


def R(queue: Any, job_id: str) -> bytes:
    """The row key of ``job_id`` in ``queue``."""
    return queue.keys.job(job_id).encode()


def Z(*pairs: tuple[Any, float]) -> tuple:
    """A zset of (member, score) pairs as dump() shows it: members in the server's order (score, then member)."""
    return "zset", sorted(((_b(m), float(s)) for m, s in pairs), key=lambda ms: (ms[1], ms[0]))


def H(fields: dict | None = None, /, **named: Any) -> tuple:
    """A hash as dump() shows it, from a dict, keywords, or both."""
    return "hash", {_b(k): _b(v) for k, v in sorted({**(fields or {}), **named}.items())}


# --------------------------------------------------------------------------- nothing changed


def digest(client: Client) -> bytes:
    """DEBUG DIGEST: one hash of the node's whole dataset, each key's expire time included."""
    return client.execute_command("DEBUG", "DIGEST")


@contextmanager
def expiry_held(client: Client) -> Iterator[None]:
    """The server's active expiry off for the block: a key an earlier test left with a TTL (a
    completed record, a rate window) is not reclaimed under a before/after DEBUG DIGEST. The
    digest hashes each key's expire time, and a key the block's commands touch still expires
    on access, so only the background reclaim is held."""
    client.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 0)
    try:
        yield
    finally:
        client.execute_command("DEBUG", "SET-ACTIVE-EXPIRE", 1)


@contextmanager
def expiry_paused(client: Client) -> Iterator[None]:
    """No key expires while the block reads. A read of a key past its TTL deletes it (lazy
    expiry, which expiry_held leaves on), and keys other tests left with a TTL (a step-driven
    worker's heartbeat record) would change the digest without any write. CLIENT PAUSE WRITE
    holds expiry too (such a key then reads as gone and stays); other clients' writes wait."""
    client.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
    try:
        yield
    finally:
        client.execute_command("CLIENT", "UNPAUSE")


#: Per node (host, port): the queues' metas whose waiter count was live (above 0) at the last look,
#: so that a node holding only those is not scanned again at every unchanged() block.
_live_counts: dict[tuple, set[bytes]] = {}


def forget_idle_waiter_counts(client: Client) -> int:
    """Delete the waiter counts no waiter holds (``meta waiters`` of 0 or less) that are set to
    expire, on every queue of the node, and keep every completed record kept as a field of a hash
    ``done`` (:func:`_persist_records`); returns how many counts went. A result waiter counts
    itself there with a field expiry of 30 s and leaves its 0 behind (docs/spec.md §12); DEBUG
    DIGEST reads a field past its expiry as gone, and no expiry switch holds a field's, so such a
    count left by an earlier test changed a later test's digest with no write. A 0 tells what no
    field tells. The node is scanned only when it holds more keys with an expiring field than the
    live counts seen last time (INFO keyspace): a scan of a shared server costs as much as its digest."""
    volatile = sum(db.get("keys_with_volatile_items", 0) for db in client.info("keyspace").values())
    where = client.connection_pool.connection_kwargs
    node = (where.get("host"), where.get("port"))
    known = _live_counts.pop(node, set())
    if not volatile:
        return 0
    counts = _waiter_counts(client, known)
    if volatile > sum(1 for count, ttl in counts.values() if count > 0 and ttl > 0):
        counts = _waiter_counts(client, set(client.scan_iter(match="emq:*:meta", count=1000, _type="HASH")))
        _persist_records(client)
    idle = [meta for meta, (count, ttl) in counts.items() if count <= 0 and ttl > 0]
    for meta in idle:
        client.hdel(meta, "waiters")
    _live_counts[node] = {meta for meta, (count, ttl) in counts.items() if count > 0 and ttl > 0}
    return len(idle)


def _persist_records(client: Client) -> None:
    """Every field of every queue's hash ``done`` (completed records as fields, docs/spec.md §12)
    kept for good (HPERSIST). A record's field expires at its retention, and, like a waiter count,
    a field that expires inside an unchanged() block changes DEBUG DIGEST with no write, however
    long its retention (a test's own record of a few ms, another's of 24 h that a shared server
    outlives): so before the "before" read none is left to expire. A record is a record all the
    same, read as it was; only its end is taken away."""
    for key in client.scan_iter(match="emq:*:done", count=1000, _type="HASH"):
        fields = client.hkeys(key)
        if fields:
            client.execute_command("HPERSIST", key, "FIELDS", len(fields), *fields)


def _waiter_counts(client: Client, metas: set[bytes]) -> dict[bytes, tuple[int, int]]:
    """Each meta's waiter count and its field's ms to live (-1: none, -2: no field), of those that have one."""
    ordered = sorted(metas)
    reads = client.pipeline(transaction=False)
    for meta in ordered:
        reads.hget(meta, "waiters")
        reads.execute_command("HPTTL", meta, "FIELDS", 1, "waiters")
    replies = reads.execute()
    return {meta: (int(count), ttl) for meta, count, (ttl,) in zip(ordered, replies[::2], replies[1::2])
            if count is not None}


class unchanged:
    """The node's dataset is the same afterwards: DEBUG DIGEST, plus a full dump of one queue's
    keys (``keyspace``) or of every key (``keyspace=None``); ``dump_keys=False``: the digest only.
    A whole-node dump is skipped on a node of more than a few hundred keys (the session's shared
    servers, past their first tests): the digest alone proves the dataset unchanged, the dump only
    makes a failure readable, and dumping a shared node twice cost a refusal test seconds; it leaves
    out keys with a TTL, which may run out within the block (the digest holds them and their
    expire times). Active expiry is held meanwhile (:func:`expiry_held`), all expiry while the
    state is read (:func:`expiry_paused`), and the waiter counts earlier tests left to expire are
    deleted first and the completed records kept as fields kept for good (no switch holds a
    field's expiry: :func:`forget_idle_waiter_counts`)."""

    WHOLE_NODE_DUMP_MAX_KEYS = 200

    def __init__(self, client: Client, keyspace: Keyspace | None = None, *, dump_keys: bool = True) -> None:
        self.client, self.keyspace, self.dump_keys = client, keyspace, dump_keys

    def _state(self) -> tuple:
        with expiry_paused(self.client):
            if not self.dump_keys:
                return digest(self.client), None
            keys = dump(self.client, self.keyspace)
            ttls = self.client.pipeline(transaction=False)
            for key in keys:
                ttls.pttl(key)
            lasting = {key: kept for (key, kept), ttl in zip(keys.items(), ttls.execute()) if ttl == -1}
            return digest(self.client), lasting

    def __enter__(self) -> None:
        forget_idle_waiter_counts(self.client)
        if self.keyspace is None and self.client.dbsize() > self.WHOLE_NODE_DUMP_MAX_KEYS:
            self.dump_keys = False
        self._held = ExitStack()
        self._held.enter_context(expiry_held(self.client))
        self.before = self._state()

    def __exit__(self, *exc: object) -> None:
        with self._held:
            after = self._state()
            assert after == self.before, f"the dataset changed; {_who_else_writes(self.client)}"


def _who_else_writes(client: Client) -> str:
    """What could have written besides the block, to make a failure readable: the node's other
    clients that sent a command within the last second, and its keys with an expiring field."""
    me = client.client_id()
    busy = [f"{c.get('name') or c['addr']}: {c['cmd']} ({c['idle']} s ago)" for c in client.client_list()
            if c["id"] != str(me) and int(c["idle"]) < 1 and c["cmd"] not in ("NULL", "client|list")]
    volatile = sum(db.get("keys_with_volatile_items", 0) for db in client.info("keyspace").values())
    return f"clients that just sent a command: {busy or 'none'}; keys with an expiring field: {volatile}"


def queue_unchanged(queue: Any) -> unchanged:
    """``unchanged`` for one queue's keys on its own connection."""
    return unchanged(queue.connection.client, queue.keys)


def error_code(exc: valkey.ResponseError) -> str:
    """The first word of the error reply (valkey-py strips the codes it maps to classes)."""
    if isinstance(exc, valkey.exceptions.NoPermissionError):
        return "NOPERM"
    return str(exc).split(" ", 1)[0]


def refused(client: Client, code: str, *command: Any, observer: Client | None = None) -> str:
    """Send ``command`` as a plain command on ``client``: it must be refused with ``code``, and the
    dataset unchanged (DEBUG DIGEST, read on ``observer`` when ``client`` may not, an ACL user's).
    Returns the refusal's text."""
    observer = client if observer is None else observer
    with unchanged(observer, dump_keys=False):
        with pytest.raises(valkey.ResponseError) as info:
            client.execute_command(*command)
        assert error_code(info.value) == code, str(info.value)
    return str(info.value)
