"""Kept results, two layouts side by side (issue 44, item 2): server CPU and bytes per kept result.

    .venv/bin/python -m bench.result_layout [--records 20000] [--rounds 5] [--json OUT]

* **today** (docs/spec.md §12): a hash per job, ``done:<id>`` with result, attempts, finished,
  created and started, its ``PEXPIREAT``, and the ``DEL`` of an older record before it;
* **field**: one hash per queue, ``done``, a field per job holding the same five values packed
  in one string, its expiry the field's own (Valkey 9's ``HSETEX … PXAT … FIELDS``): a batch of
  completions shares one deadline, so it is one command for the batch, and the new value
  replaces an older record without a ``DEL``.

Each layout's writes for batches of 10 records (a worker's PUBLISHES), two ways: inside one
script a batch (as wire 4's publishes.lua writes them), and as plain commands pipelined (as
wire 6's plan has the host run them: the commands a native verb would call). Only the record's
writes are measured, on a wiped node, the rows and the rest of PUBLISHES left out: what the
layout itself costs. Server main-thread CPU µs a record and commandstats µs a record, rounds
interleaved; bytes a record = Δ used_memory / records with every record in place.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from .common import BenchServer, machine, measured, say, summary, trafikey_module

BASE = "emq:{bench}:"
BATCH = 10
RETENTION_MS = 600_000
RESULT = b"null"  # a no-op's None, as the worker keeps it

TODAY_SCRIPT = """
local now = tonumber(ARGV[1])
local dels = {}
for i = 2, #ARGV, 4 do dels[#dels + 1] = KEYS[1] .. 'done:' .. ARGV[i] end
redis.call('DEL', unpack(dels))
for i = 2, #ARGV, 4 do
  local done = KEYS[1] .. 'done:' .. ARGV[i]
  redis.call('HSET', done, 'result', ARGV[i + 3], 'attempts', ARGV[i + 1], 'finished', now,
             'created', ARGV[i + 2], 'started', ARGV[i + 2])
  redis.call('PEXPIREAT', done, now + %d)
