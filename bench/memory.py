"""Memory per queued job: EchoMQ on both wires with each id format weighed, and BullMQ, one server.

For each system: wipe (and brand) the node, fill one queue named ``QUEUE`` with ``n`` no-op
jobs through the system's own bulk enqueue, and read (used_memory after - before) / n from
INFO memory. EchoMQ fills with ``enqueue_many``'s calls, the ids given by each format's
generator (the default format: none given, so the client's default ids); BullMQ (Node) with
``Queue.addBulk`` (bench/peers/bullmq_node.mjs), its ids the queue's counter 1 … n.

The formats are the candidates for the default id (issue 18). Besides their memory, each gets
the figures that say whether a person can still read and type it, computed from the alphabet:
length, case-sensitive or not, the pairs of look-alike characters its alphabet holds (from
``LOOK_ALIKE``), whether a double-click selects it whole (no separators), and, for the short
formats, how many bits tell two processes apart and the chance that two of 100 concurrently
running processes mint the same ids.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from echomq import Queue, connect
from echomq._protocol.ids import ALPHABET as BASE62, COUNTER_SPAN, TAIL_CHARS, fixed_width, new_id

from .common import BenchServer, say
from .systems import PEERS_DIR, install_peer

QUEUE = "bench"
BATCH = 1000
#: character pairs a reader mistakes for each other (digit/letter shapes, and case pairs that
#: differ only in size) -- a proxy for reading an id aloud or copying it by hand
LOOK_ALIKE = ("0O", "0o", "Oo", "1I", "1l", "Il", "2Z", "5S", "8B",
              "Cc", "Ss", "Uu", "Vv", "Ww", "Xx", "Zz")
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
START_MS = 1_796_000_000_000  #: the ms the generated ids of a reading start at (late 2026)


@dataclass(frozen=True)
class IdFormat:
    """One candidate: ``time_chars`` of ms then ``tail_chars`` of tag * COUNTER_SPAN + counter."""

    name: str
    alphabet: str
    time_chars: int
    tail_chars: int
    case_sensitive: bool
    default: bool = False  #: the client's own default ids: filled with none given

    def tag_span(self) -> int:
        return len(self.alphabet) ** self.tail_chars // COUNTER_SPAN

    def tag_bits(self) -> int:
        return self.tag_span().bit_length() - 1

    def minter(self) -> Callable[[], str]:
        """Ids of this shape, COUNTER_SPAN per ms from a fixed start: close enough for a memory reading."""
        tag = int.from_bytes(os.urandom(8), "big") % self.tag_span()
        count = iter(range(10**9))

        def mint() -> str:
            n = next(count)
            return (fixed_width(START_MS + n // COUNTER_SPAN, self.time_chars, self.alphabet)
                    + fixed_width(tag * COUNTER_SPAN + n % COUNTER_SPAN, self.tail_chars, self.alphabet))
        return mint

    def facts(self) -> dict[str, Any]:
        example = new_id() if self.default else self.minter()()
        return {**readability(example, self.alphabet, self.case_sensitive), "tag_bits": self.tag_bits(),
                "collision_100_processes": collision_chance(self.tag_bits())}


def uuid7_text() -> Callable[[], str]:
    """The former default: UUIDv7 text (48-bit ms, 12-bit counter, 62 random bits)."""
    count = iter(range(10**9))

    def mint() -> str:
        n = next(count)
        value = (START_MS + n // 4096) << 80 | 0x7 << 76 | (n % 4096) << 64 | 0b10 << 62 \
            | int.from_bytes(os.urandom(8), "big") >> 2
        return str(uuid.UUID(int=value))
    return mint


FORMATS = [
    IdFormat("base62, 12 characters", BASE62, 8, 4, True),
    IdFormat("Crockford base32, 16 characters", CROCKFORD, 10, 6, False),
    IdFormat("base62, 16 characters (the new default)", BASE62, 8, TAIL_CHARS, True, default=True),
]


def readability(example: str, alphabet: str, case_sensitive: bool) -> dict[str, Any]:
    return {"example": example, "length": len(example), "case_sensitive": case_sensitive,
            "look_alike_pairs": sorted(p for p in LOOK_ALIKE if p[0] in alphabet and p[1] in alphabet),
            "double_click_selects_whole": example.isalnum()}


def collision_chance(tag_bits: float, processes: int = 100) -> float:
    """Chance that two of ``processes`` running at once drew the same tag (birthday bound)."""
    return processes * (processes - 1) / 2 / 2**tag_bits


def fill_echomq(server: BenchServer, wire: int, n: int, mint: Callable[[], str] | None) -> None:
    conn = connect(server.url, wire=wire)
    try:
        queue = Queue(conn, QUEUE)
        for start in range(0, n, BATCH):
            size = min(BATCH, n - start)
            if mint is None:
                queue.enqueue_many(["x"] * size)
            else:
                conn.send_many([queue.enqueue_call("x", id=mint()) for _ in range(size)])
    finally:
        conn.close()


def fill_bullmq(server: BenchServer, n: int, priority: int) -> None:
    subprocess.run(["node", str(PEERS_DIR / "bullmq_node.mjs"), "enqueue", server.url, QUEUE, str(n),
                    *([str(priority)] if priority else [])], check=True, capture_output=True, timeout=600)


#: levers the SPEC does not allow (its row fields and its pending zset are promises, SPEC §1), measured
#: with plain commands so a decision about them has its figure: (name, row fields, how pending holds ids)
LEVERS = [
    ("plain HSET + ZADD: the SPEC's row and pending", ("state", "payload", "attempts", "created"), "zset"),
    ("… without `created`", ("state", "payload", "attempts"), "zset"),
    ("… without `created` and `attempts`", ("state", "payload"), "zset"),
    ("… the SPEC's row, pending as a list", ("state", "payload", "attempts", "created"), "list"),
]


def fill_plain(server: BenchServer, n: int, fields: tuple[str, ...], pending: str) -> None:
    """ENQUEUE's writes as plain pipelined commands, with ``fields`` of its row and ``pending`` a zset or list."""
    base, created = f"emq:{{{QUEUE}}}:", str(START_MS)
    values = {"state": "pending", "payload": '"x"', "attempts": "0", "created": created}
    row = [part for field in fields for part in (field, values[field])]
    for start in range(0, n, BATCH):
        pipe = server.client.pipeline(transaction=False)
        for _ in range(min(BATCH, n - start)):
            job_id = new_id()
            pipe.execute_command("HSET", base + "job:" + job_id, *row)
            if pending == "zset":
                pipe.execute_command("ZADD", base + "pending", 0, job_id)
            else:
                pipe.execute_command("RPUSH", base + "pending", job_id)
        pipe.execute()


