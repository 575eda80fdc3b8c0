"""`emq`: every command against real servers, and clear errors on bad input with nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import valkey
from click.testing import CliRunner

from echomq import App, EmbeddedServer, Flow, Queue, State, brand_node, connect, module_path
from echomq.cli import main
from echomq.worker.heartbeat import Heartbeat
from echomq.local.server import free_port
from support.dataset import unchanged
from support.processes import ROOT, reap
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past, wait_until


@pytest.fixture
def name():
    return fresh_name("c")


def test_enqueue_then_stats_inspect_and_the_wire_auto_detected(emq, conn, name):
    result = emq("enqueue", "-q", name, '{"to": "ada"}', '{"to": "bob"}')
    assert result.exit_code == 0, result.output
    ids = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert len(ids) == 2
    queue = Queue(conn, name)
    assert queue.counts().pending == 2 and queue.job(ids[0])["payload"] == {"to": "ada"}

    stats = emq("stats", "-q", name)
    assert stats.exit_code == 0 and name in stats.stdout
    (row,) = [line.split() for line in stats.stdout.splitlines() if line.split()[:1] == [name]]
    assert row[1:5] == ["2", "0", "0", "0"]  # pending, active, scheduled, dead

    shown = emq("inspect", ids[1], "-q", name)
    assert shown.exit_code == 0 and "pending" in shown.stdout and '"to": "bob"' in shown.stdout


def test_stats_without_a_queue_finds_every_queue_and_watch_shows_rates(emq, conn, name):
    Queue(conn, name).enqueue({})
    assert name in emq("stats").stdout
    watched = emq("stats", "-q", name, "--watch", "--times", "2", "--interval", "0.05")
    assert watched.exit_code == 0 and "wire " in watched.stdout
    # not a terminal: each sample is printed as it is taken (a live redraw showed nothing until the end)
    assert watched.stdout.count("EchoMQ queues on") == 2 and "done/s" in watched.stdout


def test_enqueue_options_id_priority_delay_count_raw(emq, conn, name):
    queue = Queue(conn, name)
    assert emq("enqueue", "-q", name, "--id", "order-1", "{}").exit_code == 0
    again = emq("enqueue", "-q", name, "--id", "order-1", "{}")
    assert "exists (not enqueued again)" in again.stdout
    assert emq("enqueue", "-q", name, "--priority", "5", "--count", "3", '{"x": 1}').exit_code == 0
    assert emq("enqueue", "-q", name, "--delay-ms", "60000", "{}").exit_code == 0
    assert emq("enqueue", "-q", name, "--raw", "plain text").exit_code == 0
    assert emq("enqueue", "-q", name, "--group", "tenant-7", "--priority", "3", "--count", "2").exit_code == 0
    assert emq("enqueue", "-q", name, "--group", "tenant-7", "--id", "first", "{}").exit_code == 0
    counts = queue.counts()
    assert (counts.pending, counts.scheduled, counts.lane_pending) == (5, 1, 3)
    assert queue.groups()["tenant-7"].waiting == 3
    assert [job.id for job in queue.claim_lanes(1, 60_000)] == ["first"]  # priority 0 before 3


@pytest.mark.parametrize("args, message", [
    (("enqueue", "-q", "QUEUE", "{bad json"), "is not standard JSON"),
    (("enqueue", "-q", "QUEUE", "{}", "[1, 2"), "is not standard JSON"),
    (("enqueue", "-q", "QUEUE", "{}", "NaN"), "NaN is not standard JSON"),
    (("enqueue", "-q", "QUEUE", '{"x": Infinity}'), "Infinity is not standard JSON"),
    (("enqueue", "-q", "QUEUE", "{}", '{"x": -Infinity}'), "-Infinity is not standard JSON"),
    (("enqueue", "-q", "QUEUE", "--max-payload-bytes", "8", "{}", '{"big": 1}'), "over the limit of 8"),
    (("enqueue", "-q", "QUEUE", "--raw", "--max-payload-bytes", "4", "hello"), "is 5 bytes, over the limit of 4"),
    (("remove", "-q", "QUEUE", "x" * 600), "bad job id"),
    (("cancel", "-q", "QUEUE", "x" * 600), "bad job id"),
    (("enqueue", "-q", "QUEUE", "--id", "x", "{}", "{}"), "--id names one job"),
    (("enqueue", "-q", "QUEUE", "--group", "t", "--priority", "1024", "{}"), "bad lane_priority 1024"),
    (("enqueue", "-q", "QUEUE", "--group", "bad{group}", "{}"), "bad group"),
    (("enqueue", "-q", "QUEUE", "--group", "t", "--delay-ms", "5", "{}"), "takes no --delay-ms"),
    (("enqueue", "-q", "bad{queue}", "{}"), "bad queue name"),
    (("stats", "-q", "bad{queue}"), "bad queue name"),
    (("pause", "-q", ""), "bad queue name"),
    (("inspect", "x" * 600, "-q", "QUEUE"), "bad job id"),
    (("reprocess", "-q", "QUEUE", "x" * 600), "bad job id"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(emq, server, name, args, message):
    with server.client() as client, unchanged(client):
        result = emq(*(name if a == "QUEUE" else a for a in args))
    assert result.exit_code == 1 and message in result.stderr, result.output
    assert "Traceback" not in result.output


def test_bad_url_missing_server_unbranded_node_and_the_wrong_wire(emq, server, wire, name):
    bad = emq("stats", url="http://example.com")
    assert bad.exit_code == 1 and "bad URL" in bad.stderr
    missing = emq("stats", url=f"redis://127.0.0.1:{free_port()}")
    assert missing.exit_code == 1 and "no Valkey answers" in missing.stderr and "EMQ_URL" in missing.stderr
    other = 4 if wire == 6 else 6
    wrong = CliRunner().invoke(main, ["stats", "--url", server.url, "--wire", str(other)])
    assert wrong.exit_code == 1
    assert ("branded" in wrong.stderr) or ("EMQ.VERSION" in wrong.stderr), wrong.stderr
    with EmbeddedServer() as bare:
        unbranded = emq("enqueue", "-q", name, "{}", url=bare.url)
        assert unbranded.exit_code == 1 and "not branded" in unbranded.stderr and "emq brand" in unbranded.stderr
        with bare.client() as client:
            assert client.dbsize() == 0
            brand_node(client, 4)  # database 0 only: database 1 of the same node is still unbranded
        other_database = emq("enqueue", "-q", name, "{}", url=f"{bare.url}/1")
        assert other_database.exit_code == 1 and "each database carries its own brand" in other_database.stderr


def test_brand_once_and_never_the_other_wire():
    runner = CliRunner()
    with EmbeddedServer(module=module_path()) as node:
        first = runner.invoke(main, ["brand", node.url, "--wire", "4"])
        assert first.exit_code == 0 and "echomq:4.0.0" in first.stdout
        assert runner.invoke(main, ["brand", node.url, "--wire", "4"]).exit_code == 0  # idempotent
        with node.client() as client, unchanged(client):
            other = runner.invoke(main, ["brand", node.url, "--wire", "6"])
        assert other.exit_code == 1 and "already branded" in other.stderr and "--replace" in other.stderr
        assert runner.invoke(main, ["stats", "--url", node.url]).exit_code == 0
        replaced = runner.invoke(main, ["brand", node.url, "--wire", "6", "--replace"])  # no EchoMQ data yet
        assert replaced.exit_code == 0 and "echomq:6.0.0" in replaced.stdout


def test_brand_wire_6_is_refused_on_a_node_without_trafikey():
    runner = CliRunner()
    with EmbeddedServer() as bare, bare.client() as client:
        with unchanged(client):
            refused = runner.invoke(main, ["brand", bare.url, "--wire", "6"])
        assert refused.exit_code == 1 and "trafikey" in refused.stderr and "--loadmodule" in refused.stderr
        assert "emq brand URL --wire 4" in refused.stderr and "Traceback" not in refused.output
        assert client.dbsize() == 0


def test_dead_lists_and_reprocess_sends_back(emq, conn, name):
    queue = Queue(conn, name)
    jobs = [queue.enqueue({"n": n}) for n in range(3)]
    for _ in jobs:
        queue.fail(queue.claim(10_000), "boom: bad row", max_attempts=1)
    listed = emq("dead", "-q", name)
    assert listed.exit_code == 0 and "dead in" in listed.stdout and "boom: bad row" in listed.stdout
    assert all(j.id in listed.stdout for j in jobs)
    row = next(line for line in listed.stdout.splitlines() if jobs[0].id in line)
    assert [cell.strip() for cell in row.split("│")[2:5]] == ["1", "1", "0"]  # attempts, failures, stalled (absent: 0)

    one = emq("reprocess", "-q", name, jobs[0].id, "no-such-job")
    assert one.exit_code == 1 and "reprocessed 1 job(s)" in one.stdout and "no-such-job: not in dead" in one.stderr
    assert queue.state(jobs[0].id).value == "pending"
    queue.enqueue({"n": 3}, group="g", id="lane-job")
    (lane_job,) = queue.claim_lanes(1, 10_000)
    queue.fail(lane_job, "boom", max_attempts=1)
    assert "reprocessed 3 job(s)" in emq("reprocess", "-q", name, "--all").stdout
    assert queue.counts().pending == 3 and queue.counts().dead == 0
    assert queue.state("lane-job").value == "pending" and queue.groups()["g"].waiting == 1  # in its lane, not flat
    assert emq("reprocess", "-q", name).exit_code == 2  # neither ids nor --all: a usage error


def test_reprocess_all_takes_the_dead_its_filters_choose(emq, conn, name):
    """--all with --task (the name a job's headers carry), --error and ages moves those dead jobs
    alone; a filter without --all is refused and writes nothing."""
    app = App("shop", queue=name).connect(conn)

    @app.task
    def send_email(to: str) -> None: ...

    @app.task
    def bill(amount: int) -> None: ...

    queue = Queue(conn, name)
    mail, invoice = send_email.delay("ada").id, bill.delay(5).id
    plain = queue.enqueue({"n": 1}).id  # no headers: no task's
    for error in ("SMTPError: refused", "CardError: declined", "SMTPError: timeout"):
        queue.fail(queue.claim(10_000), error, max_attempts=1)
    with unchanged(conn.client):
        refused = emq("reprocess", "-q", name, mail, "--task", "send_email")
    assert refused.exit_code == 1 and "--task choose among every dead job: pass --all" in refused.stderr
    by_task = emq("reprocess", "-q", name, "--all", "--task", "send_email", "--json")
    assert by_task.exit_code == 0 and json.loads(by_task.stdout)["reprocessed"] == [mail]
    assert queue.state(mail) is State.PENDING and queue.state(invoice) is queue.state(plain) is State.DEAD
    by_error = emq("reprocess", "-q", name, "--all", "--error", "smtperror", "--json")
    assert json.loads(by_error.stdout)["reprocessed"] == [plain]  # any case; the mail was not dead any more
    too_young = emq("reprocess", "-q", name, "--all", "--min-age", "1h")
    assert "reprocessed 0 job(s)" in too_young.stdout and queue.state(invoice) is State.DEAD
    assert "reprocessed 1 job(s)" in emq("reprocess", "-q", name, "--all", "--max-age", "1h").stdout
    assert queue.counts().dead == 0


def test_pause_resume_promote_and_sweep_once(emq, conn, name):
    queue = Queue(conn, name)
    assert "paused" in emq("pause", "-q", name, "--create").stdout and queue.counts().paused
    assert "(paused)" in emq("stats", "-q", name).stdout
    assert "resumed" in emq("resume", "-q", name).stdout and not queue.counts().paused

    queue.schedule({}, 0)
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    assert "promoted 1 job(s)" in emq("promote", "-q", name).stdout
    job = queue.claim(1)
    wait_server_past(conn.client, conn.client.zscore(queue.keys.active, job.id))
    swept = emq("sweep", "-q", name, "--max-stalled", "2")
    assert "recovered 1" in swept.stdout and job.id in swept.stdout
    assert queue.state(job.id).value == "pending"


def test_inspect_a_held_job_shows_its_lease_and_a_missing_one_is_an_error(emq, conn, name):
    queue = Queue(conn, name)
    queue.enqueue({"a": 1})
    job = queue.claim(60_000)
    shown = emq("inspect", job.id, "-q", name)
    assert "active" in shown.stdout and "expires in" in shown.stdout
    missing = emq("inspect", "nope", "-q", name)
    assert missing.exit_code == 1 and "no job 'nope'" in missing.stderr


def test_inspect_shows_the_last_failures_traceback_and_the_rows_times(emq, conn, name):
    queue = Queue(conn, name)
    queue.enqueue({"a": 1})
    trace = ('Traceback (most recent call last):\n  File "jobs.py", line 9, in send\n'
             "    [red]raise[/red] KeyError\nKeyError")
    job = queue.claim(60_000)
    queue.fail(job, "KeyError", max_attempts=1, traceback=trace)
    shown = emq("inspect", job.id, "-q", name)
    assert shown.exit_code == 0 and "KeyError" in shown.stdout
    assert all(line.strip() in shown.stdout for line in trace.splitlines())  # as stored: no markup read
    for field in ("created", "started", "failed"):
        assert any(line.split()[1:2] == [field] and "ago (" in line for line in shown.stdout.splitlines()), field
    assert json.loads(emq("inspect", job.id, "-q", name, "--json").stdout)["traceback"] == trace


def test_module_path_and_a_bad_app_spec():
    runner = CliRunner()
    result = runner.invoke(main, ["module-path"])
    assert result.exit_code == 0 and result.stdout.strip() == module_path()
    bad = runner.invoke(main, ["worker", "no_such_module_here:app"])
    assert bad.exit_code == 2 and "cannot import 'no_such_module_here'" in bad.stderr
    shape = runner.invoke(main, ["worker", "no-colon"])
    assert shape.exit_code == 2 and "expected module:app" in shape.stderr


@pytest.mark.parametrize("source, said", [
    ("def broken(:\n", "does not compile: invalid syntax"),
    ("import json\nSETTINGS = json.loads('{oops')\n", "raised JSONDecodeError"),
])
def test_a_tasks_module_that_fails_to_import_is_one_line_naming_where(tmp_path, monkeypatch, source, said):
    (tmp_path / "broken_tasks.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "broken_tasks", raising=False)
    bad = CliRunner().invoke(main, ["worker", "broken_tasks:app"])
    assert bad.exit_code == 2 and said in bad.stderr and "broken_tasks.py" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("wire_arg", ["4", "6"])
def test_server_runs_until_sigterm(tmp_path, wire_arg):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # a relative --dir, as typed in a project: the server once failed to open its log there
    argv = [sys.executable, "-m", "echomq.cli", "server", "--wire", wire_arg, "--aof", "--dir", "data"]
    for run, pending in (("first", 0), ("again", 1)):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            line, data = proc.stdout.readline(), proc.stdout.readline()
            assert f", wire {wire_arg}" in line, line + proc.stderr.read()
            # a directory it made is said to be new: a mistyped --dir shows, not a server that lost its jobs
            assert f"jobs survive a restart: AOF everysec in {tmp_path / 'data'}" in data, data
            assert ("(a new directory: no jobs yet)" in data) == (run == "first"), data
            port = int(line.split("redis://127.0.0.1:")[1].split(",")[0])  # a free port: it chose one
            url = f"redis://127.0.0.1:{port}"
            with connect(url, wire=int(wire_arg)) as connection:
                assert Queue(connection, "s").counts().pending == pending  # the job of the first run is kept
            result = CliRunner().invoke(main, ["enqueue", "-q", "s", "{}", "--url", url])
            assert result.exit_code == 0, result.output
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0
            assert (tmp_path / "data" / "appendonlydir").is_dir()  # the data directory was kept
        finally:
            reap(proc)


def test_a_killed_emq_server_takes_its_valkey_with_it(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "server", "--wire", "4", "--dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        port = int(line.split("redis://127.0.0.1:")[1].split(",")[0])
        with valkey.Valkey(port=port) as client:
            valkey_pid = client.info("server")["process_id"]
        proc.kill()  # SIGKILL: no handler, no cleanup of its own runs
        proc.wait(15)

        def gone() -> bool:  # exited: reaped, or a zombie where PID 1 does not reap (a container)
            try:
                return Path(f"/proc/{valkey_pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
            except FileNotFoundError:
                return True

        wait_until(gone, timeout=20, what="the orphaned valkey-server to stop")
    finally:
        reap(proc)


def test_demo_app_module_loads():
    from echomq.worker.loading import load_app

    app = load_app("echomq.local.demo:app")
    assert list(app.tasks) == ["demo"]
    assert json.dumps(app.tasks["demo"].fn({"order": 123}, None)) == "6"


def test_every_command_is_in_the_docs_table():
    text = (ROOT / "docs" / "workers.md").read_text()
    missing = [name for name in main.commands if f"`emq {name}" not in text]
    assert not missing, f"docs/workers.md does not list: {missing}"
    worker_options = {opt for param in main.commands["worker"].params for opt in param.opts if opt.startswith("--")}
    undocumented = sorted(o for o in worker_options - {"--url", "--wire", "--log-level", "--queue", "--concurrency"}
                          if o not in text)
    assert not undocumented, undocumented


def test_worker_refuses_a_queue_its_app_has_no_handler_for(server, tmp_path):
    runner = CliRunner(env={"EMQ_TEST_QUEUE": "known", "EMQ_TEST_OUT": str(tmp_path)})
    result = runner.invoke(main, ["worker", "worker_apps:make_app", "--url", server.url, "-q", "unknown"])
    assert result.exit_code == 1 and "no handler for queue(s) ['unknown']" in result.stderr, result.output


def test_emq_parity_runs_the_instrument_and_reports_a_total():
    from click.testing import CliRunner

    from echomq.cli import main

    result = CliRunner().invoke(main, ["parity", "--case", "claim.*", "--brief"])
    assert result.exit_code == 0, result.output
    assert "0 UNEXPECTED" in result.output


def test_stats_shows_a_damaged_queue_as_unreadable_and_still_lists_the_others(emq, conn, name, server):
    Queue(conn, name).enqueue({})
    damaged = name + "-damaged"
    with server.client() as client:
        client.set(f"emq:{{{damaged}}}:pending", "not a zset")
    try:
        result = emq("stats")
        assert result.exit_code == 0, result.output
        assert name in result.stdout and "unreadable" in result.stdout
        # the error below the table, on its queue's line; the table keeps to its columns' own widths
        result = emq("stats", "-q", name, "-q", damaged)
        (told,) = [line for line in result.stdout.splitlines() if line.startswith(f"{damaged}: ")]
        assert "WRONGTYPE" in told
        assert all(len(line) < 100 for line in result.stdout.splitlines() if line != told), result.stdout
    finally:
        with server.client() as client:
            client.delete(f"emq:{{{damaged}}}:pending")


# -- for scripts: --json, unwrapped tables, exit 1 when nothing matched ---------------------------------


def test_read_commands_answer_json(emq, conn, name):
    queue = Queue(conn, name)
    held = queue.enqueue({"n": 1})
    queue.enqueue({"n": 2})
    queue.schedule({"n": 3}, 60_000)
    queue.fail(queue.claim(60_000), "boom", max_attempts=1)
    queue.complete(queue.claim(60_000))
    assert held.id  # the first one went dead (claimed first), the second completed

    (row,) = json.loads(emq("stats", "-q", name, "--json").stdout)
    assert row == {"queue": name, "partitions": 1, "pending": 0, "active": 0, "scheduled": 1, "dead": 1,
                   "paused": False, "completed_total": 1, "dead_total": 1, "lane_pending": 0, "lane_active": 0,
                   "flow_waiting": 0, "flow_pending": 0, "flow_active": 0, "flow_scheduled": 0, "workers": 0}
    dead = json.loads(emq("dead", "-q", name, "--json").stdout)
    assert dead["total"] == 1 and dead["jobs"][0]["id"] == held.id and dead["jobs"][0]["last_error"] == "boom"
    shown = json.loads(emq("inspect", held.id, "-q", name, "--json").stdout)
    assert dead["jobs"][0]["set"] == shown["set"] == "dead"  # the page names the set it read, as inspect does
    assert (shown["state"], shown["attempts"], shown["payload"], shown["in_its_set"]) == ("dead", 1, {"n": 1}, True)
    (scheduled_id, _), = queue.ids("scheduled")
    due = json.loads(emq("inspect", scheduled_id, "-q", name, "--json").stdout)
    assert due["state"] == "scheduled" and 0 < due["due_in_ms"] <= 60_000
    assert isinstance(json.loads(emq("workers", "--json").stdout), list)


#: the --json keys whose values are text even when they read as digits (names, ids, a run id, a payload's)
TEXT_KEYS = {"queue", "id", "lease_epoch", "payload", "result", "stream_id", "last_error", "host", "group", "state"}


def strings_of_digits(value, key=None):
    """Every (key, value) in a --json answer where a number travels as a string."""
    if isinstance(value, dict):
        return [found for k, v in value.items() if k not in TEXT_KEYS for found in strings_of_digits(v, k)]
    if isinstance(value, list):
        return [found for v in value for found in strings_of_digits(v, key)]
    return [(key, value)] if isinstance(value, str) and value.lstrip("-").isdigit() else []


def test_every_json_read_gives_counts_attempts_and_times_as_numbers(emq, conn, name):
    queue = Queue(conn, name)
    queue.enable_events()
    queue.enqueue({"n": 1})
    active = queue.claim(60_000)
    queue.progress(active, {"pct": 40})
    queue.enqueue({"n": 2}, group="tenant")
    doomed = queue.claim_lanes(1, 60_000)[0]
    queue.fail(doomed, "boom", max_attempts=1)
    done = queue.enqueue({"n": 3})
    queue.publish(queue.claim(60_000), {"ok": True}, retention_ms=60_000)
    beat = Heartbeat(conn.client, queues=[name], concurrency=3, wire=conn.wire)
    beat.beat(held=1, completed=2, failed=0)
    try:
        answers = {args: json.loads(emq(*args, "--json").stdout) for args in [
            ("inspect", active.id, "-q", name), ("inspect", done.id, "-q", name), ("dead", "-q", name),
            ("stats", "-q", name), ("workers",), ("group", "list", "-q", name)]}
        answers["events"] = [json.loads(line) for line in emq("events", "-q", name, "--json").stdout.splitlines()]
    finally:
        beat.remove()
    for args, answer in answers.items():
        assert strings_of_digits(answer) == [], args
    shown = answers[("inspect", active.id, "-q", name)]
    assert (shown["attempts"], shown["progress"], type(shown["created"]), type(shown["started"])) == (
        1, {"pct": 40}, int, int)
    record = answers[("inspect", done.id, "-q", name)]
    assert record["attempts"] == 1 and all(type(record[t]) is int for t in ("created", "started", "finished"))
    (dead,) = answers[("dead", "-q", name)]["jobs"]
    assert (dead["attempts"], dead["failures"], type(dead["failed"]), dead["seq"]) == (1, 1, int, 1)
    (worker,) = [w for w in answers[("workers",)] if w["id"] == beat.id]
    assert (worker["pid"], worker["concurrency"], worker["held"], worker["completed"]) == (os.getpid(), 3, 1, 2)


def test_stats_shows_lane_and_flow_jobs_when_there_are_any(emq, conn, name):
    queue = Queue(conn, name)
    queue.enqueue({"n": 0})
    assert "lanes" not in emq("stats", "-q", name).stdout  # flat only: the table as before
    queue.enqueue({"n": 1}, group="g")
    queue.enqueue({"n": 2}, group="g")
    queue.claim_lanes(1, 60_000)
    queue.enqueue_flow("p", children=["a", "b"], id="root")
    stats = emq("stats", "-q", name)
    assert "lanes" in stats.stdout and "flows" in stats.stdout
    (row,) = [line.split() for line in stats.stdout.splitlines() if line.split()[:1] == [name]]
    assert row[1:] == ["1", "0", "0", "0", "0", "0", "1/1", "1/2/0/0"]
    (shown,) = json.loads(emq("stats", "-q", name, "--json").stdout)
    assert (shown["pending"], shown["lane_pending"], shown["lane_active"], shown["flow_waiting"],
            shown["flow_pending"]) == (1, 1, 1, 1, 2)


def test_stats_flags_a_queue_whose_jobs_wait_with_no_live_worker(emq, conn, name):
    queue, idle = Queue(conn, name), Queue(conn, fresh_name("c"))
    queue.enqueue({})
    queue.enqueue({}, group="tenant")
    idle.schedule({}, 60_000)  # nothing waits yet: not flagged
    stats = emq("stats", "-q", name, "-q", idle.name)
    assert "no live worker serves" in stats.stdout and f"  {name}: 2 waiting" in stats.stdout
    assert idle.name not in stats.stdout.split("no live worker serves")[1]
    assert [row["workers"] for row in json.loads(emq("stats", "-q", name, "--json").stdout)] == [0]
    beat = Heartbeat(conn.client, queues=[name], concurrency=1, wire=conn.wire)
    beat.beat(held=0, completed=0, failed=0)
    try:
        assert "no live worker" not in emq("stats", "-q", name, "--watch", "--times", "1").stdout
        assert [row["workers"] for row in json.loads(emq("stats", "-q", name, "--json").stdout)] == [1]
    finally:
        beat.remove()


def test_stats_json_watch_prints_one_line_per_refresh_with_rates(emq, conn, name):
    Queue(conn, name).enqueue({})
    watched = emq("stats", "-q", name, "--json", "--watch", "--times", "2", "--interval", "0.05")
    lines = watched.stdout.splitlines()
    assert watched.exit_code == 0 and len(lines) == 2
    first, second = (json.loads(line)[0] for line in lines)
    # the first sample has no rates yet: null, so every line has the same keys
    assert first["completed_per_s"] is None and second["completed_per_s"] == 0 and second["pending"] == 1
    assert emq("stats", "-q", name, "--times", "2").exit_code == 2  # --times without --watch


@pytest.mark.parametrize("args", [
    ("stats", "-q", "QUEUE"), ("dead", "-q", "QUEUE"), ("inspect", "some-id", "-q", "QUEUE"),
    ("reprocess", "-q", "QUEUE", "some-id"), ("reprocess", "-q", "QUEUE", "--all"), ("pause", "-q", "QUEUE"),
    ("resume", "-q", "QUEUE"), ("promote", "-q", "QUEUE"), ("sweep", "-q", "QUEUE"),
    ("remove", "-q", "QUEUE", "some-id"), ("cancel", "-q", "QUEUE", "some-id"), ("purge", "-q", "QUEUE"),
    ("drain", "-q", "QUEUE"), ("events", "-q", "QUEUE"), ("events", "-q", "QUEUE", "--enable", "100"),
    ("events", "-q", "QUEUE", "--disable"), ("rate-limit", "-q", "QUEUE"),
])
def test_an_unknown_queue_is_exit_1_and_creates_nothing(emq, server, name, args):
    with server.client() as client, unchanged(client):
        result = emq(*(name if a == "QUEUE" else a for a in args))
    assert result.exit_code == 1, result.output
    assert f"no queue {name!r} on this node" in result.stderr
    # the commands that can act on a queue before its first job say how
    assert ("--create" in result.stderr) == ("--create" in emq(args[0], "--help").stdout)


def test_pause_with_create_makes_the_queue_and_says_so_in_help(emq, conn, name):
    assert "--create" in emq("pause", "--help").stdout
    assert emq("pause", "-q", name, "--create").exit_code == 0
    assert Queue(conn, name).counts().paused
    assert emq("stats", "-q", name).exit_code == 0  # it exists now


def test_reprocess_of_ids_not_in_dead_is_exit_1_and_writes_nothing(emq, conn, name):
    queue = Queue(conn, name)
    pending = queue.enqueue({}).id
    with unchanged(conn.client, queue.keys):
        result = emq("reprocess", "-q", name, pending, "no-such-id")
    assert result.exit_code == 1 and "reprocessed 0 job(s)" in result.stdout
    assert f"{pending}: not in dead" in result.stderr and "no-such-id: not in dead" in result.stderr


def test_tables_are_not_wrapped_when_stdout_is_a_pipe(server, conn):
    name = "a-rather-long-queue-name-" + fresh_name("wrap") + "-" + "x" * 60
    queue = Queue(conn, name)
    queue.enqueue({"to": "y" * 150})
    queue.fail(queue.claim(60_000), "a long error message " + "z" * 120, max_attempts=1)
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="")
    env.pop("COLUMNS")
    for args, needles in ((["stats", "-q", name], [name, "completed", "(total)"]),
                          (["dead", "-q", name], ["last error", "z" * 120])):
        piped = subprocess.run([sys.executable, "-m", "echomq.cli", *args, "--url", server.url],
                               capture_output=True, text=True, env=env, check=True)
        lines = piped.stdout.splitlines()
        for needle in needles:
            assert any(needle in line for line in lines), (needle, piped.stdout)
        assert not any("…" in line for line in lines), piped.stdout  # nothing cut short either
    (row,) = [line.split() for line in subprocess.run(
        [sys.executable, "-m", "echomq.cli", "stats", "-q", name, "--url", server.url],
        capture_output=True, text=True, env=env, check=True).stdout.splitlines() if line.split()[:1] == [name]]
    assert row[1:] == ["0", "0", "0", "1", "0", "1"]  # one line per queue: pending active scheduled dead, totals


def test_write_commands_answer_json_too(emq, conn, name):
    queue = Queue(conn, name)
    added = json.loads(emq("enqueue", "-q", name, "--count", "25", "{}", "--json").stdout)
    assert len(added) == 25 and all(row["created"] for row in added)  # every id, not the first 20
    again = json.loads(emq("enqueue", "-q", name, "--id", added[0]["id"], "{}", "--json").stdout)
    assert again == [{"id": added[0]["id"], "created": False}]
    dead = queue.claim(60_000)
    queue.fail(dead, "boom", max_attempts=1)
    answer = emq("reprocess", "-q", name, dead.id, "missing-id", "--json")
    assert answer.exit_code == 1
    assert json.loads(answer.stdout) == {"queue": name, "reprocessed": [dead.id], "not_in_dead": ["missing-id"]}
    queue.schedule({}, 0)
    wait_server_past(conn.client, server_ms(conn.client) + 1)
    assert json.loads(emq("promote", "-q", name, "--json").stdout) == {"queue": name, "promoted": 1}
    held = queue.claim(1)
    wait_server_past(conn.client, conn.client.zscore(queue.keys.active, held.id))
    swept = json.loads(emq("sweep", "-q", name, "--json").stdout)
    assert swept == {"queue": name, "recovered": [held.id], "exempt": [], "dead": []}


MYAPP = '''
from echomq import App

app = App("myapp")


@app.task
def send_email(payload):
    return payload


def make_app():
    return app


def make_nothing():
    return 42


def needs_config(config):
    return app


number = 7
'''


@pytest.mark.parametrize("attr,says", [
    ("send_email", "is the task handler 'send_email' (registered with @app.task), not an echomq.App"),
    ("needs_config", "is a function that takes arguments, not an echomq.App"),
    ("number", "is a int, not an echomq.App"),
    ("make_nothing", "make_nothing() returned a int, not an echomq.App"),
])
def test_load_app_refuses_what_is_not_an_app_in_one_line(tmp_path, attr, says):
    (tmp_path / "myapp.py").write_text(MYAPP)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "echomq.cli", "worker", f"myapp:{attr}", "--url", "redis://127.0.0.1:1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, done.stderr
    if attr != "make_nothing":
        assert "point at the App instead: myapp:app" in error_lines[0]


def test_load_app_takes_the_app_or_a_factory(tmp_path, monkeypatch):
    from echomq.worker.loading import load_app

    (tmp_path / "myapp2.py").write_text(MYAPP)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_app("myapp2:app") is load_app("myapp2:make_app")
    assert list(load_app("myapp2:app").tasks) == ["send_email"]


def test_worker_burst_exits_once_its_queue_is_empty(server, wire, tmp_path, conn):
    from support.workers import WorkerProcess, processed

    queue = fresh_name("burst")
    made = Queue(conn, queue).enqueue_many([{"n": n, "fail": 1 if n == 0 else 0} for n in range(6)])
    proc = WorkerProcess(server.url, wire, queue, tmp_path, "--burst", "--promote-interval-ms", "10",
                         env={"EMQ_TEST_MAX_ATTEMPTS": "3"})
    assert proc.wait(30) == 0, proc.log()
    assert sorted(job_id for job_id, _, _ in processed(tmp_path)) == sorted(e.id for e in made)
    assert Queue(conn, queue).counts().total == 0  # the retry (backoff 20 ms) was waited for: it fell due
    assert "burst: the queues are empty" in proc.log()


def test_a_burst_worker_on_a_paused_queue_names_what_it_left(server, wire, tmp_path, conn):
    from support.workers import WorkerProcess, processed

    queue = fresh_name("burst")
    Queue(conn, queue).enqueue_many([{"n": n} for n in range(2)])
    Queue(conn, queue).pause()
    proc = WorkerProcess(server.url, wire, queue, tmp_path, "--burst")
    assert proc.wait(30) == 0, proc.log()
    assert processed(tmp_path) == [] and Queue(conn, queue).counts().pending == 2
    assert f"paused, so not run: {queue} (2 pending)" in proc.log()


def test_enqueue_reads_payloads_from_a_file_and_from_stdin(emq, conn, name, tmp_path, server):
    path = tmp_path / "payload.json"
    path.write_text('{"from": "file"}')
    assert emq("enqueue", "-q", name, "--file", str(path)).exit_code == 0
    runner = CliRunner(env={"COLUMNS": "200"})
    piped = runner.invoke(main, ["enqueue", "-q", name, "-", "--url", server.url], input='{"from": "stdin"}',
                          catch_exceptions=False)
    assert piped.exit_code == 0, piped.output
    queue = Queue(conn, name)
    assert sorted(queue.job(i)["payload"]["from"] for i, _ in queue.ids("pending")) == ["file", "stdin"]
    raw_in = runner.invoke(main, ["enqueue", "-q", name, "--raw", "-", "--url", server.url], input=b"\x00bytes",
                           catch_exceptions=False)
    assert raw_in.exit_code == 0 and queue.counts().pending == 3
    with server.client() as client, unchanged(client):
        bad = runner.invoke(main, ["enqueue", "-q", name, "-", "--url", server.url], input="NaN")
        twice = runner.invoke(main, ["enqueue", "-q", name, "-", "-", "--url", server.url], input="{}")
    assert bad.exit_code == 1 and "NaN is not standard JSON" in bad.stderr
    assert twice.exit_code == 2 and "give - at most once" in twice.stderr


def test_remove_cancel_purge_and_drain_with_counts(emq, conn, name):
    queue = Queue(conn, name)
    for _ in range(5):
        queue.enqueue({})
    held = queue.claim(60_000)
    dead = queue.claim(60_000)
    queue.fail(dead, "x", max_attempts=1)
    waiting = queue.ids("pending")[0][0]
    removed = emq("remove", "-q", name, waiting, dead.id, "nope")  # a named id with no job: exit 1
    assert removed.exit_code == 1 and "removed 2 job(s)" in removed.stdout and "nope: no such job" in removed.stderr
    refused = emq("remove", "-q", name, held.id)
    assert refused.exit_code == 1 and f"{held.id}: EMQSTATE" in refused.stderr and "cancel it instead" in refused.stderr
    assert "cancelled 1 job(s)" in emq("cancel", "-q", name, held.id).stdout
    assert queue.job(held.id)["last_error"] == "cancelled"
    assert "purged 0 dead job(s)" in emq("purge", "-q", name, "--older-than", "1h").stdout
    assert "purged 1 dead job(s)" in emq("purge", "-q", name).stdout
    assert "drained 2 pending job(s)" in emq("drain", "-q", name, "--batch", "1").stdout
    counts = queue.counts()
    assert (counts.pending, counts.active, counts.dead) == (0, 0, 0)
    bad = emq("purge", "-q", name, "--older-than", "soon")
    assert bad.exit_code == 2 and "is not a duration" in bad.stderr


def test_remove_cancel_purge_and_drain_answer_json(emq, conn, name):
    queue = Queue(conn, name)
    for _ in range(4):
        queue.enqueue({})
    held = queue.claim(60_000)
    waiting = queue.ids("pending")[0][0]
    answer = emq("remove", "-q", name, waiting, "missing-id", "--json")
    assert answer.exit_code == 1
    assert json.loads(answer.stdout) == {"queue": name, "removed": {waiting: "pending"}, "no_such_job": ["missing-id"],
                                         "refused": {}}
    cancelled = json.loads(emq("cancel", "-q", name, held.id, "--json").stdout)
    assert cancelled == {"queue": name, "cancelled": [held.id], "no_such_job": [], "refused": {}}
    assert json.loads(emq("purge", "-q", name, "--json").stdout) == {"queue": name, "purged": 1}
    assert json.loads(emq("drain", "-q", name, "--json").stdout) == {"queue": name, "drained": 2, "lane_drained": 0,
                                                                     "flow_left": 0}


def test_stats_watch_drain_and_purge_see_and_act_on_lane_and_flow_jobs(emq, conn, name):
    """Drain deleted only flat pending jobs ("drained 0" for a queue of lane jobs): it now drains the
    lanes too, leaves a running lane job and the flow jobs, and says what it left; purge deletes
    dead lane and flow jobs as it does flat ones."""
    queue = Queue(conn, name)
    queue.enqueue_many([{}] * 3)
    for n in range(5):
        queue.enqueue({"n": n}, group=f"tenant-{n % 2}")
    running = queue.claim_lanes(1, 60_000)[0]
    queue.enqueue_flow("parent", children=[Flow(name, "a", id="a"), Flow(name, "b", id="b")], id="parent")
    watched = emq("stats", "-q", name, "--watch", "--times", "1")
    (row,) = [line.split() for line in watched.stdout.splitlines() if line.split()[:1] == [name]]
    assert row[1:5] == ["3", "0", "0", "0"] and "4/1" in row and "1/2/0/0" in row

    drained = emq("drain", "-q", name, "--batch", "2")
    assert drained.exit_code == 0 and "drained 7 pending job(s)" in drained.stdout and "(4 of them lane jobs)" in drained.stdout
    assert "left 3 flow job(s) not started" in drained.stderr and "emq cancel" in drained.stderr
    counts = queue.counts()
    assert (counts.pending, counts.lane_pending, counts.lane_active, counts.flow_waiting_total) == (0, 0, 1, 3)
    assert list(queue.groups()) == [running.group]  # an emptied lane left no group behind
    assert json.loads(emq("drain", "-q", name, "--json").stdout) == {"queue": name, "drained": 0, "lane_drained": 0,
                                                                     "flow_left": 3}

    queue.fail(running, "boom", max_attempts=1)
    assert queue.cancel("a")  # a flow child's death: its parent dies with it (on_child_failure "fail")
    assert queue.counts().dead == 3
    assert "purged 3 dead job(s)" in emq("purge", "-q", name).stdout
    assert {queue.job(job_id) for job_id in (running.id, "a", "parent")} == {None}
    assert queue.counts().dead == 0


def test_a_refused_id_among_several_is_named_and_the_others_are_still_acted_on(emq, conn, name):
    queue = Queue(conn, name)
    for _ in range(4):
        queue.enqueue({})
    held = queue.claim(60_000)
    first, second = (job_id for job_id, _ in queue.ids("pending")[:2])
    # the active job sits between two pending ones: remove refuses it alone
    answer = emq("remove", "-q", name, first, held.id, second, "--json")
    assert answer.exit_code == 1 and f"{held.id}: EMQSTATE" in answer.stderr
    report = json.loads(answer.stdout)
    assert report["removed"] == {first: "pending", second: "pending"} and report["no_such_job"] == []
    assert list(report["refused"]) == [held.id] and "cancel it instead" in report["refused"][held.id]
    assert queue.job(held.id)["state"] == "active" and queue.counts().pending == 1
    # cancel refuses the pending job and still cancels the active one after it
    last = queue.ids("pending")[0][0]
    cancelled = emq("cancel", "-q", name, last, held.id)
    assert cancelled.exit_code == 1 and "cancelled 1 job(s)" in cancelled.stdout and f"{last}: EMQSTATE" in cancelled.stderr
    assert queue.job(held.id)["last_error"] == "cancelled" and queue.job(last)["state"] == "pending"


def test_rate_limit_shows_sets_and_lifts(emq, conn, name):
    queue = Queue(conn, name)
    assert emq("rate-limit", "-q", name, "50/s").exit_code == 1  # an unknown queue, without --create
    set_ = emq("rate-limit", "-q", name, "50/s", "--create")
    assert set_.exit_code == 0 and "at most 50/s job starts" in set_.stdout
    assert str(queue.rate_limit()) == "50/s"
    shown = json.loads(emq("rate-limit", "-q", name, "--json").stdout)
    assert shown == {"queue": name, "rate_limit": "50/s", "limit": 50, "window_ms": 1000}
    with unchanged(conn.client):
        bad = emq("rate-limit", "-q", name, "50/d")
        assert bad.exit_code == 1 and "bad rate limit" in bad.output
    assert "no rate limit" in emq("rate-limit", "-q", name, "--off").stdout and queue.rate_limit() is None
