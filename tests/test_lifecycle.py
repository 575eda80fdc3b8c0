"""Lifecycle hooks (echomq.worker.lifecycle): @app.on_startup before a worker's first claim,
@app.on_shutdown after its last settle, the state they share with sync and async handlers, and what
a failing hook does, in this process and under `emq worker` (one process and -p N), on both wires."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from echomq import App, AppState, ConfigurationError, Queue, StartupFailed, Worker, WorkerConfig
from support.dataset import digest
from support.processes import ROOT
from support.queues import fresh_name
from support.workers import running


def test_hooks_run_once_around_the_claims_and_both_kinds_of_handler_read_the_state(conn):
    sync_name, async_name = fresh_name("life"), fresh_name("life")
    app, said = App(), []

    @app.on_startup
    def open_pool(state: AppState) -> None:
        said.append(("startup", Queue(conn, sync_name).counts().pending))
        state.pool = "a pool"

    @app.on_shutdown
    def close_pool() -> None:  # a hook may take nothing
        said.append(("shutdown", Queue(conn, sync_name).metrics().get("completed", 0)))

    @app.task(queue=sync_name)
    def sync_handler(payload, ctx):
        return ctx.state.pool

    @app.task(queue=async_name)
    async def async_handler(payload, ctx):
        return ctx.state.pool + " " + app.state.pool

    sync_job, async_job = Queue(conn, sync_name).enqueue(1), Queue(conn, async_name).enqueue(2)
    with running(Worker(app, conn)) as worker:
        assert Queue(conn, sync_name).result(sync_job.id, timeout=10) == "a pool"
        assert Queue(conn, async_name).result(async_job.id, timeout=10) == "a pool a pool"
    assert said == [("startup", 1), ("shutdown", 1)]  # before the first claim, after the last settle
    assert worker.shutdown_errors == []


def test_async_hooks_run_on_the_loop_the_async_handlers_use(conn):
    name, app = fresh_name("life"), App()

    @app.on_startup
    async def make_future(state: AppState) -> None:
        state.ready = asyncio.get_running_loop().create_future()  # usable only on the loop it was made on

    @app.on_shutdown
    async def check_loop(state: AppState) -> None:
        state.closed_on_same_loop = asyncio.get_running_loop() is state.ready.get_loop()

    @app.task(queue=name)
    async def handler(payload, ctx):
        ctx.state.ready.set_result("set")
        return await ctx.state.ready  # a future of another loop raises RuntimeError here

    job = Queue(conn, name).enqueue(None)
    with running(Worker(app, conn)):
        assert Queue(conn, name).result(job.id, timeout=10) == "set"
    assert app.state.closed_on_same_loop is True


def test_a_failing_startup_hook_stops_the_worker_before_it_claims_anything(conn, caplog):
    name, app, shut = fresh_name("life"), App(), []

    @app.on_startup
    def broken(state: AppState) -> None:
        raise OSError("the database is down")

    app.on_shutdown(lambda: shut.append(True))
    app.handler(name, lambda payload: None)
    job = Queue(conn, name).enqueue(None)
    worker = Worker(app, conn)
    before = digest(conn.client)
    with caplog.at_level(logging.ERROR, "echomq.worker"), \
            pytest.raises(StartupFailed, match=r"the startup hook .*broken raised OSError: the database is down; "
                                               "the worker claimed nothing"):
        worker.run(install_signals=False)
    assert digest(conn.client) == before  # nothing claimed, no heartbeat, no rate limit: nothing written
    assert Queue(conn, name).state(job.id).value == "pending"
    assert shut == []  # the shutdown hooks run only after a startup that succeeded
    assert "Traceback" in caplog.text and "the database is down" in caplog.text


def test_a_failing_shutdown_hook_is_logged_the_others_run_and_the_worker_says_so(conn, caplog):
    name, app, ran = fresh_name("life"), App(), []

    @app.on_shutdown
    def broken() -> None:
        raise RuntimeError("could not flush")

    app.on_shutdown(lambda state: ran.append(state))
    app.handler(name, lambda payload: None)
    worker = Worker(app, conn, config=WorkerConfig(burst=True))
    with caplog.at_level(logging.ERROR, "echomq.worker"):
        worker.run(install_signals=False)
    assert [str(error) for error in worker.shutdown_errors] == ["could not flush"]
    assert ran == [app.state]
    assert "the shutdown hook" in caplog.text and "broken raised" in caplog.text


def test_a_hook_that_takes_more_than_the_state_is_refused():
    app = App()
    with pytest.raises(ConfigurationError, match="takes the app's state or nothing"):
        app.on_startup(lambda state, other: None)
    with pytest.raises(ConfigurationError, match="decorates a function"):
        app.on_shutdown("close")  # type: ignore[arg-type]
    assert app.lifecycle.startup == [] and app.lifecycle.shutdown == []


def test_an_unset_state_name_says_where_to_set_it():
    with pytest.raises(AttributeError, match=r"no 'db': set it in an @app.on_startup hook \(state.db = ...\)"):
        AppState().db


APP = """
    import os
    from pathlib import Path
    import echomq

    app = echomq.App()
    OUT = Path(os.environ["EMQ_TEST_OUT"])

    @app.on_startup
    def started(state):
        (OUT / f"startup-{os.getpid()}").touch()
        if os.environ.get("FAIL_AT") == "startup":
            raise RuntimeError("no database")

    @app.on_shutdown
    def stopped(state):
        (OUT / f"shutdown-{os.getpid()}").touch()
        if os.environ.get("FAIL_AT") == "shutdown":
            raise RuntimeError("could not flush")

    app.handler(os.environ["EMQ_TEST_QUEUE"], lambda payload: None)
"""


def emq_worker(server, wire, tmp_path: Path, queue: str, *args: str, fail_at: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "hooked.py").write_text(textwrap.dedent(APP))
    env = dict(os.environ, EMQ_TEST_OUT=str(tmp_path), EMQ_TEST_QUEUE=queue, FAIL_AT=fail_at,
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "echomq.cli", "worker", "hooked:app", "--url", server.url,
                           "--wire", str(wire), "--burst", *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)


def pids(tmp_path: Path, kind: str) -> set[int]:
    return {int(path.name.rpartition("-")[2]) for path in tmp_path.glob(f"{kind}-*")}


@pytest.mark.slow  # emq worker processes
def test_emq_worker_exits_1_with_one_line_when_a_startup_hook_fails(conn, server, wire, tmp_path):
    name = fresh_name("life")
    job = Queue(conn, name).enqueue(None)
    done = emq_worker(server, wire, tmp_path, name, fail_at="startup")
    assert done.returncode == 1
    assert "Error: the startup hook hooked.started raised RuntimeError: no database; the worker claimed nothing" \
        in done.stderr
    assert Queue(conn, name).state(job.id).value == "pending" and pids(tmp_path, "shutdown") == set()


@pytest.mark.slow  # emq worker processes
def test_emq_worker_exits_1_when_a_shutdown_hook_fails(server, wire, tmp_path):
    done = emq_worker(server, wire, tmp_path, fresh_name("life"), fail_at="shutdown")
    assert done.returncode == 1
    assert "Error: 1 shutdown hook(s) raised (see the log): RuntimeError: could not flush" in done.stderr


@pytest.mark.slow  # emq worker processes
def test_under_processes_each_worker_process_runs_the_hooks_once(server, wire, tmp_path):
    done = emq_worker(server, wire, tmp_path, fresh_name("life"), "-p", "2")
    assert done.returncode == 0, done.stderr
    started = pids(tmp_path, "startup")
    assert len(started) == 2 and pids(tmp_path, "shutdown") == started
