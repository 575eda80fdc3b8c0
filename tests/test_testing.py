"""echomq.testing: the pytest plugin's fixtures, drain() and assert_enqueued(), on real servers."""

from __future__ import annotations

import pytest

from echomq import App, Backoff, Delay, Queue
from echomq.testing import ANY, assert_enqueued, drain, enqueued
from support.queues import fresh_name

pytest_plugins = ["pytester"]


def test_the_plugin_gives_a_clean_branded_server_per_test_on_either_wire(pytester):
    pytester.makepyfile(
        """
        import pytest
        import echomq
        from echomq.testing import assert_enqueued, drain

        app = echomq.App()

        @app.task(queue="emails")
        def send(payload):
            return payload

        @pytest.mark.parametrize("echomq_wire", [4, 6])
        @pytest.mark.parametrize("round", [1, 2])
        def test_enqueue_then_drain(echomq_connection, echomq_wire, round):
            assert echomq_connection.wire == echomq_wire
            emails = echomq.Queue(echomq_connection, "emails")
            assert emails.counts().total == 0  # flushed after the previous test
            emails.enqueue({"to": "ada"}, id="welcome")
            assert_enqueued(emails, {"to": "ada"}, id="welcome")
            assert drain(app, emails).completed == 1
            assert_enqueued(emails, count=0)
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_drain_runs_jobs_in_process_until_the_queue_is_empty_retries_included(conn):
    name, seen = fresh_name("d"), []
    app = App()

    @app.task(queue=name, max_attempts=3, backoff=Backoff(base_ms=20, max_ms=20, jitter=0.0))
    def handler(payload, ctx):
        seen.append((payload["n"], ctx.attempt))
        if payload["n"] == 0 and ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        if payload["n"] == 1 and ctx.attempt == 1:
            raise Delay(30)

    queue = Queue(conn, name)
    queue.enqueue_many([{"n": n} for n in range(5)])
    tally = drain(app, queue)
    assert (tally.claimed, tally.completed, tally.retried, tally.delayed) == (7, 5, 1, 1)
    assert sorted(seen) == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (3, 1), (4, 1)]
    assert queue.counts().total == 0


def test_drain_gives_up_after_its_timeout_on_a_job_due_far_later(conn):
    name = fresh_name("d")
    app = App()
    app.handler(name, lambda payload: None)
    queue = Queue(conn, name)
    queue.schedule({}, 600_000)
    with pytest.raises(TimeoutError, match=name):
        drain(app, queue, timeout_s=0.3)
    assert queue.counts().scheduled == 1


def test_assert_enqueued_matches_payload_id_state_and_count(conn):
    queue = Queue(conn, fresh_name("a"))
    queue.enqueue({"to": "ada"}, id="a1")
    queue.enqueue({"to": "bob"}, id="b1")
    queue.schedule({"to": "ada"}, 600_000, id="a2")
    assert [row["id"] for row in assert_enqueued(queue, {"to": "ada"})] == ["a1", "a2"]
    assert_enqueued(queue, {"to": "ada"}, count=2)
    assert_enqueued(queue, {"to": "ada"}, state="scheduled", count=1)
    assert_enqueued(queue, ANY, count=3)
    assert_enqueued(queue, {"to": "cy"}, count=0)
    assert [row["payload"] for row in enqueued(queue)] == [{"to": "ada"}, {"to": "bob"}, {"to": "ada"}]
    with pytest.raises(AssertionError, match=r"expected at least one job\(s\) with payload \{'to': 'cy'\}.*found 0"):
        assert_enqueued(queue, {"to": "cy"})
    with pytest.raises(AssertionError, match="expected 1 job.*found 2.*a1 \\(pending\\)"):
        assert_enqueued(queue, {"to": "ada"}, count=1)


def test_drain_with_one_slot_claims_each_retry_as_soon_as_it_is_due(conn):
    """One handler slot: a retry's promote wakes the worker, whose one claim may probe the lanes first
    (the kinds take turns). The flat job must still be claimed then, not left until a block's timeout."""
    name, attempts = fresh_name("d"), []
    app = App()

    @app.task(queue=name, max_attempts=6, backoff=Backoff(base_ms=10, max_ms=10, jitter=0.0))
    def handler(payload, ctx):
        attempts.append(ctx.attempt)
        if ctx.attempt < 6:
            raise RuntimeError("not yet")

    queue = Queue(conn, name)
    queue.enqueue({})
    tally = drain(app, queue, timeout_s=10)  # a stranded retry waits for the 30 s block timeout
    assert (tally.completed, tally.retried, attempts) == (1, 5, [1, 2, 3, 4, 5, 6])
