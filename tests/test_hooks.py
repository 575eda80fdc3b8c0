"""echomq.hooks: the send path's verb events (both clients), the worker's job events, the catalogue."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path

import pytest

from echomq import App, ConnectionFailed, Queue, Worker, WorkerConfig, aio, hooks
from echomq.server import free_port
from helpers import fresh_name
from worker_helpers import wait_until

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture
def recorded():
    seen: list[tuple[str, dict]] = []
    offs = [hooks.subscribe(event, lambda e, d: seen.append((e, d))) for event in hooks.EVENTS]
    yield seen
    for off in offs:
        off()


def test_the_catalogue_in_docs_lists_every_event_and_nothing_else():
    listed = set(re.findall(r"^\| `([a-z]+\.[a-z]+)` \|", (DOCS / "hooks.md").read_text(), re.M))
    assert listed == set(hooks.EVENTS)


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError, match="verb.stop"):
        hooks.subscribe("verb.done", lambda e, d: None)


def test_the_sync_send_path_emits_one_start_and_stop_per_round_trip(conn, recorded):
    q = Queue(conn, fresh_name("h"))
    q.enqueue_many([1, 2])
    q.enqueue(3)
    verbs = [(e, d["verbs"]) for e, d in recorded]
    assert verbs == [("verb.start", ["enqueue", "enqueue"]), ("verb.stop", ["enqueue", "enqueue"]),
                     ("verb.start", ["enqueue"]), ("verb.stop", ["enqueue"])]
    assert all(d["wire"] == conn.wire for _, d in recorded) and recorded[1][1]["duration_s"] >= 0


def test_the_async_send_path_emits_the_same(server, wire, recorded):
    async def main():
        async with await aio.connect(server.url, wire=wire) as conn:
            recorded.clear()  # the handshake is not a verb round trip, but keep the check exact
            await aio.Queue(conn, fresh_name("h")).claim_many(2, 1000)

    asyncio.run(main())
    names = [(e, d["verbs"]) for e, d in recorded]
    claims = ["claim", "claim"]
    assert names == ([("verb.start", ["hget"]), ("verb.stop", ["hget"])] if wire == 4 else []) + [
        ("verb.start", claims), ("verb.stop", claims)]


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

    Queue(conn, name).enqueue_many(["ok", "ok", "bad"])
    worker = Worker(app, conn, config=WorkerConfig(concurrency=3))
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: worker.tally.completed + worker.tally.dead == 3, what="3 settled")
    finally:
        worker.stop()
        thread.join(10)
    mine = [(e, d) for e, d in recorded if e.startswith("job.") and d["worker"] is worker]
    assert sorted(e for e, _ in mine) == ["job.claimed"] * 3 + ["job.completed"] * 2 + ["job.dead"]
    dead = next(d for e, d in mine if e == "job.dead")
    assert dead["queue"] == name and dead["attempt"] == 1 and "bad payload" in dead["error"]
    assert (worker.tally.claimed, worker.tally.completed, worker.tally.dead) == (3, 2, 1)
