"""Loading an app is loading an app (issue 43, item 7; the section of that name in docs/guarantees.md).

``emq worker MODULE:APP`` calls nothing but an App factory of MODULE: ``os:fork``, a builtin, a
function MODULE imported from elsewhere or one annotated to return something else is refused
before it runs. The current directory comes after the standard library on ``sys.path`` (a
``./imaplib.py`` no longer stands in for the standard library's, and is named). A process a
handler forks cannot live on as a copy of the worker that ignores SIGTERM: it exits where its
handler returns, and SIGTERM ends it while it runs (on both wires)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from echomq import Queue
from support.processes import ROOT, reap
from support.queues import fresh_name
from support.waiting import wait_until

CALLED = "called.txt"  #: what a refused target writes if it runs after all
HELPER = f'''
def make_app():
    open({CALLED!r}, "w").write("called")
'''
MYAPP = f'''
from os import fork
from echomq import App
from helper import make_app as imported_factory

app = App("myapp")


def make_text() -> str:
    open({CALLED!r}, "w").write("called")
    return "not an app"


def make_app() -> "App":
    return app
'''


def worker(cwd: Path, spec: str, *args: str, url: str = "redis://127.0.0.1:1") -> subprocess.CompletedProcess:
    """``emq worker SPEC`` as the console script runs it (not ``python -m``, which puts the current
    directory first before any of EchoMQ's code runs)."""
    emq = Path(sys.executable).parent / "emq"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([str(emq), "worker", spec, "--url", url, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "myapp.py").write_text(MYAPP)
    return tmp_path


@pytest.mark.parametrize("spec,says", [
    ("os:fork", "'os' is the standard library's, not an app"),
    ("tempfile:mkdtemp", "'tempfile' is the standard library's, not an app"),
    ("myapp:fork", "myapp:fork is a builtin_function_or_method (only a function of the app's module is called)"),
    ("myapp:imported_factory", "myapp:imported_factory is a function of 'helper'"),
    ("myapp:make_text", "myapp:make_text is a function that returns 'str'"),
])
def test_what_is_not_an_app_factory_is_refused_before_it_runs(here, spec, says):
    done = worker(here, spec)
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (here / CALLED).exists()
    assert done.stderr.count("Error:") == 1  # one process said it: nothing forked


def test_the_app_s_own_factory_still_runs(here):
    done = worker(here, "myapp:make_app")
    assert done.returncode == 1 and "no Valkey answers" in done.stderr, done.stderr  # loaded; the node is not there


SHADOW = f'''
open({CALLED!r}, "w").write("a module of the current directory was imported for the standard library's")
'''


def test_the_current_directory_does_not_shadow_the_standard_library(here):
    (here / "imaplib.py").write_text(SHADOW)
    (here / "myapp.py").write_text(MYAPP + "\nimport imaplib\n")
    done = worker(here, "myapp:app")
    assert not (here / CALLED).exists(), done.stderr
    assert "./imaplib.py is not imported as `imaplib`" in done.stderr
    named = worker(here, "imaplib:app")
    assert named.returncode == 2 and "./imaplib.py is not imported under a name the standard library has" \
        in named.stderr


FORKING = '''
import os
import time

from echomq import App

app = App("forking")


@app.task(queue={queue!r})
def forks(payload):
    if os.fork() == 0:  # the child: it records itself, then returns (a bug) or blocks
        mark = os.path.join({out!r}, f"child-{{os.getpid()}}")
        with open(mark + ".tmp", "w") as written:  # renamed when whole: the test reads no empty mark
            written.write(payload["then"])
        os.rename(mark + ".tmp", mark)
        if payload["then"] == "blocks":
            time.sleep(3600)
        return "the child returned into the worker"
    return "parent"
'''


def state_of(pid: int) -> str:
    """The process's state letter from /proc (Z: exited, not reaped), or 'gone'."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def ended(pid: int) -> bool:
    return state_of(pid) in ("Z", "gone")


def test_a_process_a_handler_forks_ends_and_obeys_sigterm(server, wire, conn, tmp_path: Path):
    queue = Queue(conn, fresh_name("forks"))
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "forking.py").write_text(FORKING.format(queue=queue.name, out=str(out)))
    queue.enqueue({"then": "returns"})
    queue.enqueue({"then": "blocks"})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "worker", "forking:app", "--url", server.url],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(list(out.glob("child-*[0-9]"))) == 2, what="both handlers to fork")
        children = {int(mark.name.split("-")[1]): mark.read_text() for mark in out.glob("child-*[0-9]")}
        returned, blocked = (next(pid for pid, then in children.items() if then == kind) for kind in ("returns",
                                                                                                    "blocks"))
        wait_until(lambda: queue.counts().pending + queue.counts().active == 0, what="both jobs to complete")
        wait_until(lambda: ended(returned), what="the child that returned into the worker to exit")
        assert not ended(blocked)
        os.kill(blocked, signal.SIGTERM)
        wait_until(lambda: ended(blocked), what="the blocked child to end on SIGTERM")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "forked by a handler, came back to the worker: it exits here" in proc.stderr.read()
    finally:  # every process that forked (a copy of the worker left on would fork again), SIGKILLed if it lives
        for mark in out.glob("child-*"):
            if not ended(pid := int(mark.name.split("-")[1].removesuffix(".tmp"))):
                os.kill(pid, signal.SIGKILL)
        reap(proc)
