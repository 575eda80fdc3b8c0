"""``emq``: the command line. Thin by design: it parses arguments and calls the public API.

Every command that talks to a node takes ``--url`` (or ``EMQ_URL``), ``--wire``
(4, 6, or ``auto`` = what the node is branded for; or ``EMQ_WIRE``) and
``--cluster/--no-cluster`` (default: ask the node, and on a Valkey Cluster node use the
cluster client; or ``EMQ_CLUSTER``). Input is
checked before anything is written: a bad payload, id or queue name changes nothing.

For scripts: every read command takes ``--json``; tables printed to a pipe or a file
are not wrapped; a command that matched nothing (an unknown queue or id) exits 1.

The top of the layers: it may import any of them (docs/architecture.md); nothing imports it.
"""

from __future__ import annotations

import importlib
from inspect import isfunction, signature
import json
import logging
import os
import re
import signal
import sys
import sysconfig
import threading
import time
import traceback
from collections import Counter
from contextlib import contextmanager, nullcontext
from itertools import chain, islice, repeat
from typing import Any, Callable, Iterator

import click
import valkey
from valkey.cluster import ValkeyCluster
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..admin import steps as admin
from ..admin.steps import brand_node
from .._client.connection import Connection, connect, open_client
from ..errors import ConfigurationError, ConnectionFailed, EchoMQError, PortInUse, ServerStartError, StateError
from .._core.workers import serving
from ..admin.workers import list_workers
from ..admin.inventory import (QueueNumbers, QueueScan, ago, discover_queues, job_page, job_view, numbers_of,
                               partitions_of, queue_exists, record_view, scan_queues, text_of, waiting_unserved)
from .._protocol.keys import VERSION_KEY, State, check_group, check_job_id, check_queue_name, parent_queue
from ..local.module import module_path
from ..local.versions import local_report, node_report
from .._client.partitioned import AnyQueue, PartitionedQueue, open_queue, open_queues
from ..worker.policy import IdlePolicy, LeasePolicy
from .._core.core import MAX_PAYLOAD_BYTES, encode_payload
from ..worker.cron import describe
from ..admin.doctor import examine, verdict
from ..admin.flows import adopt_flows, adoption_lines
from .._client.queue import Queue, Sweep
from .._core.reaper import merged
from .._protocol.serializers import JSON, RAW
from ..local.server import FSYNC_POLICIES, EmbeddedServer, durability_for
from .._protocol.shown import from_id_form, id_form, lines, one_line, redact_url
from ..worker.supervisor import Supervisor
from ..worker.tasks import App
from ..worker.timers import TimerConfig
from .._protocol.verbs import EVENTS_MAX, GROUPED_COUNTS, Counts
from ..worker.worker import Worker, WorkerConfig

DEFAULT_URL = "redis://127.0.0.1:6379"
UNWRAPPED = 100_000  #: the width tables get when stdout is not a terminal: one line per row, for scripts
out = Console()
err = Console(stderr=True)


# -- shared options and error handling ---------------------------------------------


def cluster_option(fn: Any) -> Any:
    """``--cluster/--no-cluster``, read by :func:`opened` (so no command passes it along): unset, the
    node is asked (HELLO's mode) and a cluster node gets the cluster client."""

    def keep(ctx: click.Context, _param: click.Parameter, value: bool | None) -> None:
        ctx.meta["emq.cluster"] = "auto" if value is None else value

    return click.option("--cluster/--no-cluster", envvar="EMQ_CLUSTER", default=None, expose_value=False,
                        callback=keep, help="the URL names a Valkey Cluster node (default: ask the node)")(fn)


def chosen_cluster() -> bool | str:
    return click.get_current_context().meta.get("emq.cluster", "auto")


def node_options(fn: Any) -> Any:
    fn = cluster_option(fn)
    fn = click.option("--wire", envvar="EMQ_WIRE", show_envvar=True, default="auto", show_default=True,
                      type=click.Choice(["4", "6", "auto"]),
                      help="4 = scripts, 6 = trafikey, auto = what the node is branded for")(fn)
    return url_option(fn)


def url_option(fn: Any) -> Any:
    return click.option("--url", envvar="EMQ_URL", show_envvar=True, default=DEFAULT_URL, show_default=True,
                        callback=warn_of_password, help="the Valkey node (redis://, rediss://, unix://); with a "
                        "password, set EMQ_URL instead (an option is visible to every user of the host)")(fn)


def warn_of_password(ctx: click.Context, param: click.Parameter, url: str) -> str:
    """A password in ``--url`` is in the process list for every user of the host: say so (it is
    printed nowhere: every line shows the URL redacted)."""
    if redact_url(url) != url and ctx.get_parameter_source(param.name or "") is click.core.ParameterSource.COMMANDLINE:
        err.print("warning: the password in --url is visible to every user of this host (ps, /proc); set EMQ_URL "
                  "instead", style="yellow")
    return url


def queue_option(required: bool = True) -> Any:
    return click.option("-q", "--queue", "queue_name", required=required, help="the queue's name")


