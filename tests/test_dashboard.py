"""`emq dashboard` over HTTP against real servers on both wires: every page, paging, the
actions and their refusals (nothing written), auth, read-only, and /metrics against counts()."""

from __future__ import annotations

import base64
import os
import re
import signal
import socket
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from echomq import Flow, PartitionedQueue, Queue
from echomq.cli import main
from echomq.dashboard import Settings, check_binding, serving
from echomq.dashboard.auth import authorized
from echomq.dashboard.rates import Point, Sample, rate_series, svg_chart
from echomq.errors import ConfigurationError
from echomq.worker.heartbeat import Heartbeat
from echomq.local.server import free_port
from support.dashboard import PENDING, ids_on, own_servers, secret_of, server, stock, stocked  # noqa: F401 (fixtures)
from support.dataset import queue_unchanged, unchanged
from support.processes import ROOT, reap
from support.queues import fresh_name, take
from support.waiting import server_ms, wait_until

TOKEN = "s3cret-token-of-the-tests"  # 16 characters or more (echomq.dashboard.auth.MIN_TOKEN_CHARS)


@pytest.fixture
def site(conn, stocked):
    """Started after the stock is in, so its first queue discovery finds it."""
    with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as client:
        yield client


def test_every_page_loads_and_shows_the_queue(site, stocked):
    name = stocked.queue.name
    overview = site.get("/")
    assert overview.status_code == 200 and f'href="/queues/{name}"' in overview.text
    row = re.search(rf'<tr data-queue="{re.escape(name)}">(.*?)</tr>', overview.text, re.S).group(1)
    assert re.findall(r'data-state="(\w+)">(\d+)<', row) == [("pending", str(PENDING)), ("active", "1"),
                                                             ("scheduled", "1"), ("dead", "2")]
    assert "<svg" in overview.text and "Workers" in overview.text
    assert site.get("/parts/overview").status_code == 200
    assert site.get("/workers").status_code == 200
    for state, expected in (("active", [stocked.active]), ("scheduled", [stocked.scheduled]),
                            ("dead", stocked.dead)):
        page = site.get(f"/queues/{name}", params={"state": state})
        assert page.status_code == 200 and sorted(ids_on(page.text)) == sorted(expected), state
    dead = site.get(f"/queues/{name}/job", params={"id": stocked.dead[0]})
    assert dead.status_code == 200 and "ValueError: bad row" in dead.text and "&#34;doomed&#34;" in dead.text
    assert ">Reprocess</button>" in dead.text
    assert '<pre id="traceback" class="traceback">Traceback (most recent call last):\n  File &#34;jobs.py&#34;, line 12' \
        in dead.text
    for field in ("created", "started", "failed"):  # the row's times, as people read them
        assert re.search(rf'<td id="{field}">\d+s ago <small>\(\d{{4}}-\d\d-\d\d [0-9:.]+ UTC, server clock', dead.text)
    assert '<td class="error" id="last_error">ValueError: bad row</td>' in dead.text
    assert ">Remove</button>" in dead.text and ">Cancel</button>" not in dead.text
    held = site.get(f"/queues/{name}/job", params={"id": stocked.active})
    assert "lease</th><td>ends in" in held.text and ">Reprocess</button>" not in held.text
    assert ">Cancel</button>" in held.text and ">Remove</button>" not in held.text
    waiting = site.get(f"/queues/{name}/job", params={"id": stocked.pending[0]}).text
    assert ">Remove</button>" in waiting and 'id="failed"' not in waiting and 'id="last_error"' not in waiting
    assert ">Purge dead</button>" in site.get(f"/queues/{name}").text


