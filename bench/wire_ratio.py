"""Wire 4's server cost per job against wire 6's, in the peer harness's shape (issue 42, item 5).

    .venv/bin/python -m bench.wire_ratio                       now, 5 rounds
    .venv/bin/python -m bench.wire_ratio --before REV          and both wires as of REV, in the same run
    .venv/bin/python -m bench.wire_ratio --json out.json

Each round runs ``emq worker`` with its defaults (results kept) on each system, 2 worker processes
and 20,000 no-op jobs from one producer, as ``python -m bench``'s e2e section runs it (bench/e2e.py
``throughput``: the server's main-thread CPU per job, the producer's enqueues included); the rounds
interleave the systems, so a pair shares the moment's load, and the ratio wire 4 / wire 6 is read
round by round. Then one more run per system, with the server's slow log at 0 µs, says where each
µs goes: every top-level command's time by what it is (a script by its name), per job. The slow log
counts what commandstats counts (execution, not parsing or I/O), so its total is below the CPU;
it is a run of its own because logging every command costs the server a little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

from . import e2e
from .common import ROOT, BenchServer, say, trafikey_module
from .systems import System, echomq_at, echomq_system

SLOWLOG_MAX = 1_000_000


def script_names(system: System) -> dict[str, str]:
    """sha1 -> name of every script as ``system``'s echomq tree loads it (an older one for --before)."""
    code = ("import hashlib, json; from echomq.verbs import SCRIPTED; "
            "print(json.dumps({hashlib.sha1(v.source()).hexdigest(): v.name for v in SCRIPTED}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=system.cwd or ROOT, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def attribute(server: BenchServer, system: System, k: int, n: int, shas: dict[str, str]) -> dict[str, Any]:
    """One throughput run with every command logged: µs and calls per job, by command (a script by name)."""
    client = server.client
    old = {name: client.config_get(name)[name] for name in ("slowlog-log-slower-than", "slowlog-max-len")}
    client.config_set("slowlog-max-len", SLOWLOG_MAX)
    client.config_set("slowlog-log-slower-than", 0)
    try:
        client.slowlog_reset()
        run = e2e.throughput(server, system, k, n, window_s=120)
        entries = client.execute_command("SLOWLOG", "GET", SLOWLOG_MAX)
    finally:
        for name, value in old.items():
            client.config_set(name, value)
    by: dict[str, list[float]] = {}
    for entry in entries:
        micros, argv = int(entry[2]), entry[3]
        name = argv[0].decode().lower() if argv else "?"
        if name in ("evalsha", "evalsha_ro") and len(argv) > 1:
            name = "script " + shas.get(argv[1].decode(), argv[1].decode()[:8])
        elif name in ("slowlog", "config", "info", "incrbyfloat", "getrange", "flushall", "memory"):
            continue  # the harness's and the probe's own
        calls_us = by.setdefault(name, [0, 0])
        calls_us[0] += 1
        calls_us[1] += micros
    done = run["done"]
    return {"server_cpu_us_per_job": run["server_cpu_us_per_job"], "done": done, "logged": len(entries),
            "commands": {name: {"calls_per_job": c / done, "us_per_job": us / done, "us_per_call": us / c}
                         for name, (c, us) in sorted(by.items(), key=lambda kv: -kv[1][1])}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wire_ratio", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--before", default="", metavar="REV", help="also both wires with the echomq package as of REV")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args(argv)
    module, why = trafikey_module()
    if module is None:
        print(f"no trafikey build: {why}", file=sys.stderr)
        return 2
    systems = [echomq_system(6, "emq"), echomq_system(4, "emq")]
    if args.before:
        systems += [echomq_at(args.before, 6), echomq_at(args.before, 4)]
    pairs = [(systems[1].name, systems[0].name)] + ([(systems[3].name, systems[2].name)] if args.before else [])
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in systems}
    with BenchServer(module) as server:
        for r in range(args.rounds):
            for system in systems[r % len(systems):] + systems[: r % len(systems)]:
                say(f"wire_ratio round {r + 1}/{args.rounds}: {system.name}")
                runs[system.name].append(e2e.throughput(server, system, args.processes, args.jobs, window_s=120))
        attribution = {}
        for system in systems:
            say(f"wire_ratio: where the µs go, {system.name}")
            attribution[system.name] = attribute(server, system, args.processes, args.jobs, script_names(system))
    cpu = {name: [run["server_cpu_us_per_job"] for run in values] for name, values in runs.items()}
    out = {"rounds": args.rounds, "jobs": args.jobs, "processes": args.processes, "before": args.before,
           "cpu_us_per_job": {name: {"median": statistics.median(v), "runs": v} for name, v in cpu.items()},
           "jobs_per_s": {name: statistics.median(run["jobs_per_s"] for run in values) for name, values in runs.items()},
           "ratios": {f"{four} / {six}": {"median": statistics.median(a / b for a, b in zip(cpu[four], cpu[six])),
                                          "runs": [a / b for a, b in zip(cpu[four], cpu[six])]}
                      for four, six in pairs},
           "attribution": attribution}
    print(json.dumps({"cpu": out["cpu_us_per_job"], "ratios": out["ratios"]}, indent=1))
    for name, found in attribution.items():
        print(f"\n{name}: {found['server_cpu_us_per_job']:.1f} µs CPU a job; logged µs a job by command:")
        for command, v in found["commands"].items():
            print(f"  {command:32} {v['calls_per_job']:7.3f} calls  {v['us_per_call']:7.2f} µs/call  "
                  f"{v['us_per_job']:6.2f} µs/job")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
