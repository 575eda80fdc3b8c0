"""What every ``emq`` command shares: the node options (``--url``, ``--wire``, ``--cluster``), the
queue and output options, the consoles, and the error handling (an EchoMQ error is one line and
exit 1). The commands live one group a module beside it; each parses and calls the library."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

import click
from rich.console import Console
from rich.text import Text

from .._client.connection import Connection, connect
from .._client.partitioned import AnyQueue, open_queue
from .._protocol.keys import check_job_id, check_queue_name
from .._protocol.shown import from_id_form, id_form, lines, one_line, redact_url
from ..admin.inventory import queue_exists
from ..errors import ConnectionFailed, EchoMQError

DEFAULT_URL = "redis://127.0.0.1:6379"
UNWRAPPED = 100_000  #: the width tables get when stdout is not a terminal: one line per row, for scripts
out = Console()
err = Console(stderr=True)


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
    every character that is not printable escaped (``one_line``), and no rich markup read in it."""
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
    """EchoMQ errors, a failed link among them, become one clear line and exit status 1, not a
    traceback (escaped: a refusal may quote an id or a name from the node)."""
    try:
        yield
    except EchoMQError as exc:  # a link fault too: every read and write of the node is ConnectionFailed's
        raise click.ClickException(lines(str(exc))) from exc


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


def say_escaped(ids: list[str]) -> None:
    """Below a list of ids: how to name one that is shown escaped."""
    if any(id_form(job_id) != job_id for job_id in ids):
        err.print(Text("some ids are shown escaped (a backslash, control characters or bytes that are not UTF-8): "
                       "name them as shown with --escaped, e.g. emq remove --escaped -q QUEUE 'ID'"))


def create_option(fn: Any) -> Any:
    return click.option("--create", is_flag=True,
                        help="act on a queue that has no keys yet (it then exists, holding only this setting)")(fn)