def json_option(fn: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table (for scripts)")(fn)


def print_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def cell(value: Any) -> Text:
    """Data a job carries (or a raw command left), as a table cell or a printed line: on one line,
    every character that is not printable escaped (echomq._protocol.shown), and no rich markup read in it."""
    return Text(one_line(str(value)))


def escaped_option(fn: Any) -> Any:
    return click.option("--escaped", is_flag=True,
                        help="the IDs are in the escaped form tables show (\\\\ for a backslash, \\n, \\xNN for a "
                             "byte, \\uNNNN): for an id with control characters or bytes that are not UTF-8")(fn)


def named_ids(job_ids: tuple[str, ...], escaped: bool) -> list[str]:
    """The ids a command was given, read from their escaped form with ``--escaped``, each checked."""
    ids = []
    for given in job_ids:
        try:
            job_id = from_id_form(given) if escaped else given
        except ValueError as exc:
            raise click.BadParameter(f"{given!r}: {exc}", param_hint="--escaped ID") from None
        ids.append(check_job_id(job_id))
    return ids


def require_queue(queue: AnyQueue, creatable: bool = False) -> None:
    """An unknown queue is an error (exit 1), not an empty answer: a typo must not look like 'nothing to do'.
    ``creatable``: the command takes --create, and the message says so."""
    if not queue_exists(queue):
        raise click.ClickException(f"no queue {queue.name!r} on this node (none of its keys exist); "
                                   "`emq stats` lists the queues"
                                   + ("; pass --create to act on it before its first job" if creatable else ""))


@contextmanager
def reported() -> Iterator[None]:
    """EchoMQ and link errors become one clear line and exit status 1, not a traceback (escaped: a
    refusal may quote an id or a name from the node)."""
    try:
        yield
    except EchoMQError as exc:
        raise click.ClickException(lines(str(exc))) from exc
    except (valkey.ConnectionError, valkey.TimeoutError) as exc:
        raise click.ClickException(lines(f"the server link failed: {exc}")) from exc


@contextmanager
def opened(url: str, wire: str) -> Iterator[Connection]:
    with reported():
        try:
            connection = connect(url, wire=wire if wire == "auto" else int(wire), cluster=chosen_cluster())
        except ConnectionFailed as exc:
            raise ConnectionFailed(f"{exc}; point --url (or EMQ_URL) at your node, or start one: emq server") from exc
        try:
            yield connection
        finally:
            connection.close()


@contextmanager
def opened_queue(url: str, wire: str, name: str, **kwargs: Any) -> Iterator[AnyQueue]:
    """The queue as its record says: a partitioned queue is one queue over all its partitions."""
    with reported():
        check_queue_name(name)  # before connecting: a bad name is a usage error, whatever the node
    with opened(url, wire) as connection, reported():
        yield open_queue(connection, name, **kwargs)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True,
             no_args_is_help=True)
@click.option("--version", "show_version", is_flag=True,
              help="print this package's version, the trafikey module it would load (path, version, tokens) "
                   "and, with --url, what that node runs; then exit")
@click.option("--url", "version_url", default=None, metavar="URL",
              help="with --version: the node to describe too (its server, trafikey and brand)")
@click.pass_context
def main(ctx: click.Context, show_version: bool, version_url: str | None) -> None:
    """EchoMQ: a job queue on Valkey, every state change one atomic step in the server.

    Every command that talks to a node takes --url (or EMQ_URL, default redis://127.0.0.1:6379)
    and --wire (or EMQ_WIRE, default: what the node is branded for). New here: `emq server`
    starts one."""
    for console in (out, err):  # per invocation: stdout may have been redirected since import
        console.width = None if console.is_terminal else UNWRAPPED  # type: ignore[assignment]
    if version_url is not None and not show_version:
        raise click.UsageError("--url before a command goes with --version; a command takes its own --url after "
                               "its name (emq stats --url URL)")
    if show_version:
        for line in local_report():
            click.echo(line)
        if version_url is not None:
            with reported():
                for line in node_report(version_url):
                    click.echo(line)
        ctx.exit(0)
    if ctx.invoked_subcommand is None:
        raise click.UsageError("no command given: emq --help lists them")


# -- the node ---------------------------------------------------------------------


@main.command()
@click.option("--wire", type=click.Choice(["4", "6"]), default="6", show_default=True,
              help="6 loads the trafikey module; 4 serves the scripts")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="default: a free port")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="data directory, kept on exit, its jobs kept across a restart (append-only file; made if "
                   "missing). Default: a fresh temporary one, memory only, removed on exit")
@click.option("--no-persist", "no_persist", is_flag=True, help="with --dir: memory only, nothing survives a stop")
@click.option("--fsync", type=click.Choice(FSYNC_POLICIES), default=None,
              help="the append-only file's fsync: everysec (default; a machine crash loses at most about the last "
                   "second), always (none lost, each write waits for the disk), no (when the OS flushes)")
