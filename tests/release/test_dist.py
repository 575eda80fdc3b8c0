"""The release files (issue 40 items 1 and 5), each installed into a fresh virtual environment and
run from a folder outside the checkout, as a user would:

* the wheel, on a machine without Rust (no cargo on PATH), serves wire 6 end to end: ``emq
  server``, a worker running jobs, ``emq doctor``;
* the sdist without Rust installs wire 4 and says, at install and at use, that the module is
  missing and how to get it;
* the sdist where Rust exists builds the module.

The files: ``$ECHOMQ_DIST`` when set (files you built with ``./run dist``), else ``./run dist``
builds them into a temporary folder, once for the whole run (every pytest-xdist process uses them).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import valkey

pytestmark = pytest.mark.slow  # builds the release files and installs each into a fresh environment

ROOT = Path(__file__).resolve().parents[2]
VERSION = (ROOT / "echomq" / "VERSION").read_text().strip()
DIST_ENV = "ECHOMQ_DIST"
JOBS = 20

APP = '''
from echomq import App

app = App()


@app.task(queue="smoke")
def double(payload):
    return payload["n"] * 2
'''


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory) -> Dist:
    folder = os.environ.get(DIST_ENV)
    if not folder:
        # built once for the whole run: pytest-xdist's processes share the base temp's parent, and
        # the first to take the lock builds while the others wait for its files
        shared = tmp_path_factory.getbasetemp().parent / "dist"
        shared.mkdir(exist_ok=True)
        with open(shared / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (shared / ".built").exists():
                subprocess.run([str(ROOT / "run"), "dist", str(shared)], check=True, capture_output=True, timeout=900)
                (shared / ".built").touch()
        folder = str(shared)
    found = Path(folder).resolve()
    wheels = sorted(found.glob(f"echomq-{VERSION}-py3-none-manylinux_*_x86_64.whl"))
    sdists = sorted(found.glob(f"echomq-{VERSION}.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, f"{found}: {sorted(p.name for p in found.iterdir())}"
    return Dist(wheels[0], sdists[0])


def without_rust() -> dict[str, str]:
    """This environment less Rust (no directory on PATH with cargo or rustc) and less anything
    that would point at the checkout or a node."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(os.path.exists(os.path.join(d, tool)) for tool in ("cargo", "rustc", "rustup"))]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARGO", "RUSTUP", "ECHOMQ_", "EMQ_", "PYTEST", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = os.pathsep.join(keep)
    assert shutil.which("cargo", path=env["PATH"]) is None
    return env


