"""The dashboard as an on-call console (issue 39), over HTTP against real servers on both wires: a
job found by its id or its start from any queue, a queue's lists filtered by error text and age
behind links that survive a reload, the dead a filter chooses reprocessed or removed in bulk after a
confirmation that states the count (each action one audit line; read-only, another site and a stale
form refused with nothing written), and the oldest waiting job's age. The address's reading is
tested without a server."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from echomq import RAW, App, PartitionedQueue, Queue, State
from echomq._protocol.envelope import wrap
from echomq.admin import selection
from echomq.admin.selection import JobFilter
from echomq.dashboard import Settings, serving
from echomq.dashboard.views import BadQuery, ListQuery, list_query, seconds
from echomq.local.server import free_port
from support.dashboard import ids_on, own_servers, secret_of, server, stock  # noqa: F401 (fixtures)
from support.dataset import queue_unchanged
from support.processes import ROOT, reap
from support.queues import fresh_name, take
from support.waiting import wait_until

HOUR_MS = 3_600_000
STATES = ["pending", "active", "scheduled", "dead"]


def admitted_ago(queue: Queue, job_id: str, ms: int) -> None:
    """Plant an older admission time (the row's ``created``, server clock) than a test could wait for."""
    queue.connection.client.hset(queue.keys.job(job_id), "created", str(queue.server_ms() - ms))


def kill(queue: Queue, job_id: str, error: str) -> None:
    queue.enqueue({"n": job_id}, id=job_id)
    queue.fail(take(queue), error, max_attempts=1)


@pytest.fixture
def dead_mix(conn):
    """Six dead jobs: three timeouts (one of them admitted two hours ago), three bad rows."""
    queue = Queue(conn, fresh_name("console"))
    for n in range(6):
        kill(queue, f"d{n}", "TimeoutError: the mailer did not answer" if n % 2 == 0 else "ValueError: bad row")
    admitted_ago(queue, "d0", 2 * HOUR_MS)
    return queue


@pytest.fixture
def site(conn, dead_mix):
    with serving(conn, Settings(sample_interval_s=0.1)) as url, httpx.Client(base_url=url) as client:
        yield client


# -- the address, read and written back (pure) -----------------------------------------------------


def test_a_list_address_round_trips_and_leaves_out_its_defaults():
    shown = ListQuery("dead", page=1, start=500, job_filter=JobFilter(error="time out", min_age="1h"))
    assert shown.params() == {"state": "dead", "error": "time out", "min_age": "1h", "from": "500"}
    assert list_query(shown.params(), STATES) == shown
    assert ListQuery().href("/queues/q") == "/queues/q?state=pending"
    assert shown.href("/queues/q", start=0) == "/queues/q?state=dead&error=time+out&min_age=1h"


@pytest.mark.parametrize("params, says", [
    ({"state": "finished"}, "bad state 'finished': one of pending"), ({"page": "0"}, "bad page '0'"),
    ({"from": "-1"}, "bad from '-1'"), ({"page": str(2**63)}, "bad page"), ({"from": "x"}, "bad from 'x'"),
    ({"min_age": "an hour"}, "bad min age"), ({"error": "e" * 201}, "error text of 201 characters"),
])
def test_an_address_that_does_not_read_is_refused_naming_the_value(params, says):
    with pytest.raises(BadQuery, match=says):
        list_query(params, STATES)


def test_durations_read_as_people_read_them():
    assert [seconds(ms) for ms in (None, 850, 12_500, 192_000, 5_400_000 * 2)] == ["–", "850 ms", "12.5 s",
                                                                                     "3.2 min", "3.0 h"]


# -- find a job ------------------------------------------------------------------------------------


def test_a_whole_id_opens_its_job_in_whatever_queue_holds_it(site, dead_mix, conn):
    other = Queue(conn, fresh_name("elsewhere"))  # made after the dashboard's discovery: found by the SCAN
    job_id = other.enqueue({"to": "someone"}).id
    found = site.get("/search", params={"q": job_id})
    assert found.status_code == 303 and found.headers["location"] == f"/queues/{other.name}/job?id={job_id}"
    assert site.get(found.headers["location"]).status_code == 200
    assert site.get("/search", params={"q": "d3"}).headers["location"] == f"/queues/{dead_mix.name}/job?id=d3"


def test_an_id_in_two_queues_lists_both(conn, dead_mix):
    Queue(conn, fresh_name("twin")).enqueue({}, id="shared-id")
    dead_mix.enqueue({}, id="shared-id")
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        twice = site.get("/search", params={"q": "shared-id"}).text
    assert twice.count("/job?id=shared-id") == 2 and "2 queues hold a job" in twice
    assert twice.count("<td>pending</td>") == 2


def test_an_ids_start_lists_the_jobs_it_begins_and_a_bounded_few(site, dead_mix, monkeypatch):
    start = fresh_name("start")  # the ids of this test alone, on the module's shared node
    for n in range(3):
        kill(dead_mix, f"{start}-{n}", "boom")
    dead_mix.enqueue({}, id=f"{start}-waiting")
    listed = site.get("/search", params={"q": start}).text
    assert ids_on(listed) == [f"{start}-{n}" for n in range(3)] + [f"{start}-waiting"]
    assert listed.count("<td>dead</td>") == 3 and listed.count("<td>pending</td>") == 1
    assert "No job has the id" in listed and "type more" not in listed
    monkeypatch.setattr("echomq.dashboard.app.SEARCH_HITS", 2)
    few = site.get("/search", params={"q": start}).text
    assert len(ids_on(few)) == 2 and "the first 2 found: type more of the id" in few
    nothing = site.get("/search", params={"q": "no-such-start"})
    assert nothing.status_code == 200 and ids_on(nothing.text) == []
    assert site.get("/search").status_code == 200  # the box alone


@pytest.mark.parametrize("query, says", [("bad\\escape", "bad job id"), ("x" * 2049, "a search of 2049 characters")])
def test_a_search_that_does_not_read_is_a_400(site, query, says):
    answer = site.get("/search", params={"q": query})
    assert answer.status_code == 400 and says in answer.text


def test_a_search_sees_only_the_pinned_queues(conn, dead_mix):
    other = Queue(conn, fresh_name("hidden"))
    other.enqueue({}, id="hidden-job")
    with serving(conn, Settings(queues=[dead_mix.name])) as url, httpx.Client(base_url=url) as site:
        assert ids_on(site.get("/search", params={"q": "hidden-job"}).text) == []
        assert site.get("/search", params={"q": "d1"}).status_code == 303


def test_a_partitioned_queues_job_is_found_by_its_id_and_its_start(conn):
    queue = PartitionedQueue(conn, fresh_name("split"), partitions=3)
    queue.enqueue({}, id="part-job-1")
    with serving(conn, Settings(queues=[queue.name])) as url, httpx.Client(base_url=url) as site:
        found = site.get("/search", params={"q": "part-job-1"})
        assert found.headers["location"] == f"/queues/{queue.name}/job?id=part-job-1"
        assert ids_on(site.get("/search", params={"q": "part-job"}).text) == ["part-job-1"]


# -- filtered lists ----------------------------------------------------------------------------------


def test_a_filtered_list_shows_what_matches_and_its_address_survives_a_reload(site, dead_mix):
    name = dead_mix.name
    timeouts = site.get(f"/queues/{name}", params={"state": "dead", "error": "timeouterror"})
    assert sorted(ids_on(timeouts.text)) == ["d0", "d2", "d4"]
    assert "matching error containing &#39;timeouterror&#39;: 3 found" in timeouts.text
    old = site.get(f"/queues/{name}", params={"state": "dead", "error": "timeout", "min_age": "1h"})
    assert ids_on(old.text) == ["d0"]
    reloaded = site.get(str(old.url))  # the address is the whole list: a reload, or a link sent on, shows it again
    assert ids_on(reloaded.text) == ["d0"]
    # the live part refreshes the same filtered list, and the state tabs keep the filter
    part = re.search(r'data-refresh="(/parts/queues/[^"]+/jobs[^"]*)"', old.text).group(1).replace("&amp;", "&")
    assert ids_on(site.get(part).text) == ["d0"]
    assert f'href="/queues/{name}?state=pending&amp;error=timeout&amp;min_age=1h"' in old.text
    assert 'data-every="10000"' in old.text  # a filtered list reloads at most every 10 s: its scan reads rows


def test_a_filtered_scan_stops_at_its_budget_and_links_where_to_go_on(site, dead_mix, monkeypatch):
    # the page passes no budget: matching_page's defaults (SCAN_BUDGET rows, a WINDOW a round trip) apply
    monkeypatch.setitem(selection.matching_page.__kwdefaults__, "budget", 4)
    monkeypatch.setitem(selection.matching_page.__kwdefaults__, "window", 2)
    first = site.get(f"/queues/{dead_mix.name}", params={"state": "dead", "error": "bad row"}).text
    assert ids_on(first) == ["d1", "d3"] and "among\n  4 read (from 1 of 6)" in first
    go_on = re.search(r'<a rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    assert "from=4" in go_on
    rest = site.get(go_on).text
    assert ids_on(rest) == ["d5"] and 'rel="next"' not in rest and 'rel="first"' in rest
    past = site.get(f"/queues/{dead_mix.name}", params={"state": "dead", "error": "x", "from": "6"})
    assert past.status_code == 400 and "bad from 6" in past.text


def test_a_list_filtered_by_task_shows_that_tasks_jobs_and_the_bulk_action_acts_on_them_alone(conn, caplog):
    """Issue 39 item 1's task filter: a queue of two tasks (and a plain job, and one whose planted task
    name is markup), its dead list filtered by the name its jobs' headers carry, in the address; the
    job page names the task; the bulk reprocess of the filtered list moves that task's jobs alone.
    A task's name is a job's data: shown escaped."""
    caplog.set_level(logging.INFO, logger="echomq.dashboard.audit")
    name = fresh_name("by-task")
    app = App(queue=name).connect(conn)

    @app.task
    def send_email(to):
        return to

    @app.task
    def resize(path):
        return path

    queue = Queue(conn, name)
    mail = [send_email.enqueue(f"m{n}", id=f"mail-{n}").id for n in range(3)]
    image = resize.enqueue("a.png", id="image-0").id
    queue.enqueue({"plain": True}, id="plain-0")
    odd_name = '<img src=x onerror="alert(1)">'
    Queue(conn, name, serializer=RAW).enqueue(wrap(name, b'"x"', {"task": odd_name}), id="odd-0")
    for _ in range(6):
        queue.fail(take(queue), "boom", max_attempts=1)
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        listed = site.get(f"/queues/{name}", params={"state": "dead", "task": "send_email"})
        assert sorted(ids_on(listed.text)) == mail
        assert "matching task &#39;send_email&#39;: 3 found" in listed.text
        assert 'name="task" size="14" value="send_email"' in listed.text  # the form says the filter
        assert ids_on(site.get(str(listed.url)).text) == ids_on(listed.text)  # the address is the list
        part = re.search(r'data-refresh="(/parts/queues/[^"]+/jobs[^"]*)"', listed.text).group(1).replace("&amp;", "&")
        assert "task=send_email" in part and sorted(ids_on(site.get(part).text)) == mail
        assert f'href="/queues/{name}?state=pending&amp;task=send_email"' in listed.text  # the tabs keep it
        assert ids_on(site.get(f"/queues/{name}", params={"state": "dead", "task": "resize"}).text) == [image]
        assert ids_on(site.get(f"/queues/{name}", params={"state": "dead", "task": "send"}).text) == []
        odd = site.get(f"/queues/{name}", params={"state": "dead", "task": odd_name}).text
        assert ids_on(odd) == ["odd-0"] and odd_name not in odd and "&lt;img src=x" in odd
        job = site.get(f"/queues/{name}/job", params={"id": "odd-0"}).text
        assert odd_name not in job and '<td id="task">&lt;img src=x onerror=&#34;alert(1)&#34;&gt;</td>' in job
        assert '<td id="task">send_email</td>' in site.get(f"/queues/{name}/job", params={"id": mail[0]}).text
        assert 'id="task"' not in site.get(f"/queues/{name}/job", params={"id": "plain-0"}).text
        too_long = site.get(f"/queues/{name}", params={"state": "dead", "task": "t" * 201})
        assert too_long.status_code == 400 and "a task name of 201 characters" in too_long.text
        confirm_at = re.search(r'href="([^"]+)" id="reprocess-all"', listed.text).group(1).replace("&amp;", "&")
        assert confirm_at == f"/queues/{name}/bulk/reprocess?task=send_email"
        confirm = site.get(confirm_at).text
        assert "<b>3</b> dead job(s) match task &#39;send_email&#39;" in confirm
        form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm))
        assert form["task"] == "send_email"
        done = site.post(f"/queues/{name}/bulk/reprocess", data=form, follow_redirects=True)
        assert "reprocessed 3 of 3 dead job(s) matching task &#39;send_email&#39;" in done.text
    assert {job_id: queue.state(job_id) for job_id in (*mail, image, "plain-0", "odd-0")} == {
        **dict.fromkeys(mail, State.PENDING), image: State.DEAD, "plain-0": State.DEAD, "odd-0": State.DEAD}
    (line,) = [r.getMessage() for r in caplog.records if r.name == "echomq.dashboard.audit"]
    assert f"reprocess_all {name}: reprocessed 3 of 3 dead job(s) matching task 'send_email'" in line


