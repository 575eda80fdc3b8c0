"""An idle ``emq worker`` on each wire, and the same worker at an earlier revision (a before/after):

* **pick-up** -- one idle worker, M single jobs sent with idle gaps of LO..HI ms; enqueue →
  handler start, p50/p99 (the e2e section's measure, :func:`bench.e2e.latency`);
* **delayed lateness** -- one idle worker, M jobs each scheduled D ms ahead, sent with the same
  gaps; the job's due time → its handler's start, p50/p99 (a worker that promotes once a
  second is up to a second late);
* **idle commands/s** -- one idle worker, warmed up, then S seconds with nothing to do: every
  command the server executed meanwhile (INFO commandstats: commands inside scripts count,
  the harness's own and the probe's do not) / S.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from .common import BenchServer, percentile, say
from .e2e import LAT_KEY, PROBE_COMMANDS, RunFailed, Workers, latency, produce, wait_done, warm
from .systems import System


def lateness(server: BenchServer, system: System, m: int, lo_ms: int, hi_ms: int, delay_ms: int) -> dict[str, float]:
    server.use(system.brand)
    queue = "bench"
    with Workers(system, server.url, queue, 1) as workers:
        base = warm(server, system, workers, queue)
        produce(system, server.url, queue, m, lo_ms, hi_ms, delay_ms, what="delayed")
        wait_done(server, base + m, 60 + m * hi_ms / 1000, workers)
        time.sleep(0.02)
    values = sorted(float(v) for v in server.client.lrange(LAT_KEY, 0, -1))
    return {"p50_ms": percentile(values, 0.50), "p99_ms": percentile(values, 0.99),
            "max_ms": values[-1] if values else float("nan"), "n": len(values)}


def idle_rate(server: BenchServer, system: System, seconds: float) -> float:
    server.use(system.brand)
    queue = "bench"
    with Workers(system, server.url, queue, 1) as workers:
        warm(server, system, workers, queue)
        time.sleep(1.0)  # let it settle into idling
        server.reset_stats()
        time.sleep(seconds)
        stats = server.commandstats()
        workers.check()
    return sum(calls for name, (calls, _) in stats.items() if name not in PROBE_COMMANDS) / seconds


def run(server: BenchServer, systems: list[System], *, m: int, lo: int, hi: int, delay_ms: int,
        idle_s: float) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for system in systems:
        entry: dict[str, Any] = {"config": system.config}
        try:
            say(f"idle: {system.name}, pick-up latency, {m} jobs")
            entry["pickup"] = latency(server, system, m, lo, hi)
            say(f"idle: {system.name}, delayed-job lateness, {m} jobs {delay_ms} ms ahead")
            entry["lateness"] = lateness(server, system, m, lo, hi, delay_ms)
            say(f"idle: {system.name}, idle commands over {idle_s:.0f} s")
            entry["idle_commands_per_s"] = idle_rate(server, system, idle_s)
        except (RunFailed, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            say(f"idle: {system.name} failed: {exc}")
            entry["failed"] = str(exc)[:500]
        table[system.name] = entry
    return {"jobs": m, "gap_ms": [lo, hi], "delay_ms": delay_ms, "idle_s": idle_s, "table": table}
