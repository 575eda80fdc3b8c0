"""RQ's way in, on EchoMQ (docs/migrating.md, "From RQ"; the suite runs it): a function enqueued
with its arguments, per-job options, a job scheduled for later, a job found again by its id."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import echomq

app = echomq.App("words", queue="default")  # RQ: Queue("default", connection=Redis(...))


@app.task
def count_words(text: str) -> int:
    return len(text.split())


def enqueue_some() -> tuple[echomq.JobHandle[int], ...]:
    # RQ: q.enqueue(count_words, "a b c", job_timeout=30, retry=Retry(max=2))
    job = count_words.enqueue("to be or not to be", timeout=30, max_attempts=3)
    # RQ: q.enqueue_in(timedelta(minutes=5), count_words, "...")
    later = count_words.enqueue("in five minutes", delay=timedelta(minutes=5))
    # RQ: q.enqueue_at(datetime(...), count_words, "...")
    at = count_words.enqueue("at noon", eta=datetime(2030, 1, 1, 12, tzinfo=timezone.utc))
    return job, later, at


def fetch(job_id: str) -> echomq.JobHandle[int] | None:
    return app.job(job_id)  # RQ: Job.fetch(job_id, connection=redis)
