"""What watching a node costs it: `emq dashboard` open in a browser and Prometheus scraping it.

For each wire, number of queues and way of finding them (a SCAN every 10 s, or the
queues pinned with ``-q``), the node holds ``depth`` pending jobs spread over the
queues and one live worker record with its summary of three tasks. The dashboard runs in this
process (uvicorn in a thread, its rate sampler every 2 s); for ``seconds`` a client plays two
browser tabs, one on the overview (one ``/parts/overview`` every 2 s), one on the first queue's
page (its live parts, the counts and times and the job list, every 2 s), and a scraper (one
``/metrics`` every second). Nothing else touches the node, so every command INFO commandstats counts in
that window is the dashboard's: server µs per second of watching, the share of one
core, and the commands that cost the most. The window spans two of the dashboard's
queue discoveries (a SCAN every 10 s), so ``discovered`` pays for them as it would
running. Interleaved rounds, median and spread.

    .venv/bin/python -m bench --only dashboard        (a section of the documented run)
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from echomq import Queue, connect
from echomq.dashboard import Settings, serving
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.jobstats import JobStats

from .common import ADMIN_COMMANDS, BenchServer, Sample, say

SCRAPE_EVERY_S = 1.0
PAGE_EVERY_S = 2.0


def server_usec(client: Any) -> tuple[float, dict[str, tuple[int, int]]]:
    """Total usec of every non-admin command since the last CONFIG RESETSTAT, and (calls, usec) per command."""
    stats = {name.lower(): entry for name, entry in client.info("commandstats").items()
             if name.lower().split("|")[0] not in ADMIN_COMMANDS}  # config|resetstat is CONFIG's
    per = {name[len("cmdstat_"):]: (int(e["calls"]), int(e["usec"])) for name, e in stats.items()}
    return float(sum(usec for _, usec in per.values())), per


def fill(server: BenchServer, wire: int, queues: int, depth: int) -> list[str]:
    server.use(wire)
    names = [f"watched{i}" for i in range(queues)]
    with connect(server.url, wire=wire) as conn:
        for i, name in enumerate(names):
            share = depth // queues + (1 if i < depth % queues else 0)
            queue = Queue(conn, name)
            for start in range(0, share, 1000):
                queue.enqueue_many([{"n": n} for n in range(start, min(share, start + 1000))])
            queue.metrics()  # nothing written: the metrics hashes appear with the first completion
    return names


def watch(server: BenchServer, wire: int, names: list[str], pinned: bool, seconds: float) -> tuple[float, dict]:
    """One window of watching: (server µs per second, per-command (calls, usec))."""
    with connect(server.url, wire=wire) as conn:
        stats = JobStats()
        for task in ("send", "render", "bill"):
            stats.of(names[0], task).counts["completed"] += 1
        beat = Heartbeat(conn.client, queues=names[:1], concurrency=10, wire=wire, stats=stats)
        beat.beat(held=0, completed=0, failed=0)
        settings = Settings(queues=names if pinned else [], sample_interval_s=PAGE_EVERY_S)
        with serving(conn, settings) as url, httpx.Client(base_url=url, timeout=30) as site:
            site.get("/parts/overview").raise_for_status()  # warm: the first discovery and template loads
            server.client.config_resetstat()
            started = time.monotonic()
            next_scrape = next_page = started
            while (now := time.monotonic()) < started + seconds:
                if now >= next_scrape:
                    site.get("/metrics").raise_for_status()
                    next_scrape += SCRAPE_EVERY_S
                if now >= next_page:
                    for part in ("/parts/overview", f"/parts/queues/{names[0]}", f"/parts/queues/{names[0]}/jobs"):
                        site.get(part).raise_for_status()
                    next_page += PAGE_EVERY_S
                time.sleep(max(0.0, min(next_scrape, next_page) - time.monotonic()))
            elapsed = time.monotonic() - started
            usec, per = server_usec(server.client)
        beat.remove()
    return usec / elapsed, per


def run(server: BenchServer, *, wires: list[int], queue_counts: list[int], depth: int, seconds: float,
        rounds: int) -> dict:
    configs = [(w, q, pinned) for w in wires for q in queue_counts for pinned in (False, True)]
    samples = {c: Sample() for c in configs}
    commands: dict[tuple, dict[str, list[int]]] = {c: {} for c in configs}
    for round_no in range(rounds):
        for config in configs:  # interleaved: the machine's noise falls on every row alike
            wire, queues, pinned = config
            say(f"dashboard cost: round {round_no + 1}/{rounds}, wire {wire}, {queues} queue(s), "
                f"{'pinned' if pinned else 'discovered'}")
            names = fill(server, wire, queues, depth)
            per_s, per = watch(server, wire, names, pinned, seconds)
            samples[config].add(per_s)
            for name, (calls, usec) in per.items():
                total = commands[config].setdefault(name, [0, 0])
                total[0] += calls
                total[1] += usec
    table = []
    for config in configs:
        wire, queues, pinned = config
        top = sorted(commands[config].items(), key=lambda item: -item[1][1])[:4]
        table.append({"wire": wire, "queues": queues, "pinned": pinned, "usec_per_s": samples[config].as_dict(),
                      "usec_total": sum(usec for _, usec in commands[config].values()),
                      "top": [{"command": name, "calls": calls, "usec": usec} for name, (calls, usec) in top]})
    return {"depth": depth, "seconds": seconds, "rounds": rounds, "scrape_every_s": SCRAPE_EVERY_S,
            "page_every_s": PAGE_EVERY_S, "table": table}


def lines(result: dict, med: Any, table: Any) -> list[str]:
    """The section of docs/benchmarks.md (``med``/``table``: report.py's formatters)."""
    out = ["## The cost of watching: the dashboard and a Prometheus scraper", "",
           f"The node holds {result['depth']:,} pending jobs spread over the queues and one worker record "
           f"with its summary. For {result['seconds']:g} s a client loads the overview and the first queue's "
           f"page (its counts and times, its job list) every {result['page_every_s']:g} s and "
           f"scrapes `/metrics` every {result['scrape_every_s']:g} s, while the dashboard samples the rates "
           f"every {result['page_every_s']:g} s; {result['rounds']} rounds. Every command in that window is "
           "the dashboard's (nothing else touches the node): server µs per second of watching, from INFO "
           "commandstats, and the share of one core. `discovered` finds the queues with a SCAN every 10 s; "
           "`pinned` is `emq dashboard -q …`.", ""]
    rows = []
    for row in result["table"]:
        share = row["usec_per_s"]["median"] / 1e4 if row["usec_per_s"]["median"] is not None else None
        top = ", ".join(f"{t['command']} {t['usec'] / max(1, row['usec_total']) * 100:.0f}%" for t in row["top"][:3])
        rows.append([str(row["wire"]), str(row["queues"]), "pinned" if row["pinned"] else "discovered",
                     med(row["usec_per_s"], 0), f"{share:.3f}%" if share is not None else "–", top])
    return out + table(["wire", "queues", "queues found", "server µs / s", "of one core", "most of it"], rows)
