"""Test helpers: dump a queue's keys, read the server clock, wait on the server clock."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import valkey

from echomq.keys import Keyspace


def dump_key(client: valkey.Valkey, key: bytes) -> tuple:
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
    return kind, None


def dump(client: valkey.Valkey, keyspace: Keyspace | None = None) -> dict[bytes, tuple]:
    """Every key (of one queue, or of the node) with its type and full content."""
    pattern = keyspace.pattern() if keyspace else "*"
    return {key: dump_key(client, key) for key in sorted(client.scan_iter(match=pattern, count=1000))}


def core_dump(client: valkey.Valkey, keyspace: Keyspace) -> dict[bytes, tuple]:
    """One queue's keys without wire 4's wake marker (SPEC §9.3), which must be the one-member
    marker when present: the job core's dataset, the same on both wires. When the marker is
    written is checked by the parity instrument and tests/test_blocking_worker.py."""
    keys = dump(client, keyspace)
    marker = keys.pop(keyspace.wake.encode(), None)
    assert marker in (None, ("zset", [(b"w", 0.0)])), f"not the wake marker: {marker}"
    return keys


#: A row's time fields (SPEC §9: created, started = the last claim, failed = the last failure),
#: written by the verbs on the server clock.
TIME_FIELDS = (b"created", b"started", b"failed")
TIME = b"<time>"


def mask_times(state: dict[bytes, tuple], now_ms: int, window_ms: int = 600_000) -> dict[bytes, tuple]:
    """``state`` (a :func:`dump`) with every row's time fields checked to be a server time from
    the last ``window_ms`` up to ``now_ms``, then shown as ``<time>``: the dump stays comparable
    as a whole while the field's presence (and sanity) is still asserted."""
    for key, (kind, value) in state.items():
        if kind == "hash" and b":job:" in key:
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


def digest(client: valkey.Valkey) -> bytes:
    return client.execute_command("DEBUG", "DIGEST")


def server_ms(client: valkey.Valkey) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def wait_server_past(client: valkey.Valkey, deadline_ms: float, timeout_s: float = 10.0) -> None:
    """Poll the server's clock until it is past ``deadline_ms``: waits on the server, not on a guess."""
    give_up = time.monotonic() + timeout_s
    while server_ms(client) <= deadline_ms:
        if time.monotonic() > give_up:
            raise TimeoutError(f"server clock did not pass {deadline_ms}")
        time.sleep(0.001)


class unchanged:
    """The node's dataset is the same afterwards: DEBUG DIGEST, plus a full dump of one queue's
    keys (``keyspace``) or of every key (``keyspace=None``); ``dump_keys=False``: the digest only."""

    def __init__(self, client: valkey.Valkey, keyspace: Keyspace | None = None, *, dump_keys: bool = True) -> None:
        self.client, self.keyspace, self.dump_keys = client, keyspace, dump_keys

    def _state(self) -> tuple:
        return digest(self.client), dump(self.client, self.keyspace) if self.dump_keys else None

    def __enter__(self) -> None:
        self.before = self._state()

    def __exit__(self, *exc: object) -> None:
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
