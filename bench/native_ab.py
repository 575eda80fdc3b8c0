"""Two trafikey builds side by side in one run: each build's native/scripts and native/floor
lifecycle ratios (bench/cost.py's measures), with the append-only file off, then on.

    .venv/bin/python -m bench.native_ab BEFORE.so AFTER.so [--jobs 5000] [--rounds 7] [--aof-rounds 5]

Two servers, one per build; each serves the scripts (wire 4), its native build (wire 6) and
the primitive floor, so every ratio is paired within one server and one round. Rounds
interleave the servers and rotate the executor order, so the machine's noise falls on every
side alike. Prints, per build, the median and range of the per-round ratios
(commandstats µs and main-thread CPU), and the after/before ratio of the native lifecycle.
To build a commit's module: `git worktree add /tmp/old <commit>` and
`cargo build --release --manifest-path /tmp/old/trafikey/Cargo.toml`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import BenchServer, say, summary
from .cost import run_executor

EXECUTORS = ("scripts", "native", "floor")


def rounds(servers: dict[str, BenchServer], n: int, count: int) -> dict[str, list[dict[str, Any]]]:
    """``count`` rounds; per build and round, each executor's lifecycle reading."""
    raw: dict[str, list[dict[str, Any]]] = {build: [] for build in servers}
    builds = list(servers)
    for r in range(count):
        for build in builds[r % 2:] + builds[: r % 2]:
            order = EXECUTORS[r % 3:] + EXECUTORS[: r % 3]
            say(f"round {r + 1}/{count}: {build} ({', '.join(order)})")
            raw[build].append({name: run_executor(servers[build], name, n, lifecycle_only=True)["lifecycle"]
                               for name in order})
    return raw


def ratios(raw: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for build, rs in raw.items():
        for a, b in (("native", "scripts"), ("native", "floor")):
            for key in ("usec", "cpu_us"):
                out[f"{build} {a}/{b} {key}"] = summary(x[a][key] / x[b][key] for x in rs)
        for name in EXECUTORS:
            for key in ("usec", "cpu_us"):
                out[f"{build} {name} {key}"] = summary(x[name][key] for x in rs)
    before, after = raw["before"], raw["after"]
    for key in ("usec", "cpu_us"):
        out[f"after/before native {key}"] = summary(a["native"][key] / b["native"][key]
                                                    for a, b in zip(after, before))
    return out


def show(title: str, table: dict[str, Any]) -> None:
    print(f"\n{title}")
    for name, s in table.items():
        print(f"  {name:<34} {s['median']:7.3f}  ({s['min']:.3f}–{s['max']:.3f})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--aof-rounds", type=int, default=5)
    p.add_argument("--json", help="write the raw readings and ratios here")
    args = p.parse_args(argv)
    result: dict[str, Any] = {"jobs": args.jobs}
    with BenchServer(args.before) as before, BenchServer(args.after) as after:
        servers = {"before": before, "after": after}
        for label, count, aof in (("aof off", args.rounds, False), ("aof on", args.aof_rounds, True)):
            if not count:
                continue
            for server in servers.values():
                server.set_aof(aof)
            raw = rounds(servers, args.jobs, count)
            result[label] = {"raw": raw, "ratios": ratios(raw)}
            show(f"{label}: {count} rounds x {args.jobs} lifecycles", result[label]["ratios"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
