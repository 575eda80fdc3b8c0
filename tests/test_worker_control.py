"""Control over work, with real `emq worker` processes on both wires: timeouts, cancel,
undecodable payloads, and the one budget across restarts."""

from __future__ import annotations

import signal

import pytest

from echomq import Queue
from echomq._protocol.serializers import RAW
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import processed, started

LEASE_MS = 1000
TIMEOUT_S = 0.5
ATTEMPTS = 3
FAST = ("--lease-ms", str(LEASE_MS), "--idle-max-ms", "50", "--promote-interval-ms", "50")


def is_dead(queue, job_id):
    row = queue.job(job_id)
    return row if row and row["state"] == "dead" else None


@pytest.mark.parametrize("async_handler", [False, True], ids=["sync", "async"])
def test_a_hung_handler_ends_dead_within_its_budget_of_timeouts(conn, spawn, out, async_handler):
    name = fresh_name("to")
    queue = Queue(conn, name)
    env = {"EMQ_TEST_TIMEOUT": str(TIMEOUT_S), "EMQ_TEST_MAX_ATTEMPTS": str(ATTEMPTS)}
    if async_handler:
        env["EMQ_TEST_ASYNC"] = "1"
    worker = spawn(name, *FAST, env=env)
    job = queue.enqueue({"hang": True})
    # no stopwatch (a loaded machine made one fail): every attempt ended as a timeout the worker
    # failed (failures = attempts, its error, no traceback), none as a stall the sweep found
    row = wait_until(lambda: is_dead(queue, job.id), (TIMEOUT_S + LEASE_MS / 1000) * ATTEMPTS + 30,
                     "the hung job to go dead")
    assert (row["attempts"], row["failures"]) == (str(ATTEMPTS), str(ATTEMPTS))
    assert row.get("stalled", "0") == "0"
    assert row["last_error"] == f"JobTimeout: the handler ran past its timeout of {TIMEOUT_S:g} s"
    assert row["traceback"] == ""  # the worker decided it: no raise, no traceback (nor an older one's)
    assert all(started(out, job.id, n) for n in range(1, ATTEMPTS + 1))
    worker.wait_log("failed with JobTimeout")
    if not async_handler:
        assert "its thread is abandoned" in worker.log()
    else:  # the timeout cancelled it: it stopped, as told, and did not "finish after all"
        assert "finished after all" not in worker.log()
    assert processed(out) == []


def test_a_job_that_keeps_timing_out_goes_dead_across_worker_restarts(conn, spawn, out):
    name = fresh_name("tr")
    queue = Queue(conn, name)
    budget = 4
    env = {"EMQ_TEST_TIMEOUT": str(TIMEOUT_S), "EMQ_TEST_MAX_ATTEMPTS": str(budget)}
    job = queue.enqueue({"hang": True})

    def failures() -> int:
        return int(queue.job(job.id).get("failures", 0))

    for restart in (1, 2):
        worker = spawn(name, *FAST, "--grace", "0", env=env)
        wait_until(lambda: failures() >= restart, 10, f"timeout {restart}")
        worker.signal(signal.SIGTERM)  # a deploy: what is held is requeued, no budget spent
        assert worker.wait() == 0
    assert failures() < budget and queue.job(job.id)["state"] != "dead"
    spawn(name, *FAST, env=env)
    row = wait_until(lambda: is_dead(queue, job.id), 10, "the job to go dead")
    assert row["failures"] == str(budget) and row["last_error"].startswith("JobTimeout")


@pytest.mark.parametrize("async_handler", [False, True], ids=["sync", "async"])
def test_cancel_during_a_run_revokes_the_lease_and_drops_the_outcome(conn, spawn, out, async_handler):
    name = fresh_name("cx")
    queue = Queue(conn, name)
    worker = spawn(name, "--lease-ms", "400", env={"EMQ_TEST_ASYNC": "1"} if async_handler else None)
    job = queue.enqueue({"hold": True})
    wait_until(lambda: started(out, job.id, 1), 10, "the job to start")
    assert queue.cancel(job.id) is True
    worker.wait_log(f'job {name}/"{job.id}" attempt 1: cancelled (Queue.cancel, emq cancel or the dashboard) '
                    "while it ran")  # the id quoted: no id can end a log line
    (out / "release").touch()
    worker.wait_log("cancelled while the handler ran; its outcome is not settled")
    assert "lease lost" not in worker.log() and "finished after all" not in worker.log()
    row = queue.job(job.id)
    assert (row["state"], row["last_error"]) == ("dead", "cancelled")
    assert queue.counts().active == 0 and processed(out) == []
    assert queue.metrics() == {"completed": 0, "failed": 1}


@pytest.mark.parametrize("payload", [b"hello world", b"NaN-ish {"], ids=["text", "broken-json"])
def test_an_undecodable_payload_goes_dead_at_once_without_retries(conn, spawn, out, payload):
    name = fresh_name("bp")
    worker = spawn(name, "--idle-max-ms", "50", env={"EMQ_TEST_MAX_ATTEMPTS": "5"})
    queue = Queue(conn, name, serializer=RAW)  # reads the row without decoding the payload
    job = queue.enqueue(payload)
    row = wait_until(lambda: is_dead(queue, job.id), 10, "the job to go dead")
    assert (row["attempts"], row["failures"]) == ("1", "1")  # one attempt of five: no retries
    assert row["last_error"].startswith("PayloadError: the payload cannot be decoded by the task's serializer")
    assert not started(out, job.id, 1)  # the handler never ran
    worker.wait_log("cannot be decoded")


def test_the_worker_timeout_flag_overrides_the_tasks(conn, spawn, out):
    name = fresh_name("tf")
    queue = Queue(conn, name)
    # the task keeps the default timeout (300 s); the flag cuts it to TIMEOUT_S
    spawn(name, *FAST, "--timeout", str(TIMEOUT_S), env={"EMQ_TEST_MAX_ATTEMPTS": "1"})
    job = queue.enqueue({"hang": True})
    row = wait_until(lambda: is_dead(queue, job.id), 10, "the hung job to go dead")
    assert row["last_error"] == f"JobTimeout: the handler ran past its timeout of {TIMEOUT_S:g} s"
    assert (row["attempts"], row["failures"]) == ("1", "1")
