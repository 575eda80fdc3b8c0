"""The no-op task `emq worker bench.echomq_tasks:app` runs in the benchmarks (queue from BENCH_QUEUE;
BENCH_RESULT_TTL, seconds, when set: how long results are kept, 0 none, as the bare loops keep none)."""

from __future__ import annotations

import os

from echomq._protocol.results import DEFAULT_RESULT_TTL_S
from echomq.worker.tasks import App

from .peers import probe

app = App("bench")


@app.task(queue=os.environ.get("BENCH_QUEUE", "bench"), max_attempts=1,
          result_ttl=float(os.environ.get("BENCH_RESULT_TTL", DEFAULT_RESULT_TTL_S)))
def noop(payload):
    probe.done(payload.get("t") if isinstance(payload, dict) else None)