def per_job(server: BenchServer, wire: int | None, n: int, fill: Callable[[], None]) -> float:
    server.use(wire)
    before = server.used_memory()
    fill()
    return (server.used_memory() - before) / n


def run(server: BenchServer, *, wires: list[int], n: int, with_bullmq: bool) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    bullmq, why = install_peer("bullmq-node") if with_bullmq else (None, "not among --peers")
    if bullmq is None:
        say(f"memory: BullMQ (Node) skipped: {why}")
    else:
        # its plain jobs wait in a list; prioritized ones in a zset, as every EchoMQ job does (SPEC §1)
        for priority, kind in ((0, "BullMQ (Node)"), (1, "BullMQ (Node), priority 1")):
            say(f"memory: {kind}, {n} jobs")
            rows.append({"system": kind, "ids": "the queue's counter (1 … n)", "version": bullmq.version,
                         "bytes_per_job": per_job(server, None, n, lambda: fill_bullmq(server, n, priority))})
    uuid_facts = {**readability(uuid7_text()(), "0123456789abcdef-", False), "tag_bits": None}  # random per id
    candidates = [("UUIDv7 text (the former default)", uuid7_text, uuid_facts)]
    candidates += [(fmt.name, None if fmt.default else fmt.minter, fmt.facts()) for fmt in FORMATS]
    for name, minter, facts in candidates:
        for wire in wires:
            say(f"memory: EchoMQ wire {wire}, ids {name}, {n} jobs")
            rows.append({"system": f"EchoMQ wire {wire}", "ids": name, **facts,
                         "bytes_per_job": per_job(server, wire, n,
                                                  lambda: fill_echomq(server, wire, n, minter and minter()))})
    for name, fields, pending in LEVERS:
        say(f"memory: {name}, {n} jobs")
        rows.append({"system": "plain commands", "ids": "base62, 16 characters", "lever": name,
                     "bytes_per_job": per_job(server, None, n, lambda: fill_plain(server, n, fields, pending))})
    server.wipe()
    return {"n": n, "queue": QUEUE, "rows": rows}


