"""``emq brand``, ``emq doctor`` and ``emq adopt-flows``: the node's brand, whether it is ready for
production, and the flows an upgrade from before 0.2.0 left to adopt."""

from __future__ import annotations

import sys

import click

from .._protocol.keys import VERSION_KEY, check_queue_name
from .._protocol.shown import one_line, redact_url
from ..admin.doctor import examine_url, verdict
from ..admin.flows import adopt_flows, adoption_lines
from ..admin.steps import brand_url
from .common import (DEFAULT_URL, cell, chosen_cluster, cluster_option, json_option, node_options, opened, out,
                     print_json, reported, url_option)


@click.command()
@click.argument("url", envvar="EMQ_URL", default=DEFAULT_URL)
@click.option("--wire", type=click.Choice(["4", "6"]), required=True)
@click.option("--replace", is_flag=True,
              help="overwrite another brand (a mistake), only while the node holds no EchoMQ data")
@cluster_option
def brand(url: str, wire: str, replace: bool) -> None:
    """Brand the node at URL for one wire, once (refuses to overwrite the other brand, and wire 6 on a
    node without trafikey). On a Valkey Cluster the brand is one key for the whole cluster, written
    on the primary of its slot."""
    with reported():
        branded = brand_url(url, int(wire), replace=replace, cluster=chosen_cluster())
    said = branded.brand.decode()
    if branded.primaries is not None:
        out.print(f"the cluster of {redact_url(url)} ({branded.primaries} primaries) branded {said} "
                  f"({VERSION_KEY} on {branded.holder})")
    else:
        out.print(cell(f"{redact_url(url)} branded {said}"))


@click.command()
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
        checks = examine_url(url, queue_names, chosen_cluster())
    if as_json:
        print_json([check.as_json() for check in checks])
    else:
        width = max(len(check.name) for check in checks)
        for check in checks:
            where = f" [{check.node}]" if check.node else ""
            # a detail may quote the server (a refusal, a key it names): one line, escaped
            click.echo(one_line(f"{check.level.value:<8} {check.name:<{width}}  {check.detail}{where}"))
    sys.exit(verdict(checks))


@click.command("adopt-flows")
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
