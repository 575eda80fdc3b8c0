"""The demo (`./run demo`): real jobs through `emq worker` processes on an embedded Valkey.

1. start Valkey with trafikey (wire 6); only if the module is not built, wire 4, said plainly;
2. enqueue a few thousand jobs: some fail once and are retried with backoff, one is a
   poison pill that fails every attempt and goes dead;
3. run worker processes (`emq worker echomq.local.demo:app`) and show progress;
4. "fix the bug", reprocess the dead job and watch it complete;
5. SIGTERM the workers (each says what it still held), then print the final stats.

    python -m echomq.local.demo [--jobs 3000] [--workers 3] [--wire 6|4]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._client.connection import connect
from ..errors import EchoMQError, WireError
from .module import module_path
from ..worker.policy import Backoff
from .._client.queue import Queue
from .server import EmbeddedServer
from ..worker.tasks import App

QUEUE = "demo"
DIR_ENV = "EMQ_DEMO_DIR"
FLAKY_EVERY = 25  #: one job in this many fails its first attempt
TIMEOUT_S = 50.0
SHUTDOWN_MARKS = ("stopped with nothing held", "requeued", "left to lease expiry", ": done: ")

console = Console()
app = App("demo")


def _fixed() -> bool:
    return (Path(os.environ.get(DIR_ENV, ".")) / "fixed").exists()


@app.task(queue=QUEUE, max_attempts=3, backoff=Backoff(base_ms=100, max_ms=1000, jitter=0.3))
def process(payload: dict, ctx) -> int:
    """A stand-in for real work: a checksum of the order; flaky and poison orders fail on purpose."""
    if payload.get("poison") and not _fixed():
        raise ValueError(f"order {payload['order']}: cannot parse the currency field (a poison pill)")
    if payload.get("flaky") and ctx.attempt == 1:
        raise ConnectionError(f"order {payload['order']}: payment service timed out (retried with backoff)")
    return sum(int(digit) for digit in str(payload["order"]))


def start_server(wire: int) -> EmbeddedServer:
    if wire == 6:
        try:
            server = EmbeddedServer(module=module_path(), brand=6, stop_with_parent=True).start()
            try:
                connect(server.url, wire=6).close()
                return server
            except EchoMQError:
                server.cleanup()
                raise
        except WireError as exc:
            console.print(f"[yellow]note:[/] trafikey is not usable ({exc}).\n"
                          "[yellow]note:[/] falling back to wire 4: the same verbs as Lua scripts.")
    return EmbeddedServer(brand=4, stop_with_parent=True).start()


def wait_for(check, what: str, deadline: float) -> None:
    while not check():
        if time.monotonic() > deadline:
            raise click.ClickException(f"the demo timed out waiting for {what}")
        time.sleep(0.05)


@click.command()
@click.option("--jobs", type=click.IntRange(10, 100_000), default=3000, show_default=True)
@click.option("--workers", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option("--wire", type=click.Choice(["6", "4"]), default="6", show_default=True)
def main(jobs: int, workers: int, wire: str) -> None:
    """Run the EchoMQ demo."""
    started = time.monotonic()
    deadline = started + TIMEOUT_S
    workdir = Path(tempfile.mkdtemp(prefix="echomq-demo-"))
    with start_server(int(wire)) as server, connect(server.url, wire="auto") as conn:
        queue = Queue(conn, QUEUE)
        console.print(f"[bold]EchoMQ demo[/]: Valkey on {server.url}, wire {conn.wire} "
                      f"({'trafikey: native EMQ.* commands' if conn.wire == 6 else 'Lua scripts'})")

        poison_order = jobs // 2
        payloads = [{"order": n, "flaky": n % FLAKY_EVERY == 7, "poison": n == poison_order} for n in range(jobs)]
        queue.enqueue_many(payloads)
        flaky = sum(p["flaky"] for p in payloads)
        console.print(f"enqueued {jobs} jobs: {flaky} will fail once and retry, order {poison_order} is a poison pill")

        env = dict(os.environ, **{DIR_ENV: str(workdir)})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                          env.get("PYTHONPATH")]))
        procs = []
        for i in range(workers):
            log = open(workdir / f"worker-{i}.log", "wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "echomq.cli", "worker", "echomq.local.demo:app", "--url", server.url,
                 "--wire", str(conn.wire), "-c", "8", "--lease-ms", "5000", "--promote-interval-ms", "200",
                 "--grace", "5"],
                env=env, stdout=log, stderr=subprocess.STDOUT))
        console.print(f"started {workers} `emq worker echomq.local.demo:app` processes "
                      f"(pids {', '.join(str(p.pid) for p in procs)}; logs in {workdir})")
        try:
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[note]}"), TimeElapsedColumn(), console=console) as bar:
                task = bar.add_task("completed", total=jobs, note="")
                while True:
                    done, counts = queue.metrics()["completed"], queue.counts()
                    bar.update(task, completed=done,
                               note=f"retrying {counts.scheduled:>3}  dead {counts.dead}")
                    if done >= jobs - 1 and counts.dead == 1 and counts.pending + counts.active + counts.scheduled == 0:
                        break
                    if time.monotonic() > deadline:
                        raise click.ClickException("the demo timed out; see the worker logs in " + str(workdir))
                    time.sleep(0.1)
            (dead_id, _), = queue.ids("dead")
            row = queue.job(dead_id)
            console.print(f"[red]dead[/]: {dead_id} after {row['attempts']} attempts: {row['last_error']}")
            (workdir / "fixed").touch()
            console.print("the bug is fixed (the handler now parses it); [bold]reprocess[/] the dead job ...")
            queue.reprocess(dead_id)
            wait_for(lambda: queue.metrics()["completed"] == jobs, "the reprocessed job", deadline)
            console.print(f"[green]{dead_id} completed[/] on attempt {int(row['attempts']) + 1}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        elapsed = time.monotonic() - started
        shutdown_lines = [line for i in range(workers)
                          for line in (workdir / f"worker-{i}.log").read_text().splitlines()
                          if any(mark in line for mark in SHUTDOWN_MARKS)]
        for line in shutdown_lines:
            console.print("  " + line.split("echomq.worker: ", 1)[-1], style="dim")
        show_stats(queue, jobs, elapsed)


def show_stats(queue: Queue, jobs: int, elapsed: float) -> None:
    counts, metrics = queue.counts(), queue.metrics()
    table = Table(title=f"queue {queue.name!r} at the end")
    for column in ("pending", "active", "scheduled", "dead", "completed", "went dead (counted)"):
        table.add_column(column, justify="right")
    table.add_row(str(counts.pending), str(counts.active), str(counts.scheduled), str(counts.dead),
                  str(metrics["completed"]), str(metrics["failed"]))
    console.print(table)
    ok = metrics["completed"] == jobs and counts.total == 0
    console.print(f"{'[green]every job completed, none lost[/]' if ok else '[red]jobs missing[/]'}: "
                  f"{jobs} jobs in {elapsed:.1f}s (whole demo, including start-up)")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
