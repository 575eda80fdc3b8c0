"""What following a job costs (docs/results.md): server µs per lifecycle with results and events
off, results on, events on, and both; and how soon a result waiter wakes after the completion.

* **Lifecycle variants**, per wire, interleaved in rounds: enqueue + claim + settle, each phase
  pipelined in batches, read from INFO commandstats like the ``cost`` section (top-level
  commands only: EVALSHA on wire 4, the EMQ.* verb on wire 6; wire 4's own pause read is left
  out, the same in every variant). ``off``: COMPLETE, the queue's events off -- what a task
  with ``result_ttl=0`` sends. ``results``: PUBLISH keeping a 16-byte result. ``events``:
  COMPLETE with the queue's events on (every verb appends). ``both``. Ratios per round
  (paired) against ``off``. With ``--bus-before REV`` wire 4 also runs ``before``: the same
  lifecycle with the scripts of git revision REV (before the bus), so ``off/before`` shows
  what reading the event switch costs a queue with events off; ``--bus-before-module SO``
  does the same for wire 6 with a trafikey built before the bus, on a second server.
* **Wake latency**: a waiter blocked in ``Queue.result`` (subscribed to the job's outcome
  channel), the completion sent from another thread; from just before PUBLISH is sent to
  ``result`` returning (the completion's round trip, the message, the waiter's one read).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any

from echomq import Queue, connect
from echomq._client.connection import Script
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import BY_NAME

from .common import ROOT, BenchServer, measured, percentile, say, summary

BATCH = 100
LEASE_MS = 600_000
RETENTION_MS = 600_000
RESULT = b'"0123456789abcd"'  #: 16 bytes
VARIANTS = ("off", "results", "events", "both")
LIFECYCLE = ("enqueue", "claim", "settle")
#: the batch verb each phase's calls travel as where the module lists it
BATCH_VERBS = {"claim": ("claims",), "complete": ("completes",), "publish": ("publishes",)}


def scripts_at(rev: str) -> dict[str, bytes]:
    """The lifecycle's scripts as of git revision ``rev``."""
    out = {}
    for verb in ("enqueue", "claim", "complete"):
        out[verb] = subprocess.run(["git", "show", f"{rev}:echomq/scripts/{verb}.lua"], cwd=ROOT, check=True,
                                   capture_output=True).stdout
    return out


def lifecycle(server: BenchServer, wire: int, variant: str, n: int, before: dict[str, bytes] | None = None
              ) -> dict[str, float]:
    """Server µs per call of each lifecycle phase, and their sum."""
    server.use(wire)
    conn = connect(server.url, wire=wire)
    if variant == "before":
        for verb, source in (before or {}).items():
            conn.scripts[verb] = Script(BY_NAME[verb], source)
        conn.load_scripts()
    queue = Queue(conn, f"bus{wire}-{os.urandom(4).hex()}", serializer=RAW)
    if variant in ("events", "both"):
        queue.enable_events(10_000)
    publish = variant in ("results", "both")
    held: list = []
    top = {"evalsha"} if wire == 4 else None

    def enqueue():
        for start in range(0, n, BATCH):
            queue.enqueue_many([b"x"] * min(BATCH, n - start))

    def claim():
        for start in range(0, n, BATCH):
            held.extend(queue.claim_many(min(BATCH, n - start), LEASE_MS))

    def settle():
        for start in range(0, n, BATCH):
            chunk = held[start : start + BATCH]
            calls = [queue.publish_call(job, RESULT, retention_ms=RETENTION_MS) if publish
                     else queue.complete_call(job) for job in chunk]
            queue.settle_many(calls)

    out: dict[str, float] = {}
    try:
        for phase, run in (("enqueue", enqueue), ("claim", claim), ("settle", settle)):
            counters = measured(server, run)
            verb = {"enqueue": "enqueue", "claim": "claim", "settle": "publish" if publish else "complete"}[phase]
            # a batch travels as its batch verb where the module lists it (CLAIMS, COMPLETES, PUBLISHES)
            names = top or {BY_NAME[v].command.lower() for v in (verb, *BATCH_VERBS.get(verb, ()))}
            out[phase] = counters.usec(names) / n
        assert len(held) == n, f"claimed {len(held)} of {n}"
    finally:
        conn.close()
    out["lifecycle"] = sum(out[p] for p in LIFECYCLE)
    return out


class _Watched(Queue):
    """A Queue that says when its result waiter made its first read (it is subscribed by then)."""

    first_read: threading.Event

    def op_seen(self, job_id: str):  # type: ignore[override]
        seen = yield from super().op_seen(job_id)
        self.first_read.set()
        return seen