def test_lists_show_each_jobs_age_and_attempts(site, dead_mix):
    page = site.get(f"/queues/{dead_mix.name}", params={"state": "dead"}).text
    row = re.search(r'job\?id=d0">d0</a></td>\s*<td class="n">([^<]*)</td>\s*<td class="n">(\d+)</td>', page)
    assert row.groups() == ("2.0h", "1")  # admitted two hours ago (planted), claimed once


# -- bulk actions on the dead ------------------------------------------------------------------------


def test_reprocess_all_matching_states_the_count_then_moves_them_and_says_so(site, dead_mix, caplog):
    caplog.set_level(logging.INFO, logger="echomq.dashboard.audit")
    name = dead_mix.name
    listed = site.get(f"/queues/{name}", params={"state": "dead", "error": "timeout"}).text
    confirm_at = re.search(r'href="([^"]+)" id="reprocess-all"', listed).group(1).replace("&amp;", "&")
    assert confirm_at == f"/queues/{name}/bulk/reprocess?error=timeout"
    confirm = site.get(confirm_at)
    assert confirm.status_code == 200 and '<p id="count"><b>3</b> dead job(s) match error containing' in confirm.text
    assert f'data-confirm="Reprocess 3 dead job(s) of {name}?"' in confirm.text
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm.text))
    kill(dead_mix, "after", "TimeoutError: died after the count")  # not among the 3 counted
    done = site.post(f"/queues/{name}/bulk/reprocess", data=form, follow_redirects=True)
    assert done.status_code == 200 and "reprocessed 3 of 3 dead job(s) matching error containing" in done.text
    assert str(done.url).endswith(f"/queues/{name}?state=dead&error=timeout&done=" + str(done.url).split("done=")[1])
    assert {j: dead_mix.state(j) for j in ("d0", "d1", "d2", "after")} == {
        "d0": State.PENDING, "d1": State.DEAD, "d2": State.PENDING, "after": State.DEAD}
    (line,) = [r.getMessage() for r in caplog.records if r.name == "echomq.dashboard.audit"]
    assert line.startswith(f"127.0.0.1 reprocess_all {name}: reprocessed 3 of 3 dead job(s) matching error")


