"""The commands on a queue as a whole: ``emq purge``, ``drain``, ``pause``, ``resume``,
``rate-limit``, ``results-layout``, ``promote`` and ``sweep``."""

from __future__ import annotations

import click

from .._client.partitioned import PartitionedQueue
from .._protocol.results import LAYOUTS
from .._protocol.shown import id_form
from ..admin import actions, steps
from .common import (create_option, err, json_option, node_options, opened_queue, print_json, queue_option,
                     require_queue)


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` as milliseconds."""
    try:
        return steps.parse_duration_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command()
@node_options
@queue_option()
@click.option("--older-than", "age_ms", default=None, metavar="DURATION",
              callback=lambda ctx, param, value: None if value is None else parse_duration_ms(value),
              help="only jobs dead at least this long (500ms, 30s, 15m, 12h, 7d); default: every dead job")
@click.option("--batch", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="jobs deleted per server call")
@json_option
def purge(url: str, wire: str, queue_name: str, age_ms: int | None, batch: int, as_json: bool) -> None:
    """Delete a queue's dead jobs, oldest first."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        total = actions.purge(queue, age_ms or 0, batch)
    if as_json:
        print_json({"queue": queue_name, "purged": total})
    else:
        click.echo(f"purged {total} dead job(s) of {queue_name}")


@click.command()
@node_options
@queue_option()
@click.option("--batch", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="jobs deleted per server call")
@json_option
def drain(url: str, wire: str, queue_name: str, batch: int, as_json: bool) -> None:
    """Delete a queue's pending jobs, flat and lane jobs alike (active, scheduled and dead jobs are
    left alone; flow jobs too, said so: a parent waits for its children)."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        drained = actions.drain(queue, batch)
    lanes, flows = drained.lanes, drained.flows_left
    if as_json:
        print_json({"queue": queue_name, "drained": drained.pending, "lane_drained": lanes, "flow_left": flows})
    else:
        click.echo(f"drained {drained.pending} pending job(s) of {queue_name}" + (f" ({lanes} of them lane jobs)"
                                                                                if lanes else ""))
    if flows:
        err.print(f"left {flows} flow job(s) not started: a flow job is not drained, its parent waits for it; "
                  f"cancel one with emq cancel -q {queue_name} ID (its parent is told as of a death)")


@click.command()
@node_options
@queue_option()
@create_option
def pause(url: str, wire: str, queue_name: str, create: bool) -> None:
    """Hold claims on a queue (enqueue still admits jobs)."""
    with opened_queue(url, wire, queue_name) as queue:
        if not create:
            require_queue(queue, creatable=True)
        queue.pause()
    click.echo(f"{queue_name} paused")


@click.command()
@node_options
@queue_option()
def resume(url: str, wire: str, queue_name: str) -> None:
    """Let workers claim from a paused queue again."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        queue.resume()
    click.echo(f"{queue_name} resumed")


@click.command("rate-limit")
@node_options
@queue_option()
@click.argument("rate", required=False)
@click.option("--off", is_flag=True, help="lift the queue's rate limit")
@create_option
@json_option
def rate_limit(url: str, wire: str, queue_name: str, rate: str | None, off: bool, create: bool, as_json: bool) -> None:
    """Show or set a queue's rate limit: at most RATE job starts (50/s, 600/m, 1000/h) across
    every worker, enforced by the server with each claim."""
    if rate is not None and off:
        raise click.UsageError("give a RATE or --off, not both")
    with opened_queue(url, wire, queue_name) as queue:
        if isinstance(queue, PartitionedQueue):
            raise click.ClickException(f"{queue_name} is a partitioned queue: a rate limit is one queue's, and its "
                                       "partitions are queues of their own (not supported)")
        if not create:
            require_queue(queue, creatable=True)
        if rate is not None or off:
            queue.set_rate_limit(None if off else rate)
        current = queue.rate_limit()
    if as_json:
        print_json({"queue": queue_name, "rate_limit": None if current is None else str(current),
                    "limit": current and current.limit, "window_ms": current and current.window_ms})
    else:
        click.echo(f"{queue_name}: " + ("no rate limit" if current is None else f"at most {current} job starts"))


@click.command("results-layout")
@node_options
@queue_option()
@click.argument("layout", required=False, type=click.Choice(LAYOUTS))
@create_option
@json_option
def results_layout(url: str, wire: str, queue_name: str, layout: str | None, create: bool, as_json: bool) -> None:
    """Show or set where a queue keeps its completed records: fields (the default: a field of the
    queue's hash done each, where the node has field expiry) or record (a key done:<id> each, the
    layout 0.2.0 reads: keep it while a 0.2.0 process reads the queue)."""
    with opened_queue(url, wire, queue_name) as queue:
        if not create:
            require_queue(queue, creatable=True)
        if layout is not None:
            queue.set_result_layout(layout)
        found = queue.result_layout()
    layouts = found if isinstance(found, list) else [found]
    names = [part.name for part in queue.partitions] if isinstance(queue, PartitionedQueue) else [queue_name]
    if as_json:
        print_json({"queue": queue_name, **layouts[0].as_json()} if len(layouts) == 1 else
                   {"queue": queue_name, "partitions": [{"queue": name, **each.as_json()}
                                                        for name, each in zip(names, layouts)]})
    else:
        for name, each in zip(names, layouts):
            click.echo(f"{name}: the {each.layout} layout (switch {each.switch}): {each.why}")


@click.command()
@node_options
@queue_option()
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@json_option
def promote(url: str, wire: str, queue_name: str, limit: int, as_json: bool) -> None:
    """Move due scheduled jobs to pending, once."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        moved = queue.promote(limit)
    if as_json:
        print_json({"queue": queue_name, "promoted": moved})
    else:
        click.echo(f"promoted {moved} job(s) of {queue_name}")


@click.command()
@node_options
@queue_option()
@click.option("--max-stalled", type=click.IntRange(1), default=3, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@json_option
def sweep(url: str, wire: str, queue_name: str, max_stalled: int, limit: int, as_json: bool) -> None:
    """Recover expired leases (STALLED.CHECK, then the reaper for lane leases), once."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        found = actions.sweep(queue, max_stalled, limit)
    if as_json:
        print_json({"queue": queue_name, "recovered": found.recovered, "exempt": found.exempt, "dead": found.dead})
        return
    click.echo(f"{queue_name}: recovered {len(found.recovered)}, exempt (server restart) {len(found.exempt)}, "
               f"dead {len(found.dead)}")
    for label, ids in (("recovered", found.recovered), ("exempt", found.exempt), ("dead", found.dead)):
        for job_id in ids:
            click.echo(f"  {label}\t{id_form(job_id)}")
