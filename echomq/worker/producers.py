"""What ``ctx.producer(queue)`` answers a sync handler, on a thread (the worker's connection) or in a
child of the process pool (the child's own)."""

from __future__ import annotations

from typing import Mapping

from .._client.connection import Connection
from .._client.partitioned import PartitionedQueue
from .._client.queue import Queue
from .._protocol.serializers import JSON, Serializer
from .tasks import App


def serializer_of(app: App, name: str, given: Serializer | None) -> Serializer:
    """A producer's serializer: the one given, else the app's task's for that queue, else JSON."""
    task = app.tasks.get(name)
    return given or (task.serializer if task else JSON)


def producer_of(app: App, connection: Connection, layouts: Mapping[str, list[str]], name: str,
                given: Serializer | None) -> Queue | PartitionedQueue:
    """``ctx.producer(name)`` of a sync handler: a queue of ``app``'s on ``connection`` (its layout as
    the worker declared it)."""
    layout = layouts.get(name, [name])
    if len(layout) == 1:
        return Queue(connection, name, serializer=serializer_of(app, name, given))
    return PartitionedQueue(connection, name, partitions=len(layout), serializer=serializer_of(app, name, given))
