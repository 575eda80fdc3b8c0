"""The dashboard as an on-call console at depth (issue 39): how long its pages take to answer with
100,000 jobs in a queue, and the longest single command a bulk action sends through 100,000 dead jobs.

For each wire, one embedded server holds ``big`` (``--jobs`` pending jobs) and ``graveyard``
(``--jobs`` dead jobs, every other one dead of a ``TimeoutError``), and one worker record with its
summary. The dashboard runs in this process (uvicorn in a thread), the queues pinned (``-q``) or
discovered (a SCAN every 10 s, walking every job row); each page is fetched ``--rounds`` times and
timed end to end by the client (median and max, ms). Then the bulk actions, the slow log keeping
every command (``slowlog-log-slower-than 0``): reprocess the dead a filter matches, then remove
every dead job; the longest single command of each, its name, and the action's wall time.

    .venv/bin/python -m bench.console_pages --jobs 100000 --rounds 7 --json bench/results/console-pages.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from typing import Any

import httpx

from echomq import EmbeddedServer, Queue, connect, module_path
from echomq.dashboard import Settings, serving
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.jobstats import JobStats

from .common import Sample, say

BATCH = 1000


def fill(conn: Any, jobs: int) -> tuple[str, str]:
    """``big``: ``jobs`` pending; ``graveyard``: ``jobs`` dead. Returns (a pending id, a dead id)."""
    big, graveyard = Queue(conn, "big"), Queue(conn, "graveyard")
    first = ""
    for start in range(0, jobs, BATCH):
        made = big.enqueue_many([{"n": n} for n in range(start, min(jobs, start + BATCH))])
        first = first or made[0].id
        graveyard.enqueue_many([{"n": n} for n in range(start, min(jobs, start + BATCH))])
        claimed = graveyard.claim_many(BATCH, 600_000)
        graveyard.settle_many([graveyard.fail_call(job, "TimeoutError: the mailer did not answer" if i % 2 else
                                                   "ValueError: bad row", max_attempts=1)
                               for i, job in enumerate(claimed)])
    dead_id = graveyard.ids("dead", count=1)[0][0]
    return first, dead_id


def timed(site: httpx.Client, path: str, params: dict[str, str], rounds: int) -> dict[str, Any]:
    sample = Sample()
    status = 0
    for _ in range(rounds):
        started = time.perf_counter()
        answer = site.get(path, params=params)
        sample.add((time.perf_counter() - started) * 1000)
        status = answer.status_code
    return {**sample.as_dict(), "status": status}


def slowest(client: Any) -> dict[str, Any]:
    """The slow log's longest commands (it keeps every command): the five longest, named, the 99.9th
    percentile of all, and how many there were."""
    entries = client.slowlog_get(1_000_000)
    durations = sorted(e["duration"] for e in entries)
    top = sorted(entries, key=lambda e: -e["duration"])[:5]

    def named(entry: dict) -> str:
        command = entry["command"]
        words = command.split() if isinstance(command, (str, bytes)) else list(command)
        return " ".join(w.decode(errors="replace") if isinstance(w, bytes) else str(w) for w in words[:1])

    return {"longest_usec": durations[-1], "p999_usec": durations[int(len(durations) * 0.999)],
            "median_usec": durations[len(durations) // 2], "commands": len(entries),
            "top": [{"usec": e["duration"], "command": named(e)} for e in top]}


def bulk(site: httpx.Client, server: Any, action: str, params: dict[str, str]) -> dict[str, Any]:
    """Count (the confirmation page), then act (its form), the slow log keeping every command of the act."""
    started = time.perf_counter()
    confirm = site.get(f"/queues/graveyard/bulk/{action}", params=params)
    counted_ms = (time.perf_counter() - started) * 1000
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm.text))
    with server.client() as client:
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()
        started = time.perf_counter()
        done = site.post(f"/queues/graveyard/bulk/{action}", data=form, follow_redirects=True, timeout=600)
        acted_s = time.perf_counter() - started
        client.config_set("slowlog-log-slower-than", 10_000)
        worst = slowest(client)
        client.slowlog_reset()
    message = re.search(r'class="message" role="status">([^<]*)<', done.text)
    return {"confirm_ms": counted_ms, "act_s": acted_s, "said": message.group(1) if message else done.status_code,
            "longest": worst}


def run_wire(wire: int, jobs: int, rounds: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server, \
            connect(server.url, wire=wire) as conn:
        say(f"console pages: wire {wire}: filling {jobs:,} pending and {jobs:,} dead")
        pending_id, dead_id = fill(conn, jobs)
        stats = JobStats()
        for task in ("send", "render", "bill"):
            stats.of("big", task).counts["completed"] += 1
        beat = Heartbeat(conn.client, queues=["big", "graveyard"], concurrency=10, wire=wire, stats=stats)
        beat.beat(held=0, completed=3, failed=0)
        pages = {
            "overview": ("/", {}), "queue: pending, page 1": ("/queues/big", {}),
            "queue: pending, last page": ("/queues/big", {"page": str(-(-jobs // 25))}),
            "queue: dead, page 1": ("/queues/graveyard", {"state": "dead"}),
            "dead filtered by error (half match)": ("/queues/graveyard", {"state": "dead", "error": "timeout"}),
            "dead filtered, no match (2,000 rows read)": ("/queues/graveyard", {"state": "dead", "error": "nothing"}),
            "dead filtered by age (none match)": ("/queues/graveyard", {"state": "dead", "min_age": "1d"}),
            "job page": ("/queues/big/job", {"id": pending_id}),
            "search: a whole id": ("/search", {"q": dead_id}),
            "search: an id's start": ("/search", {"q": dead_id[:6]}),
            "workers": ("/workers", {}), "/metrics": ("/metrics", {}),
            "bulk confirmation, no filter (ZCOUNT)": ("/queues/graveyard/bulk/reprocess", {}),
            "bulk confirmation, filtered (reads every dead row)": ("/queues/graveyard/bulk/reprocess",
                                                                   {"error": "timeout"}),
        }
        for pinned in (True, False):
            settings = Settings(queues=["big", "graveyard"] if pinned else [], sample_interval_s=2.0)
            with serving(conn, settings) as url, httpx.Client(base_url=url, timeout=120) as site:
                site.get("/").raise_for_status()  # warm: the first discovery and the templates
                table = {}
                for name, (path, params) in pages.items():
                    say(f"console pages: wire {wire}, {'pinned' if pinned else 'discovered'}: {name}")
                    table[name] = timed(site, path, params, rounds)
                found["pinned" if pinned else "discovered"] = table
        with serving(conn, Settings(queues=["big", "graveyard"])) as url, httpx.Client(base_url=url, timeout=600) as site:
            say(f"console pages: wire {wire}: reprocess the dead a filter matches")
            found["bulk reprocess, filtered (half)"] = bulk(site, server, "reprocess", {"error": "timeout"})
            say(f"console pages: wire {wire}: remove every dead job")
            found["bulk remove, every dead job"] = bulk(site, server, "remove", {})
        beat.remove()
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.console_pages")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--wires", default="6,4")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    # the machine is shared: a page's time and a command's longest move with its load, so each run says it
    result: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds,
                              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                              "load_average_at_start": os.getloadavg()}
    result["wires"] = {wire: run_wire(int(wire), args.jobs, args.rounds) for wire in args.wires.split(",")}
    result["load_average_at_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