def test_remove_all_deletes_every_dead_job_of_an_unfiltered_list(site, dead_mix, caplog):
    caplog.set_level(logging.INFO, logger="echomq.dashboard.audit")
    confirm = site.get(f"/queues/{dead_mix.name}/bulk/remove").text
    assert "<b>6</b> dead job(s) match every job" in confirm and "This cannot be undone." in confirm
    done = site.post(f"/queues/{dead_mix.name}/bulk/remove", data={
        "secret": secret_of(confirm), "as_of": re.search(r'name="as_of" value="(\d+)"', confirm).group(1)},
        follow_redirects=True)
    assert "removed 6 of 6 dead job(s) matching every job" in done.text and dead_mix.counts().dead == 0
    assert "No dead jobs." in done.text
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [f"127.0.0.1 remove_all {dead_mix.name}"]


def test_a_bulk_action_with_nothing_to_do_offers_no_button(site, dead_mix):
    page = site.get(f"/queues/{dead_mix.name}/bulk/reprocess", params={"error": "nothing like it"}).text
    assert "No dead job matches error containing" in page and 'method="post"' not in page


def test_refused_bulk_actions_write_nothing_and_are_each_an_audit_line(site, dead_mix, caplog):
    caplog.set_level(logging.INFO, logger="echomq.dashboard.audit")
    name = dead_mix.name
    confirm = site.get(f"/queues/{name}/bulk/reprocess").text
    good = {"secret": secret_of(confirm), "as_of": re.search(r'name="as_of" value="(\d+)"', confirm).group(1)}
    with queue_unchanged(dead_mix):
        for data, headers, status, says in (
                ({**good, "secret": "from-another-site"}, {}, 403, "stale or from another site"),
                (good, {"Origin": "https://evil.example"}, 403, "posted from another site"),
                ({**good, "min_age": "a week"}, {}, 400, "bad min age"),
                ({**good, "as_of": "soon"}, {}, 400, "bad as_of"),
                ({"secret": good["secret"]}, {}, 400, "bad as_of")):
            refused = site.post(f"/queues/{name}/bulk/reprocess", data=data, headers=headers)
            assert refused.status_code == status and says in refused.text, (data, headers)
        assert site.get(f"/queues/{name}/bulk/remove", params={"max_age": "7 days"}).status_code == 400
    lines = [r.getMessage() for r in caplog.records if r.name == "echomq.dashboard.audit"]
    assert len(lines) == 5 and all(f"reprocess_all {name}: refused 4" in line for line in lines), lines


