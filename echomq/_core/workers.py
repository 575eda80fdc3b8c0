"""The workers list: every running worker keeps a heartbeat record the others can read (its
keys, the record, and the list read as an operation; the worker's writing side is
:mod:`echomq.worker.heartbeat`, the operator's read :func:`echomq.list_workers`).

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

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Generator, Sequence

from .._protocol.keys import parent_queue
from .._protocol.verbs import Plain, text

WORKERS_KEY = "{emq}:workers"
RECORD_PREFIX = "{emq}:worker:"


def record_key(worker_id: str) -> str:
    return RECORD_PREFIX + worker_id


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
    last_error: str = ""  #: its handlers' last failure (:class:`LastError`, encoded); "" for none yet

    @property
    def last_failure(self) -> "LastError | None":
        return decode_last_error(self.last_error)

    def as_dict(self) -> dict[str, Any]:
        failure = self.last_failure
        return {**vars(self), "last_error": None if failure is None else vars(failure)}


@dataclass(frozen=True)
class LastError:
    """The last failure a worker's handlers raised: when, which job, and its error (cut to a bound)."""

    at: float  #: Unix seconds, the worker's clock
    queue: str
    task: str
    id: str
    error: str

    def encoded(self) -> str:
        return json.dumps(vars(self), separators=(",", ":"))


def decode_last_error(text: str) -> LastError | None:
    """A record's ``last_error`` (pure): None for none, or one that does not read (another release's)."""
    try:
        found = json.loads(text) if text else None
        return None if not isinstance(found, dict) else LastError(
            float(found["at"]), str(found["queue"]), str(found["task"]), str(found["id"]), str(found["error"]))
    except (ValueError, KeyError, TypeError):
        return None


def encode_record(record: WorkerRecord) -> dict[str, str]:
    """The hash fields of a record (pure)."""
    fields = dict(vars(record))
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
            last_error=text.get("last_error", ""),
        )
    except (KeyError, ValueError):
        return None


def op_workers() -> Generator[list[Plain], list[Any], list[WorkerRecord]]:
    """:func:`~echomq.list_workers` as an operation (:data:`echomq._core.core.Op`), for a queue of either client to
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
