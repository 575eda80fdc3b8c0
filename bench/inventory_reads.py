"""Reading every queue of a node, as the dashboard, `emq stats` and `/metrics` do: one queue
after another (two round trips each: COUNTS, then the metrics hashes) beside all of them
together (`echomq.admin.inventory.numbers_of`: one pipeline). Interleaved rounds on one embedded
server, wall time per read of the whole node, and their ratio.

    .venv/bin/python -m bench.inventory_reads --queues 500 --rounds 7 --json bench/results/inventory-reads.json
"""

from __future__ import annotations

import argparse
import json
import time

from echomq import EmbeddedServer, Queue, connect, module_path
from echomq.admin.inventory import numbers_of, numbers_or_error
from echomq._client.partitioned import open_queues

from .common import Sample, say


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inventory_reads")
    parser.add_argument("--queues", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    result: dict = {"queues": args.queues, "rounds": args.rounds, "wires": {}}
    for wire in (6, 4):
        with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server, \
                connect(server.url, wire=wire) as conn:
            for i in range(args.queues):
                Queue(conn, f"q{i}").enqueue({"n": i})
            queues = open_queues(conn, [f"q{i}" for i in range(args.queues)])
            one_by_one, together, ratio = Sample(), Sample(), Sample()
            for round_no in range(args.rounds):
                say(f"inventory reads: wire {wire}, round {round_no + 1}/{args.rounds}, {args.queues} queues")
                started = time.perf_counter()
                each = [numbers_or_error(queue) for queue in queues]
                middle = time.perf_counter()
                batch = numbers_of(queues)
                ended = time.perf_counter()
                assert each == batch
                one_by_one.add((middle - started) * 1000)
                together.add((ended - middle) * 1000)
                ratio.add((middle - started) / (ended - middle))
            result["wires"][wire] = {"one_by_one_ms": one_by_one.as_dict(), "together_ms": together.as_dict(),
                                     "one_by_one/together": ratio.as_dict()}
            say(f"wire {wire}: one by one {one_by_one.median:.1f} ms, together {together.median:.1f} ms, "
                f"ratio {ratio.median:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
