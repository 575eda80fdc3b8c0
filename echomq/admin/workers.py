"""The operator's read of the workers list (:mod:`echomq._core.workers`): ``emq workers``, the
dashboard, and :func:`echomq.list_workers`; and what the live workers publish of their jobs
(:mod:`echomq._core.summaries`)."""

from __future__ import annotations

import warnings
from typing import Any

import valkey
from valkey.cluster import ValkeyCluster

from .._client.connection import Connection, Plain, plain_commands, run_op
from .._core.core import check_connection
from .._core.summaries import TaskSummary, decode_summary, stats_key
from .._core.workers import WorkerRecord, op_workers

#: What a caller that still passes a raw client is told (docs/compatibility.md, "Deprecation").
RAW_CLIENT_DEPRECATED = ("echomq.list_workers(client) is deprecated: pass the connection instead, "
                         "echomq.list_workers(echomq.connect(url)), whose reads fail as ConnectionFailed")


def list_workers(connection: Connection) -> list[WorkerRecord]:
    """The live workers, oldest first, read on ``connection`` (:func:`echomq.connect`) in two round
    trips. Reads only: expired ids are skipped, not removed. A valkey-py client still works, with a
    DeprecationWarning."""
    if isinstance(connection, (valkey.Valkey, ValkeyCluster)):
        warnings.warn(RAW_CLIENT_DEPRECATED, DeprecationWarning, stacklevel=2)
        with plain_commands("the workers list"):
            return listed_by_client(connection)
    check_connection(connection, Connection, "echomq.list_workers", "echomq.connect(url)", takes="conn")
    return run_op(connection, op_workers())


def listed_by_client(client: Any) -> list[WorkerRecord]:
    """The workers list read on a raw client, a pipeline for each round trip (the deprecated form)."""
    op = op_workers()
    try:
        request = next(op)
        while True:
            pipe = client.pipeline(transaction=False)
            for command in request:
                pipe.execute_command(*command.args)
            request = op.send(pipe.execute(raise_on_error=False))
    except StopIteration as done:
        return done.value


def worker_summaries(connection: Connection, workers: list[WorkerRecord]) -> dict[str, list[TaskSummary]]:
    """What each of ``workers`` published of its queues' tasks with its last beat, by worker id, in one
    round trip (the keys share the ``{emq}`` slot); a worker that published none (an older release)
    has none."""
    if not workers:
        return {}
    found = connection.round_trip([Plain(("GET", stats_key(w.id))) for w in workers])
    return {w.id: decode_summary(text) for w, text in zip(workers, found) if not isinstance(text, Exception)}