def test_read_only_refuses_the_bulk_actions_and_their_confirmation(conn, dead_mix):
    with serving(conn, Settings(read_only=True)) as url, httpx.Client(base_url=url) as site:
        with queue_unchanged(dead_mix):
            for action in ("reprocess", "remove"):
                assert site.get(f"/queues/{dead_mix.name}/bulk/{action}").status_code == 403
                refused = site.post(f"/queues/{dead_mix.name}/bulk/{action}", data={"as_of": "1"})
                assert refused.status_code == 403 and "read-only" in refused.text


def test_a_node_that_does_not_serve_remove_offers_no_remove_all(conn, dead_mix):
    if conn.wire == 4:
        pytest.skip("wire 4 carries every scripted verb; only a wire-6 module may predate the optional tokens")
    conn.tokens = conn.tokens - {"remove"}
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        page = site.get(f"/queues/{dead_mix.name}", params={"state": "dead"}).text
        assert 'id="reprocess-all"' in page and 'id="remove-all"' not in page
        assert site.get(f"/queues/{dead_mix.name}/bulk/remove").status_code == 501
        with queue_unchanged(dead_mix):
            refused = site.post(f"/queues/{dead_mix.name}/bulk/remove", data={"secret": secret_of(page), "as_of": "1"})
            assert refused.status_code == 501 and "upgrade the module" in refused.text


