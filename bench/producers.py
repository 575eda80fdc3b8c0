"""Producers: the asyncio client's enqueue throughput next to the sync batch path.

Per wire, ``n`` no-op jobs (20,000 by default) into an empty queue, ``rounds`` times:

* **sync enqueue_many** -- one thread, ``echomq.Queue.enqueue_many`` in pipelined batches
  of 1,000: the fastest way the sync client admits jobs;
* **async, 50 tasks** -- ``echomq.aio.Queue.enqueue`` awaited one job at a time by 50
  concurrent tasks on one event loop and one connection pool (``max_connections`` 50),
  as a web service's request handlers would;
* **async enqueue_many** -- the asyncio batch path, the same batches as the sync one.

The ratio row is sync enqueue_many / async 50 tasks (the issue's target: within 2x).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from echomq import Queue, aio, connect

from .common import BenchServer, say, summary

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


def run(server: BenchServer, *, wires: list[int], n: int, rounds: int) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for wire in wires:
        raw: dict[str, list[float]] = {"sync_enqueue_many": [], "async_tasks": [], "async_enqueue_many": [],
                                       "sync/async_tasks": []}
        for r in range(rounds):
            say(f"producers round {r + 1}/{rounds}: wire {wire}")
            server.use(wire)
            raw["sync_enqueue_many"].append(_sync_batches(server.url, wire, n))
            server.use(wire)
            raw["async_tasks"].append(asyncio.run(_async_tasks(server.url, wire, n)))
            server.use(wire)
            raw["async_enqueue_many"].append(asyncio.run(_async_batches(server.url, wire, n)))
            raw["sync/async_tasks"].append(raw["sync_enqueue_many"][-1] / raw["async_tasks"][-1])
        table[f"wire {wire}"] = {key: summary(values) for key, values in raw.items()}
    return {"n": n, "rounds": rounds, "tasks": TASKS, "batch": BATCH, "table": table}
