"""The tests' child processes: where they run from and how each one ends."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

#: the repository's root (PYTHONPATH of an `emq` subprocess, the source of the typed files)
ROOT = Path(__file__).resolve().parents[2]
#: tests/: the working directory and import path of a worker process (``worker_apps`` is there)
TESTS = ROOT / "tests"


def as_at_a_terminal() -> None:
    """A child's ``preexec_fn``: Ctrl-C (SIGINT) and SIGQUIT back to their defaults. A suite started
    in the background (``./run test &`` in a script) runs with both ignored, which every child would
    inherit, and a test that stops a child with SIGINT would wait on it for ever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def reap(proc: subprocess.Popen) -> None:
    """Kill a test's subprocess if it still runs, and close its pipes: the cleanup for every path."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe:
            pipe.close()
