"""`emq worker` processes against real servers: many processes, SIGKILL, SIGTERM, a second signal."""

from __future__ import annotations

import re
import signal

import pytest

from echomq import EmbeddedServer, Queue, connect, module_path
from support.queues import fresh_name
from support.waiting import wait_server_past, wait_until
from support.workers import WorkerProcess, processed, started

FAST_TIMERS = ("--promote-interval-ms", "50", "--sweep-interval-ms", "50")


def test_two_worker_processes_process_every_job_exactly_once(conn, spawn, out):
    name = fresh_name("p")
    queue = Queue(conn, name)
    ids = {job.id for job in queue.enqueue_many([{"n": n} for n in range(400)])}
    workers = [spawn(name, "-c", "4") for _ in range(2)]
    for worker in workers:  # logged once its signal handlers are in: a SIGTERM before that would kill it
        worker.wait_log(f"worker {worker.pid}: queues")
    wait_until(lambda: queue.metrics()["completed"] == 400, 30, "400 completions")
    rows = processed(out)
    assert sorted(job_id for job_id, _, _ in rows) == sorted(ids)  # each once, none missing
    assert {attempt for _, attempt, _ in rows} == {1}
    for worker in workers:
        worker.wait_log("concurrency 4")  # its signal handlers are in place (one may have found no job left)
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0
        assert "stopped with nothing held" in worker.log()
    assert queue.counts().total == 0


def test_retry_and_dead_across_a_worker_process(conn, spawn, out):
    name = fresh_name("p")
    queue = Queue(conn, name)
    flaky = queue.enqueue({"fail": 2})
    broken = queue.enqueue({"fail": 99})
    spawn(name, *FAST_TIMERS, env={"EMQ_TEST_MAX_ATTEMPTS": "3"})
    wait_until(lambda: queue.metrics() == {"completed": 1, "failed": 1}, 20, "one completion and one death")
    assert [(i, a) for i, a, _ in processed(out)] == [(flaky.id, 3)]
    row = queue.job(broken.id)
    assert row["state"] == "dead" and row["attempts"] == "3" and row["last_error"] == "RuntimeError: planned failure 3"
    assert 'worker_apps.py", line' in row["traceback"]
    assert row["traceback"].endswith("RuntimeError: planned failure 3\n")


def test_a_sigkilled_workers_job_is_recovered_by_another_workers_sweep(conn, spawn, out):
    name = fresh_name("p")
    queue = Queue(conn, name)
    job = queue.enqueue({"hold": True})
    first = spawn(name, "--lease-ms", "800", *FAST_TIMERS)
    wait_until(lambda: started(out, job.id, 1), 20, "the first attempt to start")
    first.kill()  # SIGKILL mid-job: no settle, no requeue, the lease just stops being renewed
    assert queue.state(job.id).value == "active"
    (out / "release").touch()
    second = spawn(name, "--lease-ms", "800", *FAST_TIMERS)
    wait_until(lambda: queue.metrics()["completed"] == 1, 20, "the recovered job to complete")
    assert [(i, a) for i, a, pid in processed(out)] == [(job.id, 2)]
    assert processed(out)[0][2] == second.pid
    second.wait_log("1 expired lease(s) recovered")


def test_a_frozen_worker_loses_its_job_and_settles_nothing_when_it_wakes(conn, wire, spawn, out):
    """SIGSTOP past the lease (a VM pause, a GC storm): the job is swept and run by another
    worker; on SIGCONT the frozen one learns it lost the lease, one way or the other."""
    name = fresh_name("p")
    queue = Queue(conn, name)
    job = queue.enqueue({"hold": True})
    frozen = spawn(name, "--lease-ms", "800", *FAST_TIMERS)
    wait_until(lambda: started(out, job.id, 1), 20, "the first attempt to start")
    frozen.signal(signal.SIGSTOP)
    try:
        wait_server_past(conn.client, conn.client.zscore(queue.keys.active, job.id))
        (out / "release").touch()
        spawn(name, "--lease-ms", "800", *FAST_TIMERS)
        wait_until(lambda: queue.metrics()["completed"] == 1, 20, "the other worker to complete it")
    finally:
        frozen.signal(signal.SIGCONT)
    frozen.wait_log("attempt 1: ")  # whichever it meets first: EXTENDS 0, or its COMPLETE fenced off
    wait_until(lambda: "settle refused" in frozen.log() or "its outcome is not settled" in frozen.log(), 10,
               "the frozen worker to give the job up")
    frozen.signal(signal.SIGTERM)
    assert frozen.wait() == 0
    assert queue.metrics() == {"completed": 1, "failed": 0} and queue.job(job.id) is None
    # every claim it made was lost: the first; on wire 6 perhaps also the recovered job, which its BCLAIM, blocked
    # on the server since before the freeze, was first in line for (that lease ran out while it was stopped too).
    # That block's answer may be read after the SIGTERM: then the job is released at the stop, which its lease,
    # run out, refuses, and it is abandoned (left to the sweep that already took it), not claimed
    claims = re.search(r"done: claimed (\d+), lost (\d+)(?:, abandoned (\d+))?\n", frozen.log())
    assert claims and claims[1] == claims[2], frozen.log()
    taken = int(claims[1]) + int(claims[3] or 0)
    assert taken in ((1, 2) if wire == 6 else (1,)) and claims[3] in ((None, "1") if wire == 6 else (None,)), frozen.log()


