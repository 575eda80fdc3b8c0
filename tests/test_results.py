"""Following a job on both wires, with real workers: results, status by id, progress, events
(the bus: PUBLISH, FAILURES.INCR, APPEND; docs/results.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from datetime import datetime

import pytest

from echomq import (App, Backoff, Flow, JobFailed, JobNotFound, LeaseLost, Queue, ResultNotKept, Status, Worker,
                    WorkerConfig)
from echomq.admin.inventory import record_view
from echomq._protocol.serializers import JSON, JSONSerializer
from echomq._protocol.results import (MAX_RESULT_BYTES, NOT_KEPT, Seen, decide_result, keepable_result, not_kept_of,
                                      result_value, status_of, unpacked, Completed, Failed, Unknown,
                                      Waiting)
from echomq.worker.heartbeat import Heartbeat
from support.dataset import KEEP_MS, queue_unchanged
from support.queues import AwaitingQueue, fresh_name
from support.waiting import server_ms, wait_server_past, wait_until
from test_worker import running

FAST = Backoff(base_ms=10, max_ms=20, jitter=0.0)


def _serve(conn, name, handler, **task):
    app = App()
    app.handler(name, handler, **task)
    return running(Worker(app, conn, config=WorkerConfig(concurrency=4)))


# --------------------------------------------------------------------------- pure decisions


@pytest.mark.parametrize("seen, status, verdict", [
    (Seen(None, None), Status.UNKNOWN, Unknown()),
    (Seen({"state": b"pending"}, None), Status.PENDING, Waiting(Status.PENDING)),
    (Seen({"state": b"active"}, {"result": b"1"}), Status.ACTIVE, Waiting(Status.ACTIVE)),  # enqueued again
    (Seen(None, {"result": b"[1]"}), Status.COMPLETED, Completed(b"[1]")),
    (Seen({"state": b"dead", "last_error": b"E: x", "traceback": b"tb"}, None), Status.DEAD, Failed("E: x", "tb")),
    (Seen({"state": b"dead", "last_error": b"stalled"}, None), Status.DEAD, Failed("stalled", None)),
    (Seen({"state": b"weird"}, None), Status.UNKNOWN, Unknown()),
])
def test_status_and_result_decisions(seen, status, verdict):
    assert status_of(seen) is status
    assert decide_result(seen) == verdict


# --------------------------------------------------------------------------- results


def test_result_round_trip_with_a_large_value(conn):
    name = fresh_name("r")
    big = "x" * (512 * 1024)
    with _serve(conn, name, lambda payload: {"echo": payload, "big": big if payload == "big" else None}):
        queue = Queue(conn, name)
        small, large = queue.enqueue(7), queue.enqueue("big")
        assert queue.result(small.id, timeout=10) == {"echo": 7, "big": None}
        assert queue.result(large.id, timeout=10) == {"echo": "big", "big": big}
    assert queue.status(small.id) is Status.COMPLETED
    # the record as the node keeps it (docs/spec.md §12): the field small.id of done, its own expiry
    record = unpacked(conn.client.hget(queue.keys.done_hash, small.id) or b"")
    assert record is not None and set(record) == {"result", "attempts", "created", "started", "finished"}
    assert record["attempts"] == b"1" and queue.job(small.id) is None  # COMPLETE's move: the row is gone
    assert not conn.client.exists(queue.keys.done(small.id))
    (kept_ms,) = conn.client.execute_command("HPTTL", queue.keys.done_hash, "FIELDS", 1, small.id)
    assert 0 < kept_ms <= 600_000  # the default retention


#: what a handler returns that no record can keep, and what ResultNotKept then says of it
UNKEEPABLE = {
    "unencodable": (lambda: {"sent_at": datetime.now()}, "builtins.dict", None, "cannot be encoded by JSONSerializer"),
    "too large": (lambda: "x" * MAX_RESULT_BYTES, "builtins.str", MAX_RESULT_BYTES + 2, "over the limit of"),
}


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("returned", UNKEEPABLE)
def test_a_handler_whose_result_cannot_be_kept_runs_once_and_its_job_completes(conn, caplog, kind, returned):
    """The handler sent its e-mail, then returned what no record can keep: the job completes once
    (before, it failed with PayloadError and ran max_attempts times: three e-mails), the record
    says why, result() raises ResultNotKept naming the type and size, and the worker says it once."""
    name, sent = fresh_name("r"), []
    make, type_name, size, reason = UNKEEPABLE[returned]

    def handler(payload):
        sent.append(payload)
        return make()

    async def ahandler(payload):
        return handler(payload)

    queue = Queue(conn, name)
    with caplog.at_level(logging.WARNING, logger="echomq.worker"), \
            _serve(conn, name, handler if kind == "sync" else ahandler, backoff=FAST):
        job = queue.enqueue("hello")
        with pytest.raises(ResultNotKept) as not_kept:
            queue.result(job.id, timeout=10)
    assert sent == ["hello"] and queue.metrics() == {"completed": 1, "failed": 0}
    assert queue.status(job.id) is Status.COMPLETED and queue.counts().total == 0
    assert (not_kept.value.type, not_kept.value.size, not_kept.value.job_id) == (type_name, size, job.id)
    assert reason in not_kept.value.reason and "was not kept" in str(not_kept.value)
    said = [r.getMessage() for r in caplog.records if "was not kept" in r.getMessage()]
    assert len(said) == 1 and job.id in said[0] and type_name in said[0]
    shown = record_view(queue, job.id)  # emq inspect and the dashboard's job page
    assert shown.as_dict()["result_not_kept"] == {"type": type_name, "size": size, "reason": not_kept.value.reason}
    assert shown.payload_text().startswith("(not kept: ") and shown.as_dict()["result"] is None


def test_a_lane_job_and_a_flow_child_whose_results_cannot_be_kept_run_once(conn):
    """A lane job's and a flow child's completion keep the marker as a flat job's does; the flow's
    parent runs once its child completed, and reading that child's result is ResultNotKept."""
    name, runs, parent_read = fresh_name("r"), [], []

    def handler(payload, ctx):
        runs.append(payload)
        if payload == "parent":
            try:
                parent_read.append(ctx.children_results())
            except ResultNotKept as exc:
                parent_read.append(exc)
            return "done"
        return {"at": datetime.now()}

    queue = Queue(conn, name)
    with _serve(conn, name, handler, backoff=FAST):
        lane = queue.enqueue("lane", group="tenant")
        queue.enqueue_flow("parent", children=[Flow(name, "child", id="child")], id="parent")
        with pytest.raises(ResultNotKept):
            queue.result(lane.id, timeout=10)
        assert queue.result("parent", timeout=10) == "done"
        with pytest.raises(ResultNotKept, match="'child' completed"):
            queue.result("child", timeout=10)
    assert sorted(runs) == ["child", "lane", "parent"]
    assert isinstance(parent_read[0], ResultNotKept) and parent_read[0].job_id == "child"
    assert queue.metrics() == {"completed": 3, "failed": 0}


