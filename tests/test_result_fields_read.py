"""Completed records kept as fields of the queue's hash ``done`` (issue 44 item 2, docs/spec.md §12),
read: the packed value decoded, the newer of a field and a ``done:<id>`` taken, garbage and an
expired field read as no record, by every reader -- ``result()``, ``status()``, ``emq inspect``
and the dashboard's job view, a job found by its id (``op_holding``, ``emq inspect`` without a
queue, the dashboard's search) -- on both wires and both clients; and the queue's switch
(``set_result_layout``, ``emq results-layout``). The records here are written by hand
(``HSETEX``, the bytes the verbs write), so the readers are tested whatever the writers do; the
end-to-end test reads whatever a worker's completion wrote."""

from __future__ import annotations

import json

import pytest

from echomq import (RAW, App, ConfigurationError, JobNotFound, PartitionedQueue, Queue, Status, Worker, WorkerConfig,
                    aio)
from echomq._client.partitioned import drive, on
from echomq._protocol.results import (FIELDS, RECORD, Record, ResultLayout, check_layout, newer_record, result_layout,
                                      switch_of, unpacked)
from echomq._protocol.servers import writes_fields
from echomq.admin.inventory import find_exact, find_prefixed, queues_holding, record_view, scan_queues
from echomq.worker.producing import op_holding
from support.dataset import KEEP_MS, queue_unchanged, unchanged
from support.queues import AwaitingQueue, fresh_name
from support.waiting import server_ms, wait_until
from test_conformance import q  # noqa: F401 (a fixture: a fresh RAW queue on the blocking client, then the asyncio one)
from test_worker import running

# --------------------------------------------------------------------------- the packed value (pure)


@pytest.mark.parametrize("packed, fields", [
    (b'1,1733400000123,1733399999000,1733399999500,{"x":1}',
     {"attempts": b"1", "finished": b"1733400000123", "created": b"1733399999000", "started": b"1733399999500",
      "result": b'{"x":1}'}),
    (b"2,1733400000123,,,", {"attempts": b"2", "finished": b"1733400000123", "result": b""}),
    (b"3,9,,7,a,b,,c\x00\xff", {"attempts": b"3", "finished": b"9", "started": b"7", "result": b"a,b,,c\x00\xff"}),
])
def test_a_packed_record_unpacks_to_the_fields_of_a_done_key(packed, fields):
    assert unpacked(packed) == fields


@pytest.mark.parametrize("packed", [
    b"", b"1,2,3,4", b"garbage", b",1,,,r", b"1,,,,r", b"x,1,,,r", b"1,-5,,,r", b"1, 5,,,r", b"1,+5,,,r",
    b"1,5,1.5,,r", b"1,5,,now,r", b"\xff,5,,,r",
])
def test_a_value_that_is_no_packed_record_is_none_never_an_error(packed):
    assert unpacked(packed) is None


FIELD = b"1,2000,,,from the field"
UNPACKED = {"attempts": b"1", "finished": b"2000", "result": b"from the field"}


@pytest.mark.parametrize("packed, hashed, taken", [
    (None, None, None),
    (None, {}, None),
    (FIELD, None, Record(UNPACKED, in_field=True)),
    (None, {b"result": b"k", b"finished": b"1"}, Record({"result": b"k", "finished": b"1"}, in_field=False)),
    (FIELD, {b"result": b"older", b"finished": b"1999"}, Record(UNPACKED, in_field=True)),
    (FIELD, {b"result": b"newer", b"finished": b"2001"}, Record({"result": b"newer", "finished": b"2001"}, False)),
    (FIELD, {b"result": b"tie", b"finished": b"2000"}, Record(UNPACKED, in_field=True)),
    (FIELD, {b"result": b"no time", b"finished": b"soon"}, Record(UNPACKED, in_field=True)),
    (b"garbage", None, None),
    (b"garbage", {b"result": b"k", b"finished": b"1"}, Record({"result": b"k", "finished": b"1"}, in_field=False)),
])
def test_the_newer_of_a_field_and_a_done_key_is_taken_a_tie_the_field(packed, hashed, taken):
    assert newer_record(packed, hashed) == taken


