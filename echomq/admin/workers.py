"""The operator's read of the workers list (:mod:`echomq._core.workers`): ``emq workers``, the
dashboard, and :func:`echomq.list_workers`."""

from __future__ import annotations

from .._client.connection import Connection, run_op
from .._core.core import check_connection
from .._core.workers import WorkerRecord, op_workers


def list_workers(connection: Connection) -> list[WorkerRecord]:
    """The live workers, oldest first, read on ``connection`` (:func:`echomq.connect`). Reads only:
    expired ids are skipped, not removed."""
    check_connection(connection, Connection, "echomq.list_workers", "echomq.connect(url)", takes="conn")
    return run_op(connection, op_workers())
