"""The dashboard's tests (served for real with ``echomq.dashboard.serving``: uvicorn on a free port
in a thread of the test process): a node of its own per module and wire, a queue holding jobs in
every state, and the form secret a page carries."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from echomq import EmbeddedServer, Queue, module_path

from .queues import fresh_name, take


# The dashboard reads every queue on its node, each sample and each refresh. The session's shared
# servers hold thousands of other tests' queues by the time these tests run (a loaded CI machine
# took over 10 s for a rate to show), so each dashboard module gets a node of its own per wire: a
# test module imports these two, and its `server` (which tests/conftest.py's `conn` connects to)
# is then one of them.
@pytest.fixture(scope="module")
def own_servers():
    with EmbeddedServer(brand=4) as wire4, EmbeddedServer(module=module_path(), brand=6) as wire6:
        yield {4: wire4, 6: wire6}


@pytest.fixture
def server(wire, own_servers):
    return own_servers[wire]

PENDING = 30  #: more than one page (25)


@dataclass
class Stocked:
    queue: Queue
    pending: list[str]
    active: str
    scheduled: str
    dead: list[str]


#: the stocked dead jobs' traceback, as a worker stores it
TRACEBACK = ('Traceback (most recent call last):\n  File "jobs.py", line 12, in handle\n    row = parse(payload)\n'
             "ValueError: bad row\n")


def stock(queue: Queue) -> Stocked:
    """Jobs in every state: 30 pending, 1 active, 1 scheduled, 2 dead (and 1 completed)."""
    dead = [queue.enqueue({"kind": "doomed", "n": n}).id for n in range(2)]
    for _ in dead:
        queue.fail(take(queue), "ValueError: bad row", max_attempts=1, traceback=TRACEBACK)
    done = queue.enqueue({"kind": "done"})
    queue.complete(take(queue))
    active = queue.enqueue({"kind": "held"}).id
    assert take(queue, 600_000).id == active
    pending = [e.id for e in queue.enqueue_many([{"kind": "waiting", "n": n} for n in range(PENDING)])]
    scheduled = queue.schedule({"kind": "later"}, 600_000).id
    assert done.id not in pending
    return Stocked(queue, pending, active, scheduled, dead)


@pytest.fixture
def stocked(conn) -> Stocked:
    """A fresh queue on the test's connection, stocked with jobs in every state (:func:`stock`)."""
    return stock(Queue(conn, fresh_name("dash")))


def secret_of(html: str) -> str:
    """The form secret a dashboard page carries (every form that acts posts it)."""
    found = re.search(r'name="secret" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def ids_on(html: str) -> list[str]:
    """The ids a dashboard page links to, in its order."""
    return re.findall(r'/job\?id=([^"]+)"', html)
