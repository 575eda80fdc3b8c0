"""What a result waiter's count costs the settle path (issue 37): server µs per COMPLETE with the
queue's ``meta`` in each state a waiter leaves it, interleaved in rounds.

    .venv/bin/python -m bench.waiter_cost [--rounds 5] [--jobs 20000] [--wires 4,6] [--json FILE]

Each round and wire, per state: N jobs enqueued and claimed, then completed in batches as a worker
keeping no results completes them (COMPLETES), timed by INFO commandstats (the settle's top-level
command only). States of ``meta``: ``absent`` (no waiter ever: no meta key); ``zero``: ``waiters 0``
with no expiry (what a waiter left before issue 37); ``zero, expiring``: ``waiters 0`` with a field
expiry (what one leaves now); ``expired``: the field expired and reclaimed (the hash keeps the
encoding of a hash that had a field expiry); ``waiting``: a live count, so every settle also tells
the outcome channel (nobody subscribed). Ratios per round against ``absent``: the settle must not
grow when nobody waits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from echomq import Queue, connect
from echomq._protocol.results import WAITER_TTL_S

from .common import BenchServer, say, trafikey_module
from .report import table

BATCH = 100
LEASE_MS = 600_000
STATES = ("absent", "zero", "zero, expiring", "expired", "waiting")
SETTLE_COMMANDS = {4: "evalsha", 6: "emq.completes"}


def prepare(queue: Queue, state: str) -> None:
    client, meta = queue.connection.client, queue.keys.meta
    if state == "absent":
        return
    client.hset(meta, "waiters", 1 if state == "waiting" else 0)
    if state in ("zero, expiring", "expired"):
        ttl_ms = 1 if state == "expired" else WAITER_TTL_S * 1000 * 100  # "zero, expiring" outlives the run
        client.execute_command("HPEXPIRE", meta, ttl_ms, "FIELDS", 1, "waiters")
    if state == "expired":
        while client.hlen(meta):  # reclaimed by the server's active expiry
            time.sleep(0.01)


def settle_us(server: BenchServer, wire: int, state: str, n: int) -> float:
    """Server µs per job of the completes, on a fresh queue whose meta is in ``state``."""
    server.use(wire)
    with connect(server.url, wire=wire) as connection:
        queue = Queue(connection, "waited")
        prepare(queue, state)
        for at in range(0, n, BATCH):
            queue.enqueue_many(["x"] * min(BATCH, n - at))
        held = []
        while len(held) < n:
            held += queue.claim_many(BATCH, LEASE_MS)
        server.reset_stats()
        for at in range(0, n, BATCH):
            queue.complete_many(held[at:at + BATCH])
        calls, usec = server.commandstats()[SETTLE_COMMANDS[wire]]
        assert queue.counts().total == 0 and calls == -(-n // BATCH), (calls, queue.counts())
    return usec / n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--wires", default="4,6")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    wires = [int(w) for w in args.wires.split(",")]
    runs: dict[str, list[float]] = {}
    with BenchServer(trafikey_module()[0] if 6 in wires else None) as server:
        for rnd in range(args.rounds):
            for wire in wires:
                for state in STATES:
                    took = settle_us(server, wire, state, args.jobs)
                    runs.setdefault(f"{wire}/{state}", []).append(took)
                    say(f"round {rnd + 1}: wire {wire}, meta {state}: {took:.3f} µs a settle")
    print(f"\nserver µs per COMPLETE (as COMPLETES of {BATCH}), {args.jobs} jobs, median of {args.rounds} rounds; "
          "ratio per round against absent, median (min-max)")
    rows = []
    for wire in wires:
        base = runs[f"{wire}/absent"]
        for state in STATES:
            mine = runs[f"{wire}/{state}"]
            ratios = [m / b for m, b in zip(mine, base)]
            rows.append([str(wire), state, f"{statistics.median(mine):.3f}",
                         f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"])
    print("\n".join(table(["wire", "meta", "µs a settle", "/ absent"], rows)))
    if args.json:
        args.json.write_text(json.dumps({"jobs": args.jobs, "rounds": args.rounds, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