def test_a_completed_job_shows_its_result_within_its_retention(conn):
    queue = Queue(conn, fresh_name("done"))
    done_id = queue.enqueue({"order": 42}).id
    queue.publish(take(queue), {"charged": 1999}, retention_ms=600_000)
    with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as site:
        done = site.get(f"/queues/{queue.name}/job", params={"id": done_id})
        assert done.status_code == 200, done.text
        assert '<td id="state">completed</td>' in done.text and "s more <small>(the task's result_ttl)" in done.text
        assert re.search(r'<pre id="result">\{\s*&#34;charged&#34;: 1999\s*\}</pre>', done.text), done.text
        # its finish time once, named for what it is (it was labelled "last failure" and shown raw again)
        assert done.text.count("<th>finished</th>") == 1 and "server clock: completed)" in done.text
        assert "last failure" not in done.text
        assert site.get(f"/queues/{queue.name}/job", params={"id": "never-was"}).status_code == 404


def test_a_completed_record_kept_as_a_field_is_shown_and_found(conn):
    """The fields layout (docs/spec.md §12), written by hand as PUBLISH writes it: the job page shows
    the record, what is left of its retention and its finish time; the search finds it by its id
    and by its start."""
    queue = Queue(conn, fresh_name("done"))
    queue.enqueue({"keeps": "the queue known"})
    client = conn.client
    now = server_ms(client)
    client.execute_command("HSETEX", queue.keys.done_hash, "PXAT", now + 600_000, "FIELDS", 1, f"{queue.name}-f",
                           b'3,%d,%d,,{"charged":1999}' % (now, now - 5))
    with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as site:
        done = site.get(f"/queues/{queue.name}/job", params={"id": f"{queue.name}-f"})
        assert done.status_code == 200, done.text
        assert '<td id="state">completed</td>' in done.text and "s more <small>(the task's result_ttl)" in done.text
        assert re.search(r'<pre id="result">\{\s*&#34;charged&#34;: 1999\s*\}</pre>', done.text), done.text
        assert done.text.count("<th>finished</th>") == 1
        found = site.get("/search", params={"q": f"{queue.name}-f"})
        assert found.status_code == 303 and found.headers["location"] == f"/queues/{queue.name}/job?id={queue.name}-f"
        assert ids_on(site.get("/search", params={"q": f"{queue.name}-"}).text) == [f"{queue.name}-f"]


def test_a_partitioned_queue_is_one_row_and_one_queue(conn):
    stocked = stock(PartitionedQueue(conn, fresh_name("dash"), partitions=3))
    queue, name = stocked.queue, stocked.queue.name
    with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as site:
        row = re.search(rf'<tr data-queue="{re.escape(name)}">(.*?)</tr>', site.get("/").text, re.S).group(1)
        assert "(3 partitions)" in row and re.findall(r'data-state="(\w+)">(\d+)<', row) == [
            ("pending", str(PENDING)), ("active", "1"), ("scheduled", "1"), ("dead", "2")]  # summed
        assert f"{name}~" not in site.get("/").text  # the partitions are not queues of their own here
        pages = [ids_on(site.get(f"/queues/{name}", params={"page": page}).text) for page in (1, 2)]
        assert sorted(pages[0] + pages[1]) == sorted(stocked.pending)
        job = site.get(f"/queues/{name}/job", params={"id": stocked.dead[0]})
        assert job.status_code == 200 and "ValueError: bad row" in job.text
        flows = site.get(f"/queues/{name}", params={"state": "flow_pending"})  # no lanes or flows here
        assert flows.status_code == 400 and "one of pending, active, scheduled, dead" in flows.text
        secret = secret_of(site.get(f"/queues/{name}").text)
        site.post(f"/queues/{name}/pause", data={"secret": secret})
        assert all(c.paused for c in queue.counts_by_partition().values())


def test_job_lists_page_through_a_state(site, stocked):
    name = stocked.queue.name
    first = ids_on(site.get(f"/queues/{name}").text)
    second_page = site.get(f"/queues/{name}", params={"state": "pending", "page": 2}).text
    second = ids_on(second_page)
    assert len(first) == 25 and len(second) == PENDING - 25 and not set(first) & set(second)
    assert first + second == stocked.pending  # lowest score first, then FIFO by id
    assert "page 2 of 2" in second_page and 'rel="prev"' in second_page


