"""The commands on jobs: ``emq enqueue``, ``inspect``, ``dead``, ``reprocess``, ``remove`` and
``cancel``. Each parses its arguments, calls the library (``admin``, the queue's methods) and prints."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator

import click
from rich.table import Table
from rich.text import Text

from .._client.connection import Connection
from .._client.partitioned import open_queue
from .._core.core import MAX_PAYLOAD_BYTES, encode_payload
from .._protocol.keys import check_group, check_job_id, check_queue_name
from .._protocol.serializers import JSON, RAW
from .._protocol.shown import id_form, lines
from ..admin.actions import act_on_dead, each_job, enqueue_jobs, reprocess_dead
from ..admin.inventory import dead_jobs, job_story, queues_holding
from ..admin.selection import JobFilter, dead_as_of
from ..errors import ConfigurationError
from .common import (cell, err, escaped_option, json_option, named_ids, node_options, opened, opened_queue, out,
                     print_json, queue_option, reported, require_queue, say_escaped)


@click.command()
@click.argument("payloads", nargs=-1)
@node_options
@queue_option()
@click.option("--id", "job_id", default=None, help="the job's id (one payload only); an existing id is not enqueued twice")
@click.option("--key", default=None, help="a partitioned queue: every job to this key's partition (in order)")
@click.option("--priority", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="lower runs first")
@click.option("--delay-ms", type=click.IntRange(0), default=None, help="schedule: ready this long from now")
@click.option("--group", default=None,
              help="a lane job of this group: the group's jobs start in order, k at once (docs/lanes-and-flows.md)")
@click.option("--count", type=click.IntRange(1), default=1, show_default=True,
              help="enqueue each payload this many times")
@click.option("--raw", is_flag=True, help="payloads are bytes as given, not JSON")
@click.option("--file", "files", multiple=True, type=click.File("rb"),
              help="read a payload from this file (repeatable); a PAYLOAD of - reads one from stdin")
@click.option("--max-payload-bytes", type=click.IntRange(1), default=MAX_PAYLOAD_BYTES, show_default=True,
              help="refuse a larger payload before sending anything")
@json_option
def enqueue(payloads: tuple[str, ...], url: str, wire: str, queue_name: str, job_id: str | None, key: str | None,
            priority: int, delay_ms: int | None, group: str | None, count: int, raw: bool, files: tuple[Any, ...],
            max_payload_bytes: int, as_json: bool) -> None:
    """Add jobs to a queue: each PAYLOAD is standard JSON text (default {}), - for stdin."""
    if list(payloads).count("-") > 1:
        raise click.UsageError("stdin holds one payload: give - at most once")
    # os.fsencode: the argument's bytes as given (Python reads bytes that are not UTF-8 as surrogate escapes)
    texts = [_stdin_bytes() if text == "-" else os.fsencode(text) for text in payloads]
    texts += [f.read() for f in files]
    texts = texts or [b"{}"]
    serializer = RAW if raw else JSON
    with reported():
        values = texts if raw else [_parse_json(text) for text in texts]
        for value in values:  # every payload checked before any write
            encode_payload(serializer, value, max_payload_bytes)
        if job_id is not None:
            check_job_id(job_id)
            if len(values) * count != 1:
                raise ConfigurationError("--id names one job: give one payload and no --count")
        if group is not None:
            check_group(group)
            if delay_ms is not None or key is not None:
                raise ConfigurationError("a lane job (--group) waits in its group's lane: it takes no --delay-ms "
                                         "and no --key")
    with opened_queue(url, wire, queue_name, serializer=serializer, max_payload_bytes=max_payload_bytes) as queue:
        added = enqueue_jobs(queue, values, count=count, job_id=job_id, key=key, delay_ms=delay_ms,
                             priority=priority, group=group)
        shown = 0
        with json_array() if as_json else nullcontext(None) as write:
            for item in added:
                if write is not None:  # every id, not the first 20
                    write({"id": item.id, "created": item.created})
                elif shown < 20:
                    said = "enqueued" if item.created else "exists (not enqueued again)"
                    click.echo(f"{id_form(item.id)}\t{said}")
                shown += 1
    if not as_json and shown > 20:
        click.echo(f"... {shown} jobs in all")


@contextmanager
def json_array() -> Iterator[Callable[[Any], None]]:
    """Print a JSON array an item at a time, as :func:`print_json` prints the whole list."""
    written = 0

    def write(item: Any) -> None:
        nonlocal written
        text = json.dumps(item, indent=2, sort_keys=True).replace("\n", "\n  ")
        click.echo(("[\n  " if not written else ",\n  ") + text, nl=False)
        written += 1

    yield write
    click.echo("\n]" if written else "[]")


def _stdin_bytes() -> bytes:
    return sys.stdin.buffer.read()


def _parse_json(data: bytes) -> Any:
    """One payload as standard JSON (NaN and Infinity refused: other readers cannot parse them)."""
    try:
        return JSON.loads(data)
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"payload {data[:60]!r} is not UTF-8 text ({exc}); pass --raw for bytes") from exc
    except ValueError as exc:
        raise ConfigurationError(
            f"payload {data[:60].decode(errors='replace')!r} is not standard JSON ({exc}); pass --raw for plain text"
        ) from exc


@click.command()
@click.argument("given_id", metavar="ID")
@node_options
@queue_option(required=False)
@escaped_option
@json_option
def inspect(given_id: str, url: str, wire: str, queue_name: str | None, escaped: bool, as_json: bool) -> None:
    """Show one job: its row, its set and what its score means; or, completed within its
    retention, its record and result. Without -q the job is looked for in every queue (SCAN).
    Exit 1 when there is no such job."""
    with reported():
        (job_id,) = named_ids((given_id,), escaped)
        if queue_name is not None:
            check_queue_name(queue_name)
    with opened(url, wire) as connection, reported():
        if queue_name is None:
            queue_name = the_queue_of(connection, job_id)
        queue = open_queue(connection, queue_name, serializer=RAW)
        view = job_story(queue, job_id)
        if view is None:
            require_queue(queue)
    if view is None:
        raise click.ClickException(f"no job {id_form(job_id)!r} in queue {queue_name!r} (never enqueued, or "
                                   "completed past its retention)")
    if as_json:
        print_json(view.as_dict())
        return
    table = Table(title=cell(f"{queue_name} / {id_form(job_id)}"), show_header=False)
    table.add_row("state", cell(view.state or "(none)"))
    if view.task is not None:
        table.add_row("task", cell(view.task))
    if view.where:
        table.add_row("set", cell(view.where))
    for field in ("attempts", "failures", "stalled", "priority", "group", "parent", "children", "on_child_failure",
                  "last_error", "progress", "lease_epoch"):
        if field in view.fields:
            table.add_row(field, cell(view.fields[field]))
    for field, since, utc in view.times():
        table.add_row(field, f"{since} ({utc}, server clock)")
    if view.completed:
        if view.kept_ms is not None and view.kept_ms >= 0:
            table.add_row("kept", f"for {view.kept_ms} ms more (its retention, server clock)")
        table.add_row("result", Text(lines(view.payload_text())))
        out.print(table)
        return
    if not view.in_its_set:
        table.add_row("in its set", "[red]no[/] (the row's state names a set it is not in)")
    elif view.state == "active":
        table.add_row("lease", f"expires in {view.due_in_ms} ms (server clock)")
    elif view.state == "scheduled":
        table.add_row("due", f"in {view.due_in_ms} ms (server clock)")
    if view.trace:
        table.add_row("trace", cell(" ".join(f"{k}={v}" for k, v in sorted(view.trace.items()))))
    table.add_row("payload", Text(lines(view.payload_text())))
    if view.fields.get("traceback"):  # the last failure's, its tail kept (empty: it had none)
        table.add_row("traceback", Text(lines(view.fields["traceback"])))
    out.print(table)


def the_queue_of(connection: Connection, job_id: str) -> str:
    """The one queue holding a row or a completed record for ``job_id`` (a SCAN of the node)."""
    found = queues_holding(connection, job_id)
    if not found:
        raise click.ClickException(f"no job {id_form(job_id)!r} in any queue on this node (never enqueued, or "
                                   "completed past its retention)")
    if len(found) > 1:
        raise click.ClickException(f"job {id_form(job_id)!r} is in several queues ({', '.join(sorted(found))}): "
                                   "pass -q")
    return found.pop()


@click.command()
@node_options
@queue_option()
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@json_option
def dead(url: str, wire: str, queue_name: str, limit: int, as_json: bool) -> None:
    """List dead jobs with their last error."""
    with opened_queue(url, wire, queue_name, serializer=RAW) as queue:
        require_queue(queue)
        total, views = dead_jobs(queue, limit)
    rows = [view.as_dict() for view in views]
    if as_json:
        print_json({"queue": queue_name, "total": total, "jobs": rows})
        return
    table = Table(title=f"dead in {queue_name}: {total}")
    table.add_column("id", no_wrap=True)
    for column in ("attempts", "failures", "stalled", "last error"):
        table.add_column(column)
    for row in rows:  # a counter the row does not hold yet is 0 (docs/spec.md §1)
        table.add_row(cell(id_form(row["id"])), *(cell(row.get(f, 0)) for f in ("attempts", "failures", "stalled")),
                      cell(row.get("last_error", "")))
    out.print(table)
    if total > len(rows):
        out.print(f"(showing {len(rows)} of {total}; --limit to see more)")
    say_escaped([row["id"] for row in rows])


@click.command()
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@node_options
@queue_option()
@click.option("--all", "every", is_flag=True, help="every dead job of the queue (those the filters below match)")
@click.option("--error", "error_text", default="", help="with --all: only jobs whose last error contains this text "
                                                         "(any case)")
@click.option("--min-age", default="", help="with --all: only jobs admitted at least this long ago (30s, 15m, 12h, 7d)")
@click.option("--max-age", default="", help="with --all: only jobs admitted at most this long ago")
@click.option("--task", "task_name", default="", help="with --all: only jobs of this task (the name their "
                                                      "headers carry: @app.task's name=, else its function's)")
@escaped_option
@json_option
def reprocess(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str, every: bool, error_text: str,
              min_age: str, max_age: str, task_name: str, escaped: bool, as_json: bool) -> None:
    """Send dead jobs back to pending with a full retry and stall budget again (attempts go on;
    exit 1 when a named id was not in dead). --all goes through the dead a batch at a time (500 jobs
    a round trip, each moved by its own short command), taking those dead when it starts."""
    if bool(job_ids) == every:
        raise click.UsageError("name dead job ids, or pass --all" + (", not both" if every else ""))
    with reported():
        ids = named_ids(job_ids, escaped)
        try:
            job_filter = JobFilter(error=error_text, min_age=min_age, max_age=max_age, task=task_name)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        if not every and not job_filter.empty:
            raise ConfigurationError("--error, --min-age, --max-age and --task choose among every dead job: pass --all")
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        if every:
            done = act_on_dead(queue, "reprocess", job_filter, dead_as_of(queue))
            moved, missed = done.done, done.not_done
        else:
            moved, missed = reprocess_dead(queue, ids)
    for job_id in missed:
        err.print(cell(f"{id_form(job_id)}: not in dead, left as it is"))
    if as_json:
        print_json({"queue": queue_name, "reprocessed": moved, "not_in_dead": missed})
    else:
        click.echo(f"reprocessed {len(moved)} job(s) of {queue_name}")
    if missed:
        sys.exit(1)


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@node_options
@queue_option()
@escaped_option
@json_option
def remove(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str, escaped: bool, as_json: bool) -> None:
    """Delete pending, scheduled or dead jobs (an active job is refused: cancel it; exit 1 when a
    named id had no job)."""
    with reported():
        ids = named_ids(job_ids, escaped)
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        answers, refused = each_job(ids, queue.remove)
    removed = {job_id: was for job_id, was in answers.items() if was is not None}
    settled_report(queue_name, "removed", removed, answers, refused, as_json)


@click.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@node_options
@queue_option()
@escaped_option
@json_option
def cancel(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str, escaped: bool, as_json: bool) -> None:
    """Cancel running jobs: dead with last_error 'cancelled'; the worker drops their outcome
    (exit 1 when a named id had no job)."""
    with reported():
        ids = named_ids(job_ids, escaped)
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        answers, refused = each_job(ids, queue.cancel)
    settled_report(queue_name, "cancelled", [job_id for job_id, done in answers.items() if done], answers, refused,
                   as_json)


def settled_report(queue_name: str, verb: str, done: Any, answers: dict[str, Any], refused: dict[str, str],
                   as_json: bool) -> None:
    """What remove and cancel print: the ids they acted on, the ids with no job and the ids refused
    (either exits 1)."""
    missed = [job_id for job_id, answer in answers.items() if not answer]
    for job_id in missed:
        err.print(cell(f"{id_form(job_id)}: no such job"))
    for job_id, reason in refused.items():
        err.print(cell(f"{id_form(job_id)}: {reason}"))
    if as_json:
        print_json({"queue": queue_name, verb: done, "no_such_job": missed, "refused": refused})
    else:
        click.echo(f"{verb} {len(done)} job(s) of {queue_name}")
    if missed or refused:
        sys.exit(1)