@pytest.mark.parametrize("value, size", [(object(), None), ("x" * 20, 22)])
def test_keepable_result_is_the_value_or_a_marker_that_reads_back(value, size):
    raw, not_kept = keepable_result(JSON, value, 10)
    assert not_kept is not None and not_kept.size == size and raw.startswith(NOT_KEPT)
    assert not_kept_of(raw) == not_kept and decide_result(Seen(None, {"result": raw})) == not_kept
    assert keepable_result(JSON, [1], 10) == (b"[1]", None) and not_kept_of(b"[1]") is None
    assert not_kept_of(NOT_KEPT + b"not json") is None  # bytes of a raw result that only look like one
    with pytest.raises(ResultNotKept):
        result_value(JSON.loads, raw, "a")
    assert result_value(JSON.loads, b"[1]", "a") == [1]


class CountingJSON(JSONSerializer):
    """JSON that counts the results it encodes (``dumps`` of what a handler returned)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[object] = []

    def dumps(self, obj):
        self.encoded.append(obj)
        return super().dumps(obj)


class NothingRefused(CountingJSON):
    """Refuses to encode None, as RawSerializer does: a handler that returns nothing fails."""

    def dumps(self, obj):
        if obj is None:
            self.encoded.append(obj)
            raise TypeError("no None here")
        return super().dumps(obj)


def test_nothing_returned_is_encoded_once_a_task_and_a_refusal_is_never_kept(conn):
    """The worker encodes a handler's None once per task (every such job's result is those
    bytes); a serializer that refuses None is asked again for every such job, and none keeps a
    result (each completes without one)."""
    name, refusing = fresh_name("r"), fresh_name("r")
    counting, refused = CountingJSON(), NothingRefused()
    app = App()
    app.handler(name, lambda payload: None if payload < 3 else [payload], serializer=counting)
    app.handler(refusing, lambda payload: None, serializer=refused, max_attempts=1)
    with running(Worker(app, conn, config=WorkerConfig(concurrency=4))):
        queue, other = Queue(conn, name, serializer=counting), Queue(conn, refusing, serializer=refused)
        jobs = [queue.enqueue(n) for n in range(5)]
        assert [queue.result(job.id, timeout=10) for job in jobs] == [None, None, None, [3], [4]]
        not_kept = [other.enqueue(n) for n in range(3)]
        for job in not_kept:
            with pytest.raises(ResultNotKept, match="no None here"):
                other.result(job.id, timeout=10)
    assert [obj for obj in counting.encoded if not isinstance(obj, int)] == [None, [3], [4]]
    assert [obj for obj in refused.encoded if obj is None] == [None, None, None]


def test_job_failed_carries_last_error_and_the_traceback(conn):
    name = fresh_name("r")

    def parse_order(payload):
        raise ValueError(f"cannot parse order {payload}")

    with _serve(conn, name, parse_order, max_attempts=1):
        queue = Queue(conn, name)
        job = queue.enqueue(42)
        with pytest.raises(JobFailed) as failed:
            queue.result(job.id, timeout=10)
    assert failed.value.last_error == "ValueError: cannot parse order 42"
    assert failed.value.job_id == job.id
    tb = failed.value.traceback
    assert tb.startswith("Traceback (most recent call last):") and "in parse_order" in tb
    assert tb.rstrip().endswith("ValueError: cannot parse order 42")


def test_time_running_out_is_a_timeout_error_and_unknown_ids_are_not_found(conn):
    queue = Queue(conn, fresh_name("r"))
    job = queue.enqueue(1)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still pending"):
        queue.result(job.id, timeout=0.2)
    assert time.monotonic() - started >= 0.2
    with pytest.raises(JobNotFound):
        queue.result("never-enqueued", timeout=5)
    assert queue.status("never-enqueued") is Status.UNKNOWN


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_result_wait_that_runs_out_says_when_no_live_worker_serves_the_queue(conn, server, wire, client):
    """A typo'd queue name, or a worker that is not running, left result() to time out with "still
    pending" alone; the error now says nobody serves the queue, and stops saying it once a worker's
    heartbeat names the queue."""
    queue = Queue(conn, fresh_name("r"))
    waiter = queue if client == "sync" else AwaitingQueue(server.url, wire, queue)
    try:
        job = queue.enqueue(1)
        with pytest.raises(TimeoutError) as nobody:
            waiter.result(job.id, timeout=0.1)
        said = str(nobody.value)
        assert said.startswith(f"job {job.id!r} is still pending after 0.1 s")
        assert f"no live worker serves queue {queue.name!r}" in said and "emq worker" in said
        beat = Heartbeat(conn.client, queues=["another", queue.name], concurrency=1, wire=wire)
        beat.beat(held=0, completed=0, failed=0)
        try:
            with pytest.raises(TimeoutError) as served:
                waiter.result(job.id, timeout=0.1)
        finally:
            beat.remove()
        assert str(served.value) == f"job {job.id!r} is still pending after 0.1 s"
    finally:
        if waiter is not queue:
            waiter.close()


def count_reads(queue: Queue) -> list[str]:
    """The ids of every read a result waiter makes on ``queue`` from now on (its op_seen, wrapped)."""
    reads: list[str] = []
    real = queue.op_seen

    def counted(job_id):
        reads.append(job_id)
        return (yield from real(job_id))

    queue.op_seen = counted  # type: ignore[method-assign]
    return reads


def test_the_waiter_is_woken_by_the_completion_not_by_polling(conn):
    queue = Queue(conn, fresh_name("r"))
    job = queue.enqueue(1)
    held = queue.claim(60_000)
    reads = count_reads(queue)
    got = {}
    waiter = threading.Thread(target=lambda: got.update(value=queue.result(job.id, timeout=30)))
    waiter.start()
    wait_until(lambda: reads, what="the waiter's first read")
    other = Queue(conn, queue.name)
    assert other.status(job.id) is Status.ACTIVE
    other.publish(held, {"done": True}, retention_ms=KEEP_MS)
    waiter.join(10)
    assert got == {"value": {"done": True}}
    assert len(reads) == 2  # one read before the wait, one after the outcome channel spoke


@pytest.mark.parametrize("settle", ["complete", "fail"])
def test_plain_complete_and_fail_wake_the_waiter(conn, settle):
    """COMPLETE (no record kept) and a killing FAIL tell the outcome channel too: a waiter with
    30 s left returns None, or raises JobFailed, as soon as the settle lands (one read after it)."""
    queue = Queue(conn, fresh_name("r"))
    job = queue.enqueue(1)
    held = queue.claim(60_000)
    reads = count_reads(queue)
    got = {}

    def wait():
        try:
            got["value"] = queue.result(job.id, timeout=30)
        except JobFailed as failed:
            got["failed"] = failed.last_error

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: reads, what="the waiter's first read")
    other = Queue(conn, queue.name)
    if settle == "complete":
        other.complete(held)
    else:
        other.fail(held, "E: fatal", max_attempts=1)
    waiter.join(10)  # woken by the settle, long before its 30 s
    assert not waiter.is_alive()
    assert got == ({"value": None} if settle == "complete" else {"failed": "E: fatal"})
    assert len(reads) == 2


def test_retention_expiry_gives_back_its_memory(conn):
    client = conn.client

    def publish_200(queue: Queue, retention_ms: int) -> list[str]:
        """200 records of 2 KiB written at once, as a worker settles (one PUBLISHES: one HSETEX, one
        deadline), so that none has run out before the peak is read, however slow the machine."""
        jobs = [queue.enqueue(n).id for n in range(200)]
        held = queue.claim_many(200, 60_000)
        calls = [queue.publish_call(job, b"r" * 2048, retention_ms=retention_ms) for job in held]
        assert queue.settle_many(calls) == [True] * 200
        return jobs

    # a fresh server grows once (the scripts' VM, the keyspace's tables: ~350 KB) on its first such
    # round, and keeps that: warm it on a throwaway queue, so the base is what the records return to
    warm = Queue(conn, fresh_name("warm"))
    publish_200(warm, 60_000)
    client.delete(warm.keys.done_hash, warm.keys.metrics("completed"), warm.keys.wake)
    queue = Queue(conn, fresh_name("r"))

    def used_memory() -> int:
        """used_memory once the node's background frees are done: a deleted or expired hash of many
        fields (warm's done, the records' own) is freed by another thread (lazyfree-lazy-user-del and
        -expire, Valkey 8's defaults), and read before that it still counts."""
        wait_until(lambda: client.info("memory")["lazyfree_pending_objects"] == 0, what="the lazy frees")
        return client.info("memory")["used_memory"]

    client.execute_command("MEMORY", "PURGE")
    base = used_memory()
    jobs = publish_200(queue, 1_000)
    peak = client.info("memory")["used_memory"]
    # the records are the fields of done (docs/spec.md §12), each expiring at the batch's deadline
    expiries = client.execute_command("HPEXPIRETIME", queue.keys.done_hash, "FIELDS", len(jobs), *jobs)
    assert len(set(expiries)) == 1 and expiries[0] > 0 and not client.exists(queue.keys.done(jobs[0]))
    assert all(queue.status(j) is Status.COMPLETED for j in jobs[-3:])
    wait_server_past(client, expiries[0])
    # active expiry reclaims the fields on its own cycle, and the hash with its last one: touching
    # them is not needed (no unchanged() block may run here: it keeps every field of done for good)
    wait_until(lambda: not client.exists(queue.keys.done_hash), what="the records to expire")
    after = used_memory()
    # the results were held: at least half their bytes (a field layout holds each about once; the
    # node's own buffers move by tens of KB between two reads, so the bare 400 KB was too close a bar)
    assert peak - base > 200 * 2048 // 2
    assert after - base < (peak - base) / 4  # ... and given back
    assert queue.status(jobs[0]) is Status.UNKNOWN


def test_a_task_with_result_ttl_zero_keeps_no_record(conn):
    name = fresh_name("r")
    with _serve(conn, name, lambda payload: 1, result_ttl=0):
        queue = Queue(conn, name)
        job = queue.enqueue(1)
        wait_until(lambda: queue.metrics()["completed"] == 1, what="the completion")
    assert queue.status(job.id) is Status.UNKNOWN
    assert not conn.client.hexists(queue.keys.done_hash, job.id) and not conn.client.exists(queue.keys.done(job.id))


def test_status_by_id_through_the_lifecycle(conn):
    queue = Queue(conn, fresh_name("r"))
    a, b = queue.enqueue(1), queue.schedule(2, 60_000)
    assert (queue.status(a.id), queue.status(b.id)) == (Status.PENDING, Status.SCHEDULED)
    held = queue.claim(60_000)
    assert queue.status(a.id) is Status.ACTIVE
    queue.fail(held, "E", max_attempts=1)
    assert queue.status(a.id) is Status.DEAD


# --------------------------------------------------------------------------- progress


def test_progress_from_the_handler_and_from_a_stale_holder(conn):
    name = fresh_name("r")
    gate = threading.Event()

    def handler(payload, ctx):
        ctx.progress({"pct": 50})
        gate.wait(10)
        return "ok"

    queue = Queue(conn, name)
    queue.enable_events()
    with _serve(conn, name, handler):
        job = queue.enqueue(1)
        wait_until(lambda: (queue.job(job.id) or {}).get("progress"), what="the progress")
        assert queue.job(job.id)["progress"] == '{"pct":50}'
        gate.set()
        assert queue.result(job.id, timeout=10) == "ok"
    assert [e.progress for e in queue.events() if e.type == "progress"] == [{"pct": 50}]


def test_async_progress_is_awaited_while_the_loop_runs_on(conn):
    """An async handler's ``await ctx.progress`` travels on the asyncio connection: with the
    server holding writes (CLIENT PAUSE WRITE), the APPEND is in flight and the handler's loop
    still runs another task; once writes resume, the progress is kept and the job completes."""
    name = fresh_name("r")
    claimed, paused, ticked = threading.Event(), threading.Event(), threading.Event()

    async def handler(payload, ctx):
        claimed.set()
        await asyncio.to_thread(paused.wait, 10)
        sending = asyncio.ensure_future(ctx.progress({"pct": 50}))

        async def tick():  # another task of the same loop, run while the APPEND waits on the server
            for _ in range(3):
                await asyncio.sleep(0)
            assert not sending.done()
            ticked.set()

        await tick()
        await sending
        return "ok"

    queue = Queue(conn, name)
    queue.enable_events()
    admin = conn.client
    with _serve(conn, name, handler):
        job = queue.enqueue(1)
        assert claimed.wait(10)
        admin.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        try:
            paused.set()
            assert ticked.wait(10), "the loop stopped while progress was sent"
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        assert queue.result(job.id, timeout=10) == "ok"
    assert [e.progress for e in queue.events() if e.type == "progress"] == [{"pct": 50}]


def test_progress_from_a_holder_that_lost_its_lease_is_refused(conn):
    queue = Queue(conn, fresh_name("r"))
    queue.enable_events()
    job = queue.enqueue(1)
    stale = queue.claim(1)
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    queue.stalled_check(max_stalled=5)
    fresh = queue.claim(60_000)
    assert fresh.attempt == stale.attempt + 1
    with queue_unchanged(queue), pytest.raises(LeaseLost):
        queue.progress(stale, 99)
    queue.progress(fresh, 1)
    assert queue.job(job.id)["progress"] == "1"


def test_progress_from_a_lane_jobs_and_a_flow_jobs_handler(conn):
    """``ctx.progress`` in a lane job's and a flow job's handler (lane_append, flow_append: scripts on
    both wires): each row keeps its last progress, each report is a ``progress`` event."""
    name = fresh_name("r")
    gate = threading.Event()
    reported = []

    def handler(payload, ctx):
        ctx.progress({"of": payload})
        reported.append(payload)
        gate.wait(10)
        return payload

    queue = Queue(conn, name)
    queue.enable_events()
    with _serve(conn, name, handler):
        lane = queue.enqueue("lane", group="g")
        queue.enqueue_flow("parent", children=["child"], id="parent")
        wait_until(lambda: len(reported) == 2, what="both handlers' reports")
        (child,) = [job_id.decode() for job_id in conn.client.zrange(queue.keys.base + "flow:active", 0, -1)]
        assert queue.job(lane.id)["progress"] == '{"of":"lane"}'
        assert queue.job(child)["progress"] == '{"of":"child"}'
        gate.set()
        assert queue.result("parent", timeout=10) == "parent"  # the parent reported too, then completed
    progress = sorted((e.job_id, e.progress["of"]) for e in queue.events() if e.type == "progress")
    assert progress == sorted([(lane.id, "lane"), (child, "child"), ("parent", "parent")])


def test_lane_and_flow_progress_from_a_stale_holder_is_refused_and_writes_nothing(conn):
    """A token that is not the row's, a row no longer held, or a flat row sent to lane_append: the
    lease is lost (LeaseLost), and the dataset is unchanged."""
    queue = Queue(conn, fresh_name("r"))
    queue.enable_events()
    queue.enqueue("lane", group="g")
    queue.enqueue_flow("parent", children=["child"])
    flat_id = queue.enqueue("flat").id
    (lane,) = queue.claim_lanes(1, 60_000)
    (child,) = queue.flow_claim(1, 60_000)
    flat = queue.claim(60_000)
    assert flat.id == flat_id and lane.group == "g" and child.flow
    for job in (lane, child):
        with queue_unchanged(queue), pytest.raises(LeaseLost):
            queue.progress(job, 1, token=job.attempt + 1)
    with queue_unchanged(queue), pytest.raises(LeaseLost, match="not a lane row"):
        queue.progress(dataclasses.replace(flat, group="g"), 1)
    queue.complete(lane)
    with queue_unchanged(queue), pytest.raises(LeaseLost):
        queue.progress(lane, 1)  # settled: no row
    queue.progress(child, 2)
    assert queue.job(child.id)["progress"] == "2"


# --------------------------------------------------------------------------- events


def test_events_in_order_for_a_job_that_retries_then_completes(conn):
    name = fresh_name("r")

    def flaky(payload, ctx):
        if ctx.attempt == 1:
            raise ConnectionError("upstream down")
        return "ok"

    queue = Queue(conn, name)
    queue.enable_events()
    with _serve(conn, name, flaky, max_attempts=3, backoff=Backoff(base_ms=0, max_ms=0, jitter=0.0)):
        job = queue.enqueue(1)
        assert queue.result(job.id, timeout=10) == "ok"
    events = [e for e in queue.events() if e.job_id == job.id]
    assert [(e.type, e.attempt) for e in events] == [
        ("enqueued", 0), ("claimed", 1), ("failed", 1), ("retried", 1), ("claimed", 2), ("completed", 2)]
    assert events[2].error == "ConnectionError: upstream down" and events[3].state == "pending"
    times = [e.time_ms for e in events]
    assert times == sorted(times)


def test_events_are_off_by_default_and_bounded_when_on(conn):
    queue = Queue(conn, fresh_name("r"))
    queue.enqueue(1)
    assert not conn.client.exists(queue.keys.events)
    queue.enable_events(maxlen=5)
    ids = [queue.enqueue(n).id for n in range(20)]
    assert conn.client.xlen(queue.keys.events) == 5
    assert [e.job_id for e in queue.events()] == ids[-5:]
    first = list(queue.events())[1]
    assert [e.job_id for e in queue.events(since=first.stream_id)] == ids[-3:]
    queue.disable_events()
    queue.enqueue(99)
    assert conn.client.xlen(queue.keys.events) == 5


def test_the_sweep_remove_and_cancel_tell_their_events(conn):
    queue = Queue(conn, fresh_name("r"))
    queue.enable_events()
    a, b, c = (queue.enqueue(n).id for n in range(3))
    queue.claim(1)
    queue.claim(60_000)
    wait_server_past(conn.client, server_ms(conn.client) + 2)
    assert queue.stalled_check(max_stalled=1).dead == [a]
    queue.cancel(b)
    queue.remove(c)
    d = queue.enqueue(3).id
    assert queue.purge() == 2 and queue.drain() == 1
    told = [(e.type, e.job_id, e.error, e.state) for e in queue.events() if e.type not in ("enqueued", "claimed")]
    assert told == [("stalled", a, None, None), ("dead", a, "stalled", "dead"), ("dead", b, "cancelled", "dead"),
                    ("removed", c, None, "pending"), ("removed", a, None, "dead"), ("removed", b, None, "dead"),
                    ("removed", d, None, "pending")]


def test_follow_sees_new_events(conn):
    queue = Queue(conn, fresh_name("r"))
    queue.enable_events()
    queue.enqueue("old")
    assert list(queue.events(since="$")) == []
    last = list(queue.events())[-1].stream_id
    seen = []

    def follow():
        for event in queue.events(since=last, follow=True, block_ms=50):
            seen.append(event.job_id)
            if len(seen) == 2:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    ids = [queue.enqueue("new").id for _ in range(2)]
    reader.join(10)
    assert seen == ids


def test_a_wire6_module_without_the_bus_falls_back_to_complete_and_fail(server6):
    """A module that lists no bus token: the worker completes with COMPLETE (no record), progress is
    refused client-side, and nothing is sent that the node does not serve."""
    from echomq import UnsupportedOnWire, connect

    with connect(server6.url, wire=6) as conn:
        conn.tokens = frozenset(t for t in conn.tokens if t not in ("append", "failures.incr", "publish"))
        name = fresh_name("r")
        reported = []

        def handler(payload, ctx):
            try:
                ctx.progress(1)
            except UnsupportedOnWire as exc:
                reported.append(str(exc))
            return "value"

        queue = Queue(conn, name)
        with _serve(conn, name, handler):
            job = queue.enqueue(1)
            wait_until(lambda: queue.metrics()["completed"] == 1, what="the completion")
        assert queue.status(job.id) is Status.UNKNOWN and "append" in reported[0]
        with pytest.raises(UnsupportedOnWire):
            queue.publish(job.id, 1, retention_ms=1, token=1)


def test_a_cancel_and_a_fatal_stall_wake_the_waiter_with_job_failed(conn):
    queue = Queue(conn, fresh_name("r"))
    for kill in ("cancel", "sweep"):
        job = queue.enqueue(1)
        queue.claim(1 if kill == "sweep" else 60_000)
        raised = []

        def wait():
            try:
                queue.result(job.id, timeout=30)
            except JobFailed as exc:
                raised.append(exc)

        waiter = threading.Thread(target=wait)
        waiter.start()
        wait_until(lambda: Queue(conn, queue.name).status(job.id) is Status.ACTIVE, what="the claim")
        if kill == "cancel":
            queue.cancel(job.id)
        else:
            wait_server_past(conn.client, server_ms(conn.client) + 2)
            assert queue.stalled_check(max_stalled=1).dead == [job.id]
        waiter.join(10)  # woken by the death, long before its 30 s
        assert not waiter.is_alive() and raised[0].last_error == ("cancelled" if kill == "cancel" else "stalled")


def test_an_emq_worker_process_keeps_results_tracebacks_and_progress(server, wire, tmp_path, conn):
    """`emq worker` in its own process, on both wires: a retried job's result, a dead job's traceback,
    progress, and the events of both, in order."""
    from support.workers import WorkerProcess

    name = fresh_name("rp")
    queue = Queue(conn, name)
    queue.enable_events()
    ok = queue.enqueue({"echo": "hi", "fail": 1, "progress": {"pct": 10}})
    bad = queue.enqueue({"fail": 5})
    worker = WorkerProcess(server.url, wire, name, tmp_path, env={"EMQ_TEST_MAX_ATTEMPTS": "2"})
    try:
        assert queue.result(ok.id, timeout=30) == {"echo": "hi", "attempt": 2}
        with pytest.raises(JobFailed) as failed:
            queue.result(bad.id, timeout=30)
    finally:
        worker.kill()
    assert failed.value.last_error == "RuntimeError: planned failure 2"
    assert "in run" in failed.value.traceback and "RuntimeError: planned failure 2" in failed.value.traceback
    kinds = [e.type for e in queue.events() if e.job_id == ok.id]
    # the retry waits out its backoff in schedule: the timers' PROMOTE tells it due
    assert kinds == ["enqueued", "claimed", "progress", "failed", "retried", "promoted", "claimed", "progress",
                     "completed"]
    assert [e.type for e in queue.events() if e.job_id == bad.id][-2:] == ["failed", "dead"]


def test_a_plain_complete_just_before_the_first_read_is_a_none_result_not_not_found(conn):
    """The waiter subscribes and counts itself, then reads; a COMPLETE that keeps nothing landing in
    between leaves no row and no record, but its word is already on the channel: the result is None."""
    name = fresh_name("r")
    queue, other = Queue(conn, name), Queue(conn, name)
    job = queue.enqueue(1)
    held = other.claim(60_000)
    real = queue.op_count_waiter

    def counted_then_completed():
        counted = yield from real()
        other.complete(held)  # between the count and the first read
        return counted

    queue.op_count_waiter = counted_then_completed  # type: ignore[method-assign]
    assert queue.result(job.id, timeout=30) is None
    queue.op_count_waiter = real  # type: ignore[method-assign]
    with pytest.raises(JobNotFound):  # a job that never was still is not found
        queue.result("never-enqueued", timeout=30)
