"""``emq dashboard``: the web dashboard and Prometheus ``/metrics`` of a node."""

from __future__ import annotations

import logging
import sys

import click

from .._protocol.keys import check_queue_name
from ..admin.inventory import node_where
from .common import err, node_options, opened, reported


@click.command()
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
        err.print(f"dashboard for {node_where(connection)} on http://{shown}:{port}/"
                  + (" (read-only)" if read_only else "") + (", token required" if token else ""))
        log_audit()
        serve(connection, settings, host=host, port=port, listening=listening)


def log_audit() -> None:
    """Every action the dashboard takes or refuses, one line each on stderr (the ``echomq.dashboard.audit``
    logger; a handler of your own replaces this one)."""
    audit = logging.getLogger("echomq.dashboard.audit")
    if not audit.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s audit %(message)s"))
        audit.addHandler(handler)
        audit.setLevel(logging.INFO)