@pytest.mark.parametrize("path, params, status, text", [
    ("/queues/no-such-queue-here", {}, 404, "no queue"),
    ("/queues/QUEUE", {"state": "finished"}, 400, "bad state"),
    ("/queues/QUEUE", {"page": "0"}, 400, "bad page"),
    ("/queues/QUEUE/job", {"id": "no-such-id"}, 404, "a completed job is kept only for its task&#39;s result_ttl"),
])
def test_bad_addresses_are_clear_errors(site, stocked, path, params, status, text):
    answer = site.get(path.replace("QUEUE", stocked.queue.name), params=params)
    assert answer.status_code == status and text in answer.text


def test_the_queue_page_shows_lane_and_flow_jobs_when_there_are_any(site, stocked):
    queue, name = stocked.queue, stocked.queue.name
    assert 'id="grouped"' not in site.get(f"/queues/{name}").text  # flat only: the page as before
    queue.enqueue({"n": 0}, group="g")
    queue.enqueue({"n": 1}, group="g")
    (running,) = queue.claim_lanes(1, 60_000)
    queue.enqueue_flow("p", children=["a", "b"], id="root")
    for page in (f"/queues/{name}", f"/parts/queues/{name}"):
        shown = dict(re.findall(r'data-count="(\w+)">(\d+)<', site.get(page).text))
        assert shown == {"lane_pending": "1", "lane_active": "1", "flow_waiting": "1", "flow_pending": "2",
                         "flow_active": "0", "flow_scheduled": "0"}, page
    # each set of lane and flow jobs is listed as a state's jobs are, with its lease or due time
    (kid,) = queue.flow_claim(1, 60_000)
    listed = {state: site.get(f"/queues/{name}", params={"state": state}).text
              for state in ("lane_active", "flow_waiting", "flow_pending", "flow_active", "flow_scheduled")}
    assert ids_on(listed["lane_active"]) == [running.id] and ids_on(listed["flow_waiting"]) == ["root"]
    assert len(ids_on(listed["flow_pending"])) == 1 and ids_on(listed["flow_active"]) == [kid.id]
    assert "lease ends in" in listed["flow_active"] and "No flow scheduled jobs." in listed["flow_scheduled"]
    assert "flow active: 1 job(s)" in listed["flow_active"]
    assert site.get(f"/queues/{name}", params={"state": "lane_pending"}).status_code == 400  # by group, above


