"""The no-op task `emq worker bench.echomq_tasks:app` runs in the benchmarks (queue from BENCH_QUEUE)."""

from __future__ import annotations

import os

from echomq.tasks import App

from .peers import probe

app = App("bench")


@app.task(queue=os.environ.get("BENCH_QUEUE", "bench"), max_attempts=1)
def noop(payload):
    probe.done(payload.get("t") if isinstance(payload, dict) else None)
