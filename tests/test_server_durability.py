"""`emq server --dir D` keeps the jobs (issue 37, SPEC §9.7): the append-only file is on wherever a
directory is kept, every start line says what survives, and a start on a directory that holds jobs
says how many. Against real `emq server` processes on both wires: SIGTERM, SIGKILL of `emq server`,
and a crash of its valkey-server after the AOF was fsynced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import valkey
from click.testing import CliRunner

from echomq import Job, Queue, connect
from echomq.cli import main
from echomq.cli.server import found_note
from echomq.errors import ConfigurationError
from echomq.local.server import Durability, durability_for
from support.dataset import dump
from support.processes import ROOT, reap
from support.waiting import wait_until

TMP = Path("/tmp/echomq-valkey-x")
D = Path("/srv/jobs")


# -- deciding: pure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("directory, aof, persist, fsync, chosen", [
    (None, False, True, None, Durability(False)),  # the temporary default: memory only
    (None, True, True, None, Durability(True)),  # --aof (a promise): on, also in the temporary directory
    ("d", False, True, None, Durability(True, "everysec")),  # a kept directory persists by default
    ("d", False, True, "always", Durability(True, "always")),
    ("d", True, True, "no", Durability(True, "no")),
    ("d", False, False, None, Durability(False)),  # --no-persist opts out
])
def test_a_kept_directory_persists_unless_told_not_to(directory, aof, persist, fsync, chosen):
    assert durability_for(directory, aof, persist, fsync) == chosen


@pytest.mark.parametrize("directory, aof, persist, fsync, said", [
    ("d", True, False, None, "--aof and --no-persist contradict"),
    (None, False, True, "always", "--fsync needs the append-only file"),
    ("d", False, False, "always", "--fsync needs the append-only file"),
    ("d", False, True, "sometimes", "bad fsync policy 'sometimes'"),
])
def test_contradicting_durability_options_are_refused_naming_them(directory, aof, persist, fsync, said):
    with pytest.raises(ConfigurationError, match=said):
        durability_for(directory, aof, persist, fsync)


@pytest.mark.parametrize("durability, directory, kept, line", [
    (Durability(True), D, True, "jobs survive a restart: AOF everysec in /srv/jobs"),
    (Durability(True, "always"), D, True, "jobs survive a restart: AOF always in /srv/jobs"),
    (Durability(False), TMP, False, "memory only: nothing survives a stop (data in /tmp/echomq-valkey-x, a temporary "
                                    "directory removed on exit; keep jobs with --dir D)"),
    (Durability(False), D, True, "memory only: nothing survives a stop (data in /srv/jobs)"),
    (Durability(True), TMP, False, "nothing survives a stop: AOF everysec in /tmp/echomq-valkey-x, a temporary "
                                   "directory removed on exit; keep jobs with --dir D"),
])
def test_every_start_line_says_what_survives(durability, directory, kept, line):
    assert durability.start_line(directory, kept) == line


@pytest.mark.parametrize("new, found, note", [
    (True, None, " (a new directory: no jobs yet)"),
    (False, None, ""),
    (False, (0, 0), " (it holds no jobs)"),
    (False, (7, 2), " (found 7 job(s) in 2 queue(s))"),
])
def test_a_start_says_what_its_directory_held(new, found, note):
    assert found_note(new, found) == note


def test_contradicting_options_are_a_usage_error_before_anything_starts(tmp_path):
    refused = CliRunner().invoke(main, ["server", "--dir", str(tmp_path / "d"), "--aof", "--no-persist"])
    assert refused.exit_code == 2 and "contradict" in refused.stderr
    assert not (tmp_path / "d").exists()


# -- doing: real servers ---------------------------------------------------------------------------------


class ServerProcess:
    """`emq server ARGS` in a process of its own: its start lines, its URL, its valkey-server's pid."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "echomq.cli", "server", *args], cwd=cwd,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert self.process.stdout is not None and self.process.stderr is not None
        self.first = self.process.stdout.readline()
        self.second = self.process.stdout.readline()
        assert "valkey on redis://127.0.0.1:" in self.first, self.first + self.process.stderr.read()
        self.url = "redis://127.0.0.1:" + self.first.split("redis://127.0.0.1:")[1].split(",")[0]
        with self.client() as client:
            self.valkey_pid = client.info("server")["process_id"]

    def client(self) -> valkey.Valkey:
        return valkey.Valkey.from_url(self.url)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(20) == 0

    def valkey_gone(self) -> bool:
        """Its valkey-server exited: reaped, or a zombie where PID 1 does not reap (a container)."""
        try:
            return Path(f"/proc/{self.valkey_pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        reap(self.process)


def every_kind_of_job(url: str, wire: int) -> None:
    """Pending, scheduled, dead, lane and flow jobs, and a completion counted, on one queue."""
    with connect(url, wire=wire) as connection:
        queue = Queue(connection, "kept")
        queue.enqueue({"n": 1})
        queue.complete(claimed(queue))
        queue.enqueue({"n": 2})
        queue.schedule({"n": 3}, 3_600_000)
        queue.enqueue({"n": 4})
        queue.fail(claimed(queue), "E: broken", max_attempts=1)
        queue.enqueue({"n": 5}, group="tenant-a")
        queue.enqueue_flow({"n": 6}, children=[{"n": 7}])


def claimed(queue: Queue) -> Job:
    job = queue.claim(60_000)
    assert job is not None
    return job


def emq_keys(client: valkey.Valkey) -> dict:
    return {key: value for key, value in dump(client).items() if not key.startswith(b"{emq}:worker")}


@pytest.mark.parametrize("wire", [4, 6])
def test_jobs_of_every_kind_survive_a_sigterm_and_a_restart_on_the_same_dir(tmp_path, wire):
    with ServerProcess(tmp_path, "--wire", str(wire), "--dir", "data") as first:
        assert first.second.startswith(f"jobs survive a restart: AOF everysec in {tmp_path / 'data'} "
                                       "(a new directory: no jobs yet)"), first.second
        every_kind_of_job(first.url, wire)
        with first.client() as client:
            before = emq_keys(client)
        first.stop()
    with ServerProcess(tmp_path, "--wire", str(wire), "--dir", "data") as again:
        assert again.second.startswith(f"jobs survive a restart: AOF everysec in {tmp_path / 'data'} "
                                       "(found 6 job(s) in 1 queue(s))"), again.second
        with again.client() as client:
            assert emq_keys(client) == before  # every row, set, lane, flow and total as it was
        with connect(again.url, wire=wire) as connection:
            counts = Queue(connection, "kept").counts()
            assert (counts.pending, counts.scheduled, counts.dead, counts.lane_pending) == (1, 1, 1, 1)
            assert Queue(connection, "kept").metrics() == {"completed": 1, "failed": 1}
        again.stop()


@pytest.mark.parametrize("wire", [4, 6])
def test_a_sigkilled_emq_server_and_a_crashed_valkey_keep_what_the_aof_fsynced(tmp_path, wire):
    """SIGKILL of `emq server`: its valkey-server is told to stop (SIGTERM) and flushes the AOF. A
    crash of the valkey-server itself (SIGKILL) loses at most the writes not yet fsynced (about the
    last second with everysec): here none, as the test waits for the fsync (WAITAOF)."""
    with ServerProcess(tmp_path, "--wire", str(wire), "--dir", "data") as killed:
        every_kind_of_job(killed.url, wire)
        with killed.client() as client:
            before = emq_keys(client)
        killed.process.kill()
        killed.process.wait(15)
        wait_until(killed.valkey_gone, 20, "the orphaned valkey-server to stop")
    with ServerProcess(tmp_path, "--wire", str(wire), "--dir", "data") as crashed:
        assert "(found 6 job(s) in 1 queue(s))" in crashed.second, crashed.second
        with crashed.client() as client:
            assert emq_keys(client) == before
            with connect(crashed.url, wire=wire) as connection:
                Queue(connection, "kept").enqueue({"n": 8}, id="fsynced")
            assert client.execute_command("WAITAOF", 1, 0, 10_000) == [1, 0]  # on disk now
            before = emq_keys(client)
        os.kill(crashed.valkey_pid, signal.SIGKILL)  # a crash: no flush of its own
        assert crashed.process.wait(15) == 1
        assert "valkey-server exited" in crashed.process.stderr.read()
    with ServerProcess(tmp_path, "--wire", str(wire), "--dir", "data") as after:
        assert "(found 7 job(s) in 1 queue(s))" in after.second, after.second
        with after.client() as client:
            assert emq_keys(client) == before
        after.stop()


def test_no_persist_keeps_the_directory_but_not_the_jobs_and_fsync_always_is_the_servers(tmp_path):
    with ServerProcess(tmp_path, "--wire", "4", "--dir", "data", "--no-persist") as memory:
        assert memory.second.startswith(f"memory only: nothing survives a stop (data in {tmp_path / 'data'})")
        every_kind_of_job(memory.url, 4)
        memory.stop()
    with ServerProcess(tmp_path, "--wire", "4", "--dir", "data", "--fsync", "always") as durable:
        assert durable.second.startswith(f"jobs survive a restart: AOF always in {tmp_path / 'data'} "
                                         "(it holds no jobs)"), durable.second
        with durable.client() as client:
            assert client.config_get("appendfsync") == {"appendfsync": "always"}
            assert client.config_get("appendonly") == {"appendonly": "yes"}
        durable.stop()
