"""Workers in the tests: timers that stay out of a test's way, an app of one task that fails when
asked, what a worker sent and where it blocks, and worker processes (`emq worker
worker_apps:make_app`) with what their handler wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from echomq import App, TimerConfig, Worker
from echomq._core.workers import WORKERS_KEY, record_key
from echomq.worker.waiter import LANES_WAKE

from .processes import ROOT, TESTS
from .waiting import Client, wait_until

#: timers that stay out of a test's way: no promote or sweep while it runs
QUIET_TIMERS = TimerConfig(promote_interval_ms=60_000, sweep_interval_ms=60_000, idle_sweep_interval_ms=60_000)


def app_of_one_task(queue: str, task: str, fails: Callable[[Any], bool], error: Exception) -> App:
    """An app whose one task, named ``task``, on ``queue``, raises (a copy of) ``error`` for the payloads
    ``fails`` picks, each of them dead at once (max_attempts=1), and does nothing for the others."""

    def handler(payload: Any) -> None:
        if fails(payload):
            raise type(error)(*error.args)

    handler.__name__ = handler.__qualname__ = task  # a task's figures go by its handler's name
    app = App()
    app.task(queue=queue, max_attempts=1)(handler)
    return app


def commands_sent(client: Client) -> int:
    """Commands clients sent (INFO commandstats): the verbs (EVALSHA on wire 4, EMQ.* on wire 6) and
    the pause read (HGET); the calls a module verb makes inside the server are left out, but a
    script's own HGETs (the event switch) count as HGETs: commandstats cannot tell them apart."""
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_hget")
               or k.startswith("cmdstat_EMQ."))


def blocked_waiters(client: Client) -> int:
    """Clients of ``client``'s node blocked in a worker's claiming wait (BZPOPMIN on wire 4,
    EMQ.BCLAIM on wire 6). A wire-6 worker also blocks in BZPOPMIN on the wake markers, the lanes'
    wake (named ``LANES_WAKE``, tests/test_lanes.py): not counted."""
    return sum(1 for c in client.client_list() if "b" in c["flags"] and c["cmd"].lower() in ("bzpopmin", "emq.bclaim")
               and c.get("name") != LANES_WAKE)


def processed(out: Path) -> list[tuple[str, int, int]]:
    """The lines the test handler wrote: (id, attempt, pid) per run that returned."""
    path = out / "processed.log"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job_id, attempt, pid = line.split()
        rows.append((job_id, int(attempt), int(pid)))
    return rows


def started(out: Path, job_id: str, attempt: int) -> bool:
    return (out / f"started-{job_id}-{attempt}").exists()


class WorkerProcess:
    """One `emq worker worker_apps:make_app` (or ``app``) process serving ``queue``; its log is kept in ``out``."""

    def __init__(self, url: str, wire: int, queue: str, out: Path, *args: str, env: dict | None = None,
                 app: str = "worker_apps:make_app") -> None:
        self.log_path = out / f"worker-{time.monotonic_ns()}.log"
        environment = dict(os.environ, EMQ_TEST_QUEUE=queue, EMQ_TEST_OUT=str(out), **(env or {}))
        environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), environment.get("PYTHONPATH", "")])
        command = [sys.executable, "-m", "echomq.cli", "worker", app, "--url", url,
                   "--wire", str(wire), *args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=TESTS)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 10.0) -> None:
        wait_until(lambda: text in self.log() or self.process.poll() is not None, timeout, f"{text!r} in the log")
        assert text in self.log(), f"the worker exited ({self.process.returncode}) without logging {text!r}:\n{self.log()}"

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 15.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pid} did not exit in {timeout}s:\n{self.log()}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


@contextmanager
def running(worker: Worker, join_s: float = 10.0) -> Iterator[Worker]:
    """``worker`` runs on a thread of this process until the block ends; then it stops, within ``join_s``."""
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop("test over")
        thread.join(join_s)
        assert not thread.is_alive()


def forget_heartbeats(client: Client, pids: set[int]) -> None:
    """Delete the heartbeat records of killed workers (``host:pid:tag`` ids): left alone they would
    expire during a later test on the shared server and change its dataset under a digest check."""
    for member in client.smembers(WORKERS_KEY):
        worker_id = member.decode()
        if int(worker_id.split(":")[-2]) in pids:
            client.delete(record_key(worker_id))
            client.srem(WORKERS_KEY, worker_id)
