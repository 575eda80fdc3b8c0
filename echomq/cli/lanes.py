"""``emq group``: lanes, one group of a queue's lane jobs at a time (docs/lanes-and-flows.md)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import click
from rich import box
from rich.table import Table

from .._client.partitioned import PartitionedQueue
from .._client.queue import Queue
from .common import cell, json_option, node_options, opened_queue, out, print_json, queue_option, require_queue


@click.group("group")
def group_cmd() -> None:
    """Lanes: the groups of a queue's lane jobs (docs/lanes-and-flows.md)."""


@contextmanager
def lane_queue(url: str, wire: str, queue_name: str) -> Iterator[Queue]:
    with opened_queue(url, wire, queue_name) as queue:
        if isinstance(queue, PartitionedQueue):
            raise click.ClickException(f"{queue_name} is a partitioned queue: lanes are one queue's (not supported)")
        require_queue(queue)
        yield queue


@group_cmd.command("pause")
@node_options
@queue_option()
@click.argument("group")
def group_pause(url: str, wire: str, queue_name: str, group: str) -> None:
    """GROUP starts no job until resumed (its running jobs finish)."""
    with lane_queue(url, wire, queue_name) as queue:
        queue.pause_group(group)
    click.echo(f"{queue_name} group {group} paused")


@group_cmd.command("resume")
@node_options
@queue_option()
@click.argument("group")
def group_resume(url: str, wire: str, queue_name: str, group: str) -> None:
    """GROUP takes its turn again."""
    with lane_queue(url, wire, queue_name) as queue:
        was = queue.resume_group(group)
    click.echo(f"{queue_name} group {group} resumed" + ("" if was else " (it was not paused)"))


@group_cmd.command("limit")
@node_options
@queue_option()
@click.argument("k", type=click.IntRange(1, 10_000), required=False)
@click.option("--group", "group", default=None, help="this group's k (default: the queue's, for every group "
                                                      "without its own)")
@click.option("--off", is_flag=True, help="remove the setting (a group falls back to the queue's, the queue's to 1)")
def group_limit(url: str, wire: str, queue_name: str, k: int | None, group: str | None, off: bool) -> None:
    """At most K jobs of a group run at once."""
    if (k is None) == (not off):
        raise click.UsageError("give K or --off")
    with lane_queue(url, wire, queue_name) as queue:
        queue.set_lane_limit(None if off else k, group)
    where = f"group {group}" if group else "every group without its own k"
    click.echo(f"{queue_name} {where}: " + ("setting removed" if off else f"at most {k} at once"))


@group_cmd.command("list")
@node_options
@queue_option()
@json_option
def group_list(url: str, wire: str, queue_name: str, as_json: bool) -> None:
    """The queue's groups: jobs waiting and running, paused, k."""
    with lane_queue(url, wire, queue_name) as queue:
        groups = queue.groups()
    if as_json:
        print_json({g: vars(c) for g, c in groups.items()})
        return
    table = Table(title=f"{queue_name}: {len(groups)} group(s)", box=box.SIMPLE_HEAD)
    for column in ("group", "waiting", "running", "k", "paused"):
        table.add_column(column, justify="left" if column == "group" else "right")
    for g, c in groups.items():
        table.add_row(cell(g), str(c.waiting), str(c.running), str(c.limit), "yes" if c.paused else "")
    out.print(table)
