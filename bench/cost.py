"""Server cost per verb and per job lifecycle: wire 6 vs wire 4 vs the primitive floor.

Each verb gets its own phase: the state it moves from is prepared, CONFIG RESETSTAT,
``n`` calls sent pipelined (batches of ``BATCH``), then INFO commandstats. Two readings:

* **usec** -- commandstats' execution time of the top-level commands the executor
  sent, per call: EVALSHA on wire 4 (its inner ``redis.call``s run inside it), the
  ``EMQ.*`` command on wire 6 (its host calls run inside it), every command on the
  floor. Wire 4's claim also pays its own round trip that reads ``meta paused``
  (SPEC §4): that HGET is measured in its own phase and added to its claim.
* **cpu_us** -- the server main thread's CPU (INFO cpu) over the phase, per call:
  execution plus parsing, replies and socket I/O, which commandstats leaves out.

**The primitive floor** is the lifecycle's writes, and the one read its reply needs,
sent as plain commands, pipelined, with nothing checked: enqueue = HSET row + ZADD
pending; claim = ZPOPMIN pending + HINCRBY attempts + HSET state + ZADD active +
HGET payload; complete = ZREM active + DEL row + HINCRBY metrics. The client knows
the ids (it made them, in pop order) and its own clock makes the deadline: a bound
no executor can reach, since it checks nothing.

``inner`` is the number of commands that ran inside one call (Lua ``redis.call``s
or the module's host calls), read from the same commandstats.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from echomq import Queue, connect
from echomq._client.connection import Connection
from echomq._protocol.ids import new_id
from echomq._protocol.serializers import JSON

from .common import BenchServer, Counters, measured, say, summary

BATCH = 100
LEASE_MS = 600_000
PAYLOAD = JSON.dumps("x")
LIFECYCLE = ("enqueue", "claim", "complete")


def chunks(items: list, size: int = BATCH):
    for start in range(0, len(items), size):
        yield items[start : start + size]


# -- the executors ------------------------------------------------------------------
class ScriptedOrNative:
    """Wire 4 or wire 6 through EchoMQ's own Queue API, pipelined."""

    def __init__(self, server: BenchServer, wire: int) -> None:
        self.wire = wire
        self.conn: Connection = connect(server.url, wire=wire)
        self.queue = Queue(self.conn, f"cost{wire}-{os.urandom(4).hex()}")
        self.held: list = []

    def top_level(self, verb: str) -> set[str]:
        if self.wire == 4:
            return {"evalsha"}
        if verb == "claim":  # a batch of claims is one CLAIMS where the module lists it
            return {"emq.claim", "emq.claims"}
        if verb == "complete":  # and a batch of completes one COMPLETES
            return {"emq.complete", "emq.completes"}
        return {"emq." + verb.replace("_", ".")}

    def close(self) -> None:
        self.conn.close()

    def fill(self, size: int) -> None:
        """``size`` queued jobs through the executor's own enqueue (pipelines of 1000)."""
        for start in range(0, size, 1000):
            self.queue.enqueue_many(["x"] * min(1000, size - start))

    def phases(self, n: int, lifecycle_only: bool = False) -> list[tuple[str, Callable[[], Any]]]:
        q, conn = self.queue, self.conn
        payloads = ["x"] * n

        def enqueue():
            for chunk in chunks(payloads):
                q.enqueue_many(chunk)

        def claim():
            self.held = []
            for start in range(0, n, BATCH):
                self.held += q.claim_many(min(BATCH, n - start), LEASE_MS)
            assert len(self.held) == n, f"claimed {len(self.held)} of {n}"

        def pause_read():
            # wire 4's claim reads `meta paused` in a round trip of its own, once per claim
            pipe = conn.client.pipeline(transaction=False)
            for i in range(n):
                pipe.hget(q.keys.meta, "paused")
                if i % BATCH == BATCH - 1:
                    pipe.execute()
            pipe.execute()

        def extend():
            for chunk in chunks(self.held):
                conn.send_many([q.call("extend", job.id, job.token, LEASE_MS) for job in chunk])

        def extends():
            for chunk in chunks(self.held):
                q.extend_many(chunk, LEASE_MS)

        def fail():
            for chunk in chunks(self.held):
                q.settle_many([q.fail_call(job, "boom", max_attempts=10) for job in chunk])

        def complete():
            for chunk in chunks(self.held):
                q.complete_many(chunk)

        def schedule():
            for start in range(0, n, BATCH):
                conn.send_many([q.call("schedule", new_id(), PAYLOAD, 0, 0) for _ in range(min(BATCH, n - start))])

        def promote():
            while q.promote(BATCH):
                pass

        out = [("enqueue", enqueue), ("claim", claim)]
        if self.wire == 4:
            out.append(("pause_read", pause_read))
        if lifecycle_only:
            return out + [("complete", complete)]
        out += [("extend", extend), ("extends", extends), ("fail", fail), ("claim", claim),
                ("complete", complete), ("schedule", schedule), ("promote", promote)]
        return out