end
return 1
""" % RETENTION_MS

FIELD_SCRIPT = """
local now = tonumber(ARGV[1])
local fields = {}
for i = 2, #ARGV, 4 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1] .. ':' .. now .. ':' .. ARGV[i + 2] .. ':' .. ARGV[i + 2] .. ':' .. ARGV[i + 3]
end
redis.call('HSETEX', KEYS[1] .. 'done', 'PXAT', now + %d, 'FIELDS', #fields / 2, unpack(fields))
return 1
""" % RETENTION_MS


def batches(records: int, now: int) -> list[list[tuple[str, str, int, bytes]]]:
    """(id, attempts, created, result) of each record, in batches of BATCH."""
    jobs = [(f"0000{n:012d}", "1", now - 5, RESULT) for n in range(records)]
    return [jobs[i:i + BATCH] for i in range(0, records, BATCH)]


def packed(attempts: str, now: int, created: int, result: bytes) -> bytes:
    return f"{attempts}:{now}:{created}:{created}:".encode() + result


def by_script(server: BenchServer, script: str) -> Callable[[list, int], None]:
    sha = server.client.script_load(script)

    def send(all_batches: list, now: int) -> None:
        pipe = server.client.pipeline(transaction=False)
        for n, batch in enumerate(all_batches):
            pipe.evalsha(sha, 1, BASE, now, *[part for job in batch for part in job])
            if n % 100 == 99:
                pipe.execute()
        pipe.execute()
    return send


def today_commands(all_batches: list, now: int, client: Any) -> None:
    pipe = client.pipeline(transaction=False)
    for n, batch in enumerate(all_batches):
        pipe.delete(*[BASE + "done:" + job[0] for job in batch])
        for job_id, attempts, created, result in batch:
            done = BASE + "done:" + job_id
            pipe.hset(done, mapping={"result": result, "attempts": attempts, "finished": now, "created": created,
                                     "started": created})
            pipe.pexpireat(done, now + RETENTION_MS)
        if n % 100 == 99:
            pipe.execute()
    pipe.execute()


def field_commands(all_batches: list, now: int, client: Any) -> None:
    pipe = client.pipeline(transaction=False)
    for n, batch in enumerate(all_batches):
        fields = [part for job_id, attempts, created, result in batch
                  for part in (job_id, packed(attempts, now, created, result))]
        pipe.execute_command("HSETEX", BASE + "done", "PXAT", now + RETENTION_MS, "FIELDS", len(batch), *fields)
        if n % 100 == 99:
            pipe.execute()
    pipe.execute()


def run(server: BenchServer, records: int, rounds: int) -> dict[str, Any]:
    ways = {
        "today, in a script (wire 4)": by_script(server, TODAY_SCRIPT),
        "field, in a script (wire 4)": by_script(server, FIELD_SCRIPT),
        "today, plain commands (wire 6's plan)": lambda b, now: today_commands(b, now, server.client),
        "field, plain commands (wire 6's plan)": lambda b, now: field_commands(b, now, server.client),
    }
    cpu: dict[str, list[float]] = {name: [] for name in ways}
    usec: dict[str, list[float]] = {name: [] for name in ways}
    memory: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(rounds):
        order = list(ways) if r % 2 == 0 else list(ways)[::-1]
        for name in order:
            server.use(None)
            for sha_script in (TODAY_SCRIPT, FIELD_SCRIPT):  # the flush dropped the scripts
                server.client.script_load(sha_script)
            seconds, micros = server.client.time()
            now = seconds * 1000 + micros // 1000
            work = batches(records, now)
            before = server.used_memory()
            counters = measured(server, lambda: ways[name](work, now))
            memory[name].append((server.used_memory() - before) / records)
            cpu[name].append(counters.cpu_s * 1e6 / records)
            # a script's inner commands count in commandstats beside its EVALSHA, which includes them
            usec[name].append(counters.usec(["evalsha"] if "script" in name else None) / records)
        say(f"result layout: round {r + 1}/{rounds} done")
    table = {name: {"cpu_us": summary(cpu[name]), "usec": summary(usec[name]), "bytes": summary(memory[name])}
             for name in ways}
    ratios = {}
    for way in ("in a script (wire 4)", "plain commands (wire 6's plan)"):
        today, field = f"today, {way}", f"field, {way}"
        ratios[way] = {measure: summary(f / t for f, t in zip(cpu[field] if measure == "cpu_us" else
                                                              usec[field] if measure == "usec" else memory[field],
                                                              cpu[today] if measure == "cpu_us" else
                                                              usec[today] if measure == "usec" else memory[today]))
                       for measure in ("cpu_us", "usec", "bytes")}
    return {"records": records, "rounds": rounds, "batch": BATCH, "table": table, "field/today": ratios}


def lines(result: dict[str, Any]) -> list[str]:
    out = [f"{result['records']:,} kept results in batches of {result['batch']}, {result['rounds']} rounds "
           "interleaved, medians (min–max).", "",
           "| layout, written | server CPU µs / result | commandstats µs / result | bytes / result |",
           "|---|---|---|---|"]
    for name, row in result["table"].items():
        out.append(f"| {name} | " + " | ".join(f"{row[m]['median']:.2f} ({row[m]['min']:.2f}–{row[m]['max']:.2f})"
                                               for m in ("cpu_us", "usec", "bytes")) + " |")
    out += ["", "| field / today, round by round | server CPU | commandstats µs | bytes |", "|---|---|---|---|"]
    for way, row in result["field/today"].items():
        out.append(f"| {way} | " + " | ".join(f"{row[m]['median']:.2f} ({row[m]['min']:.2f}–{row[m]['max']:.2f})"
                                             for m in ("cpu_us", "usec", "bytes")) + " |")
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.result_layout", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args(argv)
    module, _ = trafikey_module()
    with BenchServer(module) as server:
        result = run(server, args.records, args.rounds)
        result["valkey"] = server.version()
    result["machine"] = machine()
    print("\n".join(lines(result)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
