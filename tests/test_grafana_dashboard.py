"""docs/grafana-dashboard.json, the Grafana dashboard to import (issue 39, item 4): built only on the
metrics `emq dashboard` serves on /metrics. Every metric an expression or a variable names is there,
with every label it groups by, once a worker has run jobs (both wires); and the JSON has what an import
needs (its datasource input, panels with unique ids, a place and a query each)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from echomq import Queue, Worker, WorkerConfig
from echomq.dashboard import Settings, serving
from echomq.worker.heartbeat import HeartbeatConfig
from support.dashboard import own_servers, server  # noqa: F401 (fixtures)
from support.queues import fresh_name
from support.waiting import wait_until
from support.workers import app_of_one_task
from test_worker import running

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b(echomq_[a-z_]+)")
GROUPED = re.compile(r"\bby \(([^)]*)\)\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)")


def queries(dashboard: dict) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]] + \
        [variable["definition"] for variable in dashboard["templating"]["list"]]


def test_the_dashboard_json_has_what_an_import_needs():
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 8
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}" and set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"]), panel["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"queue", "task"}


def test_every_metric_and_label_the_dashboard_names_is_served(conn):
    name = fresh_name("grafana")
    app = app_of_one_task(name, "send", lambda payload: payload.get("fail"), ValueError("no"))
    queue = Queue(conn, name)
    queue.enqueue_many([{}, {}, {"fail": 1}])
    worker = Worker(app, conn, config=WorkerConfig(heartbeat=HeartbeatConfig(100, 2000)))
    with running(worker), serving(conn, Settings(queues=[name])) as url, httpx.Client(base_url=url) as site:
        def scraped() -> dict[str, list[dict[str, str]]]:
            found: dict[str, list[dict[str, str]]] = {}
            for family in text_string_to_metric_families(site.get("/metrics").text):
                for sample in family.samples:
                    found.setdefault(sample.name, []).append(sample.labels)
            return found

        served = wait_until(lambda: (s := scraped()).get("echomq_task_failures_total") and s,
                            what="the worker's summary, its failure included")
    for query in queries(json.loads(DASHBOARD.read_text())):
        named = set(METRIC.findall(query))
        assert named, query
        missing = named - set(served)
        assert not missing, f"{query!r} names {sorted(missing)}, which /metrics does not serve"
        for labels, inner in GROUPED.findall(query):
            for metric in METRIC.findall(inner):
                have = set().union(*map(set, served[metric]))
                wanted = {label.strip() for label in labels.split(",")}
                assert wanted <= have, f"{query!r} groups {metric} by {sorted(wanted - have)}, which it has not"


@pytest.mark.parametrize("query, found", [
    ("sum by (queue, task) (rate(echomq_task_jobs_total{outcome=\"completed\"}[5m]))",
     [("queue, task", "rate(echomq_task_jobs_total{outcome=\"completed\"}[5m])")]),
    ("max(echomq_workers_alive)", []),
])
def test_the_grouping_reader_reads_what_the_test_relies_on(query, found):
    assert GROUPED.findall(query) == found
