"""What the bus costs a queue with events off and nobody waiting: the lifecycle (enqueue, claim,
complete) against the executors before the bus, paired batch by batch.

The ``bus`` section pairs whole rounds, which a shared machine's load swings by more than the few
per cent asked about here. This pairs finer: batches of ``--batch`` calls of one phase, before
and now alternated (the order flipped every pair), each read from INFO commandstats after a
CONFIG RESETSTAT; the figures are the median per-call µs, the minimum (the least disturbed
batch), and the median of the per-pair ratios. Wire 4: the scripts of ``--before`` (a git
revision; each as that revision's client loaded it, with its libraries) and of this checkout, on
one server. Wire 6: a trafikey built before the bus
(``--before-module``) and this checkout's, on two servers. Both servers are our own, run at
a raised priority (nice -10) when allowed, so the other work on the machine disturbs less.

    .venv/bin/python -m bench.switch_cost --before REV --before-module SO [--pairs 100]
    .venv/bin/python -m bench.switch_cost --before REV --wires 4  # the scripts alone
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import types
from typing import Any, Callable

from echomq import brand_node, module_path
from echomq.local.server import EmbeddedServer
from echomq._protocol.verbs import BY_NAME

from .common import ROOT

PHASES = ("enqueue", "claim", "complete")
LEASE_MS = 600_000


def _server(module: str) -> EmbeddedServer:
    server = EmbeddedServer(module=module, extra_args=("--maxmemory", "0"))
    server.start()
    try:
        os.setpriority(os.PRIO_PROCESS, server._process.pid, -10)  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass  # not allowed: the run is only noisier
    return server


@functools.cache
def _verbs_at(rev: str) -> Any:
    """The verb table of git revision ``rev``: its ``echomq`` package copied out of git and its
    ``verbs`` module imported from there (not its ``__init__``), so its scripts load as that
    revision's client loaded them, with the libraries it had."""
    where = tempfile.mkdtemp(prefix="emq-before-")
    archive = subprocess.run(["git", "archive", rev, "echomq"], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", where], input=archive, check=True)
    package = types.ModuleType(f"echomq_at_{rev}")
    package.__path__ = [os.path.join(where, "echomq")]
    sys.modules[package.__name__] = package
    return importlib.import_module(f"{package.__name__}.verbs")


def _script(rev: str | None, verb: str) -> str:
    """``verb``'s script as the client of ``rev`` (None: this checkout) loads it."""
    table = BY_NAME if rev is None else _verbs_at(rev).BY_NAME
    row = table[verb]
    # a revision before the script libraries (7364445) loaded each file as it is
    return (row.source() if hasattr(row, "source") else row.script_path.read_bytes()).decode()


def _sender(client: Any, wire: int, rev: str | None, base: str) -> Callable[[Any, str, str], None]:
    """Queue one call of ``phase`` for job ``job`` on a pipeline."""
    keys = {"enqueue": (base + "pending", base), "claim": (base + "pending", base + "active", base),
            "complete": (base + "active", base)}
    if wire == 4:
        shas = {verb: client.script_load(_script(rev, verb)) for verb in PHASES}
        run = lambda p, phase, *args: p.evalsha(shas[phase], len(keys[phase]), *keys[phase], *args)  # noqa: E731
    else:
        run = lambda p, phase, *args: p.execute_command(f"EMQ.{phase.upper()}", len(keys[phase]),  # noqa: E731
                                                        *keys[phase], *args)

    def send(p: Any, phase: str, job: str) -> None:
        args = {"enqueue": (job, "x", 0), "claim": (LEASE_MS,), "complete": (job, 1)}[phase]
        run(p, phase, *args)

    return send


def _usec(client: Any, command: str) -> float:
    stats = client.info("commandstats")[f"cmdstat_{command}"]
    return stats["usec"] / stats["calls"]


def measure(wire: int, before_rev: str, before_module: str, pairs: int, batch: int) -> dict[str, Any]:
    servers = [_server(before_module if wire == 6 else module_path())]
    servers.append(servers[0] if wire == 4 else _server(module_path()))
    try:
        clients = [s.client() for s in servers]
        for client in set(clients):
            brand_node(client, wire)
        sides = [(clients[k], _sender(clients[k], wire, before_rev if k == 0 else None, f"emq:{{s{k}}}:"))
                 for k in (0, 1)]
        out: dict[str, Any] = {}
        for phase in PHASES:
            command = "evalsha" if wire == 4 else f"EMQ.{phase.upper()}"
            per = {0: [], 1: []}  # type: dict[int, list[float]]
            for i in range(pairs):
                for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                    client, send = sides[k]
                    client.config_resetstat()
                    p = client.pipeline(transaction=False)
                    for j in range(batch):
                        send(p, phase, f"{i:05d}-{j:04d}")
                    p.execute()
                    per[k].append(_usec(client, command))
            out[phase] = {"before": statistics.median(per[0]), "now": statistics.median(per[1]),
                          "before_min": min(per[0]), "now_min": min(per[1]),
                          "ratio": statistics.median(b / a for a, b in zip(per[0], per[1]))}
        return out
    finally:
        for server in {id(s): s for s in servers}.values():
            server.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, metavar="REV", help="a git revision before the bus (its scripts)")
    ap.add_argument("--before-module", metavar="SO", help="a trafikey .so built before the bus (wire 6)")
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--wires", default="4,6")
    args = ap.parse_args()
    if "6" in args.wires.split(",") and not args.before_module:
        ap.error("wire 6 compares against --before-module")
    for wire in (int(w) for w in args.wires.split(",")):
        got = measure(wire, args.before, args.before_module, args.pairs, args.batch)
        for phase, f in got.items():
            print(f"wire {wire} {phase:9s} before {f['before']:6.2f} µs (min {f['before_min']:.2f})  "
                  f"now {f['now']:6.2f} µs (min {f['now_min']:.2f})  now/before, paired median {f['ratio']:.3f}")
        mins = sum(f["now_min"] for f in got.values()) / sum(f["before_min"] for f in got.values())
        print(f"wire {wire} lifecycle now/before: of the minimums {mins:.3f}", flush=True)


if __name__ == "__main__":
    main()
