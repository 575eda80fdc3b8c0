"""`emq worker --processes N` (echomq/worker/supervisor.py): its decisions without processes, then real
supervisors over real `emq worker` processes: every job once across them, a killed process
started again, SIGTERM passed on once, the burst's exit code, and no process left behind by a
supervisor that was killed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from echomq import Queue
from echomq.cli import main
from echomq.cli.worker import worker_commands
from echomq.worker.supervisor import Exit, RestartPolicy, after_exit, how_it_ended, restart_delay_s
from support.dataset import unchanged
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import processed

POLICY = RestartPolicy(first_s=0.5, max_s=30.0, healthy_s=30.0)


def test_a_process_that_keeps_dying_young_waits_longer_each_time_and_a_healthy_one_not_at_all():
    assert [restart_delay_s(POLICY, n) for n in range(9)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    young = dict(returncode=1, stopping=False, burst=False)
    assert after_exit(POLICY, lived_s=0.2, young_deaths=0, **young) == Exit(0.5, 1)
    assert after_exit(POLICY, lived_s=0.2, young_deaths=3, **young) == Exit(4.0, 4)
    assert after_exit(POLICY, lived_s=45.0, young_deaths=3, **young) == Exit(0.0, 0)  # lived: the count restarts
    # exit 0 by itself (--max-jobs): a fresh one at once, however young
    assert after_exit(POLICY, returncode=0, lived_s=0.2, young_deaths=3, stopping=False, burst=False) == Exit(0.0, 0)
    assert after_exit(POLICY, returncode=-9, lived_s=0.2, young_deaths=3, stopping=True, burst=False) == Exit(None, 3)
    assert after_exit(POLICY, returncode=0, lived_s=45.0, young_deaths=0, stopping=False, burst=True) == Exit(None, 0)


def test_how_an_exit_reads():
    assert how_it_ended(0) == "exited with 0" and how_it_ended(3) == "exited with 3"
    assert how_it_ended(-9) == "was killed by SIGKILL"


def params_of(*args: str) -> dict:
    command = main.commands["worker"]
    return command.make_context("worker", list(args)).params


def test_each_process_gets_these_options_but_processes_and_url_and_a_port_of_its_own():
    params = params_of("app:app", "--url", "redis://:secret@db:6379", "-q", "a", "-q", "b", "-c", "3", "--burst",
                       "--timeout", "5", "--metrics-port", "9100", "-p", "3")
    commands = worker_commands(params, cluster=True)
    assert len(commands) == 3
    for index, command in enumerate(commands):
        args = command[command.index("worker") + 1:]
        assert args[:2] == ["app:app", "--cluster"]
        assert "secret" not in " ".join(command) and "--url" not in args  # EMQ_URL: off the command line
        assert "--processes" not in args and "-p" not in args
        assert "--burst" in args and args.count("--queue") == 2
        assert args[args.index("--concurrency") + 1] == "3" and args[args.index("--timeout") + 1] == "5.0"
        assert args[-2:] == ["--metrics-port", str(9100 + index)]
    free_ports = worker_commands(params_of("app:app", "--metrics-port", "0", "-p", "2"), cluster="auto")
    assert [c[-1] for c in free_ports] == ["0", "0"] and all("--cluster" not in c for c in free_ports)
    assert all("--metrics-port" not in c for c in worker_commands(params_of("app:app", "-p", "2"), "auto"))


def children_of(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (from /proc; a zombie is not live)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_processes_share_the_queue_a_killed_one_is_started_again_and_sigterm_stops_them_all(conn, spawn, out):
    name = fresh_name("sup")
    queue = Queue(conn, name)
    first = {job.id for job in queue.enqueue_many([{"n": n} for n in range(200)])}
    supervisor = spawn(name, "--processes", "2", "-c", "4")
    supervisor.wait_log("2 worker processes")
    wait_until(lambda: queue.metrics()["completed"] == 200, 30, "200 completions")
    children = wait_until(lambda: len(children_of(supervisor.pid)) == 2 and children_of(supervisor.pid))
    rows = processed(out)
    assert sorted(job_id for job_id, _, _ in rows) == sorted(first)  # each once across the processes
    assert {pid for _, _, pid in rows} <= children and supervisor.pid not in {pid for _, _, pid in rows}

    victim = min(children)
    os.kill(victim, signal.SIGKILL)
    supervisor.wait_log(f"worker process {victim} was killed by SIGKILL")
    replaced = wait_until(lambda: len(children_of(supervisor.pid) - children) == 1
                          and children_of(supervisor.pid) - children, 20, "a process in place of the killed one")
    (newcomer,) = replaced
    supervisor.wait_log(f"worker {newcomer}: queues")
    second = {job.id for job in queue.enqueue_many([{"n": n} for n in range(200)])}
    wait_until(lambda: queue.metrics()["completed"] == 400, 30, "400 completions")
    assert sorted(job_id for job_id, _, _ in processed(out)) == sorted(first | second)

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0
    log = supervisor.log()
    assert log.count("SIGTERM: passed on") == 1 and log.count("SIGTERM: no more claims") == 2
    assert not any(alive(pid) for pid in children | replaced)
    assert queue.counts().total == 0


def test_max_jobs_retires_each_process_and_the_supervisor_starts_a_fresh_one_at_once(conn, spawn, out):
    name = fresh_name("sup-recycle")
    queue = Queue(conn, name)
    ids = {job.id for job in queue.enqueue_many([{"n": n} for n in range(60)])}
    supervisor = spawn(name, "--processes", "2", "--max-jobs", "15", "-c", "2")
    wait_until(lambda: queue.metrics()["completed"] == 60, 60, "60 completions")
    rows = processed(out)
    assert sorted(job_id for job_id, _, _ in rows) == sorted(ids)  # each once, none lost to a retirement
    runs = {}
    for _, _, pid in rows:
        runs[pid] = runs.get(pid, 0) + 1
    assert len(runs) >= 4 and max(runs.values()) <= 15, runs  # 15 at most a process, then a fresh one
    log = supervisor.log()
    assert "its --max-jobs: no more claims" in log and "exited with 0 after" in log and "starting another in 0.0 s" in log
    assert "requeued" not in log  # a retirement lets its jobs finish
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0


def test_burst_processes_exit_when_the_queue_is_empty_and_the_code_says_so(conn, spawn, out):
    name = fresh_name("sup-burst")
    queue = Queue(conn, name)
    queue.enqueue_many([{"n": n} for n in range(50)])
    supervisor = spawn(name, "--processes", "2", "--burst")
    assert supervisor.wait(30) == 0, supervisor.log()
    assert queue.metrics()["completed"] == 50 and supervisor.log().count("exited with 0") == 2


def test_a_killed_supervisor_leaves_no_worker_process_running(conn, spawn, out):
    name = fresh_name("sup-orphan")
    supervisor = spawn(name, "--processes", "2")
    supervisor.wait_log("2 worker processes")
    children = wait_until(lambda: len(children_of(supervisor.pid)) == 2 and children_of(supervisor.pid))
    for pid in children:
        supervisor.wait_log(f"worker {pid}: queues")  # its SIGTERM handler is in: it stops gracefully
    supervisor.kill()
    wait_until(lambda: not any(alive(pid) for pid in children), 20, "the orphaned processes to stop")
    assert supervisor.log().count("SIGTERM: no more claims") == 2  # from the kernel: a graceful stop


@pytest.mark.parametrize("args, message", [
    (("--processes", "0"), "0 is not in the range x>=1"),
    (("--processes", "3", "--metrics-port", "65534"), "past 65535"),
])
def test_bad_process_options_are_refused_before_anything_starts(conn, spawn, args, message):
    with unchanged(conn.client):
        refused = spawn(fresh_name("sup-bad"), *args)
        assert refused.wait() == 2 and message in refused.log()
        assert "worker process" not in refused.log()