@click.option("--aof", is_flag=True, help="the append-only file on, also in the temporary directory")
def server(wire: str, port: int | None, directory: str | None, no_persist: bool, fsync: str | None,
           aof: bool) -> None:
    """Run an embedded Valkey, branded for WIRE, until Ctrl-C, SIGINT or SIGTERM."""
    try:
        durability = durability_for(directory, aof, not no_persist, fsync)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    stop_asked = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        # set both explicitly: `emq server &` in a script inherits SIGINT ignored
        signal.signal(signum, lambda *_: stop_asked.set())
    instance: EmbeddedServer | None = None
    # said at start: a mistyped --dir would otherwise look like a server that lost its jobs
    new_directory = directory is not None and not os.path.exists(directory)
    try:
        with reported():
            module = module_path() if wire == "6" else None
            instance = EmbeddedServer(module=module, aof=durability.aof, appendfsync=durability.fsync,
                                      brand=int(wire), port=port, directory=directory, stop_with_parent=True)
            try:
                instance.start()  # on a failure it leaves nothing running and no temporary directory
            except PortInUse as exc:
                if port is None:
                    raise
                raise ServerStartError(f"port {exc.port} is already in use by another process; "
                                       "pick another with --port, or omit --port for a free one") from exc
            # the node must serve the wire it is branded for
            with connect(instance.url, wire=int(wire)) as connection:
                found = None if new_directory or directory is None else jobs_on(connection)
        out.print(f"[bold]valkey[/] on {instance.url}, wire {wire}" + (f", module {module}" if module else ""),
                  soft_wrap=True)
        out.print(durability.start_line(instance.dir, kept=directory is not None)
                  + found_note(new_directory, found), soft_wrap=True, markup=False)
        out.print(f"export EMQ_URL={instance.url}   # then: emq worker mymodule:app", soft_wrap=True)
        while not stop_asked.wait(0.5):
            if not instance.running:
                # the log goes with a temporary directory: show its end now
                raise click.ClickException(f"valkey-server exited; the end of its log:\n{instance.log_tail()}")
    finally:
        if instance is not None:
            instance.cleanup()  # stops our process; removes the data directory only if it made it
    err.print("server stopped")


def jobs_on(connection: Connection) -> tuple[int, int]:
    """(the jobs on the node, in every set: flat, lanes, flows; the queues holding them)."""
    numbers = [n for n in numbers_of(open_queues(connection, discover_queues(connection)))
               if isinstance(n, QueueNumbers)]
    return sum(jobs_held(n.counts) for n in numbers), sum(1 for n in numbers if jobs_held(n.counts))


def jobs_held(counts: Counts) -> int:
    return counts.total + sum(getattr(counts, name) for name in GROUPED_COUNTS)


def found_note(new_directory: bool, found: tuple[int, int] | None) -> str:
    """What a start says of the jobs its --dir held (``found``: jobs, queues; None: not looked for)."""
    if new_directory:
        return " (a new directory: no jobs yet)"
    if found is None:
        return ""
    jobs, queues = found
    return f" (found {jobs} job(s) in {queues} queue(s))" if jobs else " (it holds no jobs)"


@main.command()
@click.argument("url", envvar="EMQ_URL", default=DEFAULT_URL)
@click.option("--wire", type=click.Choice(["4", "6"]), required=True)
@click.option("--replace", is_flag=True,
              help="overwrite another brand (a mistake), only while the node holds no EchoMQ data")
@cluster_option
def brand(url: str, wire: str, replace: bool) -> None:
    """Brand the node at URL for one wire, once (refuses to overwrite the other brand, and wire 6 on a
    node without trafikey). On a Valkey Cluster the brand is one key for the whole cluster, written
    on the primary of its slot."""
    with reported(), open_client(url, chosen_cluster()) as client:
        branded = brand_node(client, int(wire), replace=replace).decode()
        if isinstance(client, ValkeyCluster):
            holder = client.get_node_from_key(VERSION_KEY)
            out.print(f"the cluster of {redact_url(url)} ({len(client.get_primaries())} primaries) branded {branded} "
                      f"({VERSION_KEY} on {holder.name})")
        else:
            out.print(cell(f"{redact_url(url)} branded {branded}"))


@main.command()
@url_option
@click.option("-q", "--queue", "queue_names", multiple=True,
              help="check the current ACL user's permissions on this queue (repeatable)")
@json_option
@cluster_option
def doctor(url: str, queue_names: tuple[str, ...], as_json: bool) -> None:
    """Check a node for production, one line per check; exit 1 on an error. Read-only: server
    version, trafikey and its tokens, the brand, maxmemory-policy, persistence, the cluster's
    slots, replicas and their lag, the clock offset, and with -q the ACL user's permissions."""
    with reported():
        for name in queue_names:
            check_queue_name(name)
    with reported(), open_client(url, chosen_cluster()) as client:
        checks = examine(client, queue_names)
    if as_json:
        print_json([check.as_json() for check in checks])
    else:
        width = max(len(check.name) for check in checks)
        for check in checks:
            where = f" [{check.node}]" if check.node else ""
            # a detail may quote the server (a refusal, a key it names): one line, escaped
            click.echo(one_line(f"{check.level.value:<8} {check.name:<{width}}  {check.detail}{where}"))
    sys.exit(verdict(checks))


@main.command("adopt-flows")
@node_options
@click.option("-q", "--queue", "queue_names", multiple=True,
              help="read these queues (default: every queue on the node); name every queue the flows use")
@click.option("--dry-run", is_flag=True, help="say which parents would be adopted; write nothing")
def adopt_flows_command(url: str, wire: str, queue_names: tuple[str, ...], dry_run: bool) -> None:
    """Once, after upgrading from before 0.2.0: give each flow parent that still waits without a
    record of its children the record they prove, so children in other queues tell it
    (docs/compatibility.md, "Upgrades"). Exit 1 when a parent cannot be adopted (it says why)."""
    with reported():
        for name in queue_names:
            check_queue_name(name)
    with opened(url, wire) as connection, reported():
        report = adopt_flows(connection, queue_names, dry_run=dry_run)
    for line in adoption_lines(report, dry_run=dry_run):
        click.echo(one_line(line))
    sys.exit(1 if report.refused else 0)


