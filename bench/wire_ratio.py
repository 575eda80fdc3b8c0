"""Wire 4's server cost per job against wire 6's, in the peer harness's shape (issue 42, item 5).

    .venv/bin/python -m bench.wire_ratio                       now, 5 rounds
    .venv/bin/python -m bench.wire_ratio --before REV          and both wires as of REV, in the same run
    .venv/bin/python -m bench.wire_ratio --json out.json

Each round runs ``emq worker`` with its defaults (results kept) on each system, 2 worker processes
and 20,000 no-op jobs from one producer, as ``python -m bench``'s e2e section runs it (bench/e2e.py
``throughput``: the server's main-thread CPU per job, the producer's enqueues included); the rounds
interleave the systems, so a pair shares the moment's load, and the ratio wire 4 / wire 6 is read
round by round. Then, per system, bench/script_costs.py says where each µs goes: the same server
work in phases (the producer's enqueues, the claims, the kept completions), each phase's commands by
name from INFO commandstats (a script by its name), per job.
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
from .systems import System, child_env, echomq_at, echomq_system


def script_costs(server: BenchServer, system: System, jobs: int) -> dict[str, Any]:
    """bench/script_costs.py's phases for ``system``'s wire, run in its echomq tree on a wiped node."""
    server.use(system.brand)
    done = subprocess.run([sys.executable, "-m", "bench.script_costs", server.url, str(system.brand), str(jobs)],
                          cwd=system.cwd or ROOT, env=child_env(server.url, "costs"), capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


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
            attribution[system.name] = script_costs(server, system, args.jobs)
    cpu = {name: [run["server_cpu_us_per_job"] for run in values] for name, values in runs.items()}
    out = {"rounds": args.rounds, "jobs": args.jobs, "processes": args.processes, "before": args.before,
           "cpu_us_per_job": {name: {"median": statistics.median(v), "runs": v} for name, v in cpu.items()},
           "jobs_per_s": {name: statistics.median(run["jobs_per_s"] for run in values) for name, values in runs.items()},
           "ratios": {f"{four} / {six}": {"median": statistics.median(a / b for a, b in zip(cpu[four], cpu[six])),
                                          "runs": [a / b for a, b in zip(cpu[four], cpu[six])]}
                      for four, six in pairs},
           "attribution": attribution}
    print(json.dumps({"cpu": out["cpu_us_per_job"], "ratios": out["ratios"]}, indent=1))
    for name, phases in attribution.items():
        print(f"\n{name}: server µs a job by phase (bench/script_costs.py), commandstats")
        for phase, found in phases.items():
            top = {c: v for c, v in found["commands"].items() if c.startswith(("script ", "emq."))}
            others = sum(v["calls_per_job"] for c, v in found["commands"].items() if c not in top)
            print(f"  {phase:8} CPU {found['cpu_us_per_job']:6.2f}  " + "  ".join(
                f"{c} {v['us_per_job']:.2f} µs ({v['calls_per_job']:.2f} calls)" for c, v in top.items())
                + f"  other commands {others:.2f} a job")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
