"""arq's way in, on EchoMQ (docs/migrating.md, "From arq"; the suite runs it): an ``async def``
task whose context comes first, as arq's does, enqueued and awaited from asyncio code."""

from __future__ import annotations

import echomq

app = echomq.App("crawler", queue="arq")  # arq: WorkerSettings.functions = [download]; one queue


@app.task(max_attempts=5, timeout=30)  # arq: max_tries=5, job_timeout=30
async def download(ctx: echomq.AsyncJobContext, url: str, depth: int = 1) -> dict[str, object]:
    # arq's ctx["job_id"], ctx["job_try"]: ctx.id, ctx.attempt
    return {"url": url, "depth": depth, "try": ctx.attempt}


async def crawl(urls: list[str]) -> list[dict[str, object]]:
    # arq: job = await redis.enqueue_job("download", url, depth=2, _job_id=...)
    jobs = [await download.aenqueue(url, id=f"dl:{url}") for url in urls]
    jobs.append(await download.s("https://example.com/deep", depth=2).aenqueue())
    # arq: await job.result(timeout=10)
    return [await job.get(timeout=10) for job in jobs]
