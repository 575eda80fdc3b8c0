"""Queues and calls for the tests: fresh queue names, a job claimed for sure, a verb sent exactly as
given, a queue with a job in every state and each verb's arguments on it, and the asyncio client
seen through blocking calls (so one test runs on both clients), and the round trips a block sends."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import uuid
from contextlib import contextmanager
from typing import Any, Iterator

from echomq import Connection, Job, Queue, aio, hooks
from echomq._client.connection import build_call

from .waiting import server_ms, wait_server_past

_names = itertools.count()


def fresh_name(prefix: str = "t") -> str:
    """A queue name no other test uses (the shared servers outlive each test)."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


@contextmanager
def round_trips() -> Iterator[list[list[str]]]:
    """The round trips sent in the block by any connection of this process, each as its verbs (the
    ``verb.stop`` hook: one a round trip, each verb or plain command of it)."""
    sent: list[list[str]] = []
    unsubscribe = hooks.subscribe("verb.stop", lambda event, data: sent.append(data["verbs"]))
    try:
        yield sent
    finally:
        unsubscribe()


def former_default_id(ms: int) -> str:
    """A UUIDv7 text minted at ``ms``: the default job id before the 16-character ids (echomq._protocol.ids)."""
    return str(uuid.UUID(int=ms << 80 | 0x7 << 76 | 0b10 << 62 | int.from_bytes(os.urandom(7), "big")))


def take(queue: Any, lease_ms: int = 60_000) -> Job:
    """Claim the head of ``queue``, which the test knows is there (a typed ``Job``, never None)."""
    job = queue.claim(lease_ms)
    assert job is not None, f"{queue.name}: nothing to claim"
    return job


def raw(queue: Queue, verb: str, *argv: Any) -> Any:
    """Send ``verb`` on ``queue`` with ``argv`` exactly as given, past the Python-side checks: what a
    foreign client sends."""
    return queue.connection.send(build_call(verb, queue.keys, argv))


def raw_reply(queue: Queue, verb: str, *argv: Any) -> Any:
    """:func:`raw`, its reply as the connection reads it: a batch's error elements typed in their
    place, a refusal of the whole command raised."""
    (reply,) = queue.connection.round_trip([build_call(verb, queue.keys, argv)])
    if isinstance(reply, Exception):
        raise reply
    return reply


def plant_every_state(conn: Connection, name: str) -> Job:
    """In queue ``name``: p pending behind an expired lease, a held, x scheduled and due, s dead, and
    ``later`` scheduled an hour on; returns the held job (a), for the verbs that need a holder."""
    q = Queue(conn, name)
    for job_id in ("p", "a", "x", "s", "d"):
        q.enqueue({"job": job_id}, id=job_id)
    q.claim(1)  # p: a lease of 1 ms
    held = take(q)  # a
    soon = take(q)  # x -> scheduled, due now
    dying = take(q)  # s -> dead
    q.delay(soon, 0)
    q.fail(dying, "boom", max_attempts=1)
    q.schedule({"job": "later"}, 60_000, id="later")
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    return held


def argv_for(verb: str, held: Job) -> tuple:
    """A well-formed ARGV of ``verb`` on a queue :func:`plant_every_state` filled, ``held`` its held job."""
    return {
        "enqueue": ("new", b"{}", 0),
        "claim": (60_000,),
        "extend": (held.id, held.token, 60_000),
        "extends": (60_000, held.id, held.token),
        "complete": (held.id, held.token),
        "schedule": ("new", b"{}", 1000, 0),
        "promote": (100,),
        "reschedule": ("later", 1000),
        "delay": (held.id, held.token, 1000),
        "fail": (held.id, held.token, "e", 5, 0),
        "reprocess": ("s",),
        "requeue": (held.id, held.token),
        "stalled_check": (5, 100),
        "append": (held.id, held.token, b'"half"'),
        "failures_incr": (held.id, held.token, "e", 1, 0, "tb"),
        "publish": (held.id, held.token, b'"r"', 60_000),
        "counts": (),
        "state": ("a",),
    }[verb]


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
