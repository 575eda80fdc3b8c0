"""What the worker's look for cancels costs (issue 37 item 7): commands a second a worker sends
with the look and without it, side by side, on each wire.

* **busy** -- one in-process worker, concurrency 10, holding 10 jobs whose handlers run on
  (each waits until the phase ends): every one is past ``CANCEL_CHECK_MS``, so the worker looks
  every 500 ms (one ZMSCORE for the queue);
* **idle** -- the same worker with nothing to do: nothing held, so no look (it must gain nothing).

Counted from INFO commandstats (a script's inner commands count too; the harness's own left out)
over ``--seconds`` after a warm-up, rounds interleaved (look on, look off, ...)::

    .venv/bin/python -m bench.cancel_looks --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import valkey

from echomq import App, EmbeddedServer, Queue, Worker, WorkerConfig, connect, module_path

from .common import ADMIN_COMMANDS, say

HELD = 10


def commands(client: valkey.Valkey) -> int:
    """Commands executed since the last CONFIG RESETSTAT, the harness's own left out."""
    return sum(v["calls"] for k, v in client.info("commandstats").items() if k.split("|")[0] not in ADMIN_COMMANDS)


def rate(url: str, wire: int, *, busy: bool, looks: bool, seconds: float, round_no: int) -> float:
    """Commands/s of one worker over ``seconds``, busy (``HELD`` jobs running) or idle."""
    name, release = f"looks-{wire}-{busy}-{looks}-{round_no}", threading.Event()
    app = App()
    app.handler(name, lambda payload: release.wait(seconds + 30))
    with connect(url, wire=wire) as conn, valkey.Valkey.from_url(url) as admin:
        worker = Worker(app, conn, config=WorkerConfig(concurrency=HELD))
        if not looks:  # the worker as it was: no look; its renewals alone tell it of a cancel
            leases = worker.leases
            leases.check_cancels = lambda now: setattr(leases, "cancel_check_at", float("inf"))  # type: ignore
        if busy:
            Queue(conn, name).enqueue_many([{}] * HELD)
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while busy and len(worker.held) < HELD and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # past the first look, and settled into its rhythm
        admin.config_resetstat()
        time.sleep(seconds)
        sent = commands(admin)
        release.set()
        worker.stop("phase over")
        thread.join(15)
    return sent / seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.cancel_looks", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    found: dict[str, Any] = {}
    for wire in (6, 4):
        with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
            for busy in (True, False):
                runs: dict[bool, list[float]] = {True: [], False: []}
                for round_no in range(args.rounds):
                    for looks in (True, False):
                        runs[looks].append(rate(server.url, wire, busy=busy, looks=looks, seconds=args.seconds,
                                                round_no=round_no))
                row = {looks: statistics.median(values) for looks, values in runs.items()}
                found[f"wire {wire} {'busy' if busy else 'idle'}"] = row
                say(f"wire {wire}, {'busy' if busy else 'idle'}: {row[True]:.2f} commands/s with the look, "
                    f"{row[False]:.2f} without: +{row[True] - row[False]:.2f}/s "
                    f"(medians of {args.rounds}: {runs[True]} / {runs[False]})")
    return found


if __name__ == "__main__":
    main()
