"""`emq events` and `emq inspect` on the bus (docs/results.md), against real servers on both wires."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from echomq import Queue
from echomq.cli.events import events_note
from support.dataset import KEEP_MS, unchanged
from support.processes import ROOT, as_at_a_terminal
from support.queues import fresh_name


def test_events_enable_list_and_json(emq, conn):
    name = fresh_name("e")
    assert "events on" in emq("events", "-q", name, "--enable", "100", "--create").stdout
    queue = Queue(conn, name)
    job = queue.enqueue({"n": 1})
    held = queue.claim(60_000)
    queue.progress(held, {"pct": 40})
    queue.fail(held, "boom", max_attempts=1)
    lines = emq("events", "-q", name).stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["enqueued", "claimed", "progress", "failed", "dead"]
    assert "error=boom" in lines[3] and 'progress={"pct": 40}' in lines[2]
    parsed = [json.loads(line) for line in emq("events", "-q", name, "--json").stdout.splitlines()]
    assert parsed[2] == {**parsed[2], "type": "progress", "id": job.id, "attempt": 1, "progress": {"pct": 40}}
    since = emq("events", "-q", name, "--json", "--since", parsed[2]["stream_id"]).stdout.splitlines()
    assert [json.loads(line)["type"] for line in since] == ["failed", "dead"]
    assert "events off" in emq("events", "-q", name, "--disable").stdout
    queue.enqueue(2)
    assert len(emq("events", "-q", name).stdout.splitlines()) == 5


def test_events_of_a_queue_without_them_says_how_to_turn_them_on(emq, conn):
    name = fresh_name("e")
    Queue(conn, name).enqueue({})
    shown = emq("events", "-q", name)
    assert shown.exit_code == 0 and shown.stdout == "" and "--enable" in shown.stderr
    emq("events", "-q", name, "--enable", "50")
    on = emq("events", "-q", name)  # on, and nothing has moved since
    assert on.exit_code == 0 and on.stdout == "" and "events are on, the last 50 kept" in on.stderr


@pytest.mark.parametrize("args, said", [
    (("--since", "garbage"), "is not a stream id"),
    (("--enable", "100", "--disable"), "not both"),
])
def test_bad_events_options_are_usage_errors_before_the_node_is_touched(emq, server, args, said):
    name = fresh_name("e")
    with server.client() as client, unchanged(client):
        shown = emq("events", "-q", name, *args)
    assert shown.exit_code == 2 and said in shown.stderr


def test_inspect_a_completed_job_and_find_a_job_without_q(emq, conn):
    name, other = fresh_name("e"), fresh_name("e")
    queue = Queue(conn, name)
    job = queue.enqueue({"a": 1})
    queue.publish(queue.claim(60_000), {"total": 42}, retention_ms=KEEP_MS)
    shown = emq("inspect", job.id)  # no -q: found by id
    assert shown.exit_code == 0, shown.stderr
    assert "completed" in shown.stdout and '"total": 42' in shown.stdout and "kept" in shown.stdout
    pending = queue.enqueue(1, id="shared-id")
    assert "pending" in emq("inspect", pending.id).stdout
    Queue(conn, other).enqueue(1, id="shared-id")
    ambiguous = emq("inspect", "shared-id")
    assert ambiguous.exit_code == 1 and "several queues" in ambiguous.stderr and name in ambiguous.stderr
    assert "pending" in emq("inspect", "shared-id", "-q", other).stdout
    missing = emq("inspect", "no*such[id]")
    assert missing.exit_code == 1 and "in any queue" in missing.stderr


def test_events_follow_in_a_subprocess(server, conn):
    name = fresh_name("e")
    queue = Queue(conn, name)
    queue.enable_events()
    first = queue.enqueue("before")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "events", "-q", name, "--follow", "--json",
                             "--url", server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            preexec_fn=as_at_a_terminal)
    try:
        assert json.loads(proc.stdout.readline())["id"] == first.id  # what was kept, then ...
        second = queue.enqueue("after")  # ... what happens while it follows
        line = json.loads(proc.stdout.readline())
        assert (line["type"], line["id"]) == ("enqueued", second.id)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_events_follow_on_a_queue_whose_events_are_off_says_so_then_follows(server, conn):
    """It waited in silence for ever; now it says the events are off and how to turn them on, and
    shows them once they are."""
    name = fresh_name("e")
    queue = Queue(conn, name)
    queue.enqueue("untold")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "events", "-q", name, "--follow", "--json",
                             "--url", server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                            preexec_fn=as_at_a_terminal)
    try:
        said = proc.stderr.readline()
        assert f"events are off for {name}" in said and f"emq events -q {name} --enable 10000" in said
        queue.enable_events()
        told = queue.enqueue("told")
        assert json.loads(proc.stdout.readline())["id"] == told.id
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("bound, follow, kept, said", [
    (None, True, False, "events are off for q: no move is told"),
    (b"0", True, True, "events are off for q: no move is told"),
    (None, False, False, "no events in q (turn them on with: emq events -q q --enable 10000)"),
    (None, False, True, None),  # kept from before they were turned off: shown, nothing to add
    (b"50", False, False, "no events in q yet (events are on, the last 50 kept)"),
    (b"50", True, False, None),
    (b"50", False, True, None),
])
def test_events_note(bound, follow, kept, said):
    note = events_note("q", bound, follow=follow, kept=kept)
    if said is not None and said.startswith("events are off"):
        assert note.startswith(said) and "emq events -q q --enable 10000" in note
    else:
        assert note == said