def test_the_queue_page_lists_its_groups_and_pauses_and_resumes_one(site, stocked, monkeypatch):
    queue, name = stocked.queue, stocked.queue.name
    assert 'id="groups"' not in site.get(f"/queues/{name}").text  # no lane jobs: no groups table
    for group in ("b", "a", "a", "c"):
        queue.enqueue({}, group=group)
    queue.set_lane_limit(2, "a")
    queue.claim_lanes(10, 60_000)  # a runs 2 of its 2, b and c 1 each
    queue.enqueue({}, group="a")
    queue.pause_group("c")
    for page in (f"/queues/{name}", f"/parts/queues/{name}"):
        html = site.get(page).text
        rows = re.findall(r'<tr data-group="(\w+)"><td class="id">\w+</td><td class="n">(\d+)</td><td class="n">(\d+)'
                          r'</td>\s*<td class="n">(\d+)</td><td>(.*?)</td>', html)
        assert [(g, int(w), int(r), int(k), "paused" in p) for g, w, r, k, p in rows] == [
            ("a", 1, 2, 2, False), ("b", 0, 1, 1, False), ("c", 0, 1, 1, True)], page
        assert '<h3 id="groups">groups: 3</h3>' in html
    secret = secret_of(site.get(f"/queues/{name}").text)
    paused = site.post(f"/queues/{name}/groups/pause", data={"secret": secret, "group": "a"}, follow_redirects=True)
    assert paused.status_code == 200 and "group a paused" in paused.text and queue.groups()["a"].paused
    resumed = site.post(f"/queues/{name}/groups/resume", data={"secret": secret, "group": "a"}, follow_redirects=True)
    assert "group a resumed" in resumed.text and not queue.groups()["a"].paused
    again = site.post(f"/queues/{name}/groups/resume", data={"secret": secret, "group": "a"}, follow_redirects=True)
    assert "group a resumed (it was not paused)" in again.text
    with queue_unchanged(queue):
        bad = site.post(f"/queues/{name}/groups/pause", data={"secret": secret, "group": "bad{group}"})
        assert bad.status_code == 400 and "bad group" in bad.text
        assert site.post(f"/queues/{name}/groups/pause", data={"secret": secret}).status_code == 400
        stale = site.post(f"/queues/{name}/groups/pause", data={"secret": "from-another-site", "group": "a"})
        assert stale.status_code == 403
    monkeypatch.setattr("echomq.dashboard.app.GROUPS_SHOWN", 2)  # a bounded read: the first by name, and a hint
    html = site.get(f"/queues/{name}").text
    assert re.findall(r'<tr data-group="(\w+)">', html) == ["a", "b"]
    assert "groups: 3, the first 2 by name" in html and f"emq group list -q {name}" in html


def test_actions_reprocess_pause_resume_promote(site, stocked):
    queue, name = stocked.queue, stocked.queue.name
    secret = secret_of(site.get(f"/queues/{name}").text)
    moved = site.post(f"/queues/{name}/reprocess", data={"secret": secret, "id": stocked.dead[0]},
                      follow_redirects=True)
    assert moved.status_code == 200 and "reprocessed: back to pending" in moved.text
    assert queue.state(stocked.dead[0]).value == "pending"
    queue.enqueue({"n": 0}, group="g", id="lane-job")
    queue.fail(queue.claim_lanes(1, 10_000)[0], "boom", max_attempts=1)
    moved = site.post(f"/queues/{name}/reprocess", data={"secret": secret, "id": "lane-job"}, follow_redirects=True)
    assert moved.status_code == 200 and queue.groups()["g"].waiting == 1  # back in its lane, not flat
    assert "paused" in site.post(f"/queues/{name}/pause", data={"secret": secret}, follow_redirects=True).text
    assert queue.counts().paused
    assert ">Resume</button>" in site.get(f"/queues/{name}").text
    site.post(f"/queues/{name}/resume", data={"secret": secret})
    assert not queue.counts().paused
    promoted = site.post(f"/queues/{name}/promote", data={"secret": secret}, follow_redirects=True)
    assert "promoted 0 due job(s)" in promoted.text  # the scheduled one is due in 10 minutes


def test_actions_remove_cancel_purge(site, stocked):
    queue, name = stocked.queue, stocked.queue.name
    secret = secret_of(site.get(f"/queues/{name}").text)
    for job_id, state in ((stocked.pending[0], "pending"), (stocked.scheduled, "scheduled"),
                          (stocked.dead[1], "dead")):
        removed = site.post(f"/queues/{name}/remove", data={"secret": secret, "id": job_id}, follow_redirects=True)
        assert removed.status_code == 200 and f"{job_id} removed from {state}" in removed.text
        assert queue.state(job_id) is None and job_id not in ids_on(removed.text)
    cancelled = site.post(f"/queues/{name}/cancel", data={"secret": secret, "id": stocked.active},
                          follow_redirects=True)
    assert cancelled.status_code == 200 and "cancelled: dead" in cancelled.text
    assert queue.state(stocked.active).value == "dead" and '<td id="state">dead' in cancelled.text
    assert queue.counts().dead == 2  # the one left of the stock and the cancelled one
    with queue_unchanged(queue):  # both died just now: none is a day old
        kept = site.post(f"/queues/{name}/purge", data={"secret": secret, "older_than": "1d"}, follow_redirects=True)
        assert "purged 0 dead job(s) dead at least 1d" in kept.text
    purged = site.post(f"/queues/{name}/purge", data={"secret": secret, "older_than": ""}, follow_redirects=True)
    assert purged.status_code == 200 and "purged 2 dead job(s)" in purged.text and "No dead jobs." in purged.text
    assert queue.counts().dead == 0


