"""Test helpers: fresh queue names, dump a queue's keys, read and wait on the server clock, the
'dataset unchanged' check -- one of each for every test directory."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import subprocess
import time
import uuid
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

from echomq import aio
from echomq._protocol.keys import Keyspace

# valkey-py's annotations mix its sync and asyncio returns (``Awaitable[Any] | Any``) and want str
# keys: the helpers take its sync client as Any, so type checkers read the tests, not its stubs.
Client = Any

_names = itertools.count()


def fresh_name(prefix: str = "t") -> str:
    """A queue name no other test uses (the shared servers outlive each test)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


def former_default_id(ms: int) -> str:
    """A UUIDv7 text minted at ``ms``: the default job id before the 16-character ids (echomq._protocol.ids)."""
    return str(uuid.UUID(int=ms << 80 | 0x7 << 76 | 0b10 << 62 | int.from_bytes(os.urandom(7), "big")))


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
        if kind == "hash" and (b":job:" in key or b":done:" in key or b":unique:" in key):  # a row, a record, a window
            for name in TIME_FIELDS:
                if name in value:
                    assert now_ms - window_ms <= int(value[name]) <= now_ms, (key, name, value[name], now_ms)
                    value[name] = TIME
    return state


def snap(queue: Any) -> dict[bytes, tuple]:
    """A queue's job-core dataset (:func:`core_dump`), its rows' time fields checked and masked
    (:func:`mask_times`): what the conformance and script-edge tests compare whole."""
    client = queue.connection.client
    return mask_times(core_dump(client, queue.keys), server_ms(client))


def digest(client: Client) -> bytes:
    return client.execute_command("DEBUG", "DIGEST")


def server_ms(client: Client) -> int:
    """The server clock in ms, as the verbs read it (TIME)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_server_past(client: Client, deadline_ms: float, timeout_s: float = 10.0) -> None:
    """Poll the server's clock until it is past ``deadline_ms``: waits on the server, not on a guess."""
    give_up = time.monotonic() + timeout_s
    while server_ms(client) <= deadline_ms:
        if time.monotonic() > give_up:
            raise TimeoutError(f"server clock did not pass {deadline_ms}")
        time.sleep(0.001)


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


class unchanged:
    """The node's dataset is the same afterwards: DEBUG DIGEST, plus a full dump of one queue's
    keys (``keyspace``) or of every key (``keyspace=None``); ``dump_keys=False``: the digest only.
    A whole-node dump is skipped on a node of many keys (the session's shared servers): the
    digest alone proves the dataset unchanged, the dump only makes a failure readable; it leaves
    out keys with a TTL, which may run out within the block (the digest holds them and their
    expire times). Active expiry is held meanwhile (:func:`expiry_held`), and all expiry while
    the state is read (:func:`expiry_paused`)."""

    WHOLE_NODE_DUMP_MAX_KEYS = 2000

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
        if self.keyspace is None and self.client.dbsize() > self.WHOLE_NODE_DUMP_MAX_KEYS:
            self.dump_keys = False
        self._held = ExitStack()
        self._held.enter_context(expiry_held(self.client))
        self.before = self._state()

    def __exit__(self, *exc: object) -> None:
        with self._held:
            assert self._state() == self.before


def queue_unchanged(queue) -> unchanged:
    """``unchanged`` for one queue's keys on its own connection."""
    return unchanged(queue.connection.client, queue.keys)


def reap(proc: subprocess.Popen) -> None:
    """Kill a test's subprocess if it still runs, and close its pipes: the cleanup for every path."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()


class AwaitingQueue:
    """An :class:`echomq.aio.Queue` seen through blocking calls, so one suite runs on both clients:
    every coroutine method runs to completion on this adapter's own event loop (an async
    generator, to its end, as a list); the pure parts (``keys``, the ``*_call`` builders) pass through. ``connection`` is the sync twin's, for the
    tests' own inspection of the dataset."""

    def __init__(self, url: str, wire: int, twin) -> None:
        self._loop = asyncio.new_event_loop()
        self._aconn = self._loop.run_until_complete(aio.connect(url, wire=wire))
        self._queue = aio.Queue(self._aconn, twin.name, serializer=twin.serializer)
        self.connection = twin.connection

    def __getattr__(self, name: str):
        attr = getattr(self._queue, name)
        if inspect.isasyncgenfunction(attr):
            async def collect(*args, **kwargs):
                return [item async for item in attr(*args, **kwargs)]

            return lambda *args, **kwargs: self._loop.run_until_complete(collect(*args, **kwargs))
        if not inspect.iscoroutinefunction(attr):
            return attr
        return lambda *args, **kwargs: self._loop.run_until_complete(attr(*args, **kwargs))

    def close(self) -> None:
        self._loop.run_until_complete(self._aconn.aclose())
        self._loop.close()


class awaited_connect:
    """``echomq.aio.connect`` run to completion on a loop of its own: the handshake tests run
    the same checks through both clients. ``wire`` as the connection's; a context manager."""

    def __init__(self, url: str, **options) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self.conn = self._loop.run_until_complete(aio.connect(url, **options))
        except BaseException:
            self._loop.close()
            raise
        self.wire = self.conn.wire

    def __enter__(self) -> "awaited_connect":
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.run_until_complete(self.conn.aclose())
        self._loop.close()


def take(queue, lease_ms: int = 60_000):
    """Claim the head of ``queue``, which the test knows is there (a typed ``Job``, never None)."""
    job = queue.claim(lease_ms)
    assert job is not None, f"{queue.name}: nothing to claim"
    return job
