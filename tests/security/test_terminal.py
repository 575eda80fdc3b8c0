"""Nothing a job carries drives the operator's terminal or log (issue 43, item 3; docs/guarantees.md
"Job data never drives a terminal or a log"), on both wires.

An id, payload, error or event holding rich markup (``[/x]`` ends a style that is not open: rich
raised; ``[link=…]`` made a hyperlink), ESC sequences (clear the screen, set the title, an OSC 8
link) or CR/LF is shown escaped, as text, by every command that prints it; and a worker's log
line quotes the id, so a newline in it cannot forge a line. The commands run as processes with
``FORCE_COLOR`` set: rich renders as it would on a terminal, links included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from echomq import Queue
from support.processes import ROOT
from support.queues import fresh_name, take

#: an id a producer may pick (valid UTF-8, within 512 bytes), and the error and payload a job may carry
MARKUP_ID = "[link=https://evil.example]click[/link][/x]"
ESC_ID = "job-\x1b[2J\x1b]0;owned\x07"
ERROR = "[/x] boom \x1b[2J\x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\\r\nFORGED LINE"
PAYLOAD = {"note": "[/x][link=https://evil.example]x[/link]", "raw": "\x1b[2J"}
#: what must never reach the terminal from job data: the screen clear, a title set, an OSC 8 link
INJECTED = ("\x1b[2J", "\x1b]0;", "\x1b]8;", "\r\nFORGED")


def emq(url: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FORCE_COLOR="1", COLUMNS="400")
    return subprocess.run([sys.executable, "-m", "echomq.cli", *args, "--url", url], env=env, capture_output=True,
                          text=True, errors="surrogateescape", timeout=60)


def clean(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for sequence in INJECTED:
        assert sequence not in done.stdout and sequence not in done.stderr, (sequence, done.stdout)
    return done.stdout


@pytest.fixture
def hostile(conn):
    """A queue with dead jobs whose id, error and payload carry markup and escape sequences."""
    queue = Queue(conn, fresh_name("term"))
    queue.enable_events(100)
    for job_id in (MARKUP_ID, ESC_ID):
        queue.enqueue(PAYLOAD, id=job_id)
        queue.fail(take(queue), ERROR, max_attempts=1)
    return queue


def test_dead_and_inspect_show_markup_and_escapes_as_text(server, hostile):
    listed = clean(emq(server.url, "dead", "-q", hostile.name))
    assert MARKUP_ID in listed and "job-\\x1b[2J\\x1b]0;owned\\x07" in listed and "[/x] boom \\x1b[2J" in listed
    for job_id in (MARKUP_ID, "job-\\x1b[2J\\x1b]0;owned\\x07"):
        shown = clean(emq(server.url, "inspect", "--escaped", job_id, "-q", hostile.name))
        assert "[/x][link=https://evil.example]x[/link]" in shown and "\\\\u001b[2J" not in shown
        assert "\\r\\nFORGED LINE" in shown


def test_events_and_the_enqueue_echo_show_escapes_as_text(server, hostile):
    lines = clean(emq(server.url, "events", "-q", hostile.name)).splitlines()
    assert [line.split()[1] for line in lines] == ["enqueued", "claimed", "failed", "dead"] * 2
    assert "job-\\x1b[2J\\x1b]0;owned\\x07" in lines[4] and "error=[/x] boom \\x1b[2J" in lines[6]
    echoed = clean(emq(server.url, "enqueue", "-q", hostile.name, "--id", "new-\x1b[2J\r\nFORGED", "{}"))
    assert echoed.startswith("new-\\x1b[2J\\r\\nFORGED\tenqueued")


def test_sweep_and_the_refusals_name_ids_escaped(server, conn):
    queue = Queue(conn, fresh_name("term-sweep"))
    queue.enqueue({}, id=ESC_ID)
    queue.claim(1)  # a lease that runs out at once
    swept = emq(server.url, "sweep", "-q", queue.name, "--max-stalled", "5")
    assert "\\x1b[2J" in clean(swept)
    missing = emq(server.url, "remove", "-q", queue.name, "gone-\x1b[2J[/x]")
    assert missing.returncode == 1 and "gone-\\x1b[2J[/x]: no such job" in missing.stderr
    assert "\x1b[2J" not in missing.stderr


APP = '''
from echomq import App

app = App("loggy")


@app.task(queue={queue!r}, max_attempts=2, backoff=0)
def explode(payload):
    raise ValueError("bad\\nFORGED worker line")
'''


def test_a_newline_in_an_id_or_an_error_cannot_forge_a_worker_log_line(server, wire, conn, tmp_path: Path):
    queue = Queue(conn, fresh_name("term-log"))
    (tmp_path / "loggy.py").write_text(APP.format(queue=queue.name))
    queue.enqueue({}, id="evil\nINFO echomq.worker: FORGED")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "echomq.cli", "worker", "loggy:app", "--url", server.url, "--burst"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    logged = [line for line in done.stderr.splitlines() if "FORGED" in line and "Traceback" not in line]
    assert all(not line.startswith(("INFO", "FORGED")) for line in logged), done.stderr
    assert f'job {queue.name}/"evil\\nINFO echomq.worker: FORGED" attempt 1 failed (ValueError: bad\\nFORGED' \
        in done.stderr
    assert queue.counts().dead == 1
