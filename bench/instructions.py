"""Instructions per job lifecycle, counted (not timed): two trafikey builds, the scripts and the
primitive floor, each on a valkey-server run under valgrind's callgrind.

    .venv/bin/python -m bench.instructions BEFORE.so AFTER.so [--jobs 2000] [--aof] [--keep DIR]

On a shared, busy machine the timed ratios (bench/native_ab.py) spread widely; an instruction
count does not move with the load, so it tells a 5 % change from the noise. For each executor
(the scripts, each native build, the floor) a server of its own runs under callgrind with
instrumentation off; one warm-up lifecycle phase, then instrumentation on for bench/cost.py's lifecycle
phases (enqueue, claim, complete, pipelined) and a dump. Reported per lifecycle: the
instructions of the server's command execution (`call`, inclusive: what commandstats times)
and of the whole process (parsing, replies, socket I/O too: what main-thread CPU times).
Instructions are not time (a cache miss costs more than an add), so read them beside the
timed ratios. ``--keep DIR`` keeps each executor's dump there, to read by caller:
``callgrind_annotate --inclusive=yes --tree=caller DIR/callgrind.native-after``. Needs valgrind
(Debian: valgrind).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from echomq.local.server import BINARY_ENV, server_binary

from .common import BenchServer, say
from .cost import open_executor, run_executor

EXECUTORS = ("scripts", "native", "floor")


def wrapper(out_dir: Path) -> str:
    """A valkey-server stand-in that runs the real one under callgrind, instrumentation off."""
    path = out_dir / "valkey-server-callgrind"
    path.write_text("#!/bin/sh\nexec valgrind --tool=callgrind --instr-atstart=no "
                    f"--callgrind-out-file={out_dir}/callgrind.%p {server_binary()} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def counted(server: BenchServer, name: str, n: int, out_dir: Path, keep: Path | None = None) -> dict[str, float]:
    """Instructions per lifecycle of ``name``'s lifecycle phases on ``server`` (under callgrind);
    the dump copied to ``keep`` when given."""
    pid = str(server.server._process.pid)
    executor = open_executor(server, name)
    try:
        run_executor(server, name, n, executor, lifecycle_only=True)  # warm-up: caches, dict sizes
        for f in out_dir.glob(f"callgrind.{pid}*"):
            f.unlink()
        subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
        run_executor(server, name, n, executor, lifecycle_only=True)
        subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, capture_output=True)
    finally:
        executor.close()
    dumps = sorted(out_dir.glob(f"callgrind.{pid}.*"), key=os.path.getmtime)
    if keep:
        shutil.copy(dumps[-1], keep)
    report = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dumps[-1])],
                            capture_output=True, text=True, check=True).stdout
    total = execution = 0
    for line in report.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?\*?\s*(?:\S*:)?(\w+)\b", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = ir
        elif m.group(2) == "call" and not execution:
            execution = ir
    return {"total": total / n, "call": execution / n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--aof", action="store_true", help="with the append-only file on (every effect written)")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep each executor's callgrind dump there, as callgrind.<executor> (for callgrind_annotate)")
    args = p.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    if not shutil.which("valgrind"):
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    out_dir = Path(tempfile.mkdtemp(prefix="emq-callgrind-"))
    os.environ[BINARY_ENV] = wrapper(out_dir)
    rows: dict[str, dict[str, float]] = {}
    for label, module, name in (("scripts", args.before, "scripts"), ("floor", None, "floor"),
                                ("native before", args.before, "native"), ("native after", args.after, "native")):
        say(f"callgrind: {label}")
        with BenchServer(module) as server:
            server.set_aof(args.aof)
            keep = args.keep / f"callgrind.{label.replace(' ', '-')}" if args.keep else None
            rows[label] = counted(server, name, args.jobs, out_dir, keep)
    print(f"instructions per lifecycle ({args.jobs} lifecycles, after a warm-up; AOF {'on' if args.aof else 'off'})")
    print(f"{'executor':<15} {'call (commandstats)':>20} {'whole process':>14}")
    for label, r in rows.items():
        print(f"{label:<15} {r['call']:>20,.0f} {r['total']:>14,.0f}")
    s, f = rows["scripts"], rows["floor"]
    for label in ("native before", "native after"):
        r = rows[label]
        print(f"{label}: /scripts call {r['call'] / s['call']:.3f}, whole {r['total'] / s['total']:.3f}; "
              f"/floor call {r['call'] / f['call']:.3f}, whole {r['total'] / f['total']:.3f}")
    out: dict[str, Any] = rows
    return 0 if out else 1


if __name__ == "__main__":
    sys.exit(main())