# --------------------------------------------------------------------------- which layout a queue gets (pure)


def test_the_switch_is_record_for_exactly_those_bytes():
    assert [switch_of(v) for v in (b"record", "record", None, b"fields", b"Record", b"record ", b"")] == \
           [RECORD, RECORD, FIELDS, FIELDS, FIELDS, FIELDS, FIELDS]


@pytest.mark.parametrize("wire, info, fields", [
    (6, None, True),  # trafikey runs on Valkey 9.1 only
    (4, {"valkey_version": "9.1.2", "redis_version": "7.2.4"}, True),
    (4, {"valkey_version": "9.0.0"}, True),
    (4, {"valkey_version": "8.1.3", "redis_version": "7.2.4"}, False),
    (4, {"server_name": "valkey", "redis_version": "7.2.5"}, False),
    (4, {"redis_version": "8.0.2"}, True),
    (4, {"redis_version": "7.4.1"}, False),  # field expiry, but no HSETEX
    (4, {"redis_version": "7.0.15"}, False),
    (4, None, None),  # INFO refused
])
def test_the_node_writes_fields_where_it_has_hsetex(wire, info, fields):
    assert writes_fields(wire, info) is fields


@pytest.mark.parametrize("switch, field_expiry, layout", [
    (FIELDS, True, FIELDS), (RECORD, True, RECORD), (FIELDS, False, RECORD), (RECORD, False, RECORD),
    (FIELDS, None, RECORD),
])
def test_a_queue_gets_fields_when_the_node_can_and_its_switch_is_not_record(switch, field_expiry, layout):
    found = result_layout(switch, field_expiry)
    assert (found.layout, found.switch, found.field_expiry) == (layout, switch, field_expiry) and found.why


@pytest.mark.parametrize("bad", ["Record", "field", "", None, 1, b"record"])
def test_a_layout_other_than_fields_or_record_is_refused_naming_both(bad):
    with pytest.raises(ConfigurationError, match=r'bad result layout .*"fields".*"record"'):
        check_layout(bad)


# --------------------------------------------------------------------------- reading records written by hand


def keep_field(queue, job_id: str, packed: bytes, keep_ms: int = KEEP_MS) -> None:
    """A record as the fields layout keeps it: HSETEX with its expiry, as PUBLISH writes it."""
    client = queue.connection.client
    client.execute_command("HSETEX", queue.keys.done_hash, "PXAT", server_ms(client) + keep_ms, "FIELDS", 1,
                           job_id, packed)


def keep_key(queue, job_id: str, result: bytes, finished: int) -> None:
    """A record as 0.2.0 (and the record layout) keeps it: a hash of its own with a key expiry."""
    client = queue.connection.client
    key = queue.keys.done(job_id)
    client.hset(key, mapping={"result": result, "attempts": 1, "finished": finished})
    client.pexpire(key, KEEP_MS)


def holding(queue, job_id: str) -> list[str]:
    """op_holding's answer (a job found by its id alone) on the queue's own client."""
    op = on(None, op_holding([queue._queue if isinstance(queue, AwaitingQueue) else queue], job_id))
    if isinstance(queue, AwaitingQueue):
        found = queue._loop.run_until_complete(aio.drive(queue._aconn, op))
    else:
        found = drive(queue.connection, op)
    return [core.name for core in found]


