"""Calling a task through its app, on both wires: where the app's node is, ``delay``/``enqueue`` and
their per-job options as stored, refusals that write nothing, handles, ``app.job(id)``, and the
asyncio twins (docs/workers.md "Calling a task")."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

import echomq
from echomq import App, Backoff, PayloadError, Queue, Status, aio
from echomq.cli import main
from echomq.dashboard import Settings, serving
from echomq.errors import ConfigurationError, JobNotFound
from echomq._protocol import envelope
from support.dataset import unchanged
from support.queues import fresh_name, round_trips
from support.waiting import server_ms


def stored(queue: Queue, job_id: str) -> tuple[envelope.JobHeaders, bytes | None]:
    client: Any = queue.connection.client
    return envelope.read_headers(client.hget(queue.keys.job(job_id), "payload"))


def make_app(conn, queue: str) -> tuple[App, Any, Any]:
    app = App().connect(conn)

    @app.task(queue=queue)
    def send_email(payload, ctx):
        return payload["to"]

    @app.task(queue=queue, name="math.add")
    def add(x, y=1):
        return x + y

    return app, send_email, add


def test_delay_stores_a_one_argument_call_as_its_payload_and_any_other_as_args(conn):
    name = fresh_name("call")
    app, send_email, add = make_app(conn, name)
    queue = Queue(conn, name)
    one = send_email.delay({"to": "ada@example.com"})
    two = add.delay(2, y=3)
    assert (one.queue.name, one.created, one.status()) == (name, True, Status.PENDING)
    headers, payload = stored(queue, one.id)
    assert (headers.task, headers.own, payload) == ("send_email", {"task": "send_email"}, b'{"to":"ada@example.com"}')
    headers, payload = stored(queue, two.id)
    assert (headers.task, headers.own) == ("math.add", {"task": "math.add", "args": 1})
    assert payload == b'{"args":[2,3],"kwargs":{}}'
    # every reader unwraps: a row read with Queue.job shows the payload as the serializer wrote it
    assert queue.job(one.id)["payload"] == {"to": "ada@example.com"}


def test_enqueue_takes_the_per_job_options(conn):
    name = fresh_name("opts")
    app, send_email, add = make_app(conn, name)
    queue = Queue(conn, name)
    client: Any = conn.client
    before = server_ms(client)
    later = add.enqueue(1, 2, delay=30, max_attempts=7, backoff=Backoff(base_ms=5, max_ms=10), timeout=None)
    assert later.status() is Status.SCHEDULED
    due = client.zscore(queue.keys.schedule, later.id)
    assert before + 30_000 <= due <= server_ms(client) + 30_000
    assert stored(queue, later.id)[0].own == {"task": "math.add", "args": 1, "max_attempts": 7, "timeout": None,
                                              "backoff": {"base_ms": 5, "factor": 2.0, "max_ms": 10, "jitter": 0.2}}
    at = datetime.now(timezone.utc) + timedelta(hours=1)
    planned = add.enqueue(1, eta=at)  # read against the server's clock: due at the eta
    assert abs(client.zscore(queue.keys.schedule, planned.id) - at.timestamp() * 1000) < 1000
    past = add.enqueue(1, eta=datetime.now(timezone.utc) - timedelta(days=1))
    assert past.status() is Status.PENDING  # a time past is now
    first = send_email.enqueue({"to": "a"}, id="welcome-1", priority=5, unique_for=60)
    again = send_email.enqueue({"to": "a"}, id="welcome-1", unique_for=60)
    assert (first.id, first.created, again.created) == ("welcome-1", True, False)
    assert client.zscore(queue.keys.pending, "welcome-1") == 5
    lane = send_email.enqueue({"to": "b"}, group="tenant-1")
    assert queue.groups()["tenant-1"].waiting == 1 and queue.job(lane.id)["group"] == "tenant-1"


@pytest.mark.parametrize("call, refused, error", [
    (lambda t: t["add"].enqueue(1, eta=datetime(2030, 1, 1)), "naive datetime", ConfigurationError),
    (lambda t: t["add"].enqueue(1, delay=-5), "bad delay", ConfigurationError),
    (lambda t: t["add"].enqueue(1, group="g", delay=5), "cannot be delayed", ConfigurationError),
    (lambda t: t["add"].enqueue(1, unique_for=5), "needs the job's id", ConfigurationError),
    (lambda t: t["add"].enqueue(1, max_attempts=0), "max_attempts", ConfigurationError),
    (lambda t: t["add"].enqueue(1, timeout=-1), "timeout", ConfigurationError),
    (lambda t: t["add"].enqueue(1, priority=2**40), "priority", ConfigurationError),
    (lambda t: t["add"].delay(1, 2, 3), "too many positional", ConfigurationError),
    (lambda t: t["add"].delay(), "missing a required argument: 'x'", ConfigurationError),
    (lambda t: t["send_email"].delay({"at": datetime.now()}), "cannot be encoded", PayloadError),
    (lambda t: t["send_email"].delay("x" * (1 << 21)), "max_payload_bytes", PayloadError),
    (lambda t: t["add"].enqueue(1, eta=datetime(2030, 1, 1), id="x", unique_for=1), "naive", ConfigurationError),
])
def test_a_bad_call_or_option_is_refused_and_nothing_is_written(conn, call, refused, error):
    name = fresh_name("refused")
    app, send_email, add = make_app(conn, name)
    send_email.delay({"to": "warm"})  # the connection and the queue exist: the refusal is the only difference
    with unchanged(conn.client), pytest.raises(error, match=refused):
        call({"add": add, "send_email": send_email})


def test_a_partitioned_task_refuses_what_a_partition_cannot_keep(conn):
    app = App().connect(conn)

    @app.task(queue=fresh_name("parted"), partitions=3)
    def work(payload):
        return payload

    made = work.enqueue({"n": 1}, id="by-id")
    assert made.queue.name.startswith(work.task.queue + "~") and made.status() is Status.PENDING
    for option in ({"group": "g"}, {"unique_for": 5, "id": "u"}):
        with unchanged(conn.client), pytest.raises(ConfigurationError, match="is partitioned"):
            work.enqueue({"n": 2}, **option)
    assert app.job("by-id").queue.name == made.queue.name  # found among the partitions


def test_app_job_finds_a_job_by_its_id_alone_in_one_round_trip(conn):
    app, send_email, add = make_app(conn, fresh_name("find"))

    @app.task(queue=fresh_name("other"))
    def other(payload):
        return payload

    elsewhere = other.delay({"n": 1})
    send_email.delay({"to": "x"})
    with round_trips() as sent:
        found = app.job(elsewhere.id)
    assert [len(verbs) for verbs in sent] == [4]  # an EXISTS and an HEXISTS a queue, all in one round trip
    assert (found.queue.name, found.id, found.status()) == (other.task.queue, elsewhere.id, Status.PENDING)
    assert app.job("no-such-job") is None
    twin = send_email.enqueue({"to": "y"}, id=elsewhere.id)  # the same id in a second queue
    assert twin.created
    with pytest.raises(ConfigurationError, match="is in 2 of the app's queues"):
        app.job(elsewhere.id)


def test_a_handle_follows_its_job(conn):
    app, send_email, add = make_app(conn, fresh_name("handle"))
    handle = add.delay(1)
    assert handle.progress() is None
    with pytest.raises(TimeoutError, match="still pending"):
        handle.get(timeout=0.05)
    job = Queue(conn, handle.queue.name).claim(60_000)
    assert job is not None and job.headers == {"task": "math.add", "args": 1}  # a claim reads the headers too
    Queue(conn, handle.queue.name).progress(job, {"done": 1})
    assert handle.progress() == {"done": 1}
    assert handle.cancel() and handle.status() is Status.DEAD
    with pytest.raises(echomq.JobFailed, match="cancelled"):
        handle.get(timeout=1)
    with pytest.raises(JobNotFound):
        add.delay(1).queue.result("never-enqueued", timeout=0)


def test_the_app_finds_its_node_by_url_by_connect_or_by_emq_url(server, wire, monkeypatch):
    monkeypatch.delenv("EMQ_URL", raising=False)
    app = App()

    @app.task(queue=fresh_name("where"))
    def work(payload):
        return payload

    with pytest.raises(ConfigurationError, match="does not know its node.*EMQ_URL"):
        work.delay(1)
    monkeypatch.setenv("EMQ_URL", server.url)
    opened = work.delay(1).queue.connection
    assert opened.wire == wire and work.delay(2).queue.connection is opened  # one connection an app
    app.close()
    assert work.delay(3).queue.connection is not opened  # closed, then opened again at the next call
    app.close()
    monkeypatch.delenv("EMQ_URL")
    app.connect(server.url, wire=wire)
    assert work.delay(4).status() is Status.PENDING
    app.close()
    with echomq.connect(server.url, wire=wire) as lent:
        app.connect(lent)
        assert work.delay(5).queue.connection is lent
        app.close()  # a lent connection is the caller's: the app does not close it
        assert lent.client.ping()
    named = App(url=server.url, wire=wire)
    named_work = named.task(queue=work.task.queue, name="w")(lambda payload: payload)
    assert named_work.delay(6).status() is Status.PENDING
    named.close()
    with pytest.raises(ConfigurationError, match="takes a URL, an echomq.Connection"):
        app.connect(42)  # type: ignore[arg-type]


def test_the_awaitable_twins_send_on_the_apps_asyncio_connection(server, wire):
    name = fresh_name("aio")
    app = App(url=server.url, wire=wire)

    @app.task(queue=name)
    def add(x, y):
        return x + y

    async def main() -> tuple[Any, ...]:
        handle = await add.adelay(2, 3)
        later = await add.aenqueue(1, 1, delay=60, max_attempts=2)
        found = await app.ajob(handle.id)
        statuses = (await handle.status(), await later.status(), await found.status(), await handle.progress())
        connection = await app.producer.aconnection()
        await app.aclose()
        return handle, found, statuses, connection

    handle, found, statuses, connection = asyncio.run(main())
    assert isinstance(handle, echomq.AsyncJobHandle) and isinstance(connection, aio.Connection)
    assert found.id == handle.id and statuses == (Status.PENDING, Status.SCHEDULED, Status.PENDING, None)
    queue = Queue(echomq.connect(server.url, wire=wire), name)
    assert stored(queue, handle.id)[0].own == {"task": "add", "args": 1}

    async def from_another_loop() -> None:
        await add.adelay(1, 1)

    other = App(url=server.url, wire=wire)
    other_add = other.task(queue=name, name="add2")(lambda x: x)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(other_add.adelay(1))
        with pytest.raises(ConfigurationError, match="belongs to the event loop that opened it"):
            asyncio.run(other_add.adelay(2))
        loop.run_until_complete(other.aclose())
    finally:
        loop.close()
    queue.connection.close()


def test_several_tasks_share_a_queue_each_by_its_name():
    app = App()
    name = fresh_name("shared")

    @app.task(queue=name)
    def first(payload):
        return payload

    @app.task(queue=name, max_attempts=9)
    def second(x, y):
        return x

    assert app.tasks[name] is first.task and set(app.named[name]) == {"first", "second"}
    assert second.task.max_attempts == 9
    with pytest.raises(ConfigurationError, match="already has a task named 'first'"):
        app.task(queue=name)(first)
    with pytest.raises(ConfigurationError, match="already has a handler: first"):
        app.handler(name, print)
    with pytest.raises(ConfigurationError, match="the tasks of one queue share its serializer"):
        app.task(queue=name, serializer=echomq.RAW)(lambda payload: payload)
    with pytest.raises(ConfigurationError, match="share its partitions"):
        app.task(queue=name, partitions=2)(lambda payload: payload)
    with pytest.raises(ConfigurationError, match="bad task name"):
        app.task(queue=name, name="has space")(lambda payload: payload)
    with pytest.raises(ConfigurationError, match=r"name='emails' for the task's name"):
        app.task("emails")


def test_emq_inspect_and_the_dashboards_job_page_show_the_task_a_job_names(conn, server):
    name = fresh_name("shown")
    app, send_email, add = make_app(conn, name)
    handle = add.delay(4)
    plain = Queue(conn, name).enqueue({"n": 1})
    runner = CliRunner()
    shown = runner.invoke(main, ["inspect", handle.id, "-q", name, "--url", server.url])
    assert shown.exit_code == 0 and "task" in shown.output and "math.add" in shown.output, shown.output
    as_json = runner.invoke(main, ["inspect", handle.id, "-q", name, "--url", server.url, "--json"])
    import json
    assert json.loads(as_json.output)["task"] == "math.add"
    plain_json = json.loads(runner.invoke(main, ["inspect", plain.id, "-q", name, "--url", server.url,
                                                 "--json"]).output)
    assert plain_json["task"] is None and plain_json["payload"] == {"n": 1}
    queue = Queue(conn, name)  # a job whose header anyone who may write the queue wrote: data, shown as text
    hostile = queue._run(queue.op_enqueue(1, None, 0, headers={"task": "<b>x</b>\x1b[31m"}))
    with serving(conn, Settings(queues=[name])) as url:
        page = httpx.get(f"{url}/queues/{name}/job", params={"id": handle.id}).text
        plain_page = httpx.get(f"{url}/queues/{name}/job", params={"id": plain.id}).text
        hostile_page = httpx.get(f"{url}/queues/{name}/job", params={"id": hostile.id}).text
    assert '<td id="task">math.add</td>' in page and 'id="task"' not in plain_page
    assert '<td id="task">&lt;b&gt;x&lt;/b&gt;\\x1b[31m</td>' in hostile_page  # shown as text, escaped
