"""``emq``: the command line. Thin by design: each command parses its arguments, calls the library
(``admin`` for the operator's reads and writes, shared with the dashboard; the worker package for
an app and its processes) and prints what it answers.

Every command that talks to a node takes ``--url`` (or ``EMQ_URL``), ``--wire``
(4, 6, or ``auto`` = what the node is branded for; or ``EMQ_WIRE``) and
``--cluster/--no-cluster`` (default: ask the node, and on a Valkey Cluster node use the
cluster client; or ``EMQ_CLUSTER``). Input is
checked before anything is written: a bad payload, id or queue name changes nothing.

For scripts: every read command takes ``--json``; tables printed to a pipe or a file
are not wrapped; a command that matched nothing (an unknown queue or id) exits 1.

One module per command group: ``common`` (the options and the error handling they share),
``server`` (the local node), ``admin`` (brand, doctor, adopt-flows), ``worker`` (worker, cron), ``jobs``,
``queues``, ``lanes`` (group), ``events``, ``stats`` (stats, workers), ``dashboard``.

The top of the layers: it may import any of them (docs/architecture.md); nothing imports it.
"""

from __future__ import annotations

import click

from ..local.versions import local_report, node_report
from . import admin, dashboard, events, jobs, lanes, queues, server, stats, worker
from .common import UNWRAPPED, err, out, reported


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


for command in (server.server, server.module_path_command, server.parity, admin.brand, admin.doctor, admin.adopt_flows_command,
                worker.worker,
                worker.cron, jobs.enqueue, jobs.inspect, jobs.dead, jobs.reprocess, jobs.remove, jobs.cancel,
                queues.purge, queues.drain, queues.pause, queues.resume, queues.rate_limit, queues.results_layout,
                queues.promote,
                queues.sweep, lanes.group_cmd, events.events, stats.stats, stats.workers, dashboard.dashboard):
    main.add_command(command)
