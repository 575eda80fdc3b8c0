"""What a chain costs per step (issue 38 item 4): the calls its producer and one in-process worker
send, and the commands the server runs, for a chain of ``--steps`` steps against as many jobs sent
alone (``task.delay``), side by side on each wire, rounds interleaved.

* **calls** -- commands the clients sent (the ``verb.stop`` hook: each verb, or plain command, of
  each round trip), and **round trips**;
* **server** -- commands the server ran (INFO commandstats, a script's inner commands counted; the
  harness's own left out).

A chain's steps run one after another (each after the one before it completed), so its worker
claims one job at a time; jobs sent alone are claimed in batches::

    .venv/bin/python -m bench.canvas_cost --steps 200 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any

import valkey

from echomq import App, EmbeddedServer, Queue, chain, connect, hooks, module_path
from echomq.testing import drain

from .cancel_looks import commands
from .common import say


def measure(url: str, wire: int, kind: str, steps: int, round_no: int) -> dict[str, float]:
    """Per step: calls, round trips and server commands of one run (a chain, or jobs sent alone)."""
    app = App(queue=f"canvas-{wire}-{kind}-{round_no}")

    @app.task
    def add(x: int, y: int = 0) -> int:
        return x + y

    counted: Counter[str] = Counter()

    def on_stop(event: str, data: dict[str, Any]) -> None:
        counted["round_trips"] += 1
        counted["calls"] += len(data["verbs"])

    with connect(url, wire=wire) as conn, valkey.Valkey.from_url(url) as admin:
        app.connect(conn)
        queue = Queue(conn, app.queue or "")
        admin.config_resetstat()
        unsubscribe = hooks.subscribe("verb.stop", on_stop)
        started = time.perf_counter()
        try:
            if kind == "chain":
                last = chain(add.s(0), *[add.s(1) for _ in range(steps - 1)]).enqueue()
            else:
                last = [add.delay(n) for n in range(steps)][-1]
            drain(app, queue, timeout_s=300)
        finally:
            unsubscribe()
        elapsed = time.perf_counter() - started
        server = commands(admin)
        assert last.get(timeout=5) == steps - 1  # the chain: 0 + 1 + ... ; alone: the last add(steps - 1)
    return {"calls": counted["calls"] / steps, "round_trips": counted["round_trips"] / steps,
            "server": server / steps, "ms": elapsed * 1000 / steps}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.canvas_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    found: dict[str, Any] = {}
    for wire in (6, 4):
        with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server:
            runs: dict[str, list[dict[str, float]]] = {"chain": [], "alone": []}
            for round_no in range(args.rounds):
                for kind in runs:
                    runs[kind].append(measure(server.url, wire, kind, args.steps, round_no))
            for kind, samples in runs.items():
                row = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
                found[f"wire {wire} {kind}"] = row
                say(f"wire {wire}, {kind}: {row['calls']:.2f} calls, {row['round_trips']:.2f} round trips, "
                    f"{row['server']:.1f} server commands, {row['ms']:.2f} ms a step (medians of {args.rounds}, "
                    f"{args.steps} steps)")
    return found


if __name__ == "__main__":
    main()
