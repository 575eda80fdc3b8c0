"""The tests' child processes: where they run from and how each one ends."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: the repository's root (PYTHONPATH of an `emq` subprocess, the source of the typed files)
ROOT = Path(__file__).resolve().parents[2]
#: tests/: the working directory and import path of a worker process (``worker_apps`` is there)
TESTS = ROOT / "tests"


def reap(proc: subprocess.Popen) -> None:
    """Kill a test's subprocess if it still runs, and close its pipes: the cleanup for every path."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
