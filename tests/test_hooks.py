"""echomq.hooks: the send path's verb events (both clients), the worker's job events, the catalogue."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
import time
import uuid
from pathlib import Path

import pytest

from echomq import App, ConnectionFailed, Job, Queue, Worker, WorkerConfig, aio, hooks
from echomq._protocol.ids import minted_ms, new_id
from echomq.local.server import free_port
from echomq.worker.jobstats import Histogram
from echomq.worker.tallies import waited_in_pending_s
from support.queues import former_default_id, fresh_name
from support.waiting import wait_until
from test_worker import running

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture
def recorded():
    seen: list[tuple[str, dict]] = []
    offs = [hooks.subscribe(event, lambda e, d: seen.append((e, d))) for event in hooks.EVENTS]
    yield seen
    for off in offs:
        off()


def test_the_catalogue_in_docs_lists_every_event_and_nothing_else():
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z_]+)` \|", (DOCS / "hooks.md").read_text(), re.M))
    assert listed == set(hooks.EVENTS)


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError, match="verb.stop"):
        hooks.subscribe("verb.done", lambda e, d: None)


def test_the_sync_send_path_emits_one_start_and_stop_per_round_trip(conn, recorded):
    q = Queue(conn, fresh_name("h"))
    q.enqueue_many([1, 2])
    q.enqueue(3)
    verbs = [(e, d["verbs"]) for e, d in recorded]
    # a batch of enqueues is one ENQUEUES (docs/spec.md §20), a lone one its ENQUEUE
    assert verbs == [("verb.start", ["enqueues"]), ("verb.stop", ["enqueues"]),
                     ("verb.start", ["enqueue"]), ("verb.stop", ["enqueue"])]
    assert all(d["wire"] == conn.wire for _, d in recorded) and recorded[1][1]["duration_s"] >= 0


def test_the_async_send_path_emits_the_same(server, wire, recorded):
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            recorded.clear()  # the handshake is not a verb round trip, but keep the check exact
            await aio.Queue(conn, fresh_name("h")).claim_many(2, 1000)

    asyncio.run(main())
    names = [(e, d["verbs"]) for e, d in recorded]
    # a batch of claims is one CLAIMS (docs/spec.md §17); wire 4's pause read rides in its round trip
    claims = (["hget"] if wire == 4 else []) + ["claims"]
    assert names == [("verb.start", claims), ("verb.stop", claims)]


def test_a_link_fault_emits_verb_error_and_a_failing_subscriber_breaks_nothing(conn4, recorded):
    import valkey

    def broken(event, data):
        raise RuntimeError("subscriber bug")

    off = hooks.subscribe("verb.stop", broken)
    try:
        q = Queue(conn4, fresh_name("h"))
        assert q.enqueue(1).created  # the subscriber raised; the call did not
        good, conn4.client = conn4.client, valkey.Valkey(port=free_port(), socket_connect_timeout=1)
        try:
            with pytest.raises(ConnectionFailed):
                q.enqueue(2)
        finally:
            conn4.client.close()
            conn4.client = good
    finally:
        off()
    errors = [d for e, d in recorded if e == "verb.error"]
    assert len(errors) == 1 and isinstance(errors[0]["error"], ConnectionFailed) and errors[0]["verbs"] == ["enqueue"]


def test_the_worker_emits_job_events_and_tally_counts_them(conn, recorded):
    name = fresh_name("h")
    app = App()

    @app.task(queue=name, max_attempts=1)
    def handler(payload):
        if payload == "bad":
            raise ValueError("bad payload")
        if payload == "slow":
            time.sleep(0.05)  # a run time with a known lower bound, not a wait for anything

    queue = Queue(conn, name)
    queue.enqueue_many(["ok", "slow", "bad"])
    queue.enqueue("ok", id="not-a-uuid7")
    former = former_default_id(time.time_ns() // 1_000_000 - 3_600_000)  # an hour ago, by an older client
    queue.enqueue("ok", id=former)
    worker = Worker(app, conn, config=WorkerConfig(concurrency=4))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.tally.completed + worker.tally.dead == 5, what="5 settled")
    finally:
        worker.stop()
        thread.join(10)
    mine = [(e, d) for e, d in recorded if e.startswith("job.") and d["worker"] is worker]
    assert sorted(e for e, _ in mine) == (["job.claimed"] * 5 + ["job.completed"] * 4 + ["job.dead"]
                                          + ["job.returned"] * 5 + ["job.started"] * 5)
    assert all(set(d) == set(hooks.EVENTS[e]) for e, d in mine)  # the catalogue's fields, no more, no less
    dead = next(d for e, d in mine if e == "job.dead")
    assert dead["queue"] == name and dead["attempt"] == 1 and "bad payload" in dead["error"]
    assert (worker.tally.claimed, worker.tally.completed, worker.tally.dead) == (5, 4, 1)
    waited = {d["id"]: d["waited_s"] for e, d in mine if e == "job.claimed"}
    assert waited.pop("not-a-uuid7") is None
    assert 3600 <= waited.pop(former) < 3600 + 60  # its wait counts from the UUIDv7's own time
    assert len(waited) == 3 and all(0 <= w < 60 for w in waited.values())  # default ids: minted just now
    durations = sorted(d["duration_s"] for e, d in mine if e in ("job.completed", "job.dead"))
    assert durations[0] >= 0 and durations[-1] >= 0.05
    cumulative, total = worker.timings.duration.snapshot()
    assert cumulative[-1] == (float("inf"), 5) and total == pytest.approx(sum(durations))
    assert worker.timings.waited.snapshot()[0][-1][1] == 4


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_job_started_and_returned_are_told_where_the_handler_runs_around_it(conn, kind):
    """On the handler's own thread (or in its task), right before and after it, whatever its
    outcome: the place a subscriber sets a context for the handler (echomq.otel does)."""
    name, app, seen = fresh_name("h"), App(), []
    where = contextvars.ContextVar("where", default="elsewhere")

    def told(event, data):
        seen.append((event, data["id"], threading.current_thread().name, where.get()))
        if event == "job.started":
            where.set(f"set for {data['id']}")

    def ran(payload, ctx):
        seen.append(("handler", ctx.id, threading.current_thread().name, where.get()))
        if payload == "bad":
            raise ValueError("bad payload")

    async def ran_async(payload, ctx):
        ran(payload, ctx)

    app.task(queue=name, max_attempts=1)(ran if kind == "sync" else ran_async)
    ids = [e.id for e in Queue(conn, name).enqueue_many(["ok", "bad"])]
    offs = [hooks.subscribe("job.started", told), hooks.subscribe("job.returned", told)]
    try:
        with running(Worker(app, conn, config=WorkerConfig(concurrency=1))) as worker:
            wait_until(lambda: worker.tally.completed + worker.tally.dead == 2, what="both settled")
    finally:
        for off in offs:
            off()
    for job_id in ids:
        mine = [(event, thread, context) for event, i, thread, context in seen if i == job_id]
        assert [event for event, _, _ in mine] == ["job.started", "handler", "job.returned"]
        assert len({thread for _, thread, _ in mine}) == 1 and mine[0][1].startswith(("emq-handler", "emq-asyncio"))
        assert [context for _, _, context in mine[1:]] == [f"set for {job_id}"] * 2  # seen by the handler


def test_the_tally_counts_with_no_hook_listening_and_a_subscriber_gets_each_event_it_chose(conn):
    """The worker counts its events itself (no subscriber of its own on the hot events): with no one
    listening the tally and histograms still count every job, and a subscriber to one event gets
    that event for every job and no other."""
    name = fresh_name("h")
    app = App()

    @app.task(queue=name, max_attempts=1)
    def handler(payload):
        return payload

    queue = Queue(conn, name)

    def run(count: int) -> Worker:
        queue.enqueue_many(range(count))
        worker = Worker(app, conn, config=WorkerConfig(concurrency=4, burst=True))
        worker.run(install_signals=False)
        return worker

    assert not any(hooks.listened(event) for event in ("job.claimed", "job.completed"))
    quiet = run(6)
    assert (quiet.tally.claimed, quiet.tally.completed) == (6, 6)
    assert quiet.timings.duration.snapshot()[0][-1][1] == 6 and quiet.timings.waited.snapshot()[0][-1][1] == 6
    completed: list[dict] = []
    off = hooks.subscribe("job.completed", lambda e, d: completed.append(d))
    try:
        assert hooks.listened("job.completed") and not hooks.listened("job.claimed")
        heard = run(5)
    finally:
        off()
    assert not hooks.listened("job.completed")
    assert [d["worker"] for d in completed] == [heard] * 5 and len({d["id"] for d in completed}) == 5  # one a job
    assert (heard.tally.claimed, heard.tally.completed) == (5, 5)
    assert all(set(d) == set(hooks.EVENTS["job.completed"]) for d in completed)


@pytest.mark.parametrize("job_id", [new_id(), former_default_id(time.time_ns() // 1_000_000)],
                         ids=["default", "former-uuid7"])
def test_waited_in_pending_is_known_for_a_first_claim_of_an_id_that_says_when_it_was_minted(job_id):
    def claimed(job_id: str, attempt: int = 1) -> Job:
        return Job("q", job_id, None, None, attempt)

    minted_s = minted_ms(job_id) / 1000
    assert waited_in_pending_s([claimed(job_id)], minted_s + 2.5) == [pytest.approx(2.5)]
    assert waited_in_pending_s([claimed(job_id)], minted_s - 1) == [0.0]  # the worker's clock behind the producer's
    assert waited_in_pending_s([claimed(job_id, 2)], minted_s + 2.5) == [None]  # a retry: the id's time says nothing
    others = ("job-1", str(uuid.uuid4()), job_id.replace("-", "") + "x", "{" + job_id + "}", "urn:uuid:" + job_id)
    assert [minted_ms(other) for other in others] == [None] * len(others)
    # a claim batch, read at once: each job its own answer, in order
    batch = [claimed(job_id), *map(claimed, others), claimed(job_id, 3), claimed(job_id)]
    waits = waited_in_pending_s(batch, minted_s + 1)
    assert waits == [pytest.approx(1)] + [None] * (len(others) + 1) + [pytest.approx(1)]
    assert waited_in_pending_s([], minted_s) == []


def test_a_histogram_counts_into_its_buckets_cumulatively():
    histogram = Histogram((0.1, 1.0))
    histogram.observe_many([0.05, 0.1, 3.0])
    assert histogram.snapshot() == ([(0.1, 2), (1.0, 2), (float("inf"), 3)], pytest.approx(3.15))
    histogram.observe_many([0.5, 3.0])
    assert histogram.snapshot() == ([(0.1, 2), (1.0, 3), (float("inf"), 5)], pytest.approx(6.65))


def test_a_histogram_bins_what_it_keeps_once_enough_gathered_and_counts_as_if_binned_one_by_one():
    bounds = (0.001, 0.01, 0.1, 1.0)
    histogram = Histogram(bounds)
    values = [(n * 7919 % 2003) / 1000 for n in range(Histogram.BIN_AT + 10)]  # 0 to 2 s, out of order
    for at in range(0, len(values), 10):  # as a worker observes them: a batch at a time
        histogram.observe_many(values[at:at + 10])
    assert len(histogram._unbinned) < Histogram.BIN_AT  # the memory it holds stays bounded
    cumulative, total = histogram.snapshot()
    assert cumulative == [(bound, sum(value <= bound for value in values)) for bound in bounds] + \
        [(float("inf"), len(values))]
    one_by_one = 0.0
    for value in values:
        one_by_one += value
    assert total == pytest.approx(one_by_one, rel=1e-12)


def test_a_histograms_snapshot_reads_its_counts_and_sum_together_while_it_is_observed():
    # the control thread observes, a scrape's thread reads: with every value 1.0 the sum is the count
    histogram, stop = Histogram((0.5, 2.0)), threading.Event()

    def observe() -> None:
        while not stop.is_set():
            for _ in range(1000):
                histogram.observe_many([1.0])

    writer = threading.Thread(target=observe)
    writer.start()
    try:
        snapshots = [histogram.snapshot() for _ in range(2000)]
    finally:
        stop.set()
        writer.join()
    assert snapshots[-1][0][-1][1] > 0
    for cumulative, total in snapshots:
        assert cumulative[0][1] == 0 and cumulative[1][1] == cumulative[2][1] == total
