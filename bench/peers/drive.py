"""One peer job queue, driven the same way as EchoMQ's own driver (bench/drive_echomq.py).

Run by that peer's venv (bench/.peers-venv/<peer>/bin/python), never by EchoMQ's:

    drive.py worker  PEER URL QUEUE             one worker process, the peer's defaults but one OS process
    drive.py enqueue PEER URL QUEUE N           N no-op jobs through the peer's fastest enqueue; prints JSON
    drive.py stamped PEER URL QUEUE M LO HI     M jobs one at a time, spaced by gaps(M, LO, HI) ms, each
                                                carrying its enqueue time; the handler records its pick-up latency

Every handler is a no-op that calls ``probe.done`` (see probe.py). The settings used
are printed by ``drive.py config PEER`` and recorded in the results.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import peer_tasks  # noqa: E402  (the handlers, importable by name from worker processes)
from probe import gaps  # noqa: E402

CONFIG = {
    "bullmq": "Python port; Worker concurrency 1 (its default); Queue.addBulk",
    "bullmq-node": "Node; Worker concurrency 1 (its default); Queue.addBulk",
    "arq": "run_worker, max_jobs 10 and poll_delay 0.5 s (its defaults); enqueue_job, 100 in flight",
    "rq": "Worker (forks a work horse per job, its default); Queue.enqueue_many, pipelined",
    "saq": "Worker concurrency 10 (its default); Queue.enqueue, 100 in flight",
    "celery": "worker --pool solo (one process, one job at a time), no gossip/mingle/heartbeat; "
              "Redis broker, no result backend; apply_async per job",
    "dramatiq": "Worker with 8 threads (its default per process), 1 process; RedisBroker; send per job",
}


def _port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379


# -- workers ------------------------------------------------------------------------
def worker(peer: str, url: str, queue: str) -> None:
    os.environ["BENCH_URL"] = url
    os.environ["BENCH_QUEUE"] = queue
    if peer == "bullmq":
        from bullmq import Worker

        async def main():
            w = Worker(queue, peer_tasks.bullmq_noop,
                       {"connection": url, "concurrency": int(os.environ.get("BENCH_CONCURRENCY", "1"))})
            await asyncio.Event().wait()
            await w.close()

        asyncio.run(main())
    elif peer == "arq":
        from arq.worker import run_worker

        run_worker(peer_tasks.arq_settings(url, queue))
    elif peer == "rq":
        from redis import Redis
        from rq import Queue, Worker

        conn = Redis.from_url(url)
        Worker([Queue(queue, connection=conn)], connection=conn).work(logging_level="WARNING")
    elif peer == "saq":
        from saq import Queue, Worker

        async def main():
            q = Queue.from_url(url, name=queue)
            await Worker(q, functions=[peer_tasks.saq_noop]).start()

        asyncio.run(main())
    elif peer == "celery":
        app = peer_tasks.celery_app(url)
        app.worker_main(["worker", "--pool=solo", "-Q", queue, "--without-gossip", "--without-mingle",
                         "--without-heartbeat", "--loglevel=WARNING"])
    elif peer == "dramatiq":
        import dramatiq

        peer_tasks.dramatiq_setup(url, queue)
        w = dramatiq.Worker(dramatiq.get_broker(), worker_threads=8, queues={queue})
        w.start()
        while True:
            time.sleep(3600)
    else:
        raise SystemExit(f"unknown peer {peer!r}")


# -- producers ------------------------------------------------------------------------
async def _gather_in_flight(make, n: int, in_flight: int = 100) -> None:
    for start in range(0, n, in_flight):
        await asyncio.gather(*(make(start + i) for i in range(min(in_flight, n - start))))


def enqueue(peer: str, url: str, queue: str, n: int, spacing: list[float] | None = None) -> dict:
    """Enqueue ``n`` no-op jobs; with ``spacing``, one job per gap, one at a time, each stamped."""
    os.environ["BENCH_URL"] = url
    os.environ["BENCH_QUEUE"] = queue
    t = {}
    gap = spacing is not None
    if spacing is not None:
        n = len(spacing)

    def each(send):
        """Stamped mode: one job at a time, spaced, each carrying its enqueue time."""
        for pause in spacing:
            time.sleep(pause)
            send(time.time())

    if peer == "bullmq":
        from bullmq import Queue

        async def main():
            q = Queue(queue, {"connection": url})
            await q.waitUntilReady() if hasattr(q, "waitUntilReady") else None
            t["start"] = time.time()
            if not gap:
                for start in range(0, n, 1000):
                    await q.addBulk([{"name": "noop", "data": {}} for _ in range(min(1000, n - start))])
            else:
                for pause in spacing:
                    await asyncio.sleep(pause)
                    await q.add("noop", {"t": time.time()})
            t["end"] = time.time()
            await q.close()

        asyncio.run(main())
    elif peer == "arq":
        from arq import create_pool
        from arq.connections import RedisSettings

        async def main():
            host, port = _port(url)
            pool = await create_pool(RedisSettings(host=host, port=port), default_queue_name=queue)
            t["start"] = time.time()
            if not gap:
                await _gather_in_flight(lambda i: pool.enqueue_job("noop"), n)
            else:
                for pause in spacing:
                    await asyncio.sleep(pause)
                    await pool.enqueue_job("noop", time.time())
            t["end"] = time.time()
            await pool.aclose() if hasattr(pool, "aclose") else await pool.close()

        asyncio.run(main())
    elif peer == "rq":
        from redis import Redis
        from rq import Queue

        q = Queue(queue, connection=Redis.from_url(url))
        t["start"] = time.time()
        if not gap:
            for start in range(0, n, 1000):
                q.enqueue_many([Queue.prepare_data(peer_tasks.rq_noop) for _ in range(min(1000, n - start))])
        else:
            each(lambda stamp: q.enqueue(peer_tasks.rq_noop, stamp))
        t["end"] = time.time()
    elif peer == "saq":
        from saq import Queue

        async def main():
            q = Queue.from_url(url, name=queue)
            await q.connect() if hasattr(q, "connect") else None
            t["start"] = time.time()
            if not gap:
                await _gather_in_flight(lambda i: q.enqueue("saq_noop"), n)
            else:
                for pause in spacing:
                    await asyncio.sleep(pause)
                    await q.enqueue("saq_noop", t=time.time())
            t["end"] = time.time()
            await q.disconnect()

        asyncio.run(main())
    elif peer == "celery":
        app = peer_tasks.celery_app(url)
        task = app.tasks["peer_tasks.noop"]
        with app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=3)  # connect before the clock starts
            t["start"] = time.time()
            if not gap:
                for _ in range(n):
                    task.apply_async(queue=queue, producer=producer)
            else:
                each(lambda stamp: task.apply_async((stamp,), queue=queue, producer=producer))
            t["end"] = time.time()
    elif peer == "dramatiq":
        actor = peer_tasks.dramatiq_setup(url, queue)
        t["start"] = time.time()
        if not gap:
            for _ in range(n):
                actor.send()
        else:
            each(lambda stamp: actor.send(stamp))
        t["end"] = time.time()
    else:
        raise SystemExit(f"unknown peer {peer!r}")
    return t


def main(argv: list[str]) -> int:
    what, peer = argv[0], argv[1]
    if what == "config":
        print(json.dumps({"config": CONFIG.get(peer, "")}))
    elif what == "worker":
        worker(peer, argv[2], argv[3])
    elif what == "enqueue":
        print(json.dumps(enqueue(peer, argv[2], argv[3], int(argv[4]))), flush=True)
    elif what == "stamped":
        spacing = gaps(int(argv[4]), float(argv[5]), float(argv[6]))
        print(json.dumps(enqueue(peer, argv[2], argv[3], 0, spacing=spacing)), flush=True)
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
