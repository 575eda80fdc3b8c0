"""The dashboard served for real: uvicorn on a free port in a thread of the test process,
over a queue holding jobs in every state."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import uvicorn

from echomq import Queue
from echomq.connection import Connection
from echomq.dashboard import Settings, create_app
from echomq.server import free_port
from worker_helpers import wait_until

PENDING = 30  #: more than one page (25)


@dataclass
class Stocked:
    queue: Queue
    pending: list[str]
    active: str
    scheduled: str
    dead: list[str]


def stock(queue: Queue) -> Stocked:
    """Jobs in every state: 30 pending, 1 active, 1 scheduled, 2 dead (and 1 completed)."""
    dead = [queue.enqueue({"kind": "doomed", "n": n}).id for n in range(2)]
    for _ in dead:
        queue.fail(queue.claim(60_000), "ValueError: bad row", max_attempts=1)
    done = queue.enqueue({"kind": "done"})
    queue.complete(queue.claim(60_000))
    active = queue.enqueue({"kind": "held"}).id
    assert queue.claim(600_000).id == active
    pending = [e.id for e in queue.enqueue_many([{"kind": "waiting", "n": n} for n in range(PENDING)])]
    scheduled = queue.schedule({"kind": "later"}, 600_000).id
    assert done.id not in pending
    return Stocked(queue, pending, active, scheduled, dead)


@contextmanager
def serving(connection: Connection, settings: Settings) -> Iterator[str]:
    """The dashboard at the URL yielded, until the block ends."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(connection, settings), host="127.0.0.1", port=port,
                                          log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="the dashboard to start")
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
