"""A producer and a worker of EchoMQ 0.1.0 as the node saw them: 0.1.0's verbs with 0.1.0's KEYS
and ARGV, on wire 4 by its own scripts (fixtures/v0.1.0/scripts, byte for byte), on wire 6 as the
EMQ commands; its default ids UUIDv7 text. The rolling-deploy test runs it beside this release.

Why this, not 0.1.0's package: what crosses versions is the wire -- the scripts, the commands
and the data they leave -- and this sends exactly what 0.1.0 sent. 0.1.0's package is another
``echomq`` (it needs a process and a tree of its own, from history CI's shallow clone may lack),
and what its worker does inside (threads, timers, batching) changes nothing the node sees.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import valkey

SCRIPTS = Path(__file__).resolve().parent / "fixtures" / "v0.1.0" / "scripts"


def uuid7() -> str:
    """0.1.0's default id: a UUIDv7 of the current ms (echomq/ids.py at 7b480d4)."""
    ms = time.time_ns() // 1_000_000
    return str(uuid.UUID(int=ms << 80 | 0x7 << 76 | int.from_bytes(os.urandom(1), "big") << 64 | 0b10 << 62
                        | int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)))


@dataclass(frozen=True)
class Claimed:
    id: str
    payload: bytes
    token: str


class OldRelease:
    """0.1.0's calls of one queue on the node at ``url``, on ``wire``."""

    def __init__(self, url: str, wire: int, queue: str) -> None:
        self.client = valkey.Valkey.from_url(url)
        self.wire = wire
        base = f"emq:{{{queue}}}:"
        self.base, self.pending, self.active = base, base + "pending", base + "active"
        self.schedule, self.dead, self.meta = base + "schedule", base + "dead", base + "meta"
        self.sha = {path.stem: self.client.script_load(path.read_text()) for path in SCRIPTS.glob("*.lua")}

    def _verb(self, name: str, keys: tuple[str, ...], *argv: Any) -> Any:
        if self.wire == 6:
            return self.client.execute_command(f"EMQ.{name.upper()}", len(keys), *keys, *argv)
        return self.client.evalsha(self.sha[name], len(keys), *keys, *argv)

    def enqueue(self, payload: bytes, priority: int = 0) -> str:
        job_id = uuid7()
        self._verb("enqueue", (self.pending, self.base), job_id, payload, priority)
        return job_id

    def claim(self, lease_ms: int) -> Claimed | None:
        # wire 4: 0.1.0 read the pause flag in a round trip of its own first (SPEC §4)
        if self.wire == 4 and self.client.hget(self.meta, "paused") is not None:
            return None
        reply = self._verb("claim", (self.pending, self.active, self.base), lease_ms)
        if not reply:
            return None
        job_id, payload, attempts = reply
        return Claimed(job_id.decode(), payload, str(attempts))

    def complete(self, job: Claimed) -> bool:
        return self._verb("complete", (self.active, self.base), job.id, job.token) == 1

    def fail(self, job: Claimed, error: str, *, max_attempts: int, backoff_ms: int = 0) -> bytes:
        keys = (self.active, self.pending, self.schedule, self.dead, self.base)
        return self._verb("fail", keys, job.id, job.token, error, max_attempts, backoff_ms)
