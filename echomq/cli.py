"""``emq``: the command line. Thin by design: it parses arguments and calls the public API.

Every command that talks to a node takes ``--url`` (or ``EMQ_URL``) and ``--wire``
(4, 6, or ``auto`` = what the node is branded for; or ``EMQ_WIRE``). Input is
checked before anything is written: a bad payload, id or queue name changes nothing.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click
import valkey
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from . import __version__
from .admin import brand_node
from .connection import Connection, connect
from .errors import CommandRefused, ConfigurationError, ConnectionFailed, EchoMQError
from .keys import State, check_job_id, check_queue_name
from .module import module_path
from .policy import IdlePolicy, LeasePolicy
from .queue import MAX_PAYLOAD_BYTES, Queue, encode_payload
from .serializers import JSON, RAW
from .server import EmbeddedServer
from .tasks import App
from .timers import TimerConfig
from .worker import Worker, WorkerConfig

DEFAULT_URL = "redis://127.0.0.1:6379"
out = Console()
err = Console(stderr=True)


# -- shared options and error handling ---------------------------------------------


def node_options(fn: Any) -> Any:
    fn = click.option("--wire", envvar="EMQ_WIRE", default="auto", show_default=True,
                      type=click.Choice(["4", "6", "auto"]),
                      help="4 = scripts, 6 = trafikey, auto = what the node is branded for")(fn)
    fn = click.option("--url", envvar="EMQ_URL", default=DEFAULT_URL, show_default=True,
                      help="the Valkey node (redis://, rediss://, unix://)")(fn)
    return fn


def queue_option(required: bool = True) -> Any:
    return click.option("-q", "--queue", "queue_name", required=required, help="the queue's name")


@contextmanager
def reported() -> Iterator[None]:
    """EchoMQ and link errors become one clear line and exit status 1, not a traceback."""
    try:
        yield
    except EchoMQError as exc:
        raise click.ClickException(str(exc)) from exc
    except (valkey.ConnectionError, valkey.TimeoutError) as exc:
        raise click.ClickException(f"the server link failed: {exc}") from exc


@contextmanager
def opened(url: str, wire: str) -> Iterator[Connection]:
    with reported():
        connection = connect(url, wire=wire if wire == "auto" else int(wire))
        try:
            yield connection
        finally:
            connection.close()


@contextmanager
def opened_queue(url: str, wire: str, name: str, **kwargs: Any) -> Iterator[Queue]:
    with reported():
        check_queue_name(name)  # before connecting: a bad name is a usage error, whatever the node
    with opened(url, wire) as connection, reported():
        yield Queue(connection, name, **kwargs)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="emq")
def main() -> None:
    """EchoMQ: a job queue on Valkey, every state change one atomic step in the server."""


# -- the node ---------------------------------------------------------------------


@main.command()
@click.option("--wire", type=click.Choice(["4", "6"]), default="6", show_default=True,
              help="6 loads the trafikey module; 4 serves the scripts")
@click.option("--port", type=int, default=None, help="default: a free port")
@click.option("--aof", is_flag=True, help="append-only file: jobs survive a restart")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="data directory (default: a fresh temporary one)")
def server(wire: str, port: int | None, aof: bool, directory: str | None) -> None:
    """Run an embedded Valkey, branded for WIRE, until Ctrl-C."""
    with reported():
        module = module_path() if wire == "6" else None
        instance = EmbeddedServer(module=module, aof=aof, brand=int(wire), port=port, directory=directory)
        instance.start()
        try:
            connect(instance.url, wire=int(wire)).close()  # the node must serve the wire it is branded for
        except EchoMQError:
            instance.cleanup()
            raise
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        out.print(f"[bold]valkey[/] on {instance.url}, wire {wire}" + (", AOF on" if aof else "")
                  + (f", module {module}" if module else "") + f"\ndata in {instance.dir}")
        out.print(f"export EMQ_URL={instance.url}   # then: emq worker mymodule:app")
        while not stopped.wait(0.5):
            if not instance.running:
                raise click.ClickException(f"valkey-server exited; see {instance.log_path}")
    except KeyboardInterrupt:
        pass
    finally:
        instance.cleanup()  # stops it; removes the data directory only if it made it
        err.print("server stopped")


@main.command()
@click.argument("url", envvar="EMQ_URL", default=DEFAULT_URL)
@click.option("--wire", type=click.Choice(["4", "6"]), required=True)
def brand(url: str, wire: str) -> None:
    """Brand the node at URL for one wire, once (refuses to overwrite the other brand)."""
    with reported():
        try:
            client = valkey.Valkey.from_url(url)
            client.ping()
        except ValueError as exc:
            raise ConfigurationError(f"bad URL {url!r}: {exc}; use redis://host:port") from exc
        except valkey.ConnectionError as exc:
            raise ConnectionFailed(f"no Valkey answers at {url}: {exc}") from exc
        with client:
            out.print(f"{url} branded {brand_node(client, int(wire)).decode()}")


@main.command("module-path")
def module_path_command() -> None:
    """Print the path of the built trafikey module (for --loadmodule)."""
    with reported():
        click.echo(module_path())


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def parity(args: tuple[str, ...]) -> None:
    """Run the parity instrument: scripts vs trafikey, every key compared (--help for its options)."""
    from .parity import main as parity_main

    sys.exit(parity_main(list(args)))


# -- the worker --------------------------------------------------------------------


def load_app(spec: str) -> App:
    """``module:attr`` -> the App (``attr`` may also be a function returning one)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{spec!r}: expected module:app, e.g. myproject.jobs:app", param_hint="APP")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules next to where you run it
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise click.BadParameter(f"{module_name!r} has no {attr!r}", param_hint="APP")
    if not isinstance(found, App) and callable(found):
        found = found()
    if not isinstance(found, App):
        raise click.BadParameter(f"{spec} is a {type(found).__name__}, not an echomq.App", param_hint="APP")
    return found


