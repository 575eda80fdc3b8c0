"""The process pool (echomq.worker.children): sync handlers in child processes, killed past their
timeout and replaced, recycled by jobs or memory between jobs, on real servers over both wires."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ContextManager

import pytest

from echomq import App, ConfigurationError, JobTimeout, Queue, StartupFailed, Worker, WorkerConfig
from echomq.worker.children import ChildLimits, recycle_reason
from echomq.worker.loading import spec_of
import pool_apps
from support.dataset import digest
from bench.process_pool import alive
from support.waiting import wait_until
from support.workers import WorkerProcess, forget_heartbeats, running as running_worker

MIB = 1 << 20


def pool_worker(conn, *queues: str, **config) -> ContextManager[Worker]:
    """A worker of pool_apps' app on ``queues`` in this process (one slot unless ``config`` says)."""
    return running_worker(Worker(pool_apps.app, conn, queues=list(queues), config=WorkerConfig(**{"concurrency": 1, **config})),
                   join_s=30)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (its children, theirs, ...), read from /proc."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended while we read
            continue
        for child in children:
            found |= {int(child)} | descendants(int(child))
    return found


def test_recycle_reason_says_when_a_child_is_replaced():
    assert recycle_reason(ChildLimits(), 10**6, 10**12) is None
    assert recycle_reason(ChildLimits(max_jobs=3), 2, 0) is None
    assert "ran 3 job(s)" in recycle_reason(ChildLimits(max_jobs=3), 3, 0)
    assert recycle_reason(ChildLimits(max_memory_mb=100), 1, 100 * MIB) is None
    assert "101 MiB, past --max-memory-per-child 100" in recycle_reason(ChildLimits(max_memory_mb=100), 1, 101 * MIB)


def test_the_pool_needs_an_app_it_can_load_by_name():
    assert spec_of(pool_apps.app) == "pool_apps:app"
    local = App("nowhere")
    local.handler("q", lambda payload: None)
    with pytest.raises(ConfigurationError, match="define it at a module's top level"):
        spec_of(local)


def test_bad_pool_settings_are_refused():
    with pytest.raises(ConfigurationError, match="bad pool 'fork'"):
        WorkerConfig(pool="fork")
    with pytest.raises(ConfigurationError, match="bad max_jobs_per_child 0"):
        WorkerConfig(max_jobs_per_child=0)
    with pytest.raises(ConfigurationError, match="bad pool 'proc' for queue 'q'"):
        App().handler("q", lambda payload: None, pool="proc")

    async def handler(payload: object) -> None: ...

    with pytest.raises(ConfigurationError, match="pool='process' runs sync handlers; an async def handler"):
        App().handler("q", handler, pool="process")


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_handler_past_its_timeout_is_killed_and_the_worker_keeps_serving(conn, tmp_path):
    spin, work = Queue(conn, "pool-spin"), Queue(conn, "pool-work")
    with pool_worker(conn, "pool-spin", "pool-work"):
        stuck = spin.enqueue({"out": str(tmp_path)})
        wait_until(lambda: spin.state(stuck.id) is not None and spin.state(stuck.id).value == "dead", 20,
                   "the looping job to time out")
        row = spin.job(stuck.id)
        assert row["attempts"] == "1" and row["last_error"] == f"JobTimeout: {JobTimeout(1.0)}"
        [spun] = [int(path.name.split("-")[1]) for path in tmp_path.glob("spin-*")]
        wait_until(lambda: not alive(spun), 10, "the looping child to be killed")
        served = work.enqueue({"out": str(tmp_path)})
        answer = work.result(served.id, timeout=20)
        assert answer["pid"] != spun and answer["pid"] != os.getpid()  # a fresh child took its place
        assert answer["state_pid"] == answer["pid"]  # its own startup hook ran in it
    spin.remove(stuck.id)


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_handler_that_ignores_sigterm_is_killed_with_sigkill(conn, tmp_path):
    spin = Queue(conn, "pool-spin")
    with pool_worker(conn, "pool-spin"):  # stuck in C, holding the GIL: the child's control thread cannot end it
        stuck = spin.enqueue({"out": str(tmp_path), "ignore_sigterm": True, "in_c": True})
        wait_until(lambda: spin.state(stuck.id) is not None and spin.state(stuck.id).value == "dead", 20,
                   "the looping job to time out")
        [spun] = [int(path.name.split("-")[1]) for path in tmp_path.glob("spin-*")]
        wait_until(lambda: not alive(spun), 10, "the child that ignores SIGTERM to be killed")
    assert spin.job(stuck.id)["last_error"] == f"JobTimeout: {JobTimeout(1.0)}"
    spin.remove(stuck.id)


