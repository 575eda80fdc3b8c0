"""``emq server``, ``emq module-path`` and ``emq parity``: Valkey on this machine, the built
trafikey module, and the parity instrument."""

from __future__ import annotations

import os
import signal
import sys
import threading

import click

from .._client.connection import connect
from ..admin.inventory import jobs_on
from ..errors import ConfigurationError, PortInUse, ServerStartError
from ..local.module import module_path
from ..local.server import FSYNC_POLICIES, EmbeddedServer, durability_for
from .common import err, out, reported


@click.command()
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


def found_note(new_directory: bool, found: tuple[int, int] | None) -> str:
    """What a start says of the jobs its --dir held (``found``: jobs, queues; None: not looked for)."""
    if new_directory:
        return " (a new directory: no jobs yet)"
    if found is None:
        return ""
    jobs, queues = found
    return f" (found {jobs} job(s) in {queues} queue(s))" if jobs else " (it holds no jobs)"


@click.command("module-path")
def module_path_command() -> None:
    """Print the path of the built trafikey module (for --loadmodule)."""
    with reported():
        click.echo(module_path())


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def parity(args: tuple[str, ...]) -> None:
    """Run the parity instrument: scripts vs trafikey, every key compared (--help for its options)."""
    from ..parity import main as parity_main

    sys.exit(parity_main(list(args), prog="emq parity"))