@main.command()
@click.argument("app_spec", metavar="MODULE:APP")
@node_options
@click.option("-q", "--queue", "queues", multiple=True, help="serve only these queues (default: every task's)")
@click.option("-c", "--concurrency", type=click.IntRange(1), default=10, show_default=True,
              help="jobs run at once by this process")
@click.option("--lease-ms", type=click.IntRange(100), default=30_000, show_default=True)
@click.option("--grace", type=click.FloatRange(0), default=10.0, show_default=True,
              help="seconds running jobs get to finish after SIGTERM/SIGINT")
@click.option("--claim-batch", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="claims pipelined per round trip while busy")
@click.option("--idle-max-ms", type=click.IntRange(10), default=1000, show_default=True,
              help="longest wait between claims on an empty queue")
@click.option("--promote-interval-ms", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--sweep-interval-ms", type=click.IntRange(1), default=5000, show_default=True)
@click.option("--max-stalled", type=click.IntRange(1), default=3, show_default=True,
              help="lease expiries before a job goes dead")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None,
              help="seconds a handler may run before it fails with JobTimeout, for every task "
                   "(default: each task's timeout, 300 unless it says otherwise)")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
def worker(app_spec: str, url: str, wire: str, queues: tuple[str, ...], concurrency: int, lease_ms: int,
           grace: float, claim_batch: int, idle_max_ms: int, promote_interval_ms: int, sweep_interval_ms: int,
           max_stalled: int, timeout_s: float | None, log_level: str) -> None:
    """Run the handlers of MODULE:APP until SIGTERM/SIGINT (a second one exits at once)."""
    app = load_app(app_spec)
    with reported():
        config = WorkerConfig(
            concurrency=concurrency, claim_batch=claim_batch, grace_s=grace, lease=LeasePolicy(lease_ms),
            idle=IdlePolicy(max_ms=idle_max_ms),
            timers=TimerConfig(promote_interval_ms=promote_interval_ms, sweep_interval_ms=sweep_interval_ms,
                               max_stalled=max_stalled),
            timeout_s=timeout_s,
        )
    with opened(url, wire) as connection, reported():
        instance = Worker(app, connection, queues=queues or None, config=config)
        logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        instance.run()


# -- jobs ---------------------------------------------------------------------------


@main.command()
@click.argument("payloads", nargs=-1)
@node_options
@queue_option()
@click.option("--id", "job_id", default=None, help="the job's id (one payload only); an existing id is not enqueued twice")
@click.option("--priority", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="lower runs first")
@click.option("--delay-ms", type=click.IntRange(0), default=None, help="schedule: ready this long from now")
@click.option("--count", type=click.IntRange(1), default=1, show_default=True,
              help="enqueue each payload this many times")
@click.option("--raw", is_flag=True, help="payloads are bytes as given, not JSON")
@click.option("--file", "files", multiple=True, type=click.File("rb"),
              help="read a payload from this file (repeatable); a PAYLOAD of - reads one from stdin")
