"""The workers list: every running worker keeps a heartbeat record the others can read.

A worker writes one hash, ``{emq}:worker:<id>``, every ``interval_ms`` (host, pid,
queues, concurrency, wire, started, jobs done, last beat) and gives it a TTL of
``ttl_ms``, so a worker that dies without a word disappears within ``ttl_ms``. A clean
shutdown deletes it at once. The ids are kept in one set, ``{emq}:workers``, so a
reader lists them without a SCAN of the node's whole keyspace; an id whose hash has
expired is skipped by readers and dropped from the set when a worker registers.

Both keys carry the ``{emq}`` hashtag, like the brand key: on a cluster they share one
slot, so a list is two round trips to one node however many nodes hold the queues.
These keys sit outside every queue's keyspace and no verb reads them.

Times in the record are the worker's wall clock (Unix seconds): they are shown to
people, and no job decision depends on them.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Generator, Sequence

import valkey

from .._client.connection import plain_commands
from ..errors import ConfigurationError
from .._protocol.keys import parent_queue
from .._protocol.verbs import Plain, text

WORKERS_KEY = "{emq}:workers"
RECORD_PREFIX = "{emq}:worker:"


def record_key(worker_id: str) -> str:
    return RECORD_PREFIX + worker_id


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


@dataclass(frozen=True)
class WorkerRecord:
    """One worker as its last beat described it."""

    id: str
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    wire: int
    started: float  #: Unix seconds, the worker's clock
    last_beat: float  #: Unix seconds, the worker's clock
    held: int  #: jobs held at the last beat
    completed: int  #: jobs this worker completed
    failed: int  #: failures it recorded (retried or dead)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def new_worker_id() -> str:
    """``host:pid:random``: readable, and unique even when a pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def encode_record(record: WorkerRecord) -> dict[str, str]:
    """The hash fields of a record (pure)."""
    fields = record.as_dict()
    fields.pop("id")
    fields["queues"] = ",".join(record.queues)
    return {name: str(value) for name, value in fields.items()}


def decode_record(worker_id: str, fields: dict[bytes, bytes]) -> WorkerRecord | None:
    """A record from its hash; None for an expired (empty) or unreadable one (pure)."""
    text = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in fields.items()}
    try:
        return WorkerRecord(
            id=worker_id, host=text["host"], pid=int(text["pid"]),
            queues=[q for q in text["queues"].split(",") if q], concurrency=int(text["concurrency"]),
            wire=int(text["wire"]), started=float(text["started"]), last_beat=float(text["last_beat"]),
            held=int(text["held"]), completed=int(text["completed"]), failed=int(text["failed"]),
        )
    except (KeyError, ValueError):
        return None


def list_workers(client: valkey.Valkey) -> list[WorkerRecord]:
    """The live workers, oldest first. Reads only: expired ids are skipped, not removed."""
    ids = sorted(text(member) for member in client.smembers(WORKERS_KEY))  # any bytes: shown escaped
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hgetall(record_key(worker_id))
    return live_records(ids, pipe.execute())


def op_workers() -> Generator[list[Plain], list[Any], list[WorkerRecord]]:
    """:func:`list_workers` as an operation (:data:`echomq._core.core.Op`), for a queue of either client to
    drive: the ids, then their records, two round trips."""
    (members,) = yield [Plain(("SMEMBERS", WORKERS_KEY))]
    if isinstance(members, Exception):
        raise members
    ids = sorted(text(m) for m in members)  # any bytes: shown escaped
    rows = (yield [Plain(("HGETALL", record_key(worker_id))) for worker_id in ids]) if ids else []
    return live_records(ids, rows)


def live_records(ids: Sequence[str], rows: Sequence[Any]) -> list[WorkerRecord]:
    """The records read for ``ids`` that are live (an expired or unreadable one is skipped), oldest
    first (pure)."""
    records = [decode_record(worker_id, fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2])))
               for worker_id, fields in zip(ids, rows) if not isinstance(fields, Exception)]
    return sorted((r for r in records if r is not None), key=lambda r: (r.started, r.id))


def serving(workers: Sequence[WorkerRecord]) -> Counter[str]:
    """How many of ``workers`` serve each queue, by the names they serve and, for a partitioned
    queue's partitions, by the queue's own name too (each worker counted once a name) (pure)."""
    counted: Counter[str] = Counter()
    for worker in workers:
        counted.update({*worker.queues, *(parent_queue(name) for name in worker.queues)})
    return counted


class Heartbeat:
    """The worker's side: ``beat`` on an interval (the worker's loop asks ``due``), ``remove`` at the end."""

    def __init__(self, client: valkey.Valkey, *, queues: Sequence[str], concurrency: int, wire: int,
                 config: HeartbeatConfig | None = None, worker_id: str | None = None) -> None:
        self.client = client
        self.config = config or HeartbeatConfig()
        self.id = worker_id or new_worker_id()
        self.queues = list(queues)
        self.concurrency = concurrency
        self.wire = wire
        self.started = time.time()
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
        """Rewrite the record and its TTL in one round trip; the first beat also registers the id."""
        record = WorkerRecord(self.id, socket.gethostname(), os.getpid(), self.queues, self.concurrency, self.wire,
                              self.started, time.time(), held, completed, failed)
        key = record_key(self.id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, mapping=encode_record(record))
        pipe.pexpire(key, self.config.ttl_ms)
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
        pipe.srem(WORKERS_KEY, self.id)
        with plain_commands("the heartbeat's removal"):
            pipe.execute()
