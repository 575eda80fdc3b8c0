"""A claim's decode makes its Job without the frozen dataclass's __init__ (core.claimed_job, issue 44
item 3): the same Job, field for field, for every field Job has, so a field added to Job and not to
claimed_job fails here."""

from __future__ import annotations

import dataclasses

from echomq import Queue
from echomq._core.base import Job, claimed_job
from support.queues import fresh_name


def test_claimed_job_is_the_job_the_dataclass_makes():
    made = claimed_job("q", "id-1", None, b"null", 3, {"traceparent": "x"}, "g")
    expected = Job("q", "id-1", None, b"null", 3, {"traceparent": "x"}, "g")
    assert set(vars(made)) == {field.name for field in dataclasses.fields(Job)}
    assert made == expected and repr(made) == repr(expected) and vars(made) == vars(expected)
    assert dataclasses.replace(made, attempt=4) == dataclasses.replace(expected, attempt=4)
    plain = claimed_job("q", "id-2", None, None, 1, None, None)
    assert hash(plain) == hash(Job("q", "id-2", None, None, 1))
    try:
        made.attempt = 5  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("a claimed Job must stay frozen")


def test_claimed_jobs_read_as_enqueued(conn):
    q = Queue(conn, fresh_name("decode"))
    made = q.enqueue_many([{"n": 1}, {"n": 2}, {"n": 3}])
    jobs = q.claim_many(3, 30_000)
    assert [job.id for job in jobs] == [e.id for e in made]
    assert jobs == [Job(q.name, e.id, {"n": n}, f'{{"n":{n}}}'.encode(), 1) for n, e in zip((1, 2, 3), made)]