@click.option("--max-payload-bytes", type=click.IntRange(1), default=MAX_PAYLOAD_BYTES, show_default=True,
              help="refuse a larger payload before sending anything")
def enqueue(payloads: tuple[str, ...], url: str, wire: str, queue_name: str, job_id: str | None, priority: int,
            delay_ms: int | None, count: int, raw: bool, files: tuple[Any, ...], max_payload_bytes: int) -> None:
    """Add jobs to a queue: each PAYLOAD is standard JSON text (default {}), - for stdin."""
    if list(payloads).count("-") > 1:
        raise click.UsageError("stdin holds one payload: give - at most once")
    texts = [_stdin_bytes() if text == "-" else text.encode() for text in payloads]
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
    with opened_queue(url, wire, queue_name, serializer=serializer, max_payload_bytes=max_payload_bytes) as queue:
        values = values * count
        if delay_ms is not None:
            added = [queue.schedule(v, delay_ms, id=job_id, priority=priority) for v in values]
        elif job_id is not None:
            added = [queue.enqueue(values[0], id=job_id, priority=priority)]
        else:
            added = queue.enqueue_many(values, priority=priority)
    for item in added[:20]:
        click.echo(f"{item.id}\t{'enqueued' if item.created else 'exists (not enqueued again)'}")
    if len(added) > 20:
        click.echo(f"... {len(added)} jobs in all")


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


@main.command()
@click.argument("job_id", metavar="ID")
@node_options
@queue_option(required=False)
def inspect(job_id: str, url: str, wire: str, queue_name: str | None) -> None:
    """Show one job: its row, its set and what its score means; or, completed within its
    retention, its record and result. Without -q the job is looked for in every queue (SCAN)."""
    with reported():
        check_job_id(job_id)
        if queue_name is not None:
            check_queue_name(queue_name)
    with opened(url, wire) as connection, reported():
        if queue_name is None:
            queue_name = _find_queue(connection, job_id)
        queue = Queue(connection, queue_name, serializer=RAW)
        client = connection.client
        row = queue.job(job_id)
        record = client.hgetall(queue.keys.done(job_id)) if row is None else {}
        now_s, now_us = client.time()
        now_ms = now_s * 1000 + now_us // 1000
        if row is None and not record:
            raise click.ClickException(f"no job {job_id!r} in queue {queue_name!r} (never enqueued, or completed "
                                       "past its retention)")
        if row is None:
            _show_record(queue_name, job_id, {_text(k): v for k, v in record.items()},
                         client.pttl(queue.keys.done(job_id)))
            return
        state = row.get("state")
        try:
            score = client.zscore(queue.keys.key(State(state).set_suffix), job_id)
        except ValueError:  # a state no set belongs to
            score = None
    table = Table(title=f"{queue_name} / {job_id}", show_header=False)
    for field in ("state", "attempts", "failures", "stalled", "priority", "last_error", "progress", "lease_epoch"):
        if field in row:
            table.add_row(field, _text(row[field]))
    if score is None:
        table.add_row("in its set", "[red]no[/] (the row's state names a set it is not in)")
    elif state == "active":
        table.add_row("lease", f"expires in {int(score) - now_ms} ms (server clock)")
    elif state == "scheduled":
        table.add_row("due", f"in {int(score) - now_ms} ms (server clock)")
    payload = row.get("payload")
    table.add_row("payload", _show_payload(payload))
    if "traceback" in row:
        table.add_row("traceback", _text(row["traceback"]))
    out.print(table)


def _find_queue(connection: Connection, job_id: str) -> str:
    """The one queue holding a row or a completed record for ``job_id`` (a SCAN of the node)."""
    pattern_id = re.sub(r"([*?\[\]\\])", r"\\\1", job_id)
    found = set()
    for kind in ("job", "done"):
        for key in connection.client.scan_iter(match=f"emq:{{*}}:{kind}:{pattern_id}", count=1000):
            name, _, rest = _text(key)[len("emq:{"):].partition("}:")
            if rest == f"{kind}:{job_id}":
                found.add(name)
    if not found:
        raise click.ClickException(f"no job {job_id!r} in any queue on this node (never enqueued, or completed "
                                   "past its retention)")
    if len(found) > 1:
        raise click.ClickException(f"job {job_id!r} is in several queues ({', '.join(sorted(found))}): pass -q")
    return found.pop()


