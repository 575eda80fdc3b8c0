"""Periodic jobs (echomq.worker.cron): the schedules' arithmetic, and ticks enqueued exactly once by
worker processes on real servers, across a server restart."""

from __future__ import annotations

import json
import signal

import pytest

from echomq import Admission, App, ConfigurationError, EmbeddedServer, Queue, connect, module_path
from echomq.worker.cron import MIN_WINDOW_MS, Cron, CronTimer, describe
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past
from support.workers import WorkerProcess, processed

T = 1_767_225_605_300  # 2026-01-01 00:00:05.300 UTC


@pytest.mark.parametrize("expr,latest,following", [
    ("@every 1s", 1_767_225_605_000, 1_767_225_606_000),
    ("@every 1h30m", 1_767_225_600_000, 1_767_231_000_000),  # midnight is a multiple of 90 min
    ("*/10 * * * * *", 1_767_225_600_000, 1_767_225_610_000),  # 6 fields: the seconds first
    ("* * * * *", 1_767_225_600_000, 1_767_225_660_000),
    ("0 9 * * *", 1_767_171_600_000, 1_767_258_000_000),
])
def test_latest_and_next_tick(expr, latest, following):
    cron = Cron(expr, "q")
    assert cron.latest(T) == latest and cron.next_after(T) == following
    assert cron.latest(latest) == latest  # a tick exactly now is the latest
    assert cron.window_ms(latest) == max(cron.next_after(latest) - latest, MIN_WINDOW_MS)


@pytest.mark.parametrize("bad", ["@every", "@every 5x", "@every 0s", "* * * *", "61 * * * *", "* * * * * * *", ""])
def test_bad_expressions_are_refused(bad):
    with pytest.raises(ConfigurationError):
        Cron(bad, "q")


def test_app_cron_and_task_cron():
    app = App()
    app.cron("@every 5s", queue="reports", payload={"k": 1})

    @app.task(queue="cleanup", cron="* * * * *")
    def cleanup(payload): ...

    assert [(s.id, s.queue, s.payload) for s in app.schedules] == [("reports", "reports", {"k": 1}),
                                                                     ("cleanup", "cleanup", None)]
    with pytest.raises(ConfigurationError, match="taken"):
        app.cron("@every 1s", queue="reports")
    app.cron("@every 1s", queue="reports", id="reports-fast")
    assert [row["id"] for row in describe(app.schedules, T)] == ["reports", "cleanup", "reports-fast"]
    assert describe(app.schedules, T)[0]["next"] == "2026-01-01T00:00:10.000+00:00"


def test_the_timer_proposes_each_tick_once_and_a_completed_tick_stays_out(conn):
    name = fresh_name("cron")
    queue = Queue(conn, name)
    cron = Cron("@every 1h", name, {"n": 1})
    now = server_ms(conn.client)
    timers = [CronTimer([cron], {name: queue}, queue.server_ms) for _ in range(3)]
    made = [t.run_due(0) for t in timers]
    tick = cron.latest(now)
    assert made == [[cron.tick_id(tick)], [], []]  # three workers, one job
    assert timers[0].run_due(0) == [] and timers[0].next_due_ms() > 0
    job = queue.claim(60_000)
    assert job.id == cron.tick_id(tick) and job.payload == {"n": 1}
    queue.complete(job)
    # completed: a fresh worker (a restart) proposes the same tick and is told it is within its window
    assert CronTimer([cron], {name: queue}, queue.server_ms).run_due(0) == []
    again = queue.enqueue({}, id=cron.tick_id(tick), unique_for=1)
    assert again.reason is Admission.UNIQUE
    assert conn.client.pttl(queue.keys.unique(cron.tick_id(tick))) > 3_500_000  # the window: the period


@pytest.fixture
def aof_server(wire):
    with EmbeddedServer(module=module_path() if wire == 6 else None, aof=True, brand=wire) as server:
        yield server


