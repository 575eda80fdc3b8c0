"""The operator's read of the workers list (:mod:`echomq._core.workers`): ``emq workers``, the
dashboard, and :func:`echomq.list_workers`."""

from __future__ import annotations

import valkey

from .._core.workers import WORKERS_KEY, WorkerRecord, live_records, record_key
from .._protocol.verbs import text


def list_workers(client: valkey.Valkey) -> list[WorkerRecord]:
    """The live workers, oldest first. Reads only: expired ids are skipped, not removed."""
    ids = sorted(text(member) for member in client.smembers(WORKERS_KEY))  # any bytes: shown escaped
    if not ids:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id in ids:
        pipe.hgetall(record_key(worker_id))
    return live_records(ids, pipe.execute())