def _show_record(queue_name: str, job_id: str, record: dict[str, bytes], ttl_ms: int) -> None:
    table = Table(title=f"{queue_name} / {job_id}", show_header=False)
    table.add_row("state", "completed")
    for field in ("attempts", "created", "started", "finished"):
        if field in record:
            table.add_row(field, _text(record[field]))
    if ttl_ms >= 0:
        table.add_row("kept", f"for {ttl_ms} ms more (its retention, server clock)")
    table.add_row("result", _show_payload(record.get("result")))
    out.print(table)


def _show_payload(raw: bytes | None) -> str:
    if raw is None:
        return "(none)"
    try:
        return json.dumps(json.loads(raw), indent=2)
    except (ValueError, UnicodeDecodeError):
        return repr(raw)


@main.command()
@node_options
@queue_option()
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
def dead(url: str, wire: str, queue_name: str, limit: int) -> None:
    """List dead jobs with their last error."""
    with opened_queue(url, wire, queue_name, serializer=RAW) as queue:
        total = queue.counts().dead
        rows = [(job_id, queue.job(job_id) or {}) for job_id, _ in queue.ids(State.DEAD, count=limit)]
    table = Table(title=f"dead in {queue_name}: {total}")
    table.add_column("id", no_wrap=True, min_width=36)
    for column in ("attempts", "failures", "stalled", "last error"):
        table.add_column(column)
    for job_id, row in rows:
        table.add_row(job_id, *(_text(row.get(f, "")) for f in ("attempts", "failures", "stalled", "last_error")))
    out.print(table)
    if total > len(rows):
        out.print(f"(showing {len(rows)} of {total}; --limit to see more)")


@main.command()
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@node_options
@queue_option()
@click.option("--all", "every", is_flag=True, help="every dead job of the queue")
def reprocess(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str, every: bool) -> None:
    """Send dead jobs back to pending with a full retry and stall budget again (attempts go on)."""
    if bool(job_ids) == every:
        raise click.UsageError("name dead job ids, or pass --all")
    with reported():
        for job_id in job_ids:
            check_job_id(job_id)
    with opened_queue(url, wire, queue_name) as queue:
        ids = list(job_ids)
        if every:
            ids = [job_id for job_id, _ in queue.ids(State.DEAD, count=queue.counts().dead or 1)]
        moved = [job_id for job_id in ids if queue.reprocess(job_id)]
    for job_id in set(ids) - set(moved):
        err.print(f"{job_id}: not in dead, left as it is")
    click.echo(f"reprocessed {len(moved)} job(s) of {queue_name}")


@main.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@node_options
@queue_option()
def remove(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str) -> None:
    """Delete pending, scheduled or dead jobs (an active job is refused: cancel it)."""
    with reported():
        for job_id in job_ids:
            check_job_id(job_id)
    removed = 0
    with opened_queue(url, wire, queue_name) as queue:
        for job_id in job_ids:
            was = queue.remove(job_id)
            if was is None:
                err.print(f"{job_id}: no such job")
            else:
                removed += 1
    click.echo(f"removed {removed} job(s) of {queue_name}")


@main.command()
@click.argument("job_ids", nargs=-1, required=True, metavar="ID...")
@node_options
@queue_option()
def cancel(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str) -> None:
    """Cancel running jobs: dead with last_error 'cancelled'; the worker drops their outcome."""
    with reported():
        for job_id in job_ids:
            check_job_id(job_id)
    cancelled = 0
    with opened_queue(url, wire, queue_name) as queue:
        for job_id in job_ids:
            if queue.cancel(job_id):
                cancelled += 1
            else:
                err.print(f"{job_id}: no such job")
    click.echo(f"cancelled {cancelled} job(s) of {queue_name}")


DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d)")
DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` as milliseconds."""
    found = DURATION.fullmatch(text.strip())
    if found is None:
        raise click.BadParameter(f"{text!r} is not a duration: a whole number with ms, s, m, h or d, e.g. 7d")
    return int(found[1]) * DURATION_MS[found[2]]


def _batches(step: Callable[[], int], size: int) -> int:
    """Call a bounded verb until a call moves fewer than ``size``; the total moved."""
    total = 0
    while True:
        moved = step()
        total += moved
        if moved < size:
            return total


@main.command()
@node_options
@queue_option()
@click.option("--older-than", "age_ms", default=None, metavar="DURATION",
              callback=lambda ctx, param, value: None if value is None else parse_duration_ms(value),
              help="only jobs dead at least this long (500ms, 30s, 15m, 12h, 7d); default: every dead job")
@click.option("--batch", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="jobs deleted per server call")
def purge(url: str, wire: str, queue_name: str, age_ms: int | None, batch: int) -> None:
    """Delete a queue's dead jobs, oldest first."""
    with opened_queue(url, wire, queue_name) as queue:
        total = _batches(lambda: queue.purge(older_than_ms=age_ms or 0, limit=batch), batch)
    click.echo(f"purged {total} dead job(s) of {queue_name}")


@main.command()
@node_options
@queue_option()
@click.option("--batch", type=click.IntRange(1, 10_000), default=1000, show_default=True,
              help="jobs deleted per server call")
def drain(url: str, wire: str, queue_name: str, batch: int) -> None:
    """Delete a queue's pending jobs (active, scheduled and dead jobs are left alone)."""
    with opened_queue(url, wire, queue_name) as queue:
        total = _batches(lambda: queue.drain(limit=batch), batch)
    click.echo(f"drained {total} pending job(s) of {queue_name}")


@main.command()
@node_options
@queue_option()
def pause(url: str, wire: str, queue_name: str) -> None:
    """Hold claims on a queue (enqueue still admits jobs)."""
    with opened_queue(url, wire, queue_name) as queue:
        queue.pause()
    click.echo(f"{queue_name} paused")


@main.command()
@node_options
@queue_option()
def resume(url: str, wire: str, queue_name: str) -> None:
    """Let workers claim from a paused queue again."""
    with opened_queue(url, wire, queue_name) as queue:
        queue.resume()
    click.echo(f"{queue_name} resumed")


@main.command()
@node_options
@queue_option()
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
def promote(url: str, wire: str, queue_name: str, limit: int) -> None:
    """Move due scheduled jobs to pending, once."""
    with opened_queue(url, wire, queue_name) as queue:
        moved = queue.promote(limit)
    click.echo(f"promoted {moved} job(s) of {queue_name}")


@main.command()
@node_options
@queue_option()
@click.option("--max-stalled", type=click.IntRange(1), default=3, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
def sweep(url: str, wire: str, queue_name: str, max_stalled: int, limit: int) -> None:
    """Recover expired leases (STALLED.CHECK), once."""
    with opened_queue(url, wire, queue_name) as queue:
        found = queue.stalled_check(max_stalled, limit)
    click.echo(f"{queue_name}: recovered {len(found.recovered)}, exempt (server restart) {len(found.exempt)}, "
               f"dead {len(found.dead)}")
    for label, ids in (("recovered", found.recovered), ("exempt", found.exempt), ("dead", found.dead)):
        for job_id in ids:
            click.echo(f"  {label}\t{job_id}")


# -- events ---------------------------------------------------------------------------


@main.command()
@node_options
@queue_option()
@click.option("-f", "--follow", is_flag=True, help="keep waiting for new events (Ctrl-C stops)")
@click.option("--since", default=None, metavar="ID",
              help="only events after this stream id; '$' = only new ones (default: every one kept)")
@click.option("--enable", "maxlen", type=click.IntRange(1), default=None, metavar="MAXLEN",
              help="turn the queue's event stream on, bounded to MAXLEN entries, and exit")
@click.option("--disable", is_flag=True, help="turn the queue's event stream off, and exit")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
def events(url: str, wire: str, queue_name: str, follow: bool, since: str | None, maxlen: int | None,
           disable: bool, as_json: bool) -> None:
    """Show a queue's events (enqueued, claimed, progress, completed, retried, failed, dead, stalled,
    recovered, removed), oldest first; with --follow, as they happen."""
    with opened_queue(url, wire, queue_name) as queue:
        if maxlen is not None or disable:
            if disable:
                queue.disable_events()
                click.echo(f"events off for {queue_name}")
            else:
                queue.enable_events(maxlen)
                click.echo(f"events on for {queue_name}, the last {maxlen} kept")
            return
        if not follow and since is None and not queue.connection.client.exists(queue.keys.events):
            err.print(f"no events in {queue_name} (turn them on with: emq events -q {queue_name} --enable 10000)")
        try:
            for event in queue.events(since=since, follow=follow, block_ms=1000):
                click.echo(_event_line(event, as_json))
        except KeyboardInterrupt:
            pass


def _event_line(event: Any, as_json: bool) -> str:
    fields = {"stream_id": event.stream_id, "time_ms": event.time_ms, "type": event.type, "id": event.job_id,
              "attempt": event.attempt}
    fields.update({k: v for k, v in (("error", event.error), ("state", event.state), ("progress", event.progress))
                   if v is not None})
    if as_json:
        return json.dumps(fields, separators=(",", ":"))
    when = time.strftime("%H:%M:%S", time.gmtime(event.time_ms / 1000)) + f".{event.time_ms % 1000:03d}"
    extra = "".join(f" {k}={json.dumps(v) if k == 'progress' else v}" for k, v in fields.items()
                    if k in ("error", "state", "progress"))
    return f"{when} {event.type:<9} {event.job_id} attempt={event.attempt}{extra}"


# -- stats ---------------------------------------------------------------------------


def discover_queues(connection: Connection) -> list[str]:
    """Every queue with a key on the node (one SCAN; job rows are skipped by name)."""
    names = set()
    for key in connection.client.scan_iter(match="emq:{*}:*", count=1000):
        text = _text(key)
        name, _, rest = text[len("emq:{"):].partition("}:")
        if rest and not rest.startswith("job:"):
            names.add(name)
    return sorted(names)


def _where(queues: list[Queue]) -> str:
    connection = queues[0].connection
    kwargs = connection.client.get_connection_kwargs()
    place = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"{place}, wire {connection.wire}"


def stats_table(queues: list[Queue], previous: dict[str, dict[str, int]] | None, elapsed_s: float,
                samples: dict[str, dict[str, int]]) -> Table:
    table = Table(title=f"EchoMQ queues on {_where(queues)}", box=box.SIMPLE_HEAD, collapse_padding=True,
                  pad_edge=False)  # fits 80 columns with the rates
    for column in ("queue", "pending", "active", "scheduled", "dead", "completed", "failed"):
        table.add_column(column, justify="left" if column == "queue" else "right")
    if previous is not None:
        table.add_column("done/s", justify="right")
        table.add_column("fail/s", justify="right")
    for queue in queues:
        try:
            counts, metrics = queue.counts(), queue.metrics()
        except CommandRefused as exc:  # one damaged queue (a wrong-typed key) must not hide the others
            table.add_row(queue.name, f"[red]unreadable: {exc}[/]")
            continue
        samples[queue.name] = metrics
        row = [queue.name + (" [yellow](paused)[/]" if counts.paused else ""), str(counts.pending),
               str(counts.active), str(counts.scheduled), str(counts.dead), str(metrics["completed"]),
               str(metrics["failed"])]
        if previous is not None:
            before = previous.get(queue.name, metrics)
            for name in ("completed", "failed"):
                row.append(f"{(metrics[name] - before[name]) / elapsed_s:.0f}" if elapsed_s > 0 else "-")
        table.add_row(*row)
    return table


@main.command()
@node_options
@click.option("-q", "--queue", "queue_names", multiple=True, help="these queues (default: every queue on the node)")
@click.option("--watch", is_flag=True, help="refresh until Ctrl-C, with completion and failure rates")
@click.option("--interval", type=click.FloatRange(0.05), default=1.0, show_default=True, help="seconds between refreshes")
@click.option("--times", type=click.IntRange(1), default=None, hidden=True, help="stop watching after this many refreshes")
def stats(url: str, wire: str, queue_names: tuple[str, ...], watch: bool, interval: float, times: int | None) -> None:
    """Counts per set (pending, active, scheduled, dead) and metrics per queue."""
    with reported():
        for name in queue_names:
            check_queue_name(name)
    with opened(url, wire) as connection, reported():
        names = list(queue_names) or discover_queues(connection)
        if not names:
            out.print("no queues on this node yet")
            return
        queues = [Queue(connection, name) for name in names]
        samples: dict[str, dict[str, int]] = {}
        if not watch:
            out.print(stats_table(queues, None, 0, samples))
            return
        previous, then, shown = None, time.monotonic(), 0
        try:
            with Live(console=out, auto_refresh=False) as live:
                while times is None or shown < times:
                    now = time.monotonic()
                    fresh: dict[str, dict[str, int]] = {}
                    live.update(stats_table(queues, previous, now - then, fresh), refresh=True)
                    previous, then, shown = fresh, now, shown + 1
                    if times is None or shown < times:
                        time.sleep(interval)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main(prog_name="emq")