@pytest.mark.slow  # worker processes, children of a fork server
def test_children_are_replaced_after_max_jobs_per_child(conn, tmp_path):
    work = Queue(conn, "pool-work")
    with pool_worker(conn, "pool-work", max_jobs_per_child=2):
        pids = [work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"] for _ in range(5)]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    assert len(set(pids)) == 3


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_child_past_max_memory_is_replaced_between_jobs(conn, tmp_path):
    work = Queue(conn, "pool-work")
    with pool_worker(conn, "pool-work", max_memory_per_child_mb=150):
        lean = work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"]
        assert work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"] == lean  # under: kept
        leaky = work.result(work.enqueue({"out": str(tmp_path), "leak_mb": 200}).id, timeout=20)["pid"]
        assert leaky == lean  # the job that leaked finished in it
        after = work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"]
        assert after != leaky and not alive(leaky)


@pytest.mark.slow  # worker processes, children of a fork server
def test_progress_producers_and_a_cancel_reach_a_child(conn, tmp_path):
    work, follow = Queue(conn, "pool-work"), Queue(conn, "pool-follow")
    with pool_worker(conn, "pool-work"):
        sent = work.enqueue({"out": str(tmp_path), "follow": "pool-follow"})
        assert work.result(sent.id, timeout=20)["pid"] != os.getpid()
        assert follow.state(f"{sent.id}-next").value == "pending"  # enqueued from the child
        held = work.enqueue({"out": str(tmp_path), "hold": True, "progress": {"done": 3}})
        wait_until(lambda: (tmp_path / f"holding-{held.id}").exists(), 20, "the held job to start")
        assert work.progress_of(held.id) == {"done": 3}  # reported from the child, fenced by its attempt
        assert work.cancel(held.id)
        wait_until(lambda: (tmp_path / f"told-lost-{held.id}").exists(), 20, "the child to see ctx.lease_lost")
    follow.remove(f"{sent.id}-next")


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_failure_in_a_child_keeps_its_traceback_and_a_dead_child_fails_its_attempt(conn, tmp_path):
    work = Queue(conn, "pool-once")
    with pool_worker(conn, "pool-once"):
        failed = work.enqueue({"out": str(tmp_path), "fail": True})
        died = work.enqueue({"out": str(tmp_path), "exit": True})
        wait_until(lambda: all(work.state(j.id).value == "dead" for j in (failed, died)), 20, "both to die")
        row = work.job(failed.id)
        assert row["last_error"] == "RuntimeError: planned failure in a child"
        assert 'pool_apps.py", line' in row["traceback"]  # the child's frames
        assert work.job(died.id)["last_error"].startswith("ChildProcessDied: the handler's child process")
        assert work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"] != os.getpid()
    for job in (failed, died):
        work.remove(job.id)


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_task_option_runs_that_task_in_children_on_a_thread_worker(conn, tmp_path):
    work, plain = Queue(conn, "pool-work"), Queue(conn, "pool-plain")
    with pool_worker(conn, "pool-work", "pool-plain", pool="thread"):
        assert plain.result(plain.enqueue(None).id, timeout=20) == os.getpid()
        assert work.result(work.enqueue({"out": str(tmp_path)}).id, timeout=20)["pid"] != os.getpid()


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_sigkilled_worker_leaves_no_child_running(conn, server, wire, tmp_path):
    work = Queue(conn, "pool-work")
    worker = WorkerProcess(server.url, wire, "pool-work", tmp_path, "--pool", "process", "-c", "2",
                           app="pool_apps:app")
    try:
        worker.wait_log("the process pool: 2 children", 30)
        held = work.enqueue({"out": str(tmp_path), "hold": True})
        wait_until(lambda: (tmp_path / f"holding-{held.id}").exists(), 20, "a child to run the held job")
        busy = int((tmp_path / f"holding-{held.id}").read_text())
        below = descendants(worker.pid)
        assert busy in below and len(below) >= 3  # the fork server and the two children
        worker.kill()  # SIGKILL: no shutdown, no chance to stop them
        wait_until(lambda: not any(map(alive, below)), 10, "every process below the killed worker to end")
    finally:
        worker.kill()
        forget_heartbeats(server.client(), {worker.pid})  # its record would expire under a later digest check
    work.cancel(held.id)  # still active: its lease was never given up


@pytest.mark.slow  # worker processes, children of a fork server
def test_what_pickle_cannot_carry_fails_the_attempt_with_a_clear_error(conn):
    odd = Queue(conn, "pool-odd")
    with pool_worker(conn, "pool-odd"):
        raised, returned = odd.enqueue({"unloadable": True}), odd.enqueue({})
        wait_until(lambda: all(odd.state(j.id).value == "dead" for j in (raised, returned)), 20, "both to die")
    assert odd.job(raised.id)["last_error"] == "Exception: Unloadable: 7: odd"
    assert 'pool_apps.py", line' in odd.job(raised.id)["traceback"]
    assert odd.job(returned.id)["last_error"].startswith(
        "TypeError: the handler's return value cannot be sent from its child process:")
    for job in (raised, returned):
        odd.remove(job.id)


@pytest.mark.slow  # worker processes, children of a fork server
def test_a_child_whose_startup_hook_fails_stops_the_worker_before_it_claims(conn):
    job = Queue(conn, "pool-never").enqueue({})
    worker = Worker(pool_apps.failing_app, conn, config=WorkerConfig(concurrency=2))
    before = digest(conn.client)
    with pytest.raises(StartupFailed, match=r"a child process of the pool did not start: the startup hook "
                                            r"pool_apps.no_database_in_a_child raised RuntimeError: no database"):
        worker.run(install_signals=False)
    assert digest(conn.client) == before and Queue(conn, "pool-never").state(job.id).value == "pending"
    assert pool_apps.failing_app.state.shut is True  # the worker's own startup ran: its shutdown hooks undo it
    Queue(conn, "pool-never").remove(job.id)


@pytest.mark.slow  # worker processes, children of a fork server
def test_named_tasks_on_one_queue_run_their_calls_in_children(conn):
    pool_apps.app.connect(conn)
    with pool_worker(conn, "pool-named"):
        total, pid, attempt = pool_apps.add.delay(1, 2).get(timeout=20)
        assert total == 3 and pid != os.getpid() and attempt == 1
        assert pool_apps.scale.s(3, by=4).enqueue().get(timeout=20) == 12
