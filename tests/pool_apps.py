"""The app the process-pool tests run (tests/test_process_pool.py): at a module's top level, so each
child of the pool loads it by its name (``pool_apps:app``). A payload's ``"out"`` is a directory the
handler records into (the fork server imports this module once, so no environment variable reaches
a test's children)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from echomq import App, AppState, JobContext

app = App("pool-tests")
_LEAKED: list[bytes] = []  #: what the leaky handler keeps, in its child


@app.on_startup
def remember(state: AppState) -> None:
    state.pid = os.getpid()  # this process's: a child's own startup hook ran in it


def _record(payload: dict[str, Any], name: str, text: str = "") -> None:
    Path(payload["out"], name).write_text(text)


@app.task(queue="pool-spin", timeout=1, max_attempts=1, pool="process")
def spin(payload: dict[str, Any]) -> None:
    if payload.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it now
    _record(payload, f"spin-{os.getpid()}")
    if payload.get("in_c"):  # a loop in C that holds the GIL: no thread of the child runs again
        re.match(r"(a+)+$", "a" * 64 + "b")
    while True:  # an infinite loop that never looks at its lease: only a kill ends it
        pass


@app.task(queue="pool-work", pool="process")
def work(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    if "follow" in payload:
        ctx.producer(payload["follow"]).enqueue({"from": ctx.id}, id=f"{ctx.id}-next")
    if payload.get("exit"):
        os._exit(3)  # the child dies mid-job, as a crash in C code would end it
    if payload.get("hold"):
        if "progress" in payload:
            ctx.progress(payload["progress"])
        _record(payload, f"holding-{ctx.id}", str(os.getpid()))
        while not ctx.lease_lost:
            time.sleep(0.01)  # the handler's own work, not test synchronisation
        _record(payload, f"told-lost-{ctx.id}")
        return {}
    if "leak_mb" in payload:
        _LEAKED.append(b"\x01" * (payload["leak_mb"] << 20))  # written, so resident
    if payload.get("fail"):
        raise RuntimeError("planned failure in a child")
    return {"pid": os.getpid(), "state_pid": ctx.state.pid}


@app.task(queue="pool-plain")
def plain(payload: dict[str, Any]) -> int:
    return os.getpid()  # the worker's pool's (thread, unless the worker says process)


app.handler("pool-once", work, max_attempts=1, pool="process")  # its failures are dead at once


class Unloadable(Exception):
    """An exception pickle writes but cannot read back (its __init__ wants other arguments than its args)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(f"{code}: {why}")


@app.task(queue="pool-odd", max_attempts=1, pool="process")
def odd(payload: dict[str, Any]) -> Any:
    if payload.get("unloadable"):
        raise Unloadable(7, "odd")
    return threading_lock()  # a return value pickle cannot write


def threading_lock() -> Any:
    import threading

    return threading.Lock()


#: an app whose children cannot start: its startup hook raises in a child of the pool (and runs in the worker)
failing_app = App("pool-tests-failing")
failing_app.handler("pool-never", work, pool="process")
failing_app.on_shutdown(lambda state: setattr(state, "shut", True))


@failing_app.on_startup
def no_database_in_a_child(state: AppState) -> None:
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        raise RuntimeError("no database in a child")


@app.task(queue="pool-named", pool="process")
def add(a: int, b: int, ctx: JobContext) -> list[int]:
    return [a + b, os.getpid(), ctx.attempt]  # a named task's call, its context where it stands


@app.task(queue="pool-named", pool="process")
def scale(a: int, *, by: int = 2) -> int:
    return a * by
