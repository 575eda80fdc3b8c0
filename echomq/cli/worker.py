"""``emq worker`` and ``emq cron``: run an app's handlers (in one process, or N under a supervisor),
and list its periodic jobs. Loading the app, the processes' commands and the metrics server are
the worker package's and ``observe``'s; this module parses and prints."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

import click
from rich import box
from rich.table import Table

from .._client.queue import Queue
from ..worker.cron import describe
from ..worker.loading import NotAnApp, load_app
from ..worker.policy import IdlePolicy, LeasePolicy
from ..worker.supervisor import Supervisor, process_commands
from ..worker.tasks import App
from ..worker.timers import TimerConfig
from ..worker.worker import Worker, WorkerConfig
from .common import chosen_cluster, err, json_option, node_options, opened, out, print_json, reported


def app_of(spec: str) -> App:
    """The app ``spec`` names, or the usage error that says why not (exit 2)."""
    try:
        return load_app(spec, warn=lambda warning: err.print(warning, style="yellow"))
    except NotAnApp as exc:
        raise click.BadParameter(str(exc), param_hint="APP") from exc


@click.command()
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
@click.option("--pool", type=click.Choice(["thread", "process"]), default="thread", show_default=True,
              help="where sync handlers run: on this process's threads, or in child processes (one a --concurrency "
                   "slot) that are killed past their timeout (SIGTERM, then SIGKILL) and replaced; a task's "
                   "pool= wins (docs/workers.md)")
@click.option("--max-jobs-per-child", type=click.IntRange(1), default=None,
              help="(process pool) replace a child after this many jobs")
@click.option("--max-memory-per-child", "max_memory_per_child_mb", type=click.IntRange(1), default=None,
              help="(process pool) replace a child after a job that leaves it holding more resident memory than "
                   "this many MiB")
@click.option("-p", "--processes", type=click.IntRange(1), default=1, show_default=True,
              help="run this many worker processes, each with these options, under a supervisor that starts "
                   "again one that dies and passes SIGTERM/SIGINT on (CPU-bound handlers: one per core); "
                   "each --metrics-port is the given one + its index")
@click.pass_context
def worker(ctx: click.Context, app_spec: str, url: str, wire: str, queues: tuple[str, ...], concurrency: int,
           lease_ms: int, grace: float, claim_batch: int, idle_max_ms: int, promote_interval_ms: int,
           sweep_interval_ms: int, idle_sweep_interval_ms: int, max_stalled: int, timeout_s: float | None,
           log_level: str, metrics_port: int | None, metrics_host: str, burst: bool, max_jobs: int | None,
           pool: str, max_jobs_per_child: int | None, max_memory_per_child_mb: int | None, processes: int) -> None:
    """Run the handlers of MODULE:APP until SIGTERM/SIGINT (a second one exits at once), or with
    --burst until its queues are empty."""
    app = app_of(app_spec)
    with reported():
        config = WorkerConfig(
            concurrency=concurrency, claim_batch=claim_batch, grace_s=grace, lease=LeasePolicy(lease_ms),
            idle=IdlePolicy(max_ms=idle_max_ms),
            timers=TimerConfig(promote_interval_ms=promote_interval_ms, sweep_interval_ms=sweep_interval_ms,
                               idle_sweep_interval_ms=idle_sweep_interval_ms, max_stalled=max_stalled),
            burst=burst, timeout_s=timeout_s, max_jobs=max_jobs, pool=pool, max_jobs_per_child=max_jobs_per_child,
            max_memory_per_child_mb=max_memory_per_child_mb,
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
            metrics_server()(instance, metrics_host, metrics_port)
        instance.run()
    if instance.shutdown_errors:
        raise click.ClickException(f"{len(instance.shutdown_errors)} shutdown hook(s) raised (see the log): "
                                   + "; ".join(f"{type(e).__name__}: {e}" for e in instance.shutdown_errors))


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
    return process_commands(args, params["processes"], params.get("metrics_port"))


def metrics_server() -> Callable[[Worker, str, int], None]:
    """``observe``'s worker metrics server, or the error that names the extra it needs."""
    try:
        from ..observe.serving import serve_worker_metrics
    except ImportError as exc:
        raise click.ClickException(f"--metrics-port needs prometheus_client: pip install 'echomq[dashboard]' ({exc})")
    return serve_worker_metrics


@click.group()
def cron() -> None:
    """Periodic jobs: the schedules an app declares (app.cron, @app.task(cron=...))."""


@cron.command("list")
@click.argument("app_spec", metavar="APP")
@node_options
@json_option
def cron_list(app_spec: str, url: str, wire: str, as_json: bool) -> None:
    """APP's schedules (module:app) and each one's next run on the node's clock."""
    app = app_of(app_spec)
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
