"""One hot queue over a local 3-primary cluster (issue 19): the same workload on one plain queue
and on a partitioned one, in one run, each drained by one `emq worker --burst` process.

Reported per run: jobs/s, server CPU µs per job (all nodes, INFO cpu, the drain only: enqueueing is
done before the first reading) and each node's share of that CPU. On a 2-core machine read the
split, not a speed-up: the nodes, the worker and the producer share the cores.

    python -m bench.partitioned [--jobs 30000] [--partitions 6] [--wire 6] [-c 16] [--name bench]

Where the partitions land depends on the name (docs/cluster.md, "Sizing and placement"): each
run prints how many sit on each node; ``bench`` puts 6 at 2/2/2, ``emails`` at 1/1/4.

Also the app the worker runs (``bench.partitioned:app``): a no-op task on BENCH_QUEUE with
BENCH_PARTITIONS partitions.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import echomq
from echomq import PartitionedQueue, Queue, connect
from echomq.local.cluster import LocalCluster
from echomq.admin.inventory import partitions_of
from echomq.local.server import EmbeddedServer
from echomq.worker.tasks import App

ROOT = Path(__file__).resolve().parent.parent

app = App("bench-partitioned")


@app.task(queue=os.environ.get("BENCH_QUEUE", "bench"), max_attempts=1,
          partitions=int(os.environ.get("BENCH_PARTITIONS", "1")))
def noop(payload: Any) -> None:
    pass


def cpu_seconds(node: EmbeddedServer) -> float:
    with node.client() as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drain(cluster: LocalCluster, wire: int, name: str, partitions: int, jobs: int, concurrency: int) -> dict:
    with connect(cluster.url, wire=wire) as conn:
        queue = Queue(conn, name) if partitions == 1 else PartitionedQueue(conn, name, partitions=partitions)
        names = [q.name for q in partitions_of(queue)]
        placed = [sum(cluster.node_for(f"{{{sub}}}") is node for sub in names) for node in cluster.nodes]
        for start in range(0, jobs, 1000):
            queue.enqueue_many([{}] * min(1000, jobs - start))
        before = [cpu_seconds(node) for node in cluster.nodes]
        started = time.perf_counter()
        env = dict(os.environ, BENCH_QUEUE=name, BENCH_PARTITIONS=str(partitions),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        subprocess.run([sys.executable, "-m", "echomq.cli", "worker", "bench.partitioned:app", "--url", cluster.url,
                        "--wire", str(wire), "-c", str(concurrency), "--burst", "--log-level", "warning"],
                       env=env, cwd=ROOT, check=True)
        elapsed = time.perf_counter() - started
        spent = [after - first for after, first in zip((cpu_seconds(node) for node in cluster.nodes), before)]
        assert queue.metrics()["completed"] == jobs and queue.counts().total == 0, "not every job was done once"
    return {"jobs_per_s": jobs / elapsed, "server_usec_per_job": sum(spent) / jobs * 1e6,
            "share": [s / sum(spent) for s in spent], "placed": placed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--wire", type=int, choices=[4, 6], default=6)
    parser.add_argument("-c", "--concurrency", type=int, default=16)
    parser.add_argument("--name", default="bench", help="the queue's name (the partitioned run's is NAME-p)")
    args = parser.parse_args()
    module = echomq.module_path() if args.wire == 6 else None
    with LocalCluster(3, module=module, brand=args.wire) as cluster:
        print(f"{args.jobs} no-op jobs, wire {args.wire}, one worker -c {args.concurrency}, 3 primaries")
        print(f"{'queue':<22} {'jobs/s':>8} {'server µs/job':>14}  {'CPU share per node':<20} partitions per node")
        for name, partitions in ((args.name, 1), (args.name, args.partitions)):
            row = drain(cluster, args.wire, name, partitions, args.jobs, args.concurrency)
            shares = " / ".join(f"{share:.0%}" for share in row["share"])
            label = f"{name} ({partitions} partition{'s' if partitions > 1 else ''})"
            print(f"{label:<22} {row['jobs_per_s']:>8.0f} {row['server_usec_per_job']:>14.1f}  {shares:<20} "
                  + " / ".join(map(str, row["placed"])))


if __name__ == "__main__":
    main()
