"""The dashboard as an on-call console on a cluster (issue 39), both wires: a job found by its id or
its start whichever primary holds it, a partitioned queue's dead (spread over the primaries) counted,
filtered and reprocessed in bulk, the oldest waiting job's age of queues on every node, and a worker's
times per task on the overview and /metrics."""

from __future__ import annotations

import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from echomq import App, PartitionedQueue, Queue, State, Worker, WorkerConfig, connect
from echomq._core.summaries import stats_key
from echomq._core.workers import record_key
from echomq.dashboard import Settings, serving
from echomq.worker.heartbeat import HeartbeatConfig
from echomq._protocol.keys import slot_of
from support.cluster import names_on_every_node, slot_owner
from support.waiting import wait_until
from test_worker import running

pytestmark = pytest.mark.timeout(120)


def test_find_filter_act_and_time_across_the_primaries(cluster, wire):
    names = names_on_every_node(cluster, per_node=1)
    with connect(cluster.url, wire=wire) as conn:
        queues = [Queue(conn, name) for name in names]
        for n, queue in enumerate(queues):
            queue.enqueue({}, id=f"{queue.name}-job")
            queue.enqueue_many([{}] * (n + 1))
        split = PartitionedQueue(conn, f"{names[0]}-split", partitions=6)
        split.enqueue_many([{"n": n} for n in range(12)])
        for part in split.partitions:
            while (job := part.claim(60_000)) is not None:
                part.fail(job, "TimeoutError: slow" if job.id[-1] in "02468ACEGIKMOQSUWYacegikmoqsuwy" else "bad",
                          max_attempts=1)
        slow = sum(1 for part in split.partitions for job_id, _ in part.ids(State.DEAD, count=100)
                   if part.job(job_id)["last_error"].startswith("TimeoutError"))
        # spread over the nodes
        assert len({slot_owner(cluster.nodes[0], slot_of(part.name)) for part in split.partitions}) > 1

        with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
            for queue in queues:  # each on its own primary
                found = site.get("/search", params={"q": f"{queue.name}-job"})
                assert found.headers["location"] == f"/queues/{queue.name}/job?id={queue.name}-job"
            assert len(re.findall(r'/job\?id=', site.get("/search", params={"q": "spread-"}).text)) >= len(queues)

            overview = site.get("/").text
            for queue in queues:
                row = re.search(rf'<tr data-queue="{re.escape(queue.name)}">(.*?)</tr>', overview, re.S).group(1)
                assert re.search(r'data-kind="oldest">\d+ m?s<', row), row

            listed = site.get(f"/queues/{split.name}", params={"state": "dead", "error": "timeouterror"}).text
            assert f"{slow} found among" in listed
            confirm = site.get(f"/queues/{split.name}/bulk/reprocess", params={"error": "timeouterror"}).text
            assert f"<b>{slow}</b> dead job(s) match" in confirm
            form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm))
            done = site.post(f"/queues/{split.name}/bulk/reprocess", data=form, follow_redirects=True)
            assert f"reprocessed {slow} of {slow} dead job(s)" in done.text
            assert split.counts().dead == 12 - slow and split.counts().pending == slow

        app = App()

        @app.task(queue=names[1])
        def deliver(payload):
            return None

        worker = Worker(app, conn, config=WorkerConfig(heartbeat=HeartbeatConfig(100, 2000)))
        with running(worker), serving(conn, Settings(queues=[names[1]])) as url, httpx.Client(base_url=url) as site:
            wait_until(lambda: queues[1].counts().pending == 0, what="the worker to drain its queue")

            def scraped() -> dict:
                return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in
                        text_string_to_metric_families(site.get("/metrics").text) for s in family.samples}

            key = ("echomq_task_jobs_total", (("outcome", "completed"), ("queue", names[1]), ("task", "deliver"),
                                              ("worker", worker.heartbeat.id)))
            wait_until(lambda: scraped().get(key) == 3, what="the worker's summary on /metrics")
            assert scraped()[("echomq_oldest_waiting_seconds", (("queue", names[1]),))] == 0
            assert '<tr data-times="deliver">' in site.get(f"/queues/{names[1]}").text
        # a clean stop deletes the record and the summary (a cluster pipeline's DEL takes one key)
        assert conn.client.exists(record_key(worker.heartbeat.id)) == conn.client.exists(stats_key(worker.heartbeat.id)) == 0