class Venv:
    """A fresh virtual environment and the commands run from it, in ``cwd`` (outside the checkout)."""

    def __init__(self, where: Path, env: dict[str, str]) -> None:
        subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=120)
        self.bin = where / "venv" / "bin"
        self.cwd = where / "elsewhere"
        self.cwd.mkdir()
        self.env = env

    def pip_install(self, target: Path, *options: str) -> subprocess.CompletedProcess:
        """Deps from the registry or pip's cache; an sdist is built in isolation, as a user's would
        be, and never from pip's cache of wheels (a build without the module would be kept there)."""
        cache = ("--no-cache-dir",) if target.name.endswith(".tar.gz") else ()
        return self.run("pip", "install", *cache, *options, str(target), timeout=900)

    def run(self, tool: str, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin / tool), *args], cwd=self.cwd, env={**self.env, **env},
                              capture_output=True, text=True, timeout=timeout)

    @contextmanager
    def server(self, wire: int) -> Iterator[str]:
        """``emq server --wire W`` until it answers; its URL. Stopped by SIGTERM after."""
        process = subprocess.Popen([str(self.bin / "emq"), "server", "--wire", str(wire)], cwd=self.cwd,
                                   env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert process.stdout is not None
            first = process.stdout.readline()  # the start line names the URL once the node answers
            found = re.search(r"on (redis://\S+), wire", first)
            assert found, first + process.stdout.read()
            url = found.group(1)
            valkey.Valkey.from_url(url).ping()
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def installed(venv: Venv) -> Path:
    return venv.bin.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "echomq"


def run_jobs(venv: Venv, url: str) -> None:
    """Enqueue JOBS with ``emq enqueue``, run them with ``emq worker --burst``, read them back."""
    (venv.cwd / "smokeapp.py").write_text(APP)
    enqueued = venv.run("emq", "enqueue", "-q", "smoke", *(f'{{"n": {n}}}' for n in range(JOBS)), EMQ_URL=url)
    assert enqueued.returncode == 0, enqueued.stderr
    ran = venv.run("emq", "worker", "smokeapp:app", "--burst", EMQ_URL=url, timeout=300)
    assert ran.returncode == 0 and f"completed {JOBS}" in ran.stderr, ran.stderr
    queue = valkey.Valkey.from_url(url)
    assert queue.hget("emq:{smoke}:metrics:completed", "count") == str(JOBS).encode()
    assert queue.zcard("emq:{smoke}:pending") == queue.zcard("emq:{smoke}:dead") == 0


def test_the_wheel_serves_wire_6_on_a_machine_without_rust(dist, tmp_path):
    venv = Venv(tmp_path, without_rust())
    result = venv.pip_install(dist.wheel)
    assert result.returncode == 0, result.stderr
    module = installed(venv) / "local" / "libtrafikey.so"
    assert module.is_file()

    version = venv.run("emq", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.splitlines()[:2] == [
        f"echomq {VERSION} (Python {sys.version.split()[0]}, {installed(venv)})", f"trafikey {VERSION} at {module}"]

    with venv.server(6) as url:
        node = valkey.Valkey.from_url(url)
        assert [entry[5] for entry in node.execute_command("MODULE", "LIST") if entry[1] == b"trafikey"] == [
            str(module).encode()]  # the wheel's module, nothing of the checkout
        run_jobs(venv, url)
        doctor = venv.run("emq", "doctor", "--url", url)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert re.search(rf"^ok +trafikey +trafikey {re.escape(VERSION)}, every token this client uses$",
                         doctor.stdout, re.M), doctor.stdout
        assert re.search(r"^ok +brand +echomq:6\.0\.0: wire 6$", doctor.stdout, re.M), doctor.stdout


def test_the_sdist_without_rust_installs_wire_4_and_says_so(dist, tmp_path):
    venv = Venv(tmp_path, without_rust())
    result = venv.pip_install(dist.sdist, "-v")
    assert result.returncode == 0, result.stderr
    assert "echomq: no Rust toolchain (cargo) on PATH, so this install has no trafikey module" in \
        result.stdout + result.stderr
    assert not list((installed(venv) / "local").glob("*.so"))

    version = venv.run("emq", "--version")
    assert version.returncode == 0
    assert version.stdout.splitlines()[1].startswith(
        "trafikey: none to load: the trafikey module is not built: this install was made without a Rust toolchain: "
        "install the echomq wheel for this platform")
    refused = venv.run("emq", "server", "--wire", "6")
    assert refused.returncode == 1 and "install the echomq wheel for this platform" in refused.stderr
    assert "--no-cache-dir" in refused.stderr

    with venv.server(4) as url:
        run_jobs(venv, url)


def test_the_sdist_builds_the_module_where_rust_exists(dist, tmp_path):
    # the crate's dependencies as ./run built them (timestamps kept, so cargo finds them fresh):
    # only trafikey itself is compiled, in this test's own target folder
    target = tmp_path / "target"
    shutil.copytree(ROOT / "trafikey" / "target" / "release", target / "release", symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ECHOMQ_", "EMQ_", "VIRTUAL_ENV", "PYTHON"))}
    venv = Venv(tmp_path, {**env, "CARGO_TARGET_DIR": str(target)})
    result = venv.pip_install(dist.sdist)
    assert result.returncode == 0, result.stderr[-3000:]
    module = installed(venv) / "local" / "libtrafikey.so"
    version = venv.run("emq", "--version")
    assert version.stdout.splitlines()[1] == f"trafikey {VERSION} at {module}", version.stdout