@pytest.mark.parametrize("async_handler", [False, True], ids=["sync", "async"])
def test_sigterm_waits_the_grace_then_requeues_on_both_wires(conn, spawn, out, async_handler):
    name = fresh_name("p")
    queue = Queue(conn, name)
    jobs = [queue.enqueue({"hold": True}) for _ in range(2)]
    worker = spawn(name, "-c", "2", "--grace", "0.3", "--lease-ms", "400",
                   env={"EMQ_TEST_ASYNC": "1"} if async_handler else None)
    wait_until(lambda: all(started(out, j.id, 1) for j in jobs), 20, "both jobs to start")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    log = worker.log()
    assert "SIGTERM: no more claims; 2 job(s) held" in log
    assert "requeued 2 job(s)" in log
    assert queue.counts().pending == 2 and queue.counts().active == 0
    assert all("stalled" not in queue.job(j.id) for j in jobs)  # no budget spent
    assert processed(out) == [] and queue.metrics()["completed"] == 0  # told to stop; nothing settled
    (out / "release").touch()
    spawn(name)
    wait_until(lambda: queue.metrics()["completed"] == 2, 20, "both jobs to complete")
    assert sorted((i, a) for i, a, _ in processed(out)) == sorted((j.id, 2) for j in jobs)
    assert queue.counts().total == 0  # none lost


def test_a_second_signal_exits_at_once(conn, wire, spawn, out):
    name = fresh_name("p")
    queue = Queue(conn, name)
    job = queue.enqueue({"hold": True})
    worker = spawn(name, "--grace", "60")
    wait_until(lambda: started(out, job.id, 1), 20, "the job to start")
    worker.signal(signal.SIGINT)
    worker.wait_log("SIGINT: no more claims")
    worker.signal(signal.SIGINT)
    assert worker.wait(5) == 128 + signal.SIGINT
    assert "second SIGINT, exiting at once; 1 held job(s) left to lease expiry" in worker.log()
    assert queue.state(job.id).value == "active"  # not lost: the sweep recovers it once the lease runs out


@pytest.fixture
def aof_server(wire):
    with EmbeddedServer(module=module_path() if wire == 6 else None, aof=True, appendfsync="always",
                        brand=wire) as server:
        yield server


def test_a_server_restart_is_ridden_out_not_taken_for_a_crash(aof_server, wire, out):
    name = fresh_name("p")
    with connect(aof_server.url, wire=wire) as conn:
        queue = Queue(conn, name)
        job = queue.enqueue({"hold": True})
        worker = WorkerProcess(aof_server.url, wire, name, out, "--lease-ms", "3000", *FAST_TIMERS)
        try:
            wait_until(lambda: started(out, job.id, 1), 20, "the job to start")
            before = conn.client.zscore(queue.keys.active, job.id)
            aof_server.restart()  # a clean restart: the AOF keeps the lease, the run_id changes
            # the worker reconnects and keeps renewing the same lease with the same token
            wait_until(lambda: (conn.client.zscore(queue.keys.active, job.id) or 0) > before, 10,
                       "a renewal after the restart")
            (out / "release").touch()
            wait_until(lambda: queue.metrics()["completed"] == 1, 20, "the completion")
            assert [(i, a) for i, a, _ in processed(out)] == [(job.id, 1)]  # never run twice
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
            # the restart was seen (by a step, or by the waiter blocked while the queue was empty) and ridden out
            log = worker.log()
            assert "lease lost" not in log and ("step failed" in log or "blocked read failed" in log)
        finally:
            worker.kill()