def test_refused_actions_write_nothing(site, stocked):
    queue, name = stocked.queue, stocked.queue.name
    secret = secret_of(site.get(f"/queues/{name}").text)
    with queue_unchanged(queue):
        not_dead = site.post(f"/queues/{name}/reprocess", data={"secret": secret, "id": stocked.pending[0]})
        assert not_dead.status_code == 409 and "is not in dead" in not_dead.text
        stale = site.post(f"/queues/{name}/pause", data={"secret": "from-another-site"})
        assert stale.status_code == 403 and "stale or from another site" in stale.text
        assert site.post(f"/queues/{name}/pause", data={}).status_code == 403
        active = site.post(f"/queues/{name}/remove", data={"secret": secret, "id": stocked.active})
        assert active.status_code == 409 and "EMQSTATE" in active.text
        not_active = site.post(f"/queues/{name}/cancel", data={"secret": secret, "id": stocked.pending[0]})
        assert not_active.status_code == 409 and "EMQSTATE" in not_active.text
        for action in ("remove", "cancel"):
            unknown = site.post(f"/queues/{name}/{action}", data={"secret": secret, "id": "no-such-id"})
            assert unknown.status_code == 404 and f"nothing {action}" in unknown.text
        bad_age = site.post(f"/queues/{name}/purge", data={"secret": secret, "older_than": "a week"})
        assert bad_age.status_code == 400 and "is not a duration" in bad_age.text
        assert site.post(f"/queues/{name}/purge", data={"secret": "from-another-site"}).status_code == 403
    with unchanged(queue.connection.client):
        missing = site.post("/queues/no-such-queue-here/pause", data={"secret": secret})
        assert missing.status_code == 404  # pausing never creates a queue from the dashboard


def test_read_only_hides_the_actions_and_refuses_them(conn, stocked):
    name = stocked.queue.name
    stocked.queue.enqueue({}, group="g")  # its groups table too
    with serving(conn, Settings(read_only=True)) as url, httpx.Client(base_url=url) as site:
        page = site.get(f"/queues/{name}").text
        job = site.get(f"/queues/{name}/job", params={"id": stocked.dead[0]}).text
        # no action's form (a POST); the search and the filter are GET forms, read-only as any link
        assert 'method="post"' not in page and 'method="post"' not in job and "read-only" in page
        assert 'data-group="g"' in page and 'id="filter"' in page
        dead = site.get(f"/queues/{name}", params={"state": "dead"}).text
        assert "Reprocess all" not in dead and "Remove all" not in dead
        with queue_unchanged(stocked.queue):
            for action, data in (("pause", {}), ("reprocess", {"id": stocked.dead[0]}), ("remove", {"id": stocked.dead[0]}),
                                 ("cancel", {"id": stocked.active}), ("purge", {}), ("groups/pause", {"group": "g"})):
                refused = site.post(f"/queues/{name}/{action}", data=data)
                assert refused.status_code == 403 and "read-only" in refused.text


