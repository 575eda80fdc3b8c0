"""``emq stats`` and ``emq workers``: every queue's numbers (once, or refreshed with rates), and
the live workers."""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import nullcontext

import click
from rich import box
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._client.connection import Connection
from .._client.partitioned import open_queues
from .._protocol.keys import check_queue_name, parent_queue
from .._protocol.shown import id_form
from ..admin.inventory import (QueueNumbers, ago, node_where, queue_scan, rates, sample, waiting_unserved,
                               with_partitions)
from ..admin.workers import list_workers
from .common import cell, err, json_option, node_options, opened, out, print_json, reported, require_queue

#: the table's columns: the four sets as they are now, then the running totals of the metrics hashes
STATS_COLUMNS = ("queue", "pending", "active", "scheduled", "dead", "completed\n(total)", "dead\n(total)")
#: shown only when some queue has lane or flow jobs (their own sets, beside the flat four)
GROUPED_COLUMNS = ("lanes\npend/act", "flows\nwait/pend/act/sch")


def stats_table(connection: Connection, sampled: dict[str, QueueNumbers | Exception],
                per_s: dict[str, dict] | None, workers: Counter[str]) -> RenderableType:
    """The table, then the queues whose jobs wait with no live worker to serve them (``workers``: how
    many serve each), then why each unreadable queue could not be read (below it: an error text in a
    column would widen the table past any terminal)."""
    table = Table(title=f"EchoMQ queues on {node_where(connection)}", box=box.SIMPLE_HEAD, collapse_padding=True,
                  pad_edge=False)  # fits 80 columns with the rates
    for column in STATS_COLUMNS:
        table.add_column(column, justify="left" if column == "queue" else "right")
    grouped = any(not isinstance(n, Exception) and n.counts.grouped for n in sampled.values())
    for column in GROUPED_COLUMNS if grouped else ():
        table.add_column(column, justify="right")
    if per_s is not None:
        table.add_column("done/s", justify="right")
        table.add_column("died/s", justify="right")
    unreadable: list[Text] = []
    unserved: list[Text] = []
    for name, numbers in sampled.items():
        if isinstance(numbers, Exception):  # one damaged queue (a wrong-typed key) must not hide the others
            table.add_row(name, "[red]unreadable[/]")
            unreadable.append(Text(f"{name}: {numbers}", style="red"))
            continue
        c = numbers.counts
        if parent_queue(name) == name and (waiting := waiting_unserved(numbers, workers[name])):  # not per partition
            unserved.append(Text(f"  {name}: {waiting} waiting", style="red"))
        row = [numbers.label + (" [yellow](paused)[/]" if c.paused else ""), str(c.pending), str(c.active),
               str(c.scheduled),
               str(c.dead), str(numbers.completed), str(numbers.dead)] + ([c.lanes, c.flows] if grouped else [])
        if per_s is not None:
            rate = per_s.get(name)
            row += [f"{rate['completed_per_s']:.0f}", f"{rate['dead_per_s']:.0f}"] if rate else ["-", "-"]
        table.add_row(*row)
    notes: list[RenderableType] = []
    if unserved:
        notes += [Text("no live worker serves (start one: emq worker MODULE:APP; or check the name, emq workers):",
                       style="red"), *unserved]
    if unreadable:
        notes += [Text("unreadable (one of the queue's keys holds what EchoMQ does not write):"), *unreadable]
    return Group(table, *notes) if notes else table


def stats_json(sampled: dict[str, QueueNumbers | Exception], per_s: dict[str, dict],
               workers: Counter[str]) -> list[dict]:
    return [{"queue": name, "error": str(numbers)} if isinstance(numbers, Exception)
            else {**numbers.as_dict(), "workers": workers[name], **per_s.get(name, {})}
            for name, numbers in sampled.items()]


