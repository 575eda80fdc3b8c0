"""Several named tasks on one queue, run by a worker, both wires: each job runs the task it names with
the call it stored (its context where the handler takes it), a job whose name no task has goes dead at
once and is never retried, a job enqueued without a name still reaches its queue's one task as before,
and a job's own retry policy and timeout override its task's (docs/workers.md "Calling a task")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import echomq
from echomq import App, Backoff, JobFailed, Queue, Status, Worker, WorkerConfig, chain, group
from echomq._protocol import envelope
from echomq.testing import drain
from support.queues import fresh_name
from support.waiting import server_ms, wait_until
from test_canvas import shop
from test_worker import running

FAST = Backoff(base_ms=1, max_ms=5, jitter=0.0)


def row(queue: Queue, job_id: str) -> dict[str, str]:
    client: Any = queue.connection.client
    return {k.decode(): v.decode(errors="replace") for k, v in client.hgetall(queue.keys.job(job_id)).items()
            if k != b"payload"}


def test_several_tasks_share_a_queue_and_each_job_runs_its_own(conn):
    name = fresh_name("named")
    app, seen = App(queue=name).connect(conn), []

    @app.task
    def send_email(payload, ctx):
        seen.append(("send_email", payload, ctx.id))
        return payload["to"]

    @app.task
    def add(x, y=0):
        seen.append(("add", x, y))
        return x + y

    @app.task
    async def shout(text: str, *, ctx: echomq.AsyncJobContext) -> str:
        seen.append(("shout", text, ctx.queue))
        return text.upper()

    @app.task
    def first(ctx, url, depth=1):  # arq's order: the context first
        seen.append(("first", url, depth, ctx.attempt))
        return depth

    mail = send_email.delay({"to": "ada@example.com"})
    total = add.delay(2, y=3)
    loud = shout.delay("hi")
    deep = first.delay("https://example.com", depth=2)
    assert drain(app, Queue(conn, name)).completed == 4
    assert sorted(seen, key=str) == sorted([("send_email", {"to": "ada@example.com"}, mail.id), ("add", 2, 3),
                                            ("shout", "hi", name), ("first", "https://example.com", 2, 1)], key=str)
    assert (mail.get(timeout=1), total.get(timeout=1), loud.get(timeout=1), deep.get(timeout=1)) == (
        "ada@example.com", 5, "HI", 2)


def test_a_job_naming_no_task_of_the_worker_goes_dead_at_once_never_retried(conn):
    name = fresh_name("unknown")
    app = App(queue=name).connect(conn)
    ran: list[str] = []

    @app.task(max_attempts=5, backoff=FAST)
    def known(payload):
        ran.append("known")

    @app.task(max_attempts=5, backoff=FAST)
    def other(payload):
        ran.append("other")

    producer = App(queue=name).connect(conn)  # a newer producer's app, with a task the workers lack

    @producer.task(name="renamed")
    def renamed(payload):
        return payload

    queue = Queue(conn, name)
    lost = renamed.delay({"n": 1})
    nameless = queue.enqueue({"n": 2})  # no name, on a queue of two tasks
    kept = known.delay({"n": 3})
    tally = drain(app, queue)
    assert (tally.dead, tally.completed, tally.retried, ran) == (2, 1, 0, ["known"])
    dead = row(queue, lost.id)
    assert (dead["state"], dead["attempts"], dead["failures"]) == ("dead", "1", "1")
    assert dead["last_error"].startswith("UnknownTask: no task \"renamed\" on queue")
    assert "it has known, other" in dead["last_error"]
    assert row(queue, nameless.id)["last_error"].startswith(f"UnknownTask: the job names no task, and queue {name!r}")
    with pytest.raises(JobFailed, match="UnknownTask"):
        lost.get(timeout=1)
    assert kept.status() is Status.COMPLETED

    @app.task(name="renamed")  # the worker's app gains the task: reprocessed, the job runs
    def now_known(payload):
        ran.append("renamed")

    assert queue.reprocess(lost.id) and drain(app, queue).completed == 1 and ran[-1] == "renamed"


def test_a_job_without_a_name_reaches_its_queues_one_task_as_before(conn):
    name = fresh_name("plain")
    app, got = App().connect(conn), []

    @app.task(queue=name)
    def handle(payload, ctx):
        got.append((payload, ctx.id))

    queue = Queue(conn, name)
    plain = queue.enqueue({"n": 1})
    named = handle.delay({"n": 2})
    assert queue.connection.client.hget(queue.keys.job(plain.id), "payload") == b'{"n":1}'  # no envelope at all
    assert drain(app, queue).completed == 2
    assert sorted(got, key=str) == sorted([({"n": 1}, plain.id), ({"n": 2}, named.id)], key=str)


def test_a_jobs_own_retry_budget_and_backoff_override_its_tasks(conn):
    name = fresh_name("budget")
    app, attempts = App(queue=name).connect(conn), []

    @app.task(max_attempts=1, backoff=FAST)
    def flaky(n, ctx):
        attempts.append((n, ctx.attempt))
        raise ValueError(f"boom {n}")

    more = flaky.enqueue(1, max_attempts=3)  # the task would die at the first failure
    fewer = flaky.enqueue(2)
    tally = drain(app, Queue(conn, name))
    assert sorted(attempts) == [(1, 1), (1, 2), (1, 3), (2, 1)] and tally.retried == 2 and tally.dead == 2
    assert more.status() is Status.DEAD and row(Queue(conn, name), more.id)["failures"] == "3"

    slow = flaky.enqueue(3, max_attempts=2, backoff=Backoff(base_ms=3_600_000, max_ms=3_600_000, jitter=0.0))
    worker = Worker(app, conn, config=WorkerConfig(concurrency=1))
    before = server_ms(conn.client)
    with running(worker):
        wait_until(lambda: slow.status() is Status.SCHEDULED, what="the retry to wait out the job's own backoff")
    due = conn.client.zscore(Queue(conn, name).keys.schedule, slow.id)
    assert due >= before + 3_600_000  # the job's backoff (an hour), not the task's (milliseconds)


def test_a_jobs_own_timeout_overrides_its_tasks(conn):
    name = fresh_name("timeout")
    app = App(queue=name).connect(conn)
    release = threading.Event()

    @app.task(max_attempts=1, timeout=None)
    def wait(seconds):
        release.wait(seconds)
        return "done"

    @app.task(max_attempts=1, timeout=0.05)
    async def nap(seconds):
        await asyncio.sleep(seconds)
        return "slept"

    bounded = wait.enqueue(30, timeout=0.2)  # the task has no limit; this job has one
    unbounded = nap.enqueue(0.3, timeout=None)  # the task's 50 ms would fail it; this job has none
    try:
        drain(app, Queue(conn, name), concurrency=2)
    finally:
        release.set()
    with pytest.raises(JobFailed, match="JobTimeout: the handler ran past its timeout of 0.2 s"):
        bounded.get(timeout=1)
    assert unbounded.get(timeout=1) == "slept"


@pytest.mark.parametrize("own, error", [
    ({"task": "add", "max_attempts": 0}, "PayloadError: the job's own headers cannot be read: bad max_attempts"),
    ({"task": "add", "args": 1}, 'PayloadError: the job says its payload is a call'),
    ({"task": "add", "prev": "one"}, "PayloadError: the job takes its flow children's results first"),
])
def test_a_job_whose_headers_cannot_be_read_goes_dead_at_once(conn, own, error):
    name = fresh_name("bad")
    app = App(queue=name).connect(conn)

    @app.task(max_attempts=5)
    def add(x, y=0):
        return x + y

    queue = Queue(conn, name)
    bad = queue._run(queue.op_enqueue([1, 2], None, 0, headers=own))
    assert drain(app, queue).dead == 1
    assert row(queue, bad.id)["last_error"].startswith(error) and row(queue, bad.id)["failures"] == "1"


def test_a_header_no_worker_knows_is_kept_and_ignored(conn):
    name = fresh_name("future")
    app = App(queue=name).connect(conn)

    @app.task
    def add(x, y=0):
        return x + y

    queue = Queue(conn, name)
    future = queue._run(queue.op_enqueue({"args": [1, 2], "kwargs": {}}, None, 0,
                                         headers={"task": "add", "args": 1, "a-later-header": {"x": 1}}))
    assert envelope.read_headers(conn.client.hget(queue.keys.job(future.id), "payload"))[0].own["a-later-header"] == {
        "x": 1}
    assert drain(app, queue).completed == 1 and Queue(conn, name).result(future.id, timeout=1) == 3


def test_chains_and_groups_run_through_a_worker(conn):
    name = fresh_name("chains")
    app, (add, total, _) = shop(conn, name)

    @app.task(max_attempts=1)
    def broken(x):
        raise RuntimeError(f"no {x}")

    steps = chain(add.s(1, 2), add.s(10), add.s(100)).enqueue()
    chord = group([add.s(n, n) for n in range(4)] + [chain(add.s(5), add.s(5))]).then(total.s(scale=2)).enqueue()
    alone = group(add.s(1, 1), add.s(2, 2)).enqueue()
    failing = chain(add.s(1), broken.s(), add.s(1)).enqueue()
    queue = Queue(conn, name)
    drain(app, queue)
    assert steps.get(timeout=1) == 113 and chord.get(timeout=1) == 2 * (0 + 2 + 4 + 6 + 10)
    assert [h.get(timeout=1) for h in alone] == [2, 4]
    with pytest.raises(JobFailed, match=r"child \S+ failed: RuntimeError: no 1"):
        failing.get(timeout=1)


def test_chains_run_from_asyncio_too(server, wire):
    name = fresh_name("achains")
    app = App(url=server.url, wire=wire, queue=name)

    @app.task
    async def add(x, y=0):
        await asyncio.sleep(0)
        return x + y

    async def send() -> Any:
        handle = await add.s(1).then(add.s(2)).aenqueue()
        await app.aclose()
        return handle

    handle = asyncio.run(send())
    with echomq.connect(server.url, wire=wire) as conn:
        app.connect(conn)
        drain(app, Queue(conn, name))

        async def get() -> Any:
            async with await echomq.aio.connect(server.url, wire=wire) as aconn:
                return await echomq.aio.Queue(aconn, name).result(handle.id, timeout=1)

        assert asyncio.run(get()) == 3


def test_the_per_task_figures_count_each_job_under_the_task_it_ran(conn):
    """One count per task (the console's): a worker running two named tasks of one queue counts each
    job's claim, outcome, failure type and run time under the task it ran, in its metrics and in the
    summary its heartbeat publishes (what the dashboard reads); a job that ran none (it names no task
    on a queue of two) counts under the queue's first task, as UnknownTask."""
    pytest.importorskip("prometheus_client")
    from echomq._core.summaries import decode_summary
    from echomq.observe.metrics import WorkerCollector
    from echomq import IdlePolicy, TimerConfig

    name = fresh_name("per-task")
    app = App(queue=name).connect(conn)

    @app.task
    def fine(x):
        return x

    @app.task(max_attempts=2, backoff=FAST)
    def broken(x):
        raise ValueError(x)

    fine.delay(1), fine.delay(2), fine.delay(3), broken.delay(4)
    Queue(conn, name).enqueue({"n": 5})  # names no task on a queue of two: dead, and no task ran it
    worker = Worker(app, conn, config=WorkerConfig(burst=True, grace_s=0, idle=IdlePolicy(min_ms=1, max_ms=20),
                                                   timers=TimerConfig(promote_interval_ms=10)))
    assert worker.run(install_signals=False).dead == 2
    families = {family.name: family for family in WorkerCollector(worker).collect()}
    counted = {(s.labels["task"], s.labels["outcome"]): s.value for s in families["echomq_worker_jobs"].samples
               if s.labels["queue"] == name and s.value}
    assert counted == {("fine", "claimed"): 4, ("fine", "completed"): 3, ("fine", "dead"): 1,
                       ("broken", "claimed"): 2, ("broken", "retried"): 1, ("broken", "dead"): 1}
    assert {(s.labels["task"], s.labels["error"]): s.value for s in families["echomq_worker_failures"].samples
            if s.labels["queue"] == name} == {("broken", "ValueError"): 2, ("fine", "UnknownTask"): 1}
    ran = {s.labels["task"]: s.value for s in families["echomq_worker_job_duration_seconds"].samples
           if s.name.endswith("_count") and s.labels["queue"] == name}
    assert ran == {"fine": 4, "broken": 2}
    published = {t.task: t.total for t in decode_summary(worker.stats.summary()) if t.queue == name}
    assert {task: {k: v for k, v in figures.counts.items() if v} for task, figures in published.items()} == {
        "fine": {"claimed": 4, "completed": 3, "dead": 1}, "broken": {"claimed": 2, "retried": 1, "dead": 1}}
    assert {task: figures.run.count for task, figures in published.items()} == {"fine": 4, "broken": 2}
    assert published["broken"].errors == {"ValueError": 2}
    alone = App().connect(conn)  # a queue of one task: a plain job and a named one count as that task

    @alone.task(queue=fresh_name("one-task"), name="only_one")
    def only(payload):
        return payload

    Queue(conn, only.task.queue).enqueue_many([{"n": n} for n in range(25)])
    only.delay({"n": 25})
    worker = Worker(alone, conn, config=WorkerConfig(burst=True, grace_s=0, idle=IdlePolicy(min_ms=1, max_ms=20),
                                                     timers=TimerConfig(promote_interval_ms=10)))
    assert worker.run(install_signals=False).completed == 26
    assert {(s.labels["task"], s.labels["outcome"]): s.value for family in WorkerCollector(worker).collect()
            if family.name == "echomq_worker_jobs" for s in family.samples if s.value} == {
        ("only_one", "claimed"): 26, ("only_one", "completed"): 26}
