"""The plain-command side of the API (no verb): pause/resume and the reads job, ids, metrics.

They are not verbs, but they answer in the same error tree: a wrong-typed key is a
WrongType (not valkey-py's raw ResponseError), bad paging is a ConfigurationError
naming the value, and nothing is written.
"""

from __future__ import annotations

import itertools
import os

import pytest

from echomq import ConfigurationError, Queue, State, WrongType
from echomq._protocol.serializers import RAW
from support.dataset import queue_unchanged
from support.queues import take

_names = itertools.count()


@pytest.fixture
def q(conn):
    return Queue(conn, f"rd{os.getpid()}-{next(_names)}", serializer=RAW)


def test_job_reads_the_row_as_text_with_the_payload_decoded(q):
    q.enqueue(b"\xff\x00", id="a", priority=3)
    row = q.job("a")
    assert row.pop("created").isdigit()  # the server's time of the enqueue (docs/spec.md §11.5)
    assert row == {"state": "pending", "attempts": "0", "priority": "3", "payload": b"\xff\x00"}
    assert q.job("missing") is None


def test_ids_pages_through_a_set_lowest_score_first(q):
    for i in range(7):
        q.enqueue(b"p", id=f"j{i}", priority=7 - i)
    everything = q.ids(State.PENDING, count=100)
    assert [m for m, _ in everything] == [f"j{i}" for i in reversed(range(7))]
    assert q.ids("pending", offset=2, count=3) == everything[2:5]
    assert q.ids(State.PENDING, offset=6, count=5) == everything[6:]
    assert q.ids(State.PENDING, offset=7) == []
    assert q.ids(State.DEAD) == []


@pytest.mark.parametrize("count", [0, -1, True, 1.5])
def test_ids_refuses_a_bad_count(q, count):
    q.enqueue(b"p", id="a")
    with pytest.raises(ConfigurationError) as info:
        q.ids(State.PENDING, count=count)
    assert "count" in str(info.value) and repr(count) in str(info.value)


@pytest.mark.parametrize("offset", [-1, -5, None])
def test_ids_refuses_a_bad_offset(q, offset):
    q.enqueue(b"p", id="a")
    with pytest.raises(ConfigurationError) as info:
        q.ids(State.PENDING, offset=offset)
    assert "offset" in str(info.value) and repr(offset) in str(info.value)


@pytest.mark.parametrize("state", ["schedule", "done", "", None])
def test_ids_refuses_an_unknown_state(q, state):
    with pytest.raises(ConfigurationError) as info:
        q.ids(state)
    assert repr(state) in str(info.value)


def test_metrics_count_completions_and_deaths(q):
    assert q.metrics() == {"completed": 0, "failed": 0}
    q.enqueue(b"p", id="a")
    q.enqueue(b"p", id="b")
    q.complete(q.claim(60_000))
    q.fail(q.claim(60_000), "x", max_attempts=1)
    assert q.metrics() == {"completed": 1, "failed": 1}


def _wrong(q, key):
    q.connection.client.set(key, "a string")


@pytest.mark.parametrize(
    "what,key,call",
    [
        ("pause", lambda q: q.keys.meta, lambda q: q.pause()),
        ("resume", lambda q: q.keys.meta, lambda q: q.resume()),
        ("job", lambda q: q.keys.job("a"), lambda q: q.job("a")),
        ("ids", lambda q: q.keys.pending, lambda q: q.ids(State.PENDING)),
        ("metrics", lambda q: q.keys.metrics("failed"), lambda q: q.metrics()),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_wrong_typed_key_is_a_wrong_type_error_and_writes_nothing(q, what, key, call):
    _wrong(q, key(q))
    with queue_unchanged(q):
        with pytest.raises(WrongType) as info:
            call(q)
    assert info.value.code == "WRONGTYPE"


def test_numbers_of_many_queues_take_one_round_trip_and_a_damaged_one_keeps_its_place(conn, monkeypatch):
    """The dashboard, `emq stats` and the metrics endpoint read every queue of a node: one
    pipeline for all of them, each queue's numbers equal to its own reads, a partitioned queue's
    summed, and a wrong-typed key's refusal in its queue's place only."""
    from echomq import PartitionedQueue
    from echomq.admin.inventory import numbers_of
    from echomq._client.partitioned import open_queues

    names = [f"nums{os.getpid()}-{next(_names)}" for _ in range(30)]
    for n, name in enumerate(names[:-2]):
        queue = Queue(conn, name)
        queue.enqueue_many([{"n": i} for i in range(n % 4)])
        if n % 3 == 0 and n % 4:
            queue.complete(take(queue))
    split = PartitionedQueue(conn, names[-2], partitions=3)
    split.enqueue_many([{"n": i} for i in range(5)])
    damaged = names[-1]
    conn.client.set(f"emq:{{{damaged}}}:pending", "not a zset")
    try:
        queues = open_queues(conn, names)
        trips = []
        real = type(conn).round_trip
        monkeypatch.setattr(type(conn), "round_trip", lambda self, *a, **k: trips.append(1) or real(self, *a, **k))
        found = numbers_of(queues)
        assert len(trips) == 1
        monkeypatch.undo()
        assert isinstance(queues[-2], PartitionedQueue) and found[-2].partitions == 3
        assert found[-2].counts.pending == 5
        assert isinstance(found[-1], WrongType)
        assert [(f.counts, f.completed, f.dead) for f in found[:-1]] == \
            [(q.counts(), q.metrics()["completed"], q.metrics()["failed"]) for q in queues[:-1]]
        assert sum(f.completed for f in found[:-2]) == sum(1 for n in range(len(names) - 2) if n % 3 == 0 and n % 4)
        assert [f.counts.pending for f in found[:-2]] == [n % 4 - (1 if n % 3 == 0 and n % 4 else 0)
                                                          for n in range(len(names) - 2)]
    finally:
        conn.client.delete(f"emq:{{{damaged}}}:pending")