def test_three_workers_run_a_one_second_schedule_once_per_tick_across_a_restart(aof_server, wire, out):
    name = fresh_name("cron")
    env = {"EMQ_TEST_CRON": "@every 1s"}
    workers = [WorkerProcess(aof_server.url, wire, name, out, env=env) for _ in range(3)]
    try:
        with connect(aof_server.url, wire=wire) as conn:
            for worker in workers:
                worker.wait_log(f"worker {worker.pid}: queues")
            start = server_ms(conn.client)
            wait_server_past(conn.client, start + 3_000, timeout_s=20)
            aof_server.restart()  # SIGTERM: the AOF is flushed; the workers ride it out
            wait_server_past(conn.client, start + 6_000, timeout_s=20)
            end = start + 6_000
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait() == 0
        runs = [job_id for job_id, _, _ in processed(out)]
        assert len(runs) == len(set(runs)), f"a tick ran twice: {sorted(runs)}"
        ticks = sorted(int(job_id.rsplit(":", 1)[1]) for job_id in runs)
        within = [t for t in ticks if start <= t < end]
        assert 5 <= len(within) <= 7, (len(within), ticks, start)
        print(f"cron wire {wire}: {len(within)} runs of the ticks in the 6 s, {len(runs)} in all, none twice")
        assert all(t % 1000 == 0 for t in ticks)
        assert {pid for _, _, pid in processed(out)} <= {w.pid for w in workers}
    finally:
        for worker in workers:
            worker.kill()


def test_emq_cron_list(server, monkeypatch):
    from click.testing import CliRunner

    from echomq.cli import main

    monkeypatch.setenv("EMQ_TEST_QUEUE", "reports")
    monkeypatch.setenv("EMQ_TEST_CRON", "*/10 * * * * *")
    runner = CliRunner(env={"COLUMNS": "200"})
    shown = runner.invoke(main, ["cron", "list", "worker_apps:make_app", "--url", server.url], catch_exceptions=False)
    assert shown.exit_code == 0 and "*/10 * * * * *" in shown.output and "reports" in shown.output
    listed = runner.invoke(main, ["cron", "list", "worker_apps:make_app", "--url", server.url, "--json"])
    (row,) = json.loads(listed.output)
    assert row["id"] == row["queue"] == "reports" and row["next_ms"] % 10_000 == 0 and 0 < row["in_s"] <= 10
    monkeypatch.delenv("EMQ_TEST_CRON")
    none = runner.invoke(main, ["cron", "list", "worker_apps:make_app", "--url", server.url, "--json"])
    assert json.loads(none.output) == []


def test_a_tasks_ticks_name_it_on_a_queue_of_several_tasks(conn):
    from echomq._protocol import envelope

    app, name = App(), fresh_name("cron-named")

    @app.task(queue=name, cron="@every 1h")
    def report(payload):
        return payload

    alone = app.schedules[0]
    assert app.tick(alone) == (None, None)  # one task: its ticks are plain jobs, as before (any worker reads them)

    @app.task(queue=name)
    def vacuum():
        return None

    with pytest.raises(ConfigurationError, match="takes no one argument"):
        app.cron("@every 1m", task=vacuum, payload={"x": 1}, id="v")
    with pytest.raises(ConfigurationError, match="not 'elsewhere'"):
        app.cron("@every 1m", task=vacuum, queue="elsewhere", id="v")
    app.cron("@every 1m", task=vacuum, id="vacuum")
    assert app.tick(alone) == (None, {"task": "report"})  # several tasks: each tick names its own
    assert app.tick(app.schedules[1]) == ({"args": [], "kwargs": {}}, {"task": "vacuum", "args": 1})
    queue = Queue(conn, name)
    timer = CronTimer(app.schedules, {name: queue}, queue.server_ms, {s.id: app.tick(s) for s in app.schedules})
    made = timer.run_due(0)
    assert len(made) == 2
    stored = {envelope.read_headers(conn.client.hget(queue.keys.job(job_id), "payload"))[0].task for job_id in made}
    assert stored == {"report", "vacuum"}
