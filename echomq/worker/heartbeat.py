"""The worker's heartbeat: its record in the workers list (:mod:`echomq._core.workers`), rewritten
on an interval and removed at a clean shutdown."""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Sequence

import valkey

from .._client.connection import plain_commands
from .._core.summaries import stats_key
from .._core.workers import WORKERS_KEY, WorkerRecord, encode_record, record_key
from .._protocol.verbs import text
from ..errors import ConfigurationError
from .jobstats import JobStats


@dataclass(frozen=True)
class HeartbeatConfig:
    interval_ms: int = 15_000  #: how often the record is rewritten (3 commands: 0.2 a second)
    ttl_ms: int = 45_000  #: a record not rewritten for this long expires: the worker is gone

    def __post_init__(self) -> None:
        for name in ("interval_ms", "ttl_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"bad heartbeat {name} {value!r}: an integer >= 1")
        if self.ttl_ms <= self.interval_ms:
            raise ConfigurationError(
                f"bad heartbeat ttl_ms {self.ttl_ms}: it must exceed interval_ms ({self.interval_ms}), "
                "or a live worker's record would expire between beats"
            )


def new_worker_id() -> str:
    """``host:pid:random``: readable, and unique even when a pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Heartbeat:
    """The worker's side: ``beat`` on an interval (the worker's loop asks ``due``), ``remove`` at the end."""

    def __init__(self, client: valkey.Valkey, *, queues: Sequence[str], concurrency: int, wire: int,
                 config: HeartbeatConfig | None = None, worker_id: str | None = None,
                 stats: JobStats | None = None) -> None:
        self.client = client
        self.config = config or HeartbeatConfig()
        self.id = worker_id or new_worker_id()
        self.queues = list(queues)
        self.concurrency = concurrency
        self.wire = wire
        self.started = time.time()
        self.stats = stats  #: published with each beat: its summary beside the record, its last error in it
        self._last_ms: float | None = None

    def next_due_ms(self) -> float:
        return float("-inf") if self._last_ms is None else self._last_ms + self.config.interval_ms

    def run_due(self, now_ms: float, *, held: int, completed: int, failed: int) -> bool:
        """Beat if one is due at local time ``now_ms``; True when it did."""
        if now_ms < self.next_due_ms():
            return False
        with plain_commands("the heartbeat"):  # a refusal or a link fault: the worker's step handles it
            self.beat(held=held, completed=completed, failed=failed)
        self._last_ms = now_ms
        return True

    def beat(self, *, held: int, completed: int, failed: int) -> None:
        """Rewrite the record (and the stats beside it) and their TTLs in one round trip; the first beat
        also registers the id."""
        record = WorkerRecord(self.id, socket.gethostname(), os.getpid(), self.queues, self.concurrency, self.wire,
                              self.started, time.time(), held, completed, failed,
                              self.stats.last_error.encoded() if self.stats and self.stats.last_error else "")
        key = record_key(self.id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, mapping=encode_record(record))
        pipe.pexpire(key, self.config.ttl_ms)
        if self.stats is not None:
            pipe.set(stats_key(self.id), self.stats.summary(), px=self.config.ttl_ms)
        pipe.sadd(WORKERS_KEY, self.id)
        pipe.execute()
        if self._last_ms is None:
            self._forget_expired()

    def _forget_expired(self) -> None:
        """Drop ids whose record expired (workers that died): done at registration, so reads never write."""
        ids = [member for member in self.client.smembers(WORKERS_KEY)]
        pipe = self.client.pipeline(transaction=False)
        for member in ids:
            pipe.exists(record_key(text(member)))
        gone = [member for member, alive in zip(ids, pipe.execute()) if not alive]
        if gone:
            self.client.srem(WORKERS_KEY, *gone)

    def remove(self) -> None:
        """A clean shutdown: the record goes at once."""
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(record_key(self.id))
        pipe.delete(stats_key(self.id))  # apart: a cluster pipeline takes one key a DEL
        pipe.srem(WORKERS_KEY, self.id)
        with plain_commands("the heartbeat's removal"):
            pipe.execute()