def test_a_record_kept_as_a_field_is_read_by_every_reader(q):
    queue = q
    now = server_ms(queue.connection.client)
    keep_field(queue, "j1", b"2,%d,%d,%d,a,b\x00c" % (now, now - 20, now - 10))
    assert queue.status("j1") is Status.COMPLETED
    assert queue.result("j1", timeout=0) == b"a,b\x00c"  # every byte after the fourth comma
    assert holding(queue, "j1") == [queue.name] and holding(queue, "j2") == []
    shown = record_view(Queue(queue.connection, queue.name, serializer=RAW), "j1")  # emq inspect, the job page
    assert shown.state == "completed" and shown.fields["attempts"] == "2" and shown.fields["finished"] == str(now)
    assert shown.fields["created"] == str(now - 20) and shown.fields["started"] == str(now - 10)
    assert shown.payload == b"a,b\x00c" and 0 < shown.kept_ms <= KEEP_MS


@pytest.mark.parametrize("key_finished, taken", [(-1, "field"), (0, "field"), (1, "key")])
def test_a_field_and_a_done_key_together_the_newer_is_read(q, key_finished, taken):
    """A queue switched between layouts, or a record from before the upgrade: the larger
    ``finished`` wins, a tie the field; every reader takes the same one."""
    queue = q
    now = server_ms(queue.connection.client)
    keep_field(queue, "j", b"1,%d,,,field" % now)
    keep_key(queue, "j", b"key", now + key_finished)
    assert queue.status("j") is Status.COMPLETED
    assert queue.result("j", timeout=0) == taken.encode()
    assert record_view(Queue(queue.connection, queue.name, serializer=RAW), "j").payload == taken.encode()


def test_a_field_that_is_no_packed_record_is_no_record(q):
    queue = q
    queue.connection.client.hset(queue.keys.done_hash, "g", "not,a,record")
    assert queue.status("g") is Status.UNKNOWN
    with pytest.raises(JobNotFound):
        queue.result("g", timeout=0)
    assert record_view(Queue(queue.connection, queue.name, serializer=RAW), "g") is None
    keep_key(queue, "g", b"the key", 1)  # beside a done:<id>, the key is read
    assert queue.result("g", timeout=0) == b"the key"


def test_an_expired_field_is_no_record(q):
    queue = q
    client = queue.connection.client
    keep_field(queue, "brief", b"1,%d,,,soon gone" % server_ms(client), keep_ms=50)
    keep_field(queue, "kept", b"1,%d,,,kept" % server_ms(client))
    wait_until(lambda: queue.status("brief") is Status.UNKNOWN, 10, "the field's expiry")
    with pytest.raises(JobNotFound):
        queue.result("brief", timeout=0)
    assert holding(queue, "brief") == [] and queue.result("kept", timeout=0) == b"kept"
    assert record_view(Queue(queue.connection, queue.name, serializer=RAW), "brief") is None


def test_a_job_found_by_its_id_in_the_field_layout(conn, emq):
    """emq inspect without a queue, the dashboard's search by id and by prefix; and discovery skips
    a queue's hash done as it skips done:<id> (a queue of records alone is none)."""
    queue = Queue(conn, fresh_name("rf"), serializer=RAW)
    one, two = f"{queue.name}-1", f"{queue.name}*2"  # a glob character in an id matches only itself
    keep_field(queue, one, b"1,5,,,r")
    keep_field(queue, two, b"1,5,,,r")
    assert queues_holding(conn, one) == {queue.name} and queues_holding(conn, f"{queue.name}-3") == set()
    assert queues_holding(conn, two) == {queue.name}
    assert [(h.queue, h.id, h.state) for h in find_exact([queue], one)] == [(queue.name, one, "completed")]
    hits, complete = find_prefixed(conn, queue.name, lambda name: name == queue.name, 10)
    assert complete and [(h.id, h.state) for h in hits] == [(two, "completed"), (one, "completed")]
    assert queue.name not in scan_queues(conn).names
    shown = emq("inspect", one, "--json")
    assert shown.exit_code == 0, shown.output
    said = json.loads(shown.stdout)
    assert (said["queue"], said["state"], said["result"], said["attempts"]) == (queue.name, "completed", "r", 1)
    assert 0 < said["kept_ms"] <= KEEP_MS


