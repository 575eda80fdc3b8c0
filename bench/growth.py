"""Cost growth: server µs per job lifecycle and memory per queued job, as the queue grows.

For each size S (10³ … 10⁶) and each executor: wipe the node, fill the queue with S
jobs through the executor's own enqueue (the floor: its plain HSET + ZADD), read the
memory, then run ``m`` lifecycles (enqueue + claim + complete, as bench/cost.py) on
top of the S queued jobs, ``rounds`` times. Memory per queued job is
(used_memory after the fill - before) / S, from INFO memory; MEMORY USAGE of one row
and of the pending zset (per member) shows where it goes.
"""

from __future__ import annotations

from typing import Any

from .common import BenchServer, say, summary
from .cost import open_executor, run_executor


def memory_of(server: BenchServer, executor: Any, size: int) -> dict[str, float]:
    client = server.client
    if hasattr(executor, "queue"):
        keys = executor.queue.keys
        pending, first = keys.pending, keys.job(client.zrange(keys.pending, 0, 0)[0].decode())
    else:
        pending, first = executor.base + "pending", executor.base + "job:" + executor.ids[0]
    return {
        "row_bytes": int(client.execute_command("MEMORY", "USAGE", first, "SAMPLES", "0")),
        "pending_bytes_per_job": int(client.execute_command("MEMORY", "USAGE", pending, "SAMPLES", "0")) / size,
    }


def run(server: BenchServer, *, executors: list[str], sizes: list[int], m: int, rounds: int) -> dict[str, Any]:
    table: dict[str, dict[str, Any]] = {}
    for size in sizes:
        for name in executors:
            say(f"growth: {name} at {size} queued jobs")
            executor = open_executor(server, name)
            try:
                before = server.used_memory()
                executor.fill(size)
                after = server.used_memory()
                memory = memory_of(server, executor, size)
                readings = [run_executor(server, name, m, executor, lifecycle_only=True) for _ in range(rounds)]
            finally:
                executor.close()
            table.setdefault(name, {})[str(size)] = {
                "memory_per_job_bytes": (after - before) / size,
                **memory,
                "lifecycle_usec": summary(r["lifecycle"]["usec"] for r in readings),
                "lifecycle_cpu_us": summary(r["lifecycle"]["cpu_us"] for r in readings),
                **{f"{verb}_usec": summary(r[verb]["usec"] for r in readings) for verb in ("enqueue", "claim", "complete")},
            }
        server.wipe()
    return {"sizes": sizes, "m": m, "rounds": rounds, "table": table}
