"""`emq worker --metrics-port`: a real worker process's own counters and histograms, scraped over
HTTP after a known workload and checked against what the server counted."""

from __future__ import annotations

import socket

import httpx
from prometheus_client.parser import text_string_to_metric_families

from echomq import Queue
from echomq.local.server import free_port
from support.queues import fresh_name
from support.waiting import wait_until

FAST_TIMERS = ("--promote-interval-ms", "20", "--sweep-interval-ms", "200")


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_workers_metrics_count_its_outcomes(conn, spawn):
    name = fresh_name("m")
    queue = Queue(conn, name)
    queue.enqueue_many([{}, {}])
    queue.enqueue({"fail": 1})  # retried once, then completes
    queue.enqueue({"fail": 99})  # dead after two attempts
    port = free_port()
    proc = spawn(name, "-c", "4", "--metrics-port", str(port), *FAST_TIMERS, env={"EMQ_TEST_MAX_ATTEMPTS": "2"})
    proc.wait_log(f"metrics on http://127.0.0.1:{port}/metrics")
    wait_until(lambda: queue.metrics() == {"completed": 3, "failed": 1}, 20, "three completions and one death")
    mine = {"queue": name, "task": "run"}  # every figure labelled by queue and task (the handler's name)

    def at(metric: str, **labels: str) -> tuple[str, tuple]:
        return metric, tuple(sorted({**mine, **labels}.items()))

    scraped = wait_until(lambda: (s := scrape(port)).get(at("echomq_worker_jobs_total", outcome="dead")) == 1 and s,
                         10, "the worker to record the death")
    outcome = {dict(label)["outcome"]: value for (metric, label), value in scraped.items()
               if metric == "echomq_worker_jobs_total" and dict(label).items() >= mine.items()}
    assert outcome["completed"] == 3 == queue.metrics()["completed"]
    assert outcome["dead"] == 1 == queue.metrics()["failed"]
    assert outcome["retried"] == 2 and outcome["claimed"] == 6 and outcome["lost"] == 0
    # failures by error type: the handler raised RuntimeError three times (two retried, one dead)
    assert scraped[at("echomq_worker_failures_total", error="RuntimeError")] == 3
    assert scraped[("echomq_worker_concurrency", ())] == 4
    assert scraped[("echomq_worker_held", ())] == 0
    # every settled attempt has a run time; each of the four jobs' first claim a wait (default ids)
    assert scraped[at("echomq_worker_job_duration_seconds_count")] == 3 + 2 + 1
    assert scraped[at("echomq_worker_job_duration_seconds_bucket", le="+Inf")] == 6
    assert scraped[at("echomq_worker_job_waited_seconds_count")] == 4
    assert scraped[at("echomq_worker_job_waited_seconds_sum")] >= 0
    buckets = sorted((float(dict(label)["le"]), value) for (metric, label), value in scraped.items()
                     if metric == "echomq_worker_job_waited_seconds_bucket")
    assert [value for _, value in buckets] == sorted(value for _, value in buckets)  # cumulative


def test_a_port_in_use_is_a_clear_error(conn, spawn):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = spawn(fresh_name("m"), "--metrics-port", str(taken.getsockname()[1]))
        assert proc.wait() == 1
        assert "cannot serve metrics on 127.0.0.1:" in proc.log()
