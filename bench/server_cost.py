"""Server CPU per verb call, wire 4 (scripts) vs wire 6 (trafikey), from INFO commandstats.

Both nodes are embedded servers started by this script, side by side in one run.
Each verb gets its own phase: the state it needs is prepared, CONFIG RESETSTAT,
then N calls, then the top-level command's usec (EVALSHA on wire 4, EMQ.* on
wire 6; both include the inner commands they run) divided by its calls. Repeated
``--rounds`` times; the median is reported with the spread, and the ratio.

    .venv/bin/python bench/server_cost.py [--jobs 2000] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import os
import argparse
import json
import statistics
import sys

from echomq import EmbeddedServer, Queue, connect, module_path
from echomq._protocol.ids import new_id
from echomq._protocol.verbs import BY_NAME

LEASE_MS = 60_000


def top_level_usec(client, wire: int, verb_command: str) -> tuple[int, int]:
    # module commands keep their registered case in INFO (cmdstat_EMQ.CLAIM): match without case
    stats = {name.lower(): entry for name, entry in client.info("commandstats").items()}
    name = "cmdstat_evalsha" if wire == 4 else "cmdstat_" + verb_command.lower()
    entry = stats.get(name, {"calls": 0, "usec": 0})
    return int(entry["calls"]), int(entry["usec"])


def phases(queue: Queue, n: int):
    """(verb, run) pairs in an order where each phase leaves the state the next moves from."""
    ids = [new_id() for _ in range(n)]
    held = []

    def enqueue():
        for job_id in ids:
            queue.enqueue("x", id=job_id)

    def claim():
        held.clear()
        for _ in range(n):
            held.append(queue.claim(LEASE_MS))

    def extend():
        for job in held:
            queue.extend(job, LEASE_MS)

    def extends():
        for start in range(0, len(held), 100):
            queue.extend_many(held[start : start + 100], LEASE_MS)

    def complete():
        for job in held:
            queue.complete(job)

    def fail():
        for job in held:
            queue.fail(job, "boom", max_attempts=10, backoff_ms=0)

    def schedule():
        for _ in range(n):
            queue.schedule("x", 0)

    def promote():
        while queue.promote(100):
            pass

    return [
        ("enqueue", enqueue),
        ("claim", claim),
        ("extend", extend),
        ("extends", extends),
        ("fail", fail),  # back to pending (no backoff) ...
        ("claim", claim),  # ... so they can be claimed again (counted once: the first claim phase)
        ("complete", complete),
        ("schedule", schedule),
        ("promote", promote),
    ]


def measure(server: EmbeddedServer, wire: int, n: int) -> dict[str, float]:
    conn = connect(server.url, wire=wire)
    queue = Queue(conn, f"bench{os.urandom(3).hex()}")
    client = server.client(decode_responses=True)
    out: dict[str, float] = {}

    for verb, run in phases(queue, n):
        client.config_resetstat()
        run()
        calls, usec = top_level_usec(client, wire, BY_NAME[verb].command)
        if calls:
            out.setdefault(verb, usec / calls)
    out["lifecycle"] = out["enqueue"] + out["claim"] + out["complete"]
    conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)

    rounds: dict[int, list[dict[str, float]]] = {4: [], 6: []}
    with EmbeddedServer(brand=4) as s4, EmbeddedServer(module=module_path(), brand=6) as s6:
        for _ in range(args.rounds):
            for wire, server in ((4, s4), (6, s6)):  # interleaved: the same noise for both
                rounds[wire].append(measure(server, wire, args.jobs))

    verbs = list(rounds[4][0])
    rows = []
    print(f"server µs per call, median of {args.rounds} rounds of {args.jobs} calls (spread = max-min)")
    print(f"{'verb':<10} {'wire 4':>14} {'wire 6':>14} {'6/4':>6}")
    for verb in verbs:
        med = {w: statistics.median(r[verb] for r in rounds[w]) for w in (4, 6)}
        spread = {w: max(r[verb] for r in rounds[w]) - min(r[verb] for r in rounds[w]) for w in (4, 6)}
        ratio = med[6] / med[4]
        rows.append({"verb": verb, "wire4_us": med[4], "wire6_us": med[6], "ratio": ratio,
                     "wire4_spread": spread[4], "wire6_spread": spread[6]})
        print(f"{verb:<10} {med[4]:>8.2f} ±{spread[4]:<4.1f} {med[6]:>8.2f} ±{spread[6]:<4.1f} {ratio:>6.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"jobs": args.jobs, "rounds": args.rounds, "rows": rows}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
