"""BullMQ's way in, on EchoMQ (docs/migrating.md, "From BullMQ"; the suite runs it): named jobs on
one queue, their options, a flow (FlowProducer), progress, and the queue's events (QueueEvents)."""

from __future__ import annotations

import echomq
from echomq import Backoff, group

app = echomq.App("media", queue="media")  # BullMQ: new Queue("media"); new Worker("media", processor)


@app.task  # BullMQ: the processor's switch on job.name == "resize"
def resize(image: str, width: int, ctx: echomq.JobContext) -> str:
    ctx.progress({"resized": image})  # BullMQ: job.updateProgress(...)
    return f"{image}@{width}"


@app.task
def publish(sizes: list[str], album: str) -> str:  # a flow's parent reads its children's results
    return f"{album}: {', '.join(sizes)}"


def add_jobs() -> tuple[echomq.JobHandle[str], echomq.JobHandle[str]]:
    # queue.add("resize", {image, width}, {attempts: 5, backoff: {type: "exponential", delay: 1000}, priority: 2})
    one = resize.enqueue("cat.png", 640, max_attempts=5, backoff=Backoff(base_ms=1000), priority=2)
    # new FlowProducer().add({name: "publish", queueName: "media", children: [{name: "resize", ...}, ...]})
    album = group(resize.s("a.png", 320), resize.s("b.png", 320)).then(publish.s("holiday")).enqueue()
    return one, album
