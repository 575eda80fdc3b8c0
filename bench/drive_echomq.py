"""EchoMQ driven as bench/peers/drive.py drives a peer, so every queue is measured one way:

    drive_echomq.py worker  WIRE/MODE URL QUEUE          one worker process
    drive_echomq.py enqueue WIRE/MODE URL QUEUE N        N no-op jobs, one enqueue_many; JSON
    drive_echomq.py stamped WIRE/MODE URL QUEUE M LO HI  spaced, stamped jobs (pick-up latency)
    drive_echomq.py delayed WIRE/MODE URL QUEUE M LO HI D  spaced jobs scheduled D ms ahead, stamped with
                                                         their due time (lateness)

MODE is how the worker runs: ``emq`` = ``emq worker bench.echomq_tasks:app`` with its
defaults (the real thing); ``emq-idleN`` = the same with ``--idle-max-ms N``; ``emq-noresult`` = the
same keeping no results (plain COMPLETE, as the loops settle: the worker's own cost beside theirs); ``emq-record`` = the
same with the queue switched to the record layout (a key ``done:<id>`` a result, as 0.2.0 kept them: the
fields layout's before, docs/spec.md §12); ``loop`` = a minimal claim -> run -> complete loop, one job a
round trip each way; ``batch`` = the same loop with pipelined claim_many/complete_many
(10 at a time); ``batch-kept`` = ``batch`` keeping each no-op's result (None) as the worker does
by default (PUBLISHES, the worker's retention), so the server does the same work for both;
``fused`` = ``batch`` with each batch's completes and the next claims in one
Queue.settle_and_claim. The loops show what the worker adds over the bare verbs.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from echomq import Queue, connect
from echomq._protocol.results import DEFAULT_RESULT_TTL_S, encode_result
from echomq._protocol.serializers import JSON

from .peers import probe
from .peers.probe import gaps

LEASE_MS = 30_000
BATCH = 10


def fused_worker(wire: int, url: str, queue: str, batch: int) -> None:
    """The batched loop with each batch's completes and the next claims sent together by
    Queue.settle_and_claim: one round trip per batch on wire 6, two on wire 4."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    q = Queue(connect(url, wire=wire), queue)
    jobs: list = []
    while not stop:
        _, jobs = q.settle_and_claim([q.complete_call(job) for job in jobs], batch, LEASE_MS)
        if not jobs:
            time.sleep(0.001)
            continue
        for job in jobs:
            probe.done(job.payload.get("t") if isinstance(job.payload, dict) else None)


def loop_worker(wire: int, url: str, queue: str, batch: int, keep_ms: int | None = None) -> None:
    """Claim, run the no-op, complete; sleep 1 ms while the queue is empty. With ``keep_ms``, each
    batch is settled as the worker settles it: its None results kept that long (PUBLISHES)."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    q = Queue(connect(url, wire=wire), queue)
    nothing = encode_result(JSON, None, None)
    while not stop:
        jobs = q.claim_many(batch, LEASE_MS) if batch > 1 else [j for j in [q.claim(LEASE_MS)] if j]
        if not jobs:
            time.sleep(0.001)
            continue
        for job in jobs:
            probe.done(job.payload.get("t") if isinstance(job.payload, dict) else None)
        if keep_ms:
            q.settle_many(q.completion_calls([part for job in jobs for part in (job.id, job.token, nothing)], keep_ms))
        elif batch > 1:
            q.complete_many(jobs)
        else:
            q.complete(jobs[0])


def emq_worker_argv(wire: int, url: str, queue: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-c", "import sys; from echomq.cli import main; sys.exit(main())",
            "worker", "bench.echomq_tasks:app", "--url", url, "--wire", str(wire), "-q", queue,
            "--log-level", "warning", *extra]


def main(argv: list[str]) -> int:
    what, system, url, queue = argv[:4]
    wire_text, _, mode = system.partition("/")
    wire = int(wire_text)
    os.environ["BENCH_URL"] = url
    os.environ["BENCH_QUEUE"] = queue
    if what == "worker":
        if mode.startswith("emq"):
            # emq-idleN: the worker with its idle back-off capped at N ms (default 1000)
            extra = ["--idle-max-ms", mode[len("emq-idle"):]] if mode.startswith("emq-idle") else []
            if mode == "emq-noresult":
                os.environ["BENCH_RESULT_TTL"] = "0"
            if mode == "emq-record":  # the results as 0.2.0 kept them, a key each: the fields layout's before
                Queue(connect(url, wire=wire), queue).set_result_layout("record")
            os.execv(sys.executable, emq_worker_argv(wire, url, queue, extra))
        if mode == "fused":
            fused_worker(wire, url, queue, BATCH)
        else:
            keep_ms = int(DEFAULT_RESULT_TTL_S * 1000) if mode == "batch-kept" else None
            loop_worker(wire, url, queue, BATCH if mode.startswith("batch") else 1, keep_ms)
        return 0
    q = Queue(connect(url, wire=wire), queue)
    if what == "enqueue":
        n = int(argv[4])
        t = {"start": time.time()}
        q.enqueue_many([{}] * n)  # in its own shape: ENQUEUES of ENQUEUES_SIZE, all in one streamed round trip
        t["end"] = time.time()
    elif what == "stamped":
        t = {"start": time.time()}
        for pause in gaps(int(argv[4]), float(argv[5]), float(argv[6])):
            time.sleep(pause)
            q.enqueue({"t": time.time()})
        t["end"] = time.time()
    elif what == "delayed":
        t = {"start": time.time()}
        delay_ms = int(argv[7])
        for pause in gaps(int(argv[4]), float(argv[5]), float(argv[6])):
            time.sleep(pause)
            q.schedule({"t": time.time() + delay_ms / 1000}, delay_ms)  # t: its due time
        t["end"] = time.time()
    else:
        raise SystemExit(__doc__)
    print(json.dumps(t), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