@click.command()
@node_options
@click.option("-q", "--queue", "queue_names", multiple=True, help="these queues (default: every queue on the node)")
@click.option("--partitions", "detail", is_flag=True, help="a row per partition too, below a partitioned queue's")
@click.option("--watch", is_flag=True, help="refresh until Ctrl-C, with completion and death rates")
@click.option("--interval", type=click.FloatRange(0.05), default=1.0, show_default=True, help="seconds between refreshes")
@click.option("--times", type=click.IntRange(1), default=None, help="with --watch: stop after this many refreshes")
@json_option
def stats(url: str, wire: str, queue_names: tuple[str, ...], detail: bool, watch: bool, interval: float,
          times: int | None, as_json: bool) -> None:
    """Counts per set now (pending, active, scheduled, dead) and totals (completed, dead) per queue;
    lane jobs (pending/active) and flow jobs (waiting/pending/active/scheduled) when there are any.

    With --json --watch: one JSON array per line per refresh (JSON Lines)."""
    if times is not None and not watch:
        raise click.UsageError("--times counts --watch's refreshes: add --watch")
    with reported():
        for name in queue_names:
            check_queue_name(name)
    with opened(url, wire) as connection, reported():
        scan = queue_scan(connection, queue_names)
        names = scan.names
        if scan.unreadable:  # on stderr: stdout stays the table (or the JSON) a script reads
            err.print(cell(f"{scan.unreadable} key(s) skipped: their queue name is not one EchoMQ takes (a raw "
                           f"command wrote them), e.g. {', '.join(scan.examples)}"))
        queues = open_queues(connection, names)
        if queue_names:  # asked for by name: a typo must not look like an empty queue (discovered ones exist)
            for queue in queues:
                require_queue(queue)
        if not names:
            if as_json:
                click.echo("[]")
            else:
                out.print("no queues on this node yet")
            return

        rows = with_partitions(queues, detail)  # with --partitions: a partitioned queue's, under its total
        if not watch:
            sampled, workers = sample(connection, rows)
            if as_json:
                print_json(stats_json(sampled, {}, workers))
            else:
                out.print(stats_table(connection, sampled, None, workers))
            return
        previous, then, shown = None, time.monotonic(), 0
        try:
            # a terminal redraws one table in place; a pipe or a file gets each table as it is sampled
            redrawn = not as_json and out.is_terminal
            with Live(console=out, auto_refresh=False) if redrawn else nullcontext() as live:
                while times is None or shown < times:
                    now, (sampled, workers) = time.monotonic(), sample(connection, rows)
                    good = {n: v for n, v in sampled.items() if isinstance(v, QueueNumbers)}
                    per_s = rates(good, previous, now - then)
                    if as_json:  # the first sample has no rates yet: null, so every line has the same keys
                        unknown = {name: dict.fromkeys(("completed_per_s", "dead_per_s")) for name in good}
                        click.echo(json.dumps(stats_json(sampled, per_s or unknown, workers), sort_keys=True))
                    elif live is not None:
                        live.update(stats_table(connection, sampled, per_s, workers), refresh=True)
                    else:
                        out.print(stats_table(connection, sampled, per_s, workers))
                        out.file.flush()
                    previous, then, shown = good, now, shown + 1
                    if times is None or shown < times:
                        time.sleep(interval)
        except KeyboardInterrupt:
            pass


@click.command()
@node_options
@json_option
def workers(url: str, wire: str, as_json: bool) -> None:
    """The live workers: each one's heartbeat record (gone within its TTL after it dies)."""
    with opened(url, wire) as connection, reported():
        records = list_workers(connection)
    if as_json:
        print_json([record.as_dict() for record in records])
        return
    if not records:
        out.print("no live workers")
        return
    now = time.time()
    table = Table(title=f"{len(records)} live worker(s)", box=box.SIMPLE_HEAD)
    for column in ("id", "queues", "wire", "concurrency", "held", "completed", "failed", "up", "last beat"):
        table.add_column(column, no_wrap=column == "id",
                         justify="left" if column in ("id", "queues") else "right")
    for r in records:
        table.add_row(cell(id_form(r.id)), cell(",".join(r.queues)), str(r.wire), str(r.concurrency), str(r.held),
                      str(r.completed),
                      str(r.failed), ago(now - r.started), ago(now - r.last_beat) + " ago")
    out.print(table)