@main.command("module-path")
def module_path_command() -> None:
    """Print the path of the built trafikey module (for --loadmodule)."""
    with reported():
        click.echo(module_path())


@main.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def parity(args: tuple[str, ...]) -> None:
    """Run the parity instrument: scripts vs trafikey, every key compared (--help for its options)."""
    from ..parity import main as parity_main

    sys.exit(parity_main(list(args), prog="emq parity"))


# -- the worker --------------------------------------------------------------------


def load_app(spec: str) -> App:
    """``module:attr`` -> the App (``attr`` may also be a function of that module returning one).
    Nothing else is called: a builtin, a class, a function of another module or of the standard
    library (``os:fork``) is refused before it runs."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise click.BadParameter(f"{spec!r}: expected module:app, e.g. myproject.jobs:app", param_hint="APP")
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names:
        here = [name for name in shadowing(os.listdir(".")) if name.removesuffix(".py") == top]
        raise click.BadParameter(f"{module_name!r} is the standard library's, not an app"
                                 + (f" (./{top}.py is not imported under a name the standard library "
                                    "has: rename it)" if here else ""), param_hint="APP")
    modules_here()
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}", param_hint="APP") from exc
    except SyntaxError as exc:
        raise click.BadParameter(f"{module_name!r} does not compile: {exc.msg} ({exc.filename}, line {exc.lineno})",
                                 param_hint="APP") from exc
    except Exception as exc:  # the module's own code raised: where, in one line, and how to see the rest
        frame = _own_frame(exc)
        raise click.BadParameter(f"importing {module_name!r} raised {type(exc).__name__}: {exc} "
                                 f"({frame.filename}, line {frame.lineno}); the whole traceback: "
                                 f"python -c 'import {module_name}'", param_hint="APP") from exc
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise click.BadParameter(f"{module_name!r} has no {attr!r}", param_hint="APP")
    if isinstance(found, App):
        return found
    if not _factory(found, module_name):
        raise click.BadParameter(f"{spec} is {_what(found, module_name)}, not an echomq.App or a function of "
                                 f"{module_name!r} that takes no arguments and returns one{_apps_in(module_name)}",
                                 param_hint="APP")
    made = found()
    if not isinstance(made, App):
        raise click.BadParameter(f"{spec}() returned {_what(made, module_name)}, not an echomq.App", param_hint="APP")
    return made


def _own_frame(exc: BaseException) -> traceback.FrameSummary:
    """The deepest frame of ``exc``'s traceback in the user's code: not importlib's, the standard
    library's or an installed package's."""
    installed = tuple({sys.base_prefix, sys.prefix, sys.exec_prefix})
    frames = traceback.extract_tb(exc.__traceback__)
    own = [frame for frame in frames if not frame.filename.startswith((*installed, "<"))]
    return (own or frames)[-1]


def modules_here() -> None:
    """Modules in the current directory importable, as with ``python -m``, but after the standard
    library: a ``./queue.py`` must not stand in for the ``queue`` that threading's users import.
    Each such file is named (it is not imported under that name)."""
    here = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)]  # `python -m` puts it first
    stdlib = {os.path.realpath(sysconfig.get_path(name)) for name in ("stdlib", "platstdlib")}
    last = max((at for at, entry in enumerate(sys.path)
                if any(os.path.realpath(entry or ".").startswith(root) for root in stdlib)), default=-1)
    sys.path.insert(last + 1, here)
    for name in shadowing(os.listdir(here)):
        err.print(f"warning: ./{name} is not imported as `{name.removesuffix('.py')}`: the standard library's "
                  "comes first (rename it if your app means it)", style="yellow")


def shadowing(entries: list[str]) -> list[str]:
    """The files and packages of a directory listing named as a standard library module (pure)."""
    return sorted(entry for entry in entries
                  if (entry.removesuffix(".py") if entry.endswith(".py") else entry) in sys.stdlib_module_names
                  and (entry.endswith(".py") or "." not in entry))


def _factory(found: Any, module_name: str) -> bool:
    """A Python function of ``module_name`` (its own, not one it imported: ``from os import fork``
    is not an app factory) that can be called with no arguments and does not say it returns
    something other than an App. A class is not taken (App itself would pass), nor a builtin."""
    if not isfunction(found) or hasattr(found, "task") or found.__module__ != module_name:
        return False
    try:
        found_signature = signature(found)
        found_signature.bind()
    except TypeError:
        return False
    returns = found_signature.return_annotation
    named = returns if isinstance(returns, str) else getattr(returns, "__name__", "")
    return returns is found_signature.empty or returns is App or named.rpartition(".")[2].strip("'\"") == "App"


def _what(found: Any, module_name: str) -> str:
    if hasattr(found, "task"):
        return f"the task handler {getattr(found, '__qualname__', found)!r} (registered with @app.task)"
    if not callable(found) or isinstance(found, type):
        return f"a {type(found).__name__}"
    if not isfunction(found):
        return f"a {type(found).__name__} (only a function of the app's module is called)"
    if found.__module__ != module_name:
        return f"a function of {found.__module__!r}"
    try:
        signature(found).bind()
    except TypeError:
        return "a function that takes arguments"
    returns = signature(found).return_annotation
    return f"a function that returns {getattr(returns, '__name__', returns)!r}"


def _apps_in(module_name: str) -> str:
    names = [name for name, value in vars(sys.modules[module_name]).items() if isinstance(value, App)]
    return f"; point at the App instead: {', '.join(f'{module_name}:{n}' for n in names)}" if names else ""


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
              help="longest wait between claims on an empty queue, where the worker polls (a wire-6 node "
                   "without claim.block); otherwise it waits on the server")
@click.option("--promote-interval-ms", type=click.IntRange(1), default=1000, show_default=True,
              help="a busy queue's backstop between promotes (each promote reads the next due time and the "
                   "next runs then; an idle queue is promoted only when due)")
@click.option("--sweep-interval-ms", type=click.IntRange(1), default=5000, show_default=True,
              help="how often a busy queue's expired leases are looked for")
@click.option("--idle-sweep-interval-ms", type=click.IntRange(1), default=30_000, show_default=True,
              help="an idle queue is swept when its earliest lease expires, and at least this often")
@click.option("--max-stalled", type=click.IntRange(1), default=3, show_default=True,
              help="lease expiries before a job goes dead")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, min_open=True), default=None,
              help="seconds a handler may run before it fails with JobTimeout, for every task "
                   "(default: each task's timeout, 300 unless it says otherwise)")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="serve this worker's Prometheus /metrics on this port (needs echomq[dashboard])")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="the address --metrics-port binds; beyond loopback anyone who reaches it reads the counters "
                   "(no token: they name no job or queue), and the log says so")
@click.option("--burst", is_flag=True,
              help="exit once the queues are empty (nothing pending or scheduled, nothing held); for scripts and CI")
@click.option("--max-jobs", type=click.IntRange(1), default=None,
              help="claim this many jobs, let them finish, then exit 0 (a leaky handler's process starts afresh: "
                   "with --processes at once, else under your process manager)")
@click.option("-p", "--processes", type=click.IntRange(1), default=1, show_default=True,
              help="run this many worker processes, each with these options, under a supervisor that starts "
                   "again one that dies and passes SIGTERM/SIGINT on (CPU-bound handlers: one per core); "
                   "each --metrics-port is the given one + its index")
@click.pass_context
def worker(ctx: click.Context, app_spec: str, url: str, wire: str, queues: tuple[str, ...], concurrency: int,
           lease_ms: int, grace: float, claim_batch: int, idle_max_ms: int, promote_interval_ms: int,
           sweep_interval_ms: int, idle_sweep_interval_ms: int, max_stalled: int, timeout_s: float | None,
           log_level: str, metrics_port: int | None, metrics_host: str, burst: bool, max_jobs: int | None,
           processes: int) -> None:
    """Run the handlers of MODULE:APP until SIGTERM/SIGINT (a second one exits at once), or with
    --burst until its queues are empty."""
    app = load_app(app_spec)
    with reported():
        config = WorkerConfig(
            concurrency=concurrency, claim_batch=claim_batch, grace_s=grace, lease=LeasePolicy(lease_ms),
            idle=IdlePolicy(max_ms=idle_max_ms),
            timers=TimerConfig(promote_interval_ms=promote_interval_ms, sweep_interval_ms=sweep_interval_ms,
                               idle_sweep_interval_ms=idle_sweep_interval_ms, max_stalled=max_stalled),
            burst=burst, timeout_s=timeout_s, max_jobs=max_jobs,
        )
    if metrics_port and metrics_port + processes - 1 > 65535:
        raise click.UsageError(f"--metrics-port {metrics_port} + {processes - 1} (one port a process) is past 65535")
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with opened(url, wire) as connection, reported():
        instance = Worker(app, connection, queues=queues or None, config=config)  # its checks, in each process
        if processes > 1:  # the node and the app answered: now the processes, each with its own connection
            connection.close()
            # the URL travels in the environment: a password in it stays off every command line (ps)
            supervisor = Supervisor(worker_commands(ctx.params, chosen_cluster()), burst=burst, grace_s=grace,
                                    env=dict(os.environ, EMQ_URL=url))
            sys.exit(supervisor.run())
        if metrics_port is not None:
            serve_worker_metrics(instance, metrics_host, metrics_port)
        instance.run()


def worker_commands(params: dict[str, Any], cluster: bool | str) -> list[list[str]]:
    """The command of each of ``params["processes"]`` worker processes: ``emq worker`` with these
    options but ``--processes`` and ``--url`` (given as ``EMQ_URL``); each ``--metrics-port`` its
    own (the given one + its index; 0, a free port, stays 0)."""
    args = [params["app_spec"]] + ([] if cluster == "auto" else ["--cluster" if cluster else "--no-cluster"])
    for option in worker.params:
        value = params.get(option.name or "")
        if not isinstance(option, click.Option) or option.name in ("url", "processes", "metrics_port") \
                or value is None:
            continue
        flag = max(option.opts, key=len)
        if option.is_flag:
            args += [flag] if value else []
        elif option.multiple:
            args += [part for each in value for part in (flag, str(each))]
        else:
            args += [flag, str(value)]
    port = params.get("metrics_port")
    # -P: the current directory is not put first on sys.path (load_app puts it after the standard library)
    return [[sys.executable, "-P", "-m", "echomq.cli", "worker", *args,
             *([] if port is None else ["--metrics-port", str(port and port + index)])]
            for index in range(params["processes"])]


def serve_worker_metrics(instance: Worker, host: str, port: int) -> None:
    """Prometheus /metrics for this worker on a daemon thread (it ends with the process)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server

        from ..dashboard.auth import is_loopback
        from ..observe.metrics import WorkerCollector
    except ImportError as exc:
        raise click.ClickException(f"--metrics-port needs prometheus_client: pip install 'echomq[dashboard]' ({exc})")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(instance))
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    log = logging.getLogger("echomq.worker")
    log.info("worker %d: metrics on http://%s:%d/metrics", os.getpid(), host, server.server_port)
    if not is_loopback(host):  # allowed (a scraper on another host), said: it takes no token
        log.warning("worker %d: the metrics on %s:%d are reachable beyond this host and take no token: anyone who "
                    "reaches the port reads this worker's counters (no job, id or queue name is in them)",
                    os.getpid(), host, server.server_port)