def wake_latency(server: BenchServer, wire: int, m: int) -> dict[str, Any]:
    """ms from sending PUBLISH to ``Queue.result`` returning in another thread, ``m`` times."""
    server.use(wire)
    conn = connect(server.url, wire=wire)
    name = f"wake{wire}-{os.urandom(4).hex()}"
    queue, waiter_queue = Queue(conn, name), _Watched(conn, name)
    samples = []
    try:
        for _ in range(m):
            job = queue.enqueue(1)
            held = queue.claim(LEASE_MS)
            waiter_queue.first_read = threading.Event()
            woke: list[float] = []
            waiter = threading.Thread(target=lambda: (waiter_queue.result(job.id, timeout=10),
                                                      woke.append(time.perf_counter())))
            waiter.start()
            if not waiter_queue.first_read.wait(10):
                raise RuntimeError("the result waiter made no first read in 10 s (is _Watched hooking the read?)")
            sent = time.perf_counter()
            queue.publish(held, "ok", retention_ms=60_000)
            waiter.join(10)
            samples.append((woke[0] - sent) * 1000)
    finally:
        conn.close()
    ordered = sorted(samples)
    return {"n": m, "p50_ms": percentile(ordered, 0.5), "p99_ms": percentile(ordered, 0.99), "max_ms": ordered[-1]}


def run(server: BenchServer, *, wires: list[int], n: int, rounds: int, wake_m: int, before_rev: str = "",
        before_module: str = "") -> dict[str, Any]:
    before = scripts_at(before_rev) if before_rev else None
    old = BenchServer(before_module) if before_module and 6 in wires else None
    raw: dict[str, list[dict[str, float]]] = {}
    try:
        if old is not None:
            old.__enter__()
        for r in range(rounds):
            for wire in wires:
                has_before = (wire == 4 and before) or (wire == 6 and old is not None)
                variants = VARIANTS + (("before",) if has_before else ())
                order = variants[r % len(variants):] + variants[: r % len(variants)]
                for variant in order:
                    say(f"bus round {r + 1}/{rounds}: wire {wire} {variant}")
                    node = old if (wire == 6 and variant == "before") else server
                    raw.setdefault(f"{wire}:{variant}", []).append(lifecycle(node, wire, variant, n, before))
    finally:
        if old is not None:
            old.__exit__()
    table = {key: {phase: summary(x[phase] for x in rs) for phase in rs[0]} for key, rs in raw.items()}
    ratios = {}
    for key, rs in raw.items():
        wire, variant = key.split(":")
        base = raw.get(f"{wire}:off")
        if variant != "off" and base:
            ratios[f"{wire}:{variant}/off"] = summary(x["lifecycle"] / b["lifecycle"] for x, b in zip(rs, base))
    for wire in wires:
        if f"{wire}:before" in raw:
            ratios[f"{wire}:off/before"] = summary(
                b["lifecycle"] / x["lifecycle"] for x, b in zip(raw[f"{wire}:before"], raw[f"{wire}:off"]))
    wake = {str(wire): wake_latency(server, wire, wake_m) for wire in wires}
    return {"n": n, "rounds": rounds, "batch": BATCH, "before_rev": before_rev, "before_module": before_module,
            "table": table, "ratios": ratios, "wake": wake}


def render(bus: dict[str, Any], med, num, table) -> list[str]:
    """The section of docs/benchmarks.md (``med``, ``num``, ``table``: report's formatters)."""
    lines = ["## Following a job: results, events and the waiter", "",
             f"{bus['n']} jobs per phase, {bus['rounds']} rounds, pipelined in batches of {bus['batch']}; server µs "
             "per job of the top-level commands (INFO commandstats; wire 6's claims and settles travel as CLAIMS, "
             "COMPLETES and PUBLISHES; wire 4's own pause read left out, the same in every variant). off = COMPLETE with events off (a task with `result_ttl=0`); results = PUBLISH keeping "
             "a 16-byte result; events = COMPLETE with the queue's events on (enqueue, claim and complete each "
             "append); both = PUBLISH with events on"
             + (f"; before = wire 4 with the scripts of `{bus['before_rev']}` (no event switch)" if bus["before_rev"]
                else "")
             + ("; before on wire 6 = a trafikey built before the bus, on a second server" if bus.get("before_module")
                else "") + ".", ""]
    rows = []
    for key, t in bus["table"].items():
        wire, variant = key.split(":")
        ratio = bus["ratios"].get(f"{wire}:{variant}/off")
        rows.append([f"wire {wire}", variant, med(t["enqueue"]), med(t["claim"]), med(t["settle"]), med(t["lifecycle"]),
                     med(ratio) if ratio else "1"])
    lines += table(["wire", "variant", "enqueue µs", "claim µs", "settle µs", "lifecycle µs", "× off (paired)"], rows)
    for wire in ("6", "4"):
        if f"{wire}:off/before" in bus["ratios"]:
            lines += [f"Wire {wire}, events off, against the executor before the bus: off / before = "
                      f"{med(bus['ratios'][f'{wire}:off/before'])} per lifecycle (each moving verb now reads the event "
                      "switch, `meta events`).", ""]
    rows = [[f"wire {wire}", str(w["n"]), num(w["p50_ms"], 2), num(w["p99_ms"], 2), num(w["max_ms"], 2)]
            for wire, w in bus["wake"].items()]
    lines += ["Wake latency: a waiter blocked in `Queue.result` (SSUBSCRIBEd to the job's outcome channel), the "
              "completion (PUBLISH) sent from another thread; ms from just before PUBLISH is sent to `result` "
              "returning, which includes PUBLISH's round trip and the waiter's one read after the message:", ""]
    lines += table(["wire", "waits", "p50 ms", "p99 ms", "max ms"], rows)
    return lines
