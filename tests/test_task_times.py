"""Time per queue and task (issue 39, item 3): what a worker counts of its jobs (echomq/worker/jobstats.py)
and publishes with each heartbeat (echomq/_core/summaries.py), summed over the live workers by the
dashboard (throughput, waited and run p50 / p95 / p99 over the last minutes, failures by error type,
each worker's last error) and exported on /metrics labelled by queue, task and worker. The
arithmetic is checked without a server, then a real worker on both wires."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from echomq import Queue, Worker, WorkerConfig
from echomq._core.summaries import (ERRORS_KEPT, OTHER_ERROR, Buckets, Figures, TaskSummary, by_queue,
                                    decode_summary, encode_summary, over_workers, stats_key)
from echomq._core.workers import record_key
from echomq.admin.workers import list_workers, worker_summaries
from echomq.dashboard import Settings, serving
from echomq.errors import JobTimeout
from echomq.worker import policy
from echomq.worker.heartbeat import HeartbeatConfig
from echomq.worker.jobstats import JobStats, TaskStats, error_type
from support.dashboard import own_servers, server  # noqa: F401 (fixtures)
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import app_of_one_task
from test_worker import running

BOUNDS = (0.1, 1.0, 10.0)


def buckets(*counts: int, total: float = 0.0) -> Buckets:
    return Buckets(BOUNDS, counts, total)


def figures(completed: int = 0, run: Buckets | None = None, errors: dict | None = None) -> Figures:
    return Figures({"completed": completed}, run or buckets(0, 0, 0, 0), buckets(0, 0, 0, 0), errors or {})


# -- the arithmetic (pure) -------------------------------------------------------------------------


def test_quantiles_are_estimated_as_prometheus_does():
    # 10 values: 4 at most 0.1 s, 8 at most 1 s, 10 at most 10 s
    seen = buckets(4, 8, 10, 10, total=12.0)
    assert seen.quantile(0.2) == pytest.approx(0.05)  # rank 2 of the first bucket's 4, from 0
    assert seen.quantile(0.5) == pytest.approx(0.1 + 0.9 * (1 / 4))  # rank 5: the 1st of the next bucket's 4
    assert seen.quantile(0.95) == pytest.approx(1.0 + 9.0 * (1.5 / 2))
    assert buckets(0, 0, 0, 3).quantile(0.5) == 10.0  # past every bound: the highest one
    assert buckets(0, 0, 0, 0).quantile(0.5) is None


def test_figures_add_and_subtract_by_outcome_bucket_and_error_type():
    before = Figures({"completed": 2, "dead": 1}, buckets(1, 2, 3, 3, total=1.0), buckets(0, 0, 0, 0),
                     {"ValueError": 1})
    after = Figures({"completed": 5, "dead": 1}, buckets(2, 5, 6, 6, total=4.0), buckets(0, 0, 0, 0),
                    {"ValueError": 1, "KeyError": 2})
    since = after.minus(before)
    assert since.counts == {"completed": 3, "dead": 0} and since.run == buckets(1, 3, 3, 3, total=3.0)
    assert since.errors == {"KeyError": 2}
    assert since.plus(before) == Figures({"completed": 5, "dead": 1}, after.run, after.waited, after.errors)
    other_bounds = Buckets((0.5,), (1, 1))
    assert after.run.plus(other_bounds) == after.run  # another release's histogram is not summed in


def test_a_summary_reads_back_and_anything_else_reads_as_none():
    task = TaskSummary("emails", "send", figures(3, buckets(1, 2, 3, 3, total=2.5)), figures(1), 42.0)
    text = encode_summary(1000.0, [task], BOUNDS, BOUNDS)
    assert decode_summary(text) == [task]
    for bad in (None, "", "nope", "[]", '{"v": 2}', json.dumps({**json.loads(text), "run_le": [1, 0.5]}),
                text.replace('"run":[1,2,3,3]', '"run":[1,2]')):
        assert decode_summary(bad) == [], bad


def test_over_workers_sums_each_queues_task_and_each_workers_own_rate():
    a = TaskSummary("emails", "send", figures(), figures(60, buckets(10, 50, 60, 60, total=30.0)), 60.0)
    b = TaskSummary("emails", "send", figures(), figures(30, buckets(30, 30, 30, 30, total=1.5)), 30.0)
    c = TaskSummary("emails", "bounce", figures(), figures(0, errors={"KeyError": 4, "ValueError": 9}), 60.0)
    (bounce, send) = over_workers([[a, c], [b]])
    assert (send.task, send.workers, send.per_s, send.span_s) == ("send", 2, 1.0 + 1.0, 60.0)
    assert send.window.run == buckets(40, 80, 90, 90, total=31.5) and send.run_ms(0.5) == pytest.approx(100 + 900 * 5 / 40)
    assert bounce.failures == [("ValueError", 9), ("KeyError", 4)]
    whole = by_queue([bounce, send])["emails"]
    assert whole.task == "" and whole.per_s == 2.0 and whole.window.errors == {"KeyError": 4, "ValueError": 9}


def test_a_failure_is_typed_by_its_exception_class():
    assert error_type(policy.Raised(ValueError("x"))) == "ValueError"
    assert error_type(policy.Raised(JobTimeout(1.5))) == "JobTimeout"
    assert error_type(policy.RetryAsked("later", None)) == "Retry"
    assert error_type(policy.Undecodable(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))) == "UnicodeDecodeError"


def test_error_types_are_bounded_per_task():
    stats = TaskStats()
    for n in range(ERRORS_KEPT + 5):
        stats.failed(f"Error{n}")
    stats.failed("Error0")
    assert len(stats.errors) == ERRORS_KEPT + 1 and stats.errors[OTHER_ERROR] == 5 and stats.errors["Error0"] == 2


def test_the_window_is_the_change_since_the_beat_a_window_ago():
    now = [1000.0]
    stats = JobStats(window_s=60, clock=lambda: now[0])
    send = stats.of("emails", "send")

    def beat(completed: int, after_s: float) -> TaskSummary:
        send.counts["completed"] += completed
        now[0] += after_s
        (found,) = decode_summary(stats.summary())
        return found

    first = beat(5, 15)  # younger than the window: its whole life
    assert (first.window.counts["completed"], first.span_s) == (5, 15.0)
    for _ in range(4):
        beat(10, 15)  # 75 s after the start
    last = beat(10, 15)  # at 90 s: the window runs from the beat at or before 30 s (the one at 30 s)
    assert last.total.counts["completed"] == 55 and last.window.counts["completed"] == 40 and last.span_s == 60.0
    assert len(stats._snapshots) <= 60 / 15 + 2  # snapshots past the window are dropped


# -- a real worker, both wires ---------------------------------------------------------------------


def test_a_workers_times_reach_the_dashboard_and_metrics_per_queue_and_task(conn):
    name = fresh_name("times")
    app = app_of_one_task(name, "send", lambda payload: payload.get("fail"), KeyError("no such mailbox"))
    queue = Queue(conn, name)
    queue.enqueue_many([{}] * 8 + [{"fail": 1}] * 2)
    worker = Worker(app, conn, config=WorkerConfig(concurrency=4, heartbeat=HeartbeatConfig(100, 2000)))
    with running(worker):
        wait_until(lambda: queue.counts().dead == 2 and queue.metrics()["completed"] == 8, what="the jobs to settle")

        def published() -> list[TaskSummary] | None:
            found = worker_summaries(conn, [w for w in list_workers(conn) if w.id == worker.heartbeat.id])
            tasks = found.get(worker.heartbeat.id)
            return tasks if tasks and tasks[0].total.counts["completed"] == 8 else None

        (task,) = wait_until(published, what="a beat to publish the completions")
        assert (task.queue, task.task) == (name, "send") and task.window.counts["dead"] == 2
        assert task.window.errors == {"KeyError": 2} and task.window.run.count == 10 and task.window.waited.count == 10
        with serving(conn, Settings(queues=[name])) as url, httpx.Client(base_url=url) as site:
            overview = site.get("/").text
            row = re.search(rf'<tr data-times="{re.escape(name)}">(.*?)</tr>', overview, re.S).group(1)
            assert re.search(r'data-kind="failures">KeyError 2<', row) and re.search(r'data-kind="failed">2<', row)
            assert re.search(r'data-kind="run_p95">\d+ ms<', row) and re.search(r'data-kind="waited_p50">[\d.]+ m?s<', row)
            per_task = site.get(f"/queues/{name}").text
            assert re.search(r'<tr data-times="send">', per_task) and "Time per task" in per_task
            workers = site.get("/workers").text
            last = re.search(r'data-kind="last_error">(.*?)</td>', workers, re.S).group(1)
            assert f"{name}/send" in last and "KeyError: &#39;no such mailbox&#39;" in last
            assert site.get("/parts/workers").status_code == 200
            scraped = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in
                       text_string_to_metric_families(site.get("/metrics").text) for s in family.samples}
    mine = {"queue": name, "task": "send", "worker": worker.heartbeat.id}

    def at(metric: str, **labels: str) -> tuple[str, tuple]:
        return metric, tuple(sorted({**mine, **labels}.items()))

    assert scraped[at("echomq_task_jobs_total", outcome="completed")] == 8
    assert scraped[at("echomq_task_jobs_total", outcome="dead")] == 2
    assert scraped[at("echomq_task_failures_total", error="KeyError")] == 2
    assert scraped[at("echomq_task_run_seconds_count")] == 10 and scraped[at("echomq_task_waited_seconds_count")] == 10
    assert scraped[("echomq_oldest_waiting_seconds", (("queue", name),))] == 0  # nothing pending
    assert conn.client.exists(stats_key(worker.heartbeat.id), record_key(worker.heartbeat.id)) == 0  # a clean stop
