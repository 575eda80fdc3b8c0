"""Completed records as fields of one hash per queue (docs/spec.md §12, issue 44): what PUBLISH,
PUBLISHES, lane_complete and flow_complete write, on both wires. A record is the field <id> of
``emq:{q}:done``, its value ``attempts,finished,created,started,result`` and its own expiry at
finished + retention (one HSETEX: a batch's records in one); under ``meta results record`` it is
today's key ``done:<id>``. A ``done`` of another type refuses the completion, nothing written.
Redis 7, which has no HSETEX, keeps ``done:<id>``: tests/test_redis7.py."""

from __future__ import annotations

import pytest

from echomq import Queue
from echomq.errors import WrongType
from echomq._protocol.serializers import RAW

from support.dataset import KEEP_MS, queue_unchanged
from support.queues import fresh_name
from support.waiting import Client, server_ms

LEASE = 60_000
#: a result with what the packed value must carry as it is: commas, a NUL, non-ASCII bytes
RESULT = b'{"x":1},\x00,\xff'


def field_record(queue: Queue, job_id: str) -> tuple[bytes | None, int]:
    """The job's field of the queue's ``done`` and its expiry (HPEXPIRETIME: ms, -2 without a field)."""
    client: Client = queue.connection.client  # its replies as the server gives them (the stubs' are a union)
    done = queue.keys.key("done")
    (expires,) = client.execute_command("HPEXPIRETIME", done, "FIELDS", 1, job_id)
    return client.hget(done, job_id), expires


def times(queue: Queue, job_id: str) -> tuple[bytes, bytes]:
    """The row's created and started, read while the job is held."""
    client: Client = queue.connection.client
    created, started = client.hmget(queue.keys.job(job_id), ["created", "started"])
    return created, started


def assert_field(queue: Queue, job_id: str, attempts: int, row: tuple[bytes, bytes], result: bytes,
                 window: tuple[int, int], retention_ms: int = KEEP_MS) -> int:
    """The job's field is exactly its packed record, finished within ``window`` (server ms), expiring
    at finished + ``retention_ms``, and it has no key ``done:<id>``; returns finished."""
    value, expires = field_record(queue, job_id)
    assert value is not None, f"no field {job_id}"
    finished = int(value.split(b",", 2)[1])
    assert window[0] <= finished <= window[1]
    assert value == b",".join([str(attempts).encode(), str(finished).encode(), *row, result])
    assert expires == finished + retention_ms
    assert not queue.connection.client.exists(queue.keys.key(f"done:{job_id}"))
    return finished


def records_started(client, keys, job_ids) -> list[int | None]:
    """Each job's row's ``started`` as its record kept it (a field of ``done``; None without a record),
    in one read: what the tests of the start order read of the records a worker kept."""
    values = client.hmget(keys.key("done"), list(job_ids))
    return [None if value is None else int(value.split(b",", 4)[3]) for value in values]


def hsetex_calls(queue: Queue) -> int:
    """How many HSETEX the node has run (INFO commandstats: a module's and a script's calls count)."""
    client: Client = queue.connection.client
    return client.info("commandstats").get("cmdstat_hsetex", {}).get("calls", 0)


@pytest.fixture
def q(conn):
    """A queue whose payloads and results are bytes as given."""
    return Queue(conn, fresh_name("done"), serializer=RAW)


def test_a_publish_keeps_its_record_as_a_field_with_its_own_expiry(q):
    client = q.connection.client
    q.enqueue(b"p", id="a")
    job = q.claim(LEASE)
    row = times(q, "a")
    before = server_ms(client)
    q.publish(job, RESULT, retention_ms=KEEP_MS)
    assert_field(q, "a", 1, row, RESULT, (before, server_ms(client)))
    assert client.type(q.keys.key("done")) == b"hash"


def test_a_batch_of_records_is_one_hsetex_sharing_one_deadline(q):
    client = q.connection.client
    ids = [f"j{i}" for i in range(5)]
    for job_id in ids:
        q.enqueue(b"p", id=job_id)
    jobs = [q.claim(LEASE) for _ in ids]
    rows = {job.id: times(q, job.id) for job in jobs}
    calls = q.completion_calls([part for job in jobs for part in (job.id, str(job.token), b"r," + job.id.encode())],
                               KEEP_MS)
    assert [call.verb.name for call in calls] == ["publishes"]
    counted, before = hsetex_calls(q), server_ms(client)
    assert q.settle_many(calls) == [True] * len(ids)
    window = (before, server_ms(client))
    assert hsetex_calls(q) - counted == 1
    finished = {assert_field(q, job_id, 1, rows[job_id], b"r," + job_id.encode(), window) for job_id in ids}
    assert len(finished) == 1  # one deadline for the batch


def test_a_record_written_again_replaces_the_field_and_its_expiry(q):
    client = q.connection.client
    q.enqueue(b"p", id="a")
    q.publish(q.claim(LEASE), b"first", retention_ms=60_000)
    q.enqueue(b"p", id="a")
    job = q.claim(LEASE)
    row, before = times(q, "a"), server_ms(client)
    q.publish(job, b"second", retention_ms=KEEP_MS)
    assert_field(q, "a", 1, row, b"second", (before, server_ms(client)))
    assert client.hlen(q.keys.key("done")) == 1


