"""Producers: the asyncio client's enqueue throughput next to the sync batch path.

Per wire, ``n`` no-op jobs (20,000 by default) into an empty queue, ``rounds`` times:

* **sync enqueue_many** -- one thread, ``echomq.Queue.enqueue_many`` in pipelined batches
  of 1,000: the fastest way the sync client admits jobs;
* **async, 50 tasks** -- ``echomq.aio.Queue.enqueue`` awaited one job at a time by 50
  concurrent tasks on one event loop and one connection pool (``max_connections`` 50),
  as a web service's request handlers would;
* **async enqueue_many** -- the asyncio batch path, the same batches as the sync one.

The ratio row is sync enqueue_many / async 50 tasks (the issue's target: within 2x).

``--producers-before REV`` (a before/after in one run): each round also runs the two asyncio
measures with the echomq package as of ``REV``; both sides then run in a fresh process each
(``python -m bench.producers MEASURE URL WIRE N``, started in the tree it measures), their order
alternating from round to round, and the rows ``... now/before`` are their ratios.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import echomq
from echomq import Queue, aio, connect

from .common import ROOT, BenchServer, say, summary

BATCH = 1_000
TASKS = 50


def _sync_batches(url: str, wire: int, n: int) -> float:
    with connect(url, wire=wire) as conn:
        queue = Queue(conn, "bench-producers")
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            queue.enqueue_many([{"n": i} for i in range(start, min(n, start + BATCH))])
        return n / (time.perf_counter() - started)


async def _async_tasks(url: str, wire: int, n: int) -> float:
    async with await aio.connect(url, wire=wire, max_connections=TASKS) as conn:
        queue = aio.Queue(conn, "bench-producers")
        per_task = [range(t, n, TASKS) for t in range(TASKS)]

        async def produce(numbers: range) -> None:
            for i in numbers:
                await queue.enqueue({"n": i})

        started = time.perf_counter()
        await asyncio.gather(*(produce(numbers) for numbers in per_task))
        return n / (time.perf_counter() - started)


async def _async_batches(url: str, wire: int, n: int) -> float:
    async with await aio.connect(url, wire=wire) as conn:
        queue = aio.Queue(conn, "bench-producers")
        started = time.perf_counter()
        for start in range(0, n, BATCH):
            await queue.enqueue_many([{"n": i} for i in range(start, min(n, start + BATCH))])
        return n / (time.perf_counter() - started)


ASYNC_MEASURES = {"async_tasks": _async_tasks, "async_enqueue_many": _async_batches}


def _measured_in(tree: Path, what: str, url: str, wire: int, n: int) -> float:
    """The asyncio measure ``what`` in a fresh process started in ``tree``, on its ``echomq``."""
    done = subprocess.run([sys.executable, "-m", "bench.producers", what, url, str(wire), str(n)], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    if not Path(out["echomq"]).is_relative_to(tree):
        raise RuntimeError(f"measured {out['echomq']}, not the echomq of {tree}")
    return out["jobs_per_s"]


def run(server: BenchServer, *, wires: list[int], n: int, rounds: int, before: Path | None = None,
        before_label: str = "") -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for wire in wires:
        raw: dict[str, list[float]] = {"sync_enqueue_many": [], "async_tasks": [], "async_enqueue_many": [],
                                       "sync/async_tasks": []}
        if before is not None:
            raw.update({f"{what}{side}": [] for what in ASYNC_MEASURES for side in (" before", " now/before")})
        for r in range(rounds):
            say(f"producers round {r + 1}/{rounds}: wire {wire}")
            server.use(wire)
            raw["sync_enqueue_many"].append(_sync_batches(server.url, wire, n))
            if before is None:
                for what, measure in ASYNC_MEASURES.items():
                    server.use(wire)
                    raw[what].append(asyncio.run(measure(server.url, wire, n)))
            else:
                sides = [("", ROOT), (" before", before)]
                for side, tree in sides if r % 2 == 0 else sides[::-1]:
                    for what in ASYNC_MEASURES:
                        server.use(wire)
                        raw[what + side].append(_measured_in(tree, what, server.url, wire, n))
                for what in ASYNC_MEASURES:
                    raw[f"{what} now/before"].append(raw[what][-1] / raw[f"{what} before"][-1])
            raw["sync/async_tasks"].append(raw["sync_enqueue_many"][-1] / raw["async_tasks"][-1])
        table[f"wire {wire}"] = {key: summary(values) for key, values in raw.items()}
    return {"n": n, "rounds": rounds, "tasks": TASKS, "batch": BATCH, "before": before_label, "table": table}


if __name__ == "__main__":  # one asyncio measure, in the process _measured_in started
    what, url, wire, n = sys.argv[1:]
    rate = asyncio.run(ASYNC_MEASURES[what](url, int(wire), int(n)))
    print(json.dumps({"jobs_per_s": rate, "echomq": echomq.__file__}))