def test_a_node_that_does_not_serve_remove_cancel_purge_hides_and_refuses_them(conn, stocked):
    if conn.wire == 4:
        pytest.skip("wire 4 carries every scripted verb; only a wire-6 module may predate the optional tokens")
    name = stocked.queue.name
    conn.tokens = conn.tokens - {"remove", "cancel", "purge"}  # a trafikey that predates them
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        page = site.get(f"/queues/{name}").text
        assert ">Purge dead</button>" not in page and "purge: not served" in page and ">Pause</button>" in page
        dead = site.get(f"/queues/{name}/job", params={"id": stocked.dead[0]}).text
        assert ">Reprocess</button>" in dead and ">Remove</button>" not in dead and 'id="unserved"' in dead
        held = site.get(f"/queues/{name}/job", params={"id": stocked.active}).text
        assert ">Cancel</button>" not in held and "does not serve cancel" in held
        secret = secret_of(dead)
        with queue_unchanged(stocked.queue):
            for action, data in (("remove", {"id": stocked.dead[0]}), ("cancel", {"id": stocked.active}),
                                 ("purge", {})):
                refused = site.post(f"/queues/{name}/{action}", data={"secret": secret, **data})
                assert refused.status_code == 501 and f"this node does not serve {action}" in refused.text
                assert "upgrade the module" in refused.text


def test_the_token_is_required_on_every_route(conn, stocked):
    name = stocked.queue.name
    with serving(conn, Settings(token=TOKEN)) as url, httpx.Client(base_url=url) as site:
        for path in ("/", "/metrics", f"/queues/{name}", "/static/dashboard.css"):
            refused = site.get(path)
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
        assert site.get("/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        with queue_unchanged(stocked.queue):
            assert site.post(f"/queues/{name}/pause", data={"secret": "x"}).status_code == 401
        assert site.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert site.get("/metrics", auth=("prometheus", TOKEN)).status_code == 200


def test_authorized_reads_bearer_and_basic_and_nothing_else():
    basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    assert authorized(f"Bearer {TOKEN}", TOKEN) and authorized(f"Basic {basic}", TOKEN)
    for header in (None, "", TOKEN, f"Token {TOKEN}", "Bearer", f"Bearer {TOKEN}x", "Basic !!!",
                   "Basic " + base64.b64encode(TOKEN.encode()).decode()):
        assert not authorized(header, TOKEN), header


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_token(host):
    check_binding(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "dashboard.example.com"])
def test_beyond_loopback_without_a_token_is_refused(host):
    with pytest.raises(ConfigurationError, match="without a token"):
        check_binding(host, None)
    check_binding(host, TOKEN)