class Floor:
    """The lifecycle's plain commands, pipelined, unchecked (see the module docstring)."""

    wire = "floor"

    def __init__(self, server: BenchServer) -> None:
        self.client = server.server.client()
        self.base = f"emq:{{floor-{os.urandom(4).hex()}}}:"
        self.ids: list[str] = []  #: pending, in pop order (default ids sort by creation)

    def top_level(self, verb: str) -> None:
        return None  # every command counts

    def close(self) -> None:
        self.client.close()

    def _pipelined(self, ids: list[str], add: Callable[[Any, str], None]) -> None:
        for chunk in chunks(ids):
            pipe = self.client.pipeline(transaction=False)
            for job_id in chunk:
                add(pipe, job_id)
            pipe.execute()

    def _enqueue(self, ids: list[str]) -> None:
        base = self.base

        def add(pipe, job_id):
            pipe.execute_command("HSET", base + "job:" + job_id, "state", "pending", "payload", PAYLOAD,
                                 "attempts", "0")
            pipe.execute_command("ZADD", base + "pending", 0, job_id)
        self._pipelined(ids, add)
        self.ids += ids

    def fill(self, size: int) -> None:
        self._enqueue([new_id() for _ in range(size)])

    def phases(self, n: int, lifecycle_only: bool = True) -> list[tuple[str, Callable[[], Any]]]:
        import time

        base = self.base
        fresh = [new_id() for _ in range(n)]
        held: list[str] = []

        def enqueue():
            self._enqueue(fresh)

        def claim():
            deadline = int(time.time() * 1000) + LEASE_MS
            held[:] = self.ids[:n]
            del self.ids[:n]

            def add(pipe, job_id):
                row = base + "job:" + job_id
                pipe.execute_command("ZPOPMIN", base + "pending")
                pipe.execute_command("HINCRBY", row, "attempts", 1)
                pipe.execute_command("HSET", row, "state", "active")
                pipe.execute_command("ZADD", base + "active", deadline, job_id)
                pipe.execute_command("HGET", row, "payload")
            self._pipelined(held, add)

        def complete():
            def add(pipe, job_id):
                pipe.execute_command("ZREM", base + "active", job_id)
                pipe.execute_command("DEL", base + "job:" + job_id)
                pipe.execute_command("HINCRBY", base + "metrics:completed", "count", 1)
            self._pipelined(held, add)

        return [("enqueue", enqueue), ("claim", claim), ("complete", complete)]


# -- one round ------------------------------------------------------------------------
def per_call(counters: Counters, top: set[str] | None, n: int) -> dict[str, float]:
    usec = counters.usec(top)
    inner = (counters.calls() - counters.calls(top)) / n if top is not None else 0.0
    return {"usec": usec / n, "cpu_us": counters.cpu_s * 1e6 / n, "inner": inner,
            "commands": counters.calls() / n}


def open_executor(server: BenchServer, name: str) -> Any:
    """A wiped node, branded for the executor, and the executor on it."""
    if name == "floor":
        server.use(None)
        return Floor(server)
    wire = {"scripts": 4, "native": 6}[name]
    server.use(wire)
    return ScriptedOrNative(server, wire)


def run_executor(server: BenchServer, name: str, n: int, executor: Any = None,
                 lifecycle_only: bool = False) -> dict[str, dict[str, float]]:
    """Each verb's phase (or only the lifecycle's three) on ``executor`` (default: a fresh one)."""
    own = executor is None
    executor = executor or open_executor(server, name)
    out: dict[str, dict[str, float]] = {}
    try:
        for verb, run in executor.phases(n, lifecycle_only):
            counters = measured(server, run)
            top = executor.top_level(verb if verb != "pause_read" else "claim")
            if verb == "pause_read":
                top = None
            calls = n
            if verb == "extends":
                calls = -(-n // BATCH)  # one EXTENDS per batch of pairs
            if verb == "promote":
                calls = max(1, counters.calls(top))
            reading = per_call(counters, top, calls)
            if verb == "promote":
                reading["per_job_usec"] = counters.usec(top) / n
            out.setdefault(verb, reading)  # the second claim phase (after fail) is not counted twice
    finally:
        if own:
            executor.close()
    if "pause_read" in out:
        claim, read = out["claim"], out.pop("pause_read")
        claim["pause_read_usec"] = read["usec"]
        claim["usec"] += read["usec"]
    out["lifecycle"] = {key: sum(out[v][key] for v in LIFECYCLE) for key in ("usec", "cpu_us", "commands")}
    return out


def run(server: BenchServer, *, executors: list[str], n: int, rounds: int) -> dict[str, Any]:
    """Interleaved rounds (the executor order rotates) and per-round paired ratios."""
    raw: dict[str, list[dict]] = {name: [] for name in executors}
    for r in range(rounds):
        order = executors[r % len(executors):] + executors[: r % len(executors)]
        for name in order:
            say(f"cost round {r + 1}/{rounds}: {name}")
            raw[name].append(run_executor(server, name, n))
    table: dict[str, dict[str, Any]] = {}
    for name, rs in raw.items():
        for verb in rs[0]:
            for key in rs[0][verb]:
                table.setdefault(name, {}).setdefault(verb, {})[key] = summary(x[verb][key] for x in rs)
    ratios: dict[str, Any] = {}
    pairs = [("native", "scripts"), ("native", "floor"), ("scripts", "floor")]
    for a, b in pairs:
        if a in raw and b in raw:
            for key in ("usec", "cpu_us"):
                ratios[f"{a}/{b}:{key}"] = summary(
                    raw[a][i]["lifecycle"][key] / raw[b][i]["lifecycle"][key] for i in range(rounds))
    if "native" in raw and "scripts" in raw:
        for verb in raw["native"][0]:
            if verb in raw["scripts"][0]:
                ratios[f"verb:{verb}"] = summary(
                    raw["native"][i][verb]["usec"] / raw["scripts"][i][verb]["usec"] for i in range(rounds))
    return {"n": n, "rounds": rounds, "batch": BATCH, "executors": executors, "table": table, "ratios": ratios}