# -- jobs ---------------------------------------------------------------------------


@main.command()
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
        if key is not None:
            if not isinstance(queue, PartitionedQueue):
                raise ConfigurationError(f"--key picks a partition: queue {queue_name!r} is not partitioned")
            queue = queue.partition(key=key)
        if group is not None and isinstance(queue, PartitionedQueue):
            raise ConfigurationError(f"queue {queue_name!r} is partitioned: lanes are one queue's (no --group)")
        every = chain.from_iterable(repeat(values, count))  # values * count, made a batch at a time
        shown = 0
        with json_array() if as_json else nullcontext(None) as write:
            while batch := list(islice(every, ENQUEUE_BATCH)):
                if delay_ms is not None:
                    added = [queue.schedule(v, delay_ms, id=job_id, priority=priority) for v in batch]
                elif job_id is not None:
                    added = [queue.enqueue(batch[0], id=job_id, priority=priority, group=group)]
                else:
                    added = queue.enqueue_many(batch, priority=priority, group=group)
                for item in added:
                    if write is not None:  # every id, not the first 20
                        write({"id": item.id, "created": item.created})
                    elif shown < 20:
                        said = "enqueued" if item.created else "exists (not enqueued again)"
                        click.echo(f"{id_form(item.id)}\t{said}")
                    shown += 1
    if not as_json and shown > 20:
        click.echo(f"... {shown} jobs in all")


