"""The no-op handler of each peer, importable by name from its worker processes.

Each peer's library is imported only inside its own function: a peer's venv has that
peer alone.
"""

from __future__ import annotations

import os

import probe


# bullmq (Python port): processor(job, token)
async def bullmq_noop(job, token):
    probe.done((job.data or {}).get("t"))


# arq: functions take ctx first
async def noop(ctx, t=None):
    probe.done(t)


def arq_settings(url: str, queue: str):
    from urllib.parse import urlparse

    from arq.connections import RedisSettings

    parsed = urlparse(url)

    class Settings:
        functions = [noop]
        redis_settings = RedisSettings(host=parsed.hostname, port=parsed.port)
        queue_name = queue
        handle_signals = True

    return Settings


# rq: the default Worker runs each job in a forked child that exits after it, so the
# count is sent before the handler returns (a round trip, next to a fork per job)
def rq_noop(t=None):
    probe.done_now(t)


# saq: functions take ctx first, keyword arguments after
async def saq_noop(ctx, *, t=None):
    probe.done(t)


_celery = {}


def celery_app(url: str):
    if "app" not in _celery:
        from celery import Celery

        app = Celery("peer_tasks", broker=url)
        app.conf.update(task_ignore_result=True, worker_hijack_root_logger=False,
                        broker_connection_retry_on_startup=True, worker_prefetch_multiplier=4)

        @app.task(name="peer_tasks.noop")
        def celery_noop(t=None):
            probe.done(t)

        _celery["app"] = app
    return _celery["app"]


_dramatiq = {}


def dramatiq_setup(url: str, queue: str):
    if "actor" not in _dramatiq:
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        dramatiq.set_broker(RedisBroker(url=url))

        @dramatiq.actor(queue_name=queue, max_retries=0)
        def dramatiq_noop(t=None):
            probe.done(t)

        _dramatiq["actor"] = dramatiq_noop
    return _dramatiq["actor"]


if "BENCH_URL" in os.environ and "BENCH_QUEUE" in os.environ and os.environ.get("BENCH_PEER") == "celery":
    celery_app(os.environ["BENCH_URL"])