def test_the_cli_refuses_to_serve_beyond_loopback_without_a_token(server):
    result = CliRunner(env={"EMQ_DASHBOARD_TOKEN": None}).invoke(
        main, ["dashboard", "--url", server.url, "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "without a token" in result.stderr and "--token" in result.stderr


def test_a_port_in_use_is_one_clear_line_and_no_success_line(server):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = CliRunner().invoke(main, ["dashboard", "--url", server.url, "--port", str(port)])
    assert result.exit_code == 1 and f"cannot serve on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "--port" in result.stderr and "dashboard for" not in result.stderr


def _scrape(site) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(site.get("/metrics").text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_match_counts_after_a_known_workload(site, stocked, conn):
    queue, name = stocked.queue, stocked.queue.name
    for _ in range(4):  # the workload on top of the stock: 4 more completed, 1 more dead
        queue.complete(queue.claim(60_000))
    queue.fail(queue.claim(60_000), "boom", max_attempts=1)
    beat = Heartbeat(conn.client, queues=[name], concurrency=1, wire=conn.wire)
    beat.beat(held=0, completed=0, failed=0)
    try:
        scraped = _scrape(site)
        counts = queue.counts()
        for state in ("pending", "active", "scheduled", "dead"):
            assert scraped[("echomq_jobs", (("queue", name), ("state", state)))] == getattr(counts, state)
        assert (counts.pending, counts.dead) == (PENDING - 5, 3)
        assert scraped[("echomq_jobs_completed_total", (("queue", name),))] == 1 + 4
        assert scraped[("echomq_jobs_dead_total", (("queue", name),))] == 3
        assert scraped[("echomq_queue_paused", (("queue", name),))] == 0
        assert scraped[("echomq_workers_alive", ())] >= 1
    finally:
        beat.remove()


def test_lane_and_flow_jobs_are_counted_on_the_overview_and_in_metrics(conn):
    """The overview showed 0 for a queue of lane jobs, and echomq_jobs had the flat four only."""
    queue = Queue(conn, fresh_name("dash-lanes"))
    for n in range(5):
        queue.enqueue({"n": n}, group="tenant")
    queue.set_lane_limit(2)
    queue.claim_lanes(1, 60_000)
    queue.enqueue_flow("p", children=["a", "b"], id="root")
    with serving(conn, Settings(queues=[queue.name])) as url, httpx.Client(base_url=url) as site:
        overview = site.get("/").text
        scraped = _scrape(site)
    row = re.search(rf'<tr data-queue="{re.escape(queue.name)}">(.*?)</tr>', overview, re.S).group(1)
    assert re.findall(r'data-kind="(\w+)"><a [^>]*>([\d/]+)<', row) == [("lanes", "4/1"), ("flows", "1/2/0/0")]
    assert "lanes pend/act" in overview
    expected = {"pending": 0, "active": 0, "lane_pending": 4, "lane_active": 1, "flow_waiting": 1, "flow_pending": 2,
                "flow_active": 0, "flow_scheduled": 0}
    for state, count in expected.items():
        assert scraped[("echomq_jobs", (("queue", queue.name), ("state", state)))] == count, state


def test_the_overview_flags_a_queue_whose_jobs_wait_with_no_live_worker(conn):
    served, unserved, empty = (Queue(conn, fresh_name("dash-served")) for _ in range(3))
    served.enqueue({})
    unserved.enqueue({}, group="tenant")
    empty.schedule({}, 60_000)
    beat = Heartbeat(conn.client, queues=[served.name], concurrency=1, wire=conn.wire)
    beat.beat(held=0, completed=0, failed=0)
    try:
        with serving(conn, Settings(queues=[served.name, unserved.name, empty.name])) as url, \
                httpx.Client(base_url=url) as site:
            overview = site.get("/").text
    finally:
        beat.remove()
    flagged = {name for name in (served.name, unserved.name, empty.name)
               if 'class="unserved"' in re.search(rf'<tr data-queue="{re.escape(name)}">(.*?)</tr>', overview, re.S)[1]}
    assert flagged == {unserved.name}


def test_metrics_sum_a_partitioned_queue_over_its_partitions(conn):
    """/metrics opens each queue by its record, as the overview does: a partitioned queue's jobs
    are in its partitions' keys, none under its own name."""
    from echomq import PartitionedQueue

    split = PartitionedQueue(conn, fresh_name("split"), partitions=3)
    split.enqueue_many([{"n": n} for n in range(7)])
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        scraped = _scrape(site)
    assert scraped[("echomq_jobs", (("queue", split.name), ("state", "pending")))] == 7


def test_a_damaged_queue_is_shown_unreadable_and_the_others_still_are(conn, stocked, server):
    damaged = fresh_name("dash-damaged")
    with server.client() as client:
        client.set(f"emq:{{{damaged}}}:pending", "not a zset")
        try:
            with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
                row = re.search(rf'<tr data-queue="{damaged}">(.*?)</tr>', site.get("/").text, re.S).group(1)
                assert "unreadable" in row and "WRONGTYPE" in row
                assert f'data-queue="{stocked.queue.name}"' in site.get("/").text
                scraped = _scrape(site)
                assert scraped[("echomq_queue_unreadable", (("queue", damaged),))] == 1
                assert scraped[("echomq_queue_unreadable", (("queue", stocked.queue.name),))] == 0
        finally:
            client.delete(f"emq:{{{damaged}}}:pending")


def test_rates_between_samples_and_the_chart():
    samples = [Sample(0.0, {"a": (0, 0), "b": (10, 1)}), Sample(2.0, {"a": (4, 2), "b": (12, 1)}),
               Sample(4.0, {"a": (0, 2), "b": (12, 1)})]  # a's metrics were reset: no negative rate
    assert rate_series(samples, "a") == [Point(2.0, 2.0, 1.0), Point(4.0, 0.0, 0.0)]
    assert rate_series(samples) == [Point(2.0, 3.0, 1.0), Point(4.0, 0.0, 0.0)]
    assert rate_series(samples[:1]) == []
    chart = svg_chart(rate_series(samples))
    assert chart.count("<polyline") == 2 and "completed/s 0.0" in chart
    assert "-30 s</text>" in chart  # 4 s sampled: the chart spans its 30 s minimum
    long_run = [Point(float(t), 1.0, 0.0) for t in range(0, 1000, 10)]
    assert "-5 min</text>" in svg_chart(long_run)  # at most five minutes
    assert "sampling" in svg_chart([])


def test_emq_dashboard_serves_until_sigterm_and_asks_for_its_token(server, stocked):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), EMQ_DASHBOARD_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "dashboard", "--url", server.url, "--port",
                             str(port), "--read-only", "-q", stocked.queue.name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        assert f"on http://127.0.0.1:{port}/ (read-only), token required" in line, line

        def answer(**kwargs):
            try:
                return httpx.get(f"http://127.0.0.1:{port}/", **kwargs)
            except httpx.ConnectError:
                return None

        wait_until(lambda: answer() is not None, what="the dashboard to listen")
        assert answer().status_code == 401
        shown = answer(auth=("me", TOKEN))
        assert shown.status_code == 200 and stocked.queue.name in shown.text and 'method="post"' not in shown.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        reap(proc)


def test_a_node_that_stops_answering_is_a_clear_503_and_the_dashboard_lives_on(wire):
    from echomq import EmbeddedServer, connect, module_path

    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as node:
        conn = connect(node.url, wire=wire)
        Queue(conn, "q").enqueue({})
        with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as site:
            assert site.get("/").status_code == 200
            node.stop()
            for path in ("/", "/queues/q", "/workers", "/metrics"):  # a 503 scrape: Prometheus marks the target down
                down = site.get(path)
                assert down.status_code == 503 and "the node does not answer" in down.text, path
            node.start()
            wait_until(lambda: site.get("/").status_code == 200, what="the dashboard to recover")
        conn.close()


def test_without_a_token_only_loopback_names_may_address_it(site, stocked):
    for host in ("localhost:8080", "127.0.0.1", "[::1]:8080"):
        assert site.get("/", headers={"Host": host}).status_code == 200, host
    with queue_unchanged(stocked.queue):
        for host in ("attacker.example", "attacker.example:8080", "10.0.0.5"):
            assert site.get("/", headers={"Host": host}).status_code == 400, host
            secret = secret_of(site.get(f"/queues/{stocked.queue.name}").text)
            assert site.post(f"/queues/{stocked.queue.name}/pause", data={"secret": secret},
                             headers={"Host": host}).status_code == 400


def test_a_flow_jobs_page_offers_cancel_not_remove_and_cancel_tells_its_parent(site, stocked):
    queue, name = stocked.queue, stocked.queue.name
    queue.enqueue_flow("p", children=[Flow(name, "c", id="kid")], id="parent-job")
    page = site.get(f"/queues/{name}/job", params={"id": "kid"}).text
    assert ">Cancel</button>" in page and ">Remove</button>" not in page and "its parent is told" in page
    cancelled = site.post(f"/queues/{name}/cancel", data={"secret": secret_of(page), "id": "kid"},
                          follow_redirects=True)
    assert cancelled.status_code == 200 and "kid cancelled" in cancelled.text
    assert queue.job("parent-job")["last_error"] == "child kid failed: cancelled"
    dead = site.get(f"/queues/{name}/job", params={"id": "kid"}).text  # dead: a flat row, removable
    assert ">Remove</button>" in dead and ">Cancel</button>" not in dead
