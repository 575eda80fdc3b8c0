"""End to end: no-op job throughput with 1, 2, 4 worker processes; bulk enqueue; idle pick-up latency.

Every queue (EchoMQ on each wire, every peer) is measured the same way, on the same
server, the node wiped between runs:

* **throughput** -- start k worker processes on an empty queue, warm them up (20 jobs
  per process, wait until all are done), then one producer process enqueues N jobs
  through the queue's fastest enqueue while the workers run. Throughput = N / (time
  from the producer's first enqueue to the N-th job counted done); a queue too slow to
  finish within the window is timed on the window (jobs done by then / time). Done is counted by
  the handlers themselves (probe.py: a process-local counter added to the server every
  2 ms, never a round trip per job), so every queue is timed by one clock and one rule.
* **bulk enqueue** -- no workers; the same producer, about two seconds' worth of jobs
  (at most N); jobs/s. A throughput run gets no more jobs than its producer enqueues in
  half the window.
* **idle pick-up latency** -- one idle worker; M jobs enqueued one at a time with idle
  gaps between LO and HI ms (the same gaps for every queue); the handler's start minus
  the enqueue time, p50 and p99.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from .common import ROOT, BenchServer, percentile, say, summary
from .systems import System, child_env

DONE_KEY = b"bench:done"
LAT_KEY = b"bench:lat"
#: the probe's own commands (probe.py), left out of a queue's server cost
PROBE_COMMANDS = {"incrbyfloat", "getrange"}
WARM_PER_WORKER = 20


class RunFailed(Exception):
    pass


class Workers:
    """k worker processes of one system, each in its own process group (stopped by id)."""

    def __init__(self, system: System, url: str, queue: str, k: int) -> None:
        self.system, self.url, self.queue, self.k = system, url, queue, k
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Any] = []

    def __enter__(self) -> "Workers":
        env = {**child_env(self.url, self.queue), **self.system.env}
        for i in range(self.k):
            log = open(os.devnull, "wb") if not os.environ.get("BENCH_DEBUG") else open(f"/tmp/bench-w{i}.log", "wb")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(self.system.argv("worker", self.url, self.queue),
                                               cwd=self.system.cwd or ROOT, env=env,
                                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.PIPE,
                                               start_new_session=True))
        return self

    def cpu_seconds(self) -> float:
        """CPU time (user + sys, every thread, and children already reaped) of the worker processes
        so far: the client side's cost, which a busy machine slows but does not inflate per job."""
        total = 0
        for proc in self.procs:
            try:
                with open(f"/proc/{proc.pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # not Linux, or already gone: the figure is then left out
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        return total / os.sysconf("SC_CLK_TCK")

    def check(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RunFailed(f"a worker exited with {proc.returncode}: {err.strip()[-400:]}")

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            if proc.stderr:
                proc.stderr.close()
        for log in self.logs:
            log.close()


def produce(system: System, url: str, queue: str, *args: object, timeout: float = 600,
            what: str | None = None) -> dict[str, float]:
    what = what or ("enqueue" if len(args) == 1 else "stamped")
    done = subprocess.run(system.argv(what, url, queue, *args), cwd=system.cwd or ROOT,
                          env={**child_env(url, queue), **system.env},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise RunFailed(f"the producer failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_done(server: BenchServer, target: int, timeout: float, workers: Workers, *,
              partial_ok: bool = False) -> tuple[float, int]:
    """(when, count) once ``target`` jobs are done; at ``timeout``, a failure -- or, with
    ``partial_ok``, what was done by then (a slow queue is timed on a window, not waited for)."""
    deadline = time.monotonic() + timeout
    while True:
        count = int(float(server.client.getrange(DONE_KEY, 0, -1) or 0))
        if count >= target:
            return time.time(), count
        if time.monotonic() > deadline:
            if partial_ok:
                return time.time(), count
            raise RunFailed(f"only {count} of {target} jobs done in {timeout:.0f}s")
        workers.check()
        time.sleep(0.002)


def warm(server: BenchServer, system: System, workers: Workers, queue: str) -> int:
    n = WARM_PER_WORKER * workers.k
    produce(system, server.url, queue, n)
    wait_done(server, n, 120, workers)
    time.sleep(0.3)
    return n


def throughput(server: BenchServer, system: System, k: int, n: int, window_s: float) -> dict[str, float]:
    server.use(system.brand)
    queue = "bench"
    with Workers(system, server.url, queue, k) as workers:
        base = warm(server, system, workers, queue)
        server.reset_stats()
        cpu0, client0 = server.cpu_seconds(), workers.cpu_seconds()
        t = produce(system, server.url, queue, n)
        budget = max(1.0, window_s - (time.time() - t["start"]))
        finished, count = wait_done(server, base + n, budget, workers, partial_ok=True)
        cpu, client_cpu = server.cpu_seconds() - cpu0, workers.cpu_seconds() - client0
        stats = server.commandstats()
    done = count - base
    if done <= 0:
        raise RunFailed(f"no job done within {window_s:.0f}s")
    elapsed = finished - t["start"]
    own = {name: v for name, v in stats.items() if name not in PROBE_COMMANDS}
    # per job done. Commands include those run inside scripts (commandstats counts both, so
    # their usec would count twice: CPU is the cost measure). With a partial window the
    # enqueues of jobs not yet run are counted too, so these read high for such a queue.
    return {"jobs_per_s": done / elapsed, "seconds": elapsed, "done": done, "of": n,
            "enqueue_s": t["end"] - t["start"],
            "server_cpu_us_per_job": cpu * 1e6 / done,
            "worker_cpu_us_per_job": client_cpu * 1e6 / done,
            "commands_per_job": sum(c for c, _ in own.values()) / done}


def bulk_enqueue(server: BenchServer, system: System, n: int, seconds: float = 2.0) -> float:
    """Jobs/s of the producer alone: a 500-job probe, then about ``seconds`` worth (at most ``n``),
    so a slow producer is not waited on for minutes and a fast one is timed on more than a blip."""
    server.use(system.brand)
    t = produce(system, server.url, "bench", 500)
    rate = 500 / max(t["end"] - t["start"], 1e-6)
    n = int(min(n, max(1000, rate * seconds)))
    server.use(system.brand)
    t = produce(system, server.url, "bench", n)
    return n / (t["end"] - t["start"])


def latency(server: BenchServer, system: System, m: int, lo_ms: int, hi_ms: int) -> dict[str, float]:
    server.use(system.brand)
    queue = "bench"
    with Workers(system, server.url, queue, 1) as workers:
        base = warm(server, system, workers, queue)
        time.sleep(hi_ms / 1000)  # idle before the first stamped job too
        produce(system, server.url, queue, m, lo_ms, hi_ms)
        wait_done(server, base + m, 60 + m * hi_ms / 1000, workers)
        time.sleep(0.02)
    values = sorted(float(v) for v in server.client.lrange(LAT_KEY, 0, -1))
    return {"p50_ms": percentile(values, 0.50), "p99_ms": percentile(values, 0.99),
            "max_ms": values[-1] if values else float("nan"), "n": len(values)}


def run(server: BenchServer, systems: list[System], *, processes: list[int], n: int, bulk_n: int, rounds: int,
        lat_m: int, lat_lo: int, lat_hi: int, window_s: float = 30.0,
        latency_only: list[System] = ()) -> dict[str, Any]:
    """Rounds interleave the systems (order rotating), so noise falls on all alike.
    ``latency_only`` systems (worker settings, say) get only the pick-up latency, in round one."""
    raw: dict[str, dict[str, list]] = {s.name: {} for s in [*systems, *latency_only]}
    failures: dict[str, str] = {}
    for system in latency_only if lat_m else ():
        try:
            say(f"e2e: {system.name}, idle pick-up latency, {lat_m} jobs")
            raw[system.name]["latency"] = [latency(server, system, lat_m, lat_lo, lat_hi)]
        except (RunFailed, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
            failures[system.name] = str(exc)[:500]
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[: r % len(systems)]
        for system in order:
            if system.name in failures:
                continue
            try:
                say(f"e2e round {r + 1}/{rounds}: {system.name}, bulk enqueue")
                rate = bulk_enqueue(server, system, bulk_n)
                raw[system.name].setdefault("bulk_enqueue", []).append(rate)
                # no more jobs than its producer can enqueue in half the window: a slow producer
                # must not be what a run waits on
                jobs = int(min(n, max(1000, rate * window_s / 2)))
                for k in processes:
                    say(f"e2e round {r + 1}/{rounds}: {system.name}, {k} process(es), {jobs} jobs")
                    raw[system.name].setdefault(f"throughput:{k}", []).append(
                        throughput(server, system, k, jobs, window_s))
                if r == 0 and lat_m:
                    say(f"e2e: {system.name}, idle pick-up latency, {lat_m} jobs")
                    raw[system.name]["latency"] = [latency(server, system, lat_m, lat_lo, lat_hi)]
            except (RunFailed, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
                say(f"e2e: {system.name} failed: {exc}")
                failures[system.name] = str(exc)[:500]
    table: dict[str, Any] = {}
    for system in [*systems, *latency_only]:
        rows = raw[system.name]
        entry: dict[str, Any] = {"kind": system.kind, "config": system.config, "version": system.version}
        for key, values in rows.items():
            if key.startswith("throughput:"):
                entry[key] = summary(v["jobs_per_s"] for v in values)
                k = key.split(":")[1]
                for measure in ("server_cpu_us_per_job", "worker_cpu_us_per_job", "commands_per_job"):
                    entry[f"{measure}:{k}"] = summary(v[measure] for v in values if measure in v)
                partial = [v for v in values if v["done"] < v["of"]]
                if partial:
                    entry[key]["window"] = f"{len(partial)} of {len(values)} runs timed on a {window_s:.0f} s window"
            elif key == "bulk_enqueue":
                entry[key] = summary(values)
            elif key == "latency":
                entry[key] = values[0]
        if system.name in failures:
            entry["failed"] = failures[system.name]
        table[system.name] = entry
    return {"n": n, "bulk_n": bulk_n, "rounds": rounds, "processes": processes, "window_s": window_s,
            "latency_jobs": lat_m, "latency_gap_ms": [lat_lo, lat_hi], "table": table}