#: jobs ``emq enqueue --count`` makes and sends at once: its memory is a batch's, whatever the count
ENQUEUE_BATCH = 1000


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


@main.command()
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
            queue_name = _find_queue(connection, job_id)
        queue = open_queue(connection, queue_name, serializer=RAW)
        view = job_view(queue, job_id) or record_view(queue, job_id)
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


def _find_queue(connection: Connection, job_id: str) -> str:
    """The one queue holding a row or a completed record for ``job_id`` (a SCAN of the node)."""
    pattern_id = re.sub(r"([*?\[\]\\])", r"\\\1", job_id)
    found = set()
    for kind in ("job", "done"):
        for key in connection.client.scan_iter(match=f"emq:{{*}}:{kind}:{pattern_id}", count=1000):
            name, _, rest = text_of(key)[len("emq:{"):].partition("}:")
            if rest == f"{kind}:{job_id}":
                found.add(name)
    if not found:
        raise click.ClickException(f"no job {id_form(job_id)!r} in any queue on this node (never enqueued, or "
                                   "completed past its retention)")
    if len(found) > 1:
        raise click.ClickException(f"job {id_form(job_id)!r} is in several queues ({', '.join(sorted(found))}): "
                                   "pass -q")
    return found.pop()


@main.command()
@node_options
@queue_option()
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@json_option
def dead(url: str, wire: str, queue_name: str, limit: int, as_json: bool) -> None:
    """List dead jobs with their last error."""
    with opened_queue(url, wire, queue_name, serializer=RAW) as queue:
        require_queue(queue)
        total = queue.counts().dead
        rows = [view.as_dict() for view in job_page(queue, State.DEAD, offset=0, count=limit)]
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


def say_escaped(ids: list[str]) -> None:
    """Below a list of ids: how to name one that is shown escaped."""
    if any(id_form(job_id) != job_id for job_id in ids):
        err.print(Text("some ids are shown escaped (a backslash, control characters or bytes that are not UTF-8): "
                       "name them as shown with --escaped, e.g. emq remove --escaped -q QUEUE 'ID'"))


@main.command()
@click.argument("job_ids", nargs=-1, metavar="[ID]...")
@node_options
@queue_option()
@click.option("--all", "every", is_flag=True, help="every dead job of the queue")
@escaped_option
@json_option
def reprocess(job_ids: tuple[str, ...], url: str, wire: str, queue_name: str, every: bool, escaped: bool,
              as_json: bool) -> None:
    """Send dead jobs back to pending with a full retry and stall budget again (attempts go on;
    exit 1 when a named id was not in dead)."""
    if bool(job_ids) == every:
        raise click.UsageError("name dead job ids, or pass --all" + (", not both" if every else ""))
    with reported():
        ids = named_ids(job_ids, escaped)
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        if every:
            ids = [job_id for job_id, _ in queue.ids(State.DEAD, count=queue.counts().dead or 1)]
        moved = [job_id for job_id in ids if queue.reprocess(job_id)]
    missed = [job_id for job_id in ids if job_id not in set(moved)]
    for job_id in missed:
        err.print(cell(f"{id_form(job_id)}: not in dead, left as it is"))
    if as_json:
        print_json({"queue": queue_name, "reprocessed": moved, "not_in_dead": missed})
    else:
        click.echo(f"reprocessed {len(moved)} job(s) of {queue_name}")
    if missed:
        sys.exit(1)