def test_a_worker_s_record_is_read_whichever_layout_it_was_written_in(conn):
    """End to end: a worker completes and keeps the result; result() and status() read it, and the
    node holds it in exactly one layout (the field where the writers keep fields, else done:<id>)."""
    name = fresh_name("rf")
    app = App()
    app.handler(name, lambda payload: {"got": payload})
    with running(Worker(app, conn, config=WorkerConfig(concurrency=2))):
        queue = Queue(conn, name)
        job = queue.enqueue("x")
        assert queue.result(job.id, timeout=10) == {"got": "x"}
    assert queue.status(job.id) is Status.COMPLETED
    client = conn.client
    in_field, in_key = client.hexists(queue.keys.done_hash, job.id), client.exists(queue.keys.done(job.id))
    assert (in_field, in_key) in ((True, 0), (False, 1))


# --------------------------------------------------------------------------- the switch


def test_the_switch_is_set_read_and_refused(q, wire):
    queue = q
    client = queue.connection.client
    before = queue.result_layout()
    assert isinstance(before, ResultLayout) and (before.layout, before.switch, before.field_expiry) == (FIELDS, FIELDS,
                                                                                                       True)
    queue.set_result_layout("record")
    assert client.hget(queue.keys.meta, "results") == b"record"
    assert (queue.result_layout().layout, queue.result_layout().switch) == (RECORD, RECORD)
    for bad in ("Record", "keys", ""):
        with queue_unchanged(queue), pytest.raises(ConfigurationError, match="bad result layout"):
            queue.set_result_layout(bad)
    assert client.hget(queue.keys.meta, "results") == b"record"
    queue.set_result_layout("fields")
    assert client.hget(queue.keys.meta, "results") is None and queue.result_layout().layout == FIELDS
    client.hset(queue.keys.meta, "results", "something else")  # anything but record means fields
    assert queue.result_layout().layout == FIELDS


def test_a_partitioned_queue_s_switch_is_every_partition_s(conn, emq):
    queue = PartitionedQueue(conn, fresh_name("rf"), partitions=3)
    queue.enqueue({"n": 1})  # the queue exists: emq finds it
    with unchanged(conn.client, dump_keys=False), pytest.raises(ConfigurationError):
        queue.set_result_layout("keys")  # refused before the first partition's write
    queue.set_result_layout("record")
    assert [conn.client.hget(part.keys.meta, "results") for part in queue.partitions] == [b"record"] * 3
    assert [layout.layout for layout in queue.result_layout()] == [RECORD] * 3
    shown = emq("results-layout", "-q", queue.name, "fields", "--json")
    assert shown.exit_code == 0, shown.output
    assert [(each["queue"], each["layout"]) for each in json.loads(shown.stdout)["partitions"]] == \
           [(part.name, FIELDS) for part in queue.partitions]


def test_emq_results_layout_shows_sets_and_refuses(conn, emq):
    queue = Queue(conn, fresh_name("rf"))
    refused = emq("results-layout", "-q", queue.name, "record")
    assert refused.exit_code == 1 and "no queue" in refused.stderr and "--create" in refused.stderr
    set_ = emq("results-layout", "-q", queue.name, "record", "--create", "--json")
    assert set_.exit_code == 0, set_.output
    assert json.loads(set_.stdout) | {"why": ""} == {"queue": queue.name, "layout": "record", "switch": "record",
                                                     "field_expiry": True, "why": ""}
    with queue_unchanged(queue):
        bad = emq("results-layout", "-q", queue.name, "keys")
    assert bad.exit_code == 2 and "'keys' is not one of 'fields', 'record'" in bad.stderr
    shown = emq("results-layout", "-q", queue.name)
    assert shown.exit_code == 0 and shown.stdout.startswith(f"{queue.name}: the record layout (switch record)")
    back = emq("results-layout", "-q", queue.name, "fields")
    assert back.exit_code == 0 and f"{queue.name}: the fields layout (switch fields)" in back.stdout
    assert conn.client.hget(queue.keys.meta, "results") is None
