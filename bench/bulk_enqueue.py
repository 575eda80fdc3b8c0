"""Bulk enqueue: which batch size and streamed part send the most jobs/s (issue 44, item 4).

    .venv/bin/python -m bench.bulk_enqueue [--jobs 20000] [--rounds 3] [--batches 100,250,500,1000]
                                           [--depths 1,2,4,8,0]

Per wire, ``--jobs`` no-op jobs into an empty queue through ``enqueue_many``'s own path
(``op_enqueue_into``) with each shape: ``batch`` jobs per ENQUEUES, and every ENQUEUES in one round
trip, which the connection streams: ``depth`` ENQUEUES a part, each part sent before the replies
of the one before it are read (0: every command written at once, read after). The default shape
is ``ENQUEUES_SIZE`` with the connection's own parts (``STREAM_ARGS`` arguments: "auto"). Rounds
interleave the shapes and the wires, so each round's figures share that moment's load; the table
gives jobs/s (client and server together: the producer's whole cost), its ratio to the default's
round by round, the producer's and the server's CPU µs a job together (which a shared machine's
load barely moves: on two busy cores, read it beside jobs/s), and the server's main-thread CPU µs
a job alone.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from echomq import Queue, connect
from echomq._client.connection import run_op
from echomq._core.admission import ENQUEUES_SIZE, op_enqueue_into

from .common import BenchServer, machine, say, summary, trafikey_module

AUTO = -1  #: the depth of the connection's own parts (STREAM_ARGS)


def enqueued(url: str, wire: int, n: int, batch: int, depth: int) -> tuple[float, float]:
    """One ``enqueue_many`` of ``n`` no-op jobs sent in the shape (batch, depth): its jobs/s, and
    the producer's own CPU µs a job (this process; the load of a shared machine barely moves it)."""
    with connect(url, wire=wire) as conn:
        queue = Queue(conn, "bench-bulk")
        if depth != AUTO:  # a part ends at the command that brings it to depth * 3 * batch arguments
            conn.stream_args = depth * 3 * batch if depth else 1 << 62
        started, cpu = time.perf_counter(), time.process_time()
        run_op(conn, op_enqueue_into([(queue, range(n))], [{}] * n, 0, batch=batch), queue.keys)
        return n / (time.perf_counter() - started), (time.process_time() - cpu) * 1e6 / n


def run(server: BenchServer, wires: list[int], n: int, rounds: int, batches: list[int],
        depths: list[int]) -> dict[str, Any]:
    shapes = [(b, d) for b in batches for d in depths]
    default = (ENQUEUES_SIZE, AUTO)
    if default not in shapes:
        shapes.append(default)
    rate: dict[tuple[int, int, int], list[float]] = {}
    cpu: dict[tuple[int, int, int], list[float]] = {}
    producer: dict[tuple[int, int, int], list[float]] = {}
    for r in range(rounds):
        order = shapes if r % 2 == 0 else shapes[::-1]
        for wire in wires:
            for batch, depth in order:
                server.use(wire)
                before = server.cpu_seconds()
                jobs_per_s, producer_us = enqueued(server.url, wire, n, batch, depth)
                rate.setdefault((wire, batch, depth), []).append(jobs_per_s)
                producer.setdefault((wire, batch, depth), []).append(producer_us)
                cpu.setdefault((wire, batch, depth), []).append((server.cpu_seconds() - before) * 1e6 / n)
        say(f"bulk enqueue: round {r + 1}/{rounds} done")
    table: dict[str, Any] = {}
    for wire in wires:
        base = rate[(wire, *default)]
        for batch, depth in shapes:
            mine = rate[(wire, batch, depth)]
            table[f"{wire}/{batch}/{depth}"] = {
                "wire": wire, "batch": batch, "depth": depth, "jobs_per_s": summary(mine),
                "vs_default": summary(m / b for m, b in zip(mine, base)),
                "server_cpu_us_per_job": summary(cpu[(wire, batch, depth)]),
                "producer_cpu_us_per_job": summary(producer[(wire, batch, depth)]),
                "cpu_us_per_job": summary(s + p for s, p in zip(cpu[(wire, batch, depth)],
                                                                producer[(wire, batch, depth)]))}
    return {"jobs": n, "rounds": rounds, "default": list(default), "table": table}


def shown(depth: int) -> str:
    return "auto" if depth == AUTO else str(depth) if depth else "all at once"


def lines(result: dict[str, Any]) -> list[str]:
    """The section as page lines: one row per shape and wire."""
    batch, depth = result["default"]
    out = [f"{result['jobs']:,} no-op jobs into an empty queue per shape, {result['rounds']} rounds interleaved; "
           f"every ENQUEUES in one round trip, streamed in parts of depth ENQUEUES (0: written at once; auto: "
           f"the connection's own parts). vs default = jobs/s / the default shape's ({batch} × auto), round by "
           f"round.", "",
           "| wire | jobs per ENQUEUES | ENQUEUES a streamed part | jobs/s | vs default | producer + server "
           "CPU µs / job | server CPU µs / job |",
           "|---|---|---|---|---|---|---|"]
    for row in result["table"].values():
        j, v = row["jobs_per_s"], row["vs_default"]
        out.append(f"| {row['wire']} | {row['batch']} | {shown(row['depth'])} | {j['median']:,.0f} "
                   f"({j['min']:,.0f}–{j['max']:,.0f}) | {v['median']:.2f} ({v['min']:.2f}–{v['max']:.2f}) "
                   f"| {row['cpu_us_per_job']['median']:.2f} | {row['server_cpu_us_per_job']['median']:.2f} |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bulk_enqueue", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", default="100,250,500,1000")
    p.add_argument("--depths", default="1,2,4,8,0")
    p.add_argument("--wires", default="6,4")
    p.add_argument("--json")
    args = p.parse_args(argv)
    module, why = trafikey_module()
    wires = [int(w) for w in args.wires.split(",") if w]
    if module is None and 6 in wires:
        say(f"wire 6 skipped: {why}")
        wires.remove(6)
    with BenchServer(module) as server:
        result = run(server, wires, args.jobs, args.rounds, [int(b) for b in args.batches.split(",")],
                     [int(d) for d in args.depths.split(",")])
    result["machine"] = machine()
    print("\n".join(lines(result)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    for wire in wires:
        rows = [r for r in result["table"].values() if r["wire"] == wire]
        fast = max(rows, key=lambda r: r["vs_default"]["median"])
        lean = min(rows, key=lambda r: r["cpu_us_per_job"]["median"])
        say(f"wire {wire}: most jobs/s at {fast['batch']} × {shown(fast['depth'])} "
            f"({fast['vs_default']['median']:.2f}× the default); least CPU a job at {lean['batch']} × "
            f"{shown(lean['depth'])} ({lean['cpu_us_per_job']['median']:.2f} µs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