def create_option(fn: Any) -> Any:
    return click.option("--create", is_flag=True,
                        help="act on a queue that has no keys yet (it then exists, holding only this setting)")(fn)


@main.command()
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


@main.command()
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


def each_job(job_ids: list[str], act: Callable[[str], Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``act`` on every named job, one at a time: (its answer by id, the server's refusal by id).
    A refusal (an active job for remove, a job not active for cancel) stops only its own id."""
    answers: dict[str, Any] = {}
    refused: dict[str, str] = {}
    for job_id in job_ids:
        try:
            answers[job_id] = act(job_id)
        except StateError as exc:
            refused[job_id] = str(exc)
    return answers, refused


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


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``12h``, ``7d`` as milliseconds."""
    try:
        return admin.parse_duration_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@main.command()
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
        total = admin.in_batches(lambda: queue.purge(older_than_ms=age_ms or 0, limit=batch), batch)
    if as_json:
        print_json({"queue": queue_name, "purged": total})
    else:
        click.echo(f"purged {total} dead job(s) of {queue_name}")


@main.command()
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
        flat = admin.in_batches(lambda: queue.drain(limit=batch), batch)
        lanes = 0 if isinstance(queue, PartitionedQueue) else \
            admin.in_batches(lambda: queue.drain_lanes(limit=batch), batch)
        flows = queue.counts().flow_waiting_total
    if as_json:
        print_json({"queue": queue_name, "drained": flat + lanes, "lane_drained": lanes, "flow_left": flows})
    else:
        click.echo(f"drained {flat + lanes} pending job(s) of {queue_name}" + (f" ({lanes} of them lane jobs)"
                                                                             if lanes else ""))
    if flows:
        err.print(f"left {flows} flow job(s) not started: a flow job is not drained, its parent waits for it; "
                  f"cancel one with emq cancel -q {queue_name} ID (its parent is told as of a death)")


@main.command()
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


@main.command()
@node_options
@queue_option()
def resume(url: str, wire: str, queue_name: str) -> None:
    """Let workers claim from a paused queue again."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        queue.resume()
    click.echo(f"{queue_name} resumed")


@main.command("rate-limit")
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


@main.command()
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


@main.command()
@node_options
@queue_option()
@click.option("--max-stalled", type=click.IntRange(1), default=3, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@json_option
def sweep(url: str, wire: str, queue_name: str, max_stalled: int, limit: int, as_json: bool) -> None:
    """Recover expired leases (STALLED.CHECK, then the reaper for lane leases), once."""
    with opened_queue(url, wire, queue_name) as queue:
        require_queue(queue)
        found = merged([queue.stalled_check(max_stalled, limit), *lane_reap(queue, max_stalled, limit)])
    if as_json:
        print_json({"queue": queue_name, "recovered": found.recovered, "exempt": found.exempt, "dead": found.dead})
        return
    click.echo(f"{queue_name}: recovered {len(found.recovered)}, exempt (server restart) {len(found.exempt)}, "
               f"dead {len(found.dead)}")
    for label, ids in (("recovered", found.recovered), ("exempt", found.exempt), ("dead", found.dead)):
        for job_id in ids:
            click.echo(f"  {label}\t{id_form(job_id)}")


def lane_reap(queue: AnyQueue, max_stalled: int, limit: int) -> list[Sweep]:
    """The reaper's run on a plain queue (a partitioned queue has no lanes)."""
    return [] if isinstance(queue, PartitionedQueue) else [queue.reap(max_stalled, limit)]


# -- lanes: one group at a time ------------------------------------------------------


@main.group("group")
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


# -- events ---------------------------------------------------------------------------


@main.command()
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
        client = queue.connection.client
        note = events_note(queue_name, client.hget(queue.keys.meta, "events"), follow=follow,
                           kept=since is not None or bool(client.exists(queue.keys.events)))
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


# -- stats ---------------------------------------------------------------------------


def _where(connection: Connection) -> str:
    client = connection.client
    if isinstance(client, ValkeyCluster):
        return f"a cluster of {len(client.get_primaries())} primaries (via {client.get_default_node().name}), " \
               f"wire {connection.wire}"
    kwargs = client.get_connection_kwargs()
    place = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"{place}, wire {connection.wire}"


#: the table's columns: the four sets as they are now, then the running totals of the metrics hashes
STATS_COLUMNS = ("queue", "pending", "active", "scheduled", "dead", "completed\n(total)", "dead\n(total)")
#: shown only when some queue has lane or flow jobs (their own sets, beside the flat four)
GROUPED_COLUMNS = ("lanes\npend/act", "flows\nwait/pend/act/sch")


def rates(now: dict[str, QueueNumbers], before: dict[str, QueueNumbers] | None, elapsed_s: float) -> dict[str, dict]:
    """Completions and deaths per second between two samples, per queue (pure)."""
    if before is None or elapsed_s <= 0:
        return {}
    shown = {}
    for name, numbers in now.items():
        then = before.get(name, numbers)
        shown[name] = {"completed_per_s": (numbers.completed - then.completed) / elapsed_s,
                       "dead_per_s": (numbers.dead - then.dead) / elapsed_s}
    return shown


def stats_table(connection: Connection, sampled: dict[str, QueueNumbers | Exception],
                per_s: dict[str, dict] | None, workers: Counter[str]) -> RenderableType:
    """The table, then the queues whose jobs wait with no live worker to serve them (``workers``: how
    many serve each), then why each unreadable queue could not be read (below it: an error text in a
    column would widen the table past any terminal)."""
    table = Table(title=f"EchoMQ queues on {_where(connection)}", box=box.SIMPLE_HEAD, collapse_padding=True,
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
        notes += [Text("unreadable (one of the queue's keys holds the wrong type):"), *unreadable]
    return Group(table, *notes) if notes else table


def stats_json(sampled: dict[str, QueueNumbers | Exception], per_s: dict[str, dict],
               workers: Counter[str]) -> list[dict]:
    return [{"queue": name, "error": str(numbers)} if isinstance(numbers, Exception)
            else {**numbers.as_dict(), "workers": workers[name], **per_s.get(name, {})}
            for name, numbers in sampled.items()]


@main.command()
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
        scan = QueueScan(list(queue_names)) if queue_names else scan_queues(connection)
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

        # with --detail a partitioned queue's partitions get rows of their own, under its total
        rows = [q for queue in queues
                for q in [queue, *(partitions_of(queue) if detail and len(partitions_of(queue)) > 1 else [])]]

        def sample() -> tuple[dict[str, QueueNumbers | Exception], Counter[str]]:
            """Every row's numbers, and how many live workers serve each queue."""
            return {q.name: found for q, found in zip(rows, numbers_of(rows))}, serving(list_workers(connection))

        if not watch:
            sampled, workers = sample()
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
                    now, (sampled, workers) = time.monotonic(), sample()
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


# -- workers ---------------------------------------------------------------------------


@main.command()
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


# -- periodic jobs -------------------------------------------------------------------


@main.group()
def cron() -> None:
    """Periodic jobs: the schedules an app declares (app.cron, @app.task(cron=...))."""


@cron.command("list")
@click.argument("app_spec", metavar="APP")
@node_options
@json_option
def cron_list(app_spec: str, url: str, wire: str, as_json: bool) -> None:
    """APP's schedules (module:app) and each one's next run on the node's clock."""
    app = load_app(app_spec)
    if not app.schedules:
        print_json([]) if as_json else out.print(f"{app_spec} declares no schedules")
        return
    with opened(url, wire) as connection, reported():
        now = Queue(connection, app.schedules[0].queue).server_ms()  # the clock the ticks are on
    rows = describe(app.schedules, now)
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"{len(rows)} schedule(s)", box=box.SIMPLE_HEAD)
    for column in ("id", "expr", "queue", "next run (UTC)", "in"):
        table.add_column(column, no_wrap=True, justify="right" if column == "in" else "left")
    for row in rows:
        table.add_row(row["id"], row["expr"], row["queue"], row["next"], f"{row['in_s']:g} s")
    out.print(table)


# -- the dashboard -------------------------------------------------------------------


@main.command()
@node_options
@click.option("--host", default="127.0.0.1", show_default=True,
              help="the address to serve on; beyond loopback a --token is required")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="no actions: the buttons are hidden and their routes refuse")
@click.option("--token", envvar="EMQ_DASHBOARD_TOKEN", default=None,
              help="required on every request: Basic auth password (any user) or Bearer; 16 characters or more. "
                   "Set EMQ_DASHBOARD_TOKEN instead: an option is visible to every user of the host (ps)")
@click.option("-q", "--queue", "queue_names", multiple=True,
              help="serve only these queues: every other queue's pages and actions answer 404, and /metrics and "
                   "the workers list show only these (default: every queue on the node, found by SCAN every 10 s)")
@click.option("--sample-interval", type=click.FloatRange(0.1), default=2.0, show_default=True,
              help="seconds between the samples the rate chart is drawn from")
@click.pass_context
def dashboard(ctx: click.Context, url: str, wire: str, host: str, port: int, read_only: bool, token: str | None,
              queue_names: tuple[str, ...], sample_interval: float) -> None:
    """Serve the web dashboard and Prometheus /metrics for the node (Ctrl-C stops it)."""
    try:
        from ..dashboard import Settings, check_binding, listen, serve
    except ImportError as exc:
        raise click.ClickException(f"the dashboard needs its extra: pip install 'echomq[dashboard]' ({exc})") from exc
    with reported():
        for name in queue_names:
            check_queue_name(name)
        check_binding(host, token)  # before connecting: a refusal must not depend on the node
    if ctx.get_parameter_source("token") is click.core.ParameterSource.COMMANDLINE:
        err.print("warning: --token is visible to every user of this host (ps, /proc); set EMQ_DASHBOARD_TOKEN "
                  "instead", style="yellow")
    settings = Settings(read_only=read_only, token=token, queues=list(queue_names), sample_interval_s=sample_interval)
    with opened(url, wire) as connection, reported():
        listening = listen(host, port)
        shown = f"[{host}]" if ":" in host else host
        err.print(f"dashboard for {_where(connection)} on http://{shown}:{port}/"
                  + (" (read-only)" if read_only else "") + (", token required" if token else ""))
        serve(connection, settings, host=host, port=port, listening=listening)