# -- the oldest waiting job --------------------------------------------------------------------------


def test_the_oldest_waiting_job_is_found_behind_newer_jobs_of_other_priorities(conn):
    queue = Queue(conn, fresh_name("oldest"))
    old = queue.enqueue({}, priority=5).id  # the lowest priority: served last, waiting longest
    queue.enqueue_many([{}] * 3, priority=0)
    queue.enqueue({}, priority=2)
    admitted_ago(queue, old, 3 * HOUR_MS)
    empty = Queue(conn, fresh_name("oldest-empty"))
    empty.schedule({}, 60_000)
    with serving(conn, Settings(queues=[queue.name, empty.name])) as url, httpx.Client(base_url=url) as site:
        overview = site.get("/").text
        page = site.get(f"/queues/{queue.name}").text

    def oldest(name: str) -> str:
        row = re.search(rf'<tr data-queue="{re.escape(name)}">(.*?)</tr>', overview, re.S)
        cell = re.search(r'data-kind="oldest">([^<]+)<', row.group(1) if row else "")
        return cell.group(1) if cell else "(no cell)"

    assert oldest(queue.name) == "3.0 h" and oldest(empty.name) == "–"
    assert '<b id="oldest">3.0 h</b>' in page


def test_emq_dashboard_writes_each_action_as_an_audit_line_on_stderr(server, dead_mix):
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), EMQ_DASHBOARD_TOKEN="")
    env.pop("EMQ_DASHBOARD_TOKEN")
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "dashboard", "--url", server.url, "--port", str(port),
                             "-q", dead_mix.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert f"on http://127.0.0.1:{port}/" in proc.stderr.readline()
        base = f"http://127.0.0.1:{port}"

        def page() -> httpx.Response | None:
            try:
                return httpx.get(f"{base}/queues/{dead_mix.name}")
            except httpx.ConnectError:
                return None

        wait_until(lambda: page() is not None, what="the dashboard to listen")
        paused = httpx.post(f"{base}/queues/{dead_mix.name}/pause", data={"secret": secret_of(page().text)})
        assert paused.status_code == 303 and dead_mix.counts().paused
        line = proc.stderr.readline()
        assert re.fullmatch(rf"\S+ \S+ audit 127\.0\.0\.1 pause {dead_mix.name}: {dead_mix.name} paused \(\d+\.\d\d s\)\n",
                            line), line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        reap(proc)
