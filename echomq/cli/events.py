"""``emq events``: a queue's event stream, shown, followed, turned on or off."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import click

from .._protocol.verbs import EVENTS_MAX
from .._protocol.shown import id_form, one_line
from ..admin.inventory import events_setting
from .common import create_option, err, node_options, opened_queue, queue_option, require_queue


@click.command()
@node_options
@queue_option()
@click.option("-f", "--follow", is_flag=True, help="keep waiting for new events (Ctrl-C stops)")
@click.option("--since", default=None, metavar="ID",
              help="only events after this stream id; '$' = only new ones (default: every one kept)")
@click.option("--enable", "maxlen", type=click.IntRange(1, EVENTS_MAX), default=None, metavar="MAXLEN",
              help="turn the queue's event stream on, bounded to MAXLEN entries, and exit")
@click.option("--disable", is_flag=True, help="turn the queue's event stream off, and exit")
@create_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
def events(url: str, wire: str, queue_name: str, follow: bool, since: str | None, maxlen: int | None,
           disable: bool, create: bool, as_json: bool) -> None:
    """Show a queue's events (enqueued, claimed, progress, completed, retried, failed, dead, stalled,
    recovered, removed, promoted, delayed, requeued, rescheduled, reprocessed), oldest first; with
    --follow, as they happen."""
    if maxlen is not None and disable:
        raise click.UsageError("give --enable MAXLEN or --disable, not both")
    if since is not None and not STREAM_ID.fullmatch(since):
        raise click.BadParameter(f"{since!r} is not a stream id: give '$', a time in ms (1700000000000) or an "
                                 "event's stream_id (--json shows it: 1700000000000-0)", param_hint="--since")
    with opened_queue(url, wire, queue_name) as queue:
        if not create:
            require_queue(queue, creatable=True)
        if maxlen is not None or disable:
            if disable:
                queue.disable_events()
                click.echo(f"events off for {queue_name}")
            else:
                queue.enable_events(maxlen)
                click.echo(f"events on for {queue_name}, the last {maxlen} kept")
            return
        bound, kept = events_setting(queue)
        note = events_note(queue_name, bound, follow=follow, kept=since is not None or kept)
        if note:
            err.print(note)
        try:
            for event in queue.events(since=since, follow=follow, block_ms=1000):
                click.echo(_event_line(event, as_json))
        except KeyboardInterrupt:
            pass


def events_note(queue_name: str, bound: bytes | None, *, follow: bool, kept: bool) -> str | None:
    """What ``emq events`` says before the events (pure): that they are off and how to turn them on
    (a follower would otherwise wait in silence for ever), or that none are kept yet; None when
    there is nothing to say. ``bound``: the queue's ``meta events``; ``kept``: a stream to read."""
    on = bound is not None and bound.isdigit() and int(bound) > 0  # docs/spec.md §12: an integer >= 1 is on
    turn_on = f"turn them on with: emq events -q {queue_name} --enable 10000"
    if not on and follow:
        return (f"events are off for {queue_name}: no move is told, so nothing will come ({turn_on}); "
                "following anyway: they show here once turned on")
    if not on and not kept:
        return f"no events in {queue_name} ({turn_on})"
    if not kept and not follow:
        return f"no events in {queue_name} yet (events are on, the last {int(bound or 0)} kept)"
    return None


#: what XREAD takes after: '$', or a stream id (its sequence part optional)
STREAM_ID = re.compile(r"\$|\d+(-\d+)?")


def _event_line(event: Any, as_json: bool) -> str:
    fields = {"stream_id": event.stream_id, "time_ms": event.time_ms, "type": event.type, "id": event.job_id,
              "attempt": event.attempt}
    fields.update({k: v for k, v in (("error", event.error), ("state", event.state), ("progress", event.progress))
                   if v is not None})
    if as_json:
        return json.dumps(fields, separators=(",", ":"))
    when = time.strftime("%H:%M:%S", time.gmtime(event.time_ms / 1000)) + f".{event.time_ms % 1000:03d}"
    extra = "".join(f" {k}={json.dumps(v) if k == 'progress' else one_line(str(v))}" for k, v in fields.items()
                    if k in ("error", "state", "progress"))
    return f"{when} {one_line(event.type):<9} {id_form(event.job_id)} attempt={event.attempt}{extra}"