def test_retention_0_keeps_no_record(q):
    q.enqueue(b"p", id="a")
    q.publish(q.claim(LEASE), b"r", retention_ms=0)
    assert field_record(q, "a") == (None, -2)
    assert not q.connection.client.exists(q.keys.key("done"), q.keys.key("done:a"))


@pytest.mark.parametrize("batch", [False, True], ids=["publish", "publishes"])
def test_meta_results_record_keeps_the_done_id_key(q, batch):
    client = q.connection.client
    client.hset(q.keys.meta, "results", "record")
    for job_id in ("a", "b"):
        q.enqueue(b"p", id=job_id)
    jobs = [q.claim(LEASE), q.claim(LEASE)]
    rows = {job.id: times(q, job.id) for job in jobs}
    before = server_ms(client)
    if batch:
        calls = q.completion_calls([p for job in jobs for p in (job.id, str(job.token), RESULT)], KEEP_MS)
        assert q.settle_many(calls) == [True, True]
    else:
        for job in jobs:
            q.publish(job, RESULT, retention_ms=KEEP_MS)
    after = server_ms(client)
    assert not client.exists(q.keys.key("done"))
    for job_id in ("a", "b"):
        record = client.hgetall(q.keys.key(f"done:{job_id}"))
        finished = int(record[b"finished"])
        assert before <= finished <= after
        assert record == {b"result": RESULT, b"attempts": b"1", b"finished": record[b"finished"],
                          b"created": rows[job_id][0], b"started": rows[job_id][1]}
        assert client.pexpiretime(q.keys.key(f"done:{job_id}")) == finished + KEEP_MS


def test_a_lane_completion_keeps_its_record_as_a_field(q):
    client = q.connection.client
    q.enqueue(b"p", id="a", group="g")
    (job,) = q.claim_lanes(1, LEASE)
    row, before = times(q, "a"), server_ms(client)
    counted = hsetex_calls(q)
    q.publish(job, RESULT, retention_ms=KEEP_MS)
    assert_field(q, "a", 1, row, RESULT, (before, server_ms(client)))
    assert hsetex_calls(q) - counted == 1


def test_a_flow_completion_keeps_its_record_as_a_field(q):
    client = q.connection.client
    q.enqueue_flow(b"parent", children=[b"child"], id="root")
    (child,) = q.flow_claim(10, LEASE)
    row, before = times(q, child.id), server_ms(client)
    assert q.settle_many([q.flow_complete_call(child, RESULT, retention_ms=KEEP_MS)]) == [True]
    assert_field(q, child.id, 1, row, RESULT, (before, server_ms(client)))


# ---------------------------------------------------------------- a done of another type: refused, nothing written


def done_as_a_string(q: Queue) -> None:
    q.connection.client.set(q.keys.key("done"), "x")


def test_publish_refuses_a_done_of_another_type_and_writes_nothing(q):
    q.enqueue(b"p", id="a")
    job = q.claim(LEASE)
    done_as_a_string(q)
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.publish(job, b"r", retention_ms=KEEP_MS)
    # retention 0 writes no record: done is not looked at
    q.publish(job, b"r", retention_ms=0)
    assert q.connection.client.get(q.keys.key("done")) == b"x"


def test_publishes_refuses_each_held_job_when_done_is_of_another_type(q):
    for job_id in ("a", "b"):
        q.enqueue(b"p", id=job_id)
    jobs = [q.claim(LEASE), q.claim(LEASE)]
    done_as_a_string(q)
    calls = q.completion_calls([p for job in jobs for p in (job.id, str(job.token), b"r")], KEEP_MS)
    with queue_unchanged(q):
        answers = q.settle_many(calls)
    assert [type(a) for a in answers] == [WrongType, WrongType], answers


def test_a_lane_completion_refuses_a_done_of_another_type_and_writes_nothing(q):
    q.enqueue(b"p", id="a", group="g")
    (job,) = q.claim_lanes(1, LEASE)
    done_as_a_string(q)
    with queue_unchanged(q):
        with pytest.raises(WrongType):
            q.publish(job, b"r", retention_ms=KEEP_MS)


def test_a_flow_completion_refuses_a_done_of_another_type_and_writes_nothing(q):
    q.enqueue_flow(b"parent", children=[b"child"], id="root")
    (child,) = q.flow_claim(10, LEASE)
    done_as_a_string(q)
    with queue_unchanged(q):
        (answer,) = q.settle_many([q.flow_complete_call(child, b"r", retention_ms=KEEP_MS)])
    assert isinstance(answer, WrongType), answer


def test_under_meta_results_record_a_done_of_another_type_is_not_looked_at(q):
    client = q.connection.client
    client.hset(q.keys.meta, "results", "record")
    q.enqueue(b"p", id="a")
    job = q.claim(LEASE)
    done_as_a_string(q)
    q.publish(job, b"r", retention_ms=KEEP_MS)
    assert client.hget(q.keys.key("done:a"), "result") == b"r"
    assert client.get(q.keys.key("done")) == b"x"