def lines(result: dict, num: Any, table: Any) -> list[str]:
    """The section of docs/benchmarks.md (``num``/``table``: report.py's formatters)."""
    rows = result["rows"]
    bullmq = next((r["bytes_per_job"] for r in rows if r["system"] == "BullMQ (Node)"), None)  # the ratio's base
    out = ["## Memory per queued job, by id format", "",
           f"One server; each system in turn fills a queue named `{result['queue']}` with {result['n']:,} no-op "
           "jobs through its own bulk enqueue (EchoMQ: `enqueue_many`'s calls; BullMQ: `Queue.addBulk`, ids "
           "from its counter), from an empty node; bytes per job = Δ used_memory / jobs (INFO memory). "
           "EchoMQ's formats are the candidates for the default id (`echomq/_protocol/ids.py`). BullMQ keeps a plain job "
           "in a list and a prioritized one in a zset; every EchoMQ job waits in a zset (SPEC §1), so "
           "*BullMQ, priority 1* is the like-for-like structure.", ""]
    def ratio(r: dict) -> list[str]:
        return [f"{r['bytes_per_job'] / bullmq:.2f}×"] if bullmq else []
    out += table(["system", "ids", "bytes / queued job"] + (["/ BullMQ"] if bullmq else []),
                 [[r["system"], r["ids"], num(r["bytes_per_job"], 0)] + ratio(r) for r in rows if "lever" not in r])
    out += ["What the levers the SPEC does not allow would give, measured in the same run: ENQUEUE's writes as "
            "plain pipelined commands with the default ids (its row's fields and its pending zset are promises, "
            "SPEC §1):", ""]
    out += table(["writes", "bytes / queued job"] + (["/ BullMQ"] if bullmq else []),
                 [[r["lever"], num(r["bytes_per_job"], 0)] + ratio(r) for r in rows if "lever" in r])
    out += ["How a person reads each format (from its alphabet; *look-alike pairs*: the pairs of "
            "`bench/memory.py`'s `LOOK_ALIKE` both in the alphabet; *tag bits*: the per-process random part "
            "that keeps two processes' ids apart, and the chance that two of 100 processes running at once "
            "drew the same one):", ""]
    seen: dict[str, dict] = {r["ids"]: r for r in rows if r["system"].startswith("EchoMQ")}
    out += table(["ids", "example", "length", "case-sensitive", "look-alike pairs", "double-click selects it",
                   "tag bits", "same tag, 100 processes"],
                 [[name, f"`{r['example']}`", str(r["length"]), "yes" if r["case_sensitive"] else "no",
                   str(len(r["look_alike_pairs"])), "whole" if r["double_click_selects_whole"] else "a piece",
                   "none (62 random bits per id)" if r["tag_bits"] is None else str(r["tag_bits"]),
                   "–" if r["tag_bits"] is None else f"{min(1.0, r['collision_100_processes']):.0e}"]
                  for name, r in seen.items()])
    return out
