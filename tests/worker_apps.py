"""Apps that `emq worker` runs in the worker tests, configured by environment variables.

EMQ_TEST_QUEUE names the queue (or several, comma-separated), EMQ_TEST_OUT a directory the handler reports into:

* ``processed.log`` -- one line ``id attempt pid`` per handler run that returned;
* ``started-<id>-<attempt>`` -- written when a run starts (tests wait for it);
* a job whose payload has ``"hold": true`` runs until ``release`` appears in the
  directory, so a test can kill or stop a worker mid-job; told its lease is lost,
  it stops without recording anything.

A payload's ``"fail": n`` makes its first n attempts raise; ``"hang": true`` makes every
attempt hang without ever looking at its lease (the timeout must end it); ``"progress": v``
reports v through ``ctx.progress`` (sync handler); ``"lane": g, "seq": n`` (a lane job) records
``lanes.log`` lines ``group seq start_ns end_ns id``, after ``"work_ms"`` of work. A run that returns returns
``{"echo": payload's "echo", "attempt": n}``: the job's result.
EMQ_TEST_TIMEOUT sets the task's timeout (seconds); EMQ_TEST_PARTITIONS its queues' partitions; EMQ_TEST_RATE
its ``rate_limit`` (``50/s``). EMQ_TEST_CRON makes the queue a periodic job too (``app.cron``, payload ``{}``).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from echomq import App
from echomq.worker.policy import Backoff
from echomq.worker.tasks import DEFAULT_TIMEOUT_S


def _out() -> Path:
    return Path(os.environ["EMQ_TEST_OUT"])


def _record(name: str, line: str = "") -> None:
    fd = os.open(_out() / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: whole lines even from many processes
    finally:
        os.close(fd)


def run(payload, ctx):
    began_ns = time.time_ns()
    _record(f"started-{ctx.id}-{ctx.attempt}")
    while payload.get("hang"):
        time.sleep(0.05)  # a hung handler: it never checks ctx.lease_lost
    if payload.get("hold"):
        while not (_out() / "release").exists() and not ctx.lease_lost:
            time.sleep(0.01)  # the handler's own work, not test synchronisation
        if ctx.lease_lost:
            return  # a well-behaved handler stops once told: nothing it did would count
    if "progress" in payload:
        ctx.progress(payload["progress"])
    if ctx.attempt <= payload.get("fail", 0):
        raise RuntimeError(f"planned failure {ctx.attempt}")
    if "lane" in payload:  # a lane job: its own start and end, for the ordering checks
        time.sleep(payload.get("work_ms", 0) / 1000)  # the handler's work, not test synchronisation
        _record("lanes.log", f"{payload['lane']} {payload['seq']} {began_ns} {time.time_ns()} {ctx.id}\n")
    _record("processed.log", f"{ctx.id} {ctx.attempt} {os.getpid()}\n")
    return {"echo": payload.get("echo"), "attempt": ctx.attempt}


async def run_async(payload, ctx):
    _record(f"started-{ctx.id}-{ctx.attempt}")
    if payload.get("hang"):
        await asyncio.Event().wait()  # never set: only cancellation ends it
    while payload.get("hold") and not (_out() / "release").exists():
        await asyncio.sleep(0.01)
    if ctx.attempt <= payload.get("fail", 0):
        raise RuntimeError(f"planned failure {ctx.attempt}")
    _record("processed.log", f"{ctx.id} {ctx.attempt} {os.getpid()}\n")


def make_app() -> App:
    app = App("tests")
    handler = run_async if os.environ.get("EMQ_TEST_ASYNC") else run
    for name in os.environ["EMQ_TEST_QUEUE"].split(","):
        app.handler(name, handler, max_attempts=int(os.environ.get("EMQ_TEST_MAX_ATTEMPTS", "3")),
                    backoff=Backoff(base_ms=20, max_ms=200, jitter=0.0),
                    timeout=float(os.environ.get("EMQ_TEST_TIMEOUT", DEFAULT_TIMEOUT_S)),
                    partitions=int(os.environ.get("EMQ_TEST_PARTITIONS", "1")),
                    rate_limit=os.environ.get("EMQ_TEST_RATE"))
    if os.environ.get("EMQ_TEST_CRON"):
        app.cron(os.environ["EMQ_TEST_CRON"], queue=os.environ["EMQ_TEST_QUEUE"], payload={})
    return app
