"""The dashboard in headless Chromium (Debian's `chromium`, driven by Playwright), on both wires:
every page loads, a confirmed click reprocesses a dead job, removes a pending one, purges the
dead and pauses a queue, and the page shows the new state, all under the dashboard's own CSP; another site's
frame gets nothing of it. The on-call console (issue 39): a job found from the header's search box,
a dead list filtered and its address reloaded, the dead it shows reprocessed in bulk after a
confirmation that states the count, a worker's times and last error, lists that refresh themselves.

Every test keeps screenshots of the pages it saw in test-artifacts/dashboard/ (.gitignore names it),
or in EMQ_DASHBOARD_SCREENSHOTS=DIR (docs/img holds the ones docs/dashboard.md shows)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from echomq import Queue, Worker, WorkerConfig
from echomq.worker.heartbeat import HeartbeatConfig
from echomq.dashboard import Settings, serving
from support.dashboard import PENDING, own_servers, server, stock  # noqa: F401 (fixtures)
from support.queues import fresh_name
from support.workers import app_of_one_task
from support.waiting import wait_until
from test_worker import running

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: ./run setup")
CHROMIUM = shutil.which("chromium")
#: where the screenshots go: the tests' artifacts, or the docs' pictures when asked
SHOTS = Path(os.environ.get("EMQ_DASHBOARD_SCREENSHOTS") or Path(__file__).resolve().parents[1] / "test-artifacts"
             / "dashboard")
FOR_DOCS = "EMQ_DASHBOARD_SCREENSHOTS" in os.environ


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is needed for the browser tests: ./run setup installs it")
    with playwright.sync_playwright() as driver:
        instance = driver.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def page(browser, wire):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.wire = f"wire{wire}"  # the screenshots' names say which wire they show
    yield context.new_page()
    context.close()


def shot(page, name: str) -> None:
    """The page as the browser drew it, kept as an artifact (named by the page and the wire)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    wire = "" if FOR_DOCS else f"-{page.context.wire}"
    page.screenshot(path=str(SHOTS / f"{name}{wire}.png"), full_page=True)


def test_every_page_in_a_browser_then_reprocess_remove_purge_and_pause_by_clicking(conn, page):
    stocked = stock(Queue(conn, fresh_name("browser")))
    queue, name = stocked.queue, stocked.queue.name
    with serving(conn, Settings(sample_interval_s=0.2)) as url:
        answers = []
        page.on("response", lambda response: answers.append((response.status, response.url)))
        page.goto(url + "/")
        row = page.locator(f'tr[data-queue="{name}"]')
        assert row.locator('[data-state="pending"]').inner_text() == str(PENDING)
        assert row.locator('[data-state="dead"]').inner_text() == "2"
        # the sampler's rates (a selector, not wait_for_function: the page's CSP forbids the eval that takes)
        page.wait_for_selector("svg.chart polyline", state="attached")

        page.click(f'a[href="/queues/{name}"]')
        assert page.locator("h3").first.inner_text().startswith(f"pending: {PENDING} job(s)")
        page.click('a[rel="next"]')
        assert page.locator("table.jobs tbody tr").count() == PENDING - 25
        for state in ("active", "scheduled", "dead"):
            page.click(f'.counts a[data-state="{state}"]')
            page.wait_for_url(f"**state={state}")
            assert page.locator("table.jobs tbody tr").count() == (2 if state == "dead" else 1)
        shot(page, "dead")

        # exact and case-sensitive (text= is neither): ids minted together can differ only in one letter's case
        page.click(f"a:text-is('{stocked.dead[0]}')")
        assert page.locator("#state").inner_text() == "dead"
        assert "ValueError: bad row" in page.content()
        shot(page, "job")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Reprocess')")
        page.wait_for_selector(".message")
        assert page.locator("#state").inner_text() == "pending"
        assert queue.state(stocked.dead[0]).value == "pending"

        page.goto(f"{url}/queues/{name}/job?id={stocked.pending[0]}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Remove')")
        page.wait_for_selector(".message")
        assert f"{stocked.pending[0]} removed from pending" in page.locator(".message").inner_text()
        assert queue.state(stocked.pending[0]) is None
        assert page.locator(f"table.jobs :text-is('{stocked.pending[0]}')").count() == 0  # in the message, not the list
        assert page.locator(f"table.jobs a:text-is('{stocked.pending[1]}')").count() == 1

        page.goto(f"{url}/queues/{name}")
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Purge dead')")
        page.wait_for_url("**state=dead**")
        assert "purged 1 dead job(s)" in page.locator(".message").inner_text()
        assert page.locator('.counts a[data-state="dead"] b').inner_text() == "0"
        assert page.locator("p.empty").inner_text() == "No dead jobs." and queue.counts().dead == 0

        page.goto(f"{url}/queues/{name}")
        page.once("dialog", lambda dialog: dialog.dismiss())  # a dismissed confirm sends nothing
        page.click("button:has-text('Pause')")
        assert not queue.counts().paused and page.locator("#paused").count() == 0
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Pause')")
        page.wait_for_selector("#paused")
        assert queue.counts().paused and page.locator("button:has-text('Resume')").count() == 1
        shot(page, "queue")

        page.goto(url + "/workers")
        assert page.locator("h2").inner_text() == "Workers"
        bad = [(status, where) for status, where in answers if status >= 400]
        assert not bad, bad


def test_the_live_parts_refresh_without_a_reload(conn, page):
    queue = Queue(conn, fresh_name("browser-live"))
    queue.enqueue({})
    with serving(conn, Settings(refresh_s=0.2)) as url:
        page.goto(url + "/")
        cell = page.locator(f'tr[data-queue="{queue.name}"] [data-state="pending"]')
        assert cell.inner_text() == "1"
        queue.enqueue_many([{}, {}])
        wait_until(lambda: cell.inner_text() == "3", what="the overview to refresh itself")


def test_a_groups_pause_asks_first_even_after_its_part_refreshed(conn, page):
    """The groups table lives in the queue page's live part: its forms are new after each
    refresh, and a click still asks before it posts (the confirm is delegated)."""
    queue = Queue(conn, fresh_name("browser-groups"))
    queue.enqueue({}, group="tenant-a")
    queue.enqueue({}, group="tenant-b")
    with serving(conn, Settings(refresh_s=0.2)) as url:
        page.goto(f"{url}/queues/{queue.name}")
        waiting = page.locator('tr[data-group="tenant-a"] td.n').first
        assert waiting.inner_text() == "1"
        queue.enqueue({}, group="tenant-a")
        wait_until(lambda: waiting.inner_text() == "2", what="the groups table to refresh itself")
        pause = page.locator('tr[data-group="tenant-a"] button')
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        pause.click()
        wait_until(lambda: asked, what="the confirm of a form the refresh made")
        assert asked == [f"Pause group tenant-a of {queue.name}?"] and not queue.groups()["tenant-a"].paused
        page.once("dialog", lambda dialog: dialog.accept())
        pause.click()
        page.wait_for_selector(".message")
        assert "group tenant-a paused" in page.locator(".message").inner_text()
        assert queue.groups()["tenant-a"].paused and not queue.groups()["tenant-b"].paused
        assert page.locator('tr[data-group="tenant-a"] .paused').count() == 1


def test_a_busy_node_shows_its_rates_and_its_worker(conn, page, caplog):
    caplog.set_level(logging.CRITICAL, logger="echomq.worker")  # every tenth job dies, by design
    name = fresh_name("emails")
    app = app_of_one_task(name, "send", lambda payload: payload["n"] % 10 == 0, ValueError("mailbox full"))
    queue = Queue(conn, name)
    worker = Worker(app, conn, config=WorkerConfig(concurrency=4))
    stop = threading.Event()

    def feed():
        n = 0
        while not stop.wait(0.05):
            queue.enqueue_many([{"n": n + i} for i in range(20)])
            n += 20

    feeder = threading.Thread(target=feed, daemon=True)
    queue.enqueue({"n": 1})  # the queue exists before the dashboard's first discovery (then cached 10 s)
    with running(worker), serving(conn, Settings(sample_interval_s=0.25, refresh_s=0.5)) as url:
        feeder.start()
        try:
            page.goto(url + "/")
            legend = page.locator("svg.chart .legend .done").first
            wait_until(lambda: float(legend.text_content().split()[-1]) > 0, what="a completion rate on the chart")
            wait_until(lambda: page.locator(f"td.id:has-text('{worker.heartbeat.id}')").count() == 1,
                       what="the worker in the workers table")
            wait_until(lambda: float(page.locator("svg.chart .legend .died").first.text_content().split()[-1]) > 0,
                       what="a death rate on the chart")
            if FOR_DOCS:  # a picture worth showing: a few seconds of history on the chart
                wait_until(lambda: len((page.locator("svg.chart polyline.done").first.get_attribute("points")
                                        or "").split()) >= 16, 20, what="16 points on the chart")
            shot(page, "overview")
            page.goto(url + "/workers")
            assert page.locator("td.id").first.inner_text() == worker.heartbeat.id
            shot(page, "workers")
        finally:
            stop.set()
            feeder.join()


FRAMING_PAGE = """<!doctype html><title>another site</title>
<iframe id="victim" src="{url}/" width="800" height="600"></iframe>"""


def test_another_site_cannot_frame_the_dashboard(conn, page, tmp_path):
    """X-Frame-Options DENY and frame-ancestors 'none' (issue 43): the browser loads nothing of the
    dashboard into another site's frame, so no click can be stolen through it."""
    with serving(conn, Settings()) as url:
        (tmp_path / "framing.html").write_text(FRAMING_PAGE.format(url=url))
        refused = []
        page.on("console", lambda message: refused.append(message.text))
        page.goto((tmp_path / "framing.html").as_uri())
        wait_until(lambda: any("frame-ancestors" in text or "X-Frame-Options" in text for text in refused),
                   what="the browser to refuse the frame")
        framed = next(frame for frame in page.frames if frame != page.main_frame)
        assert "EchoMQ" not in framed.content()
        assert page.goto(url + "/").ok  # served as ever at its own address


# -- the on-call console (issue 39) ------------------------------------------------------------------


def test_the_search_box_opens_a_job_by_its_id_and_lists_those_its_start_begins(conn, page):
    stocked = stock(Queue(conn, fresh_name("browser-find")))
    with serving(conn, Settings()) as url:
        page.goto(url + "/")
        page.fill("header input[name=q]", stocked.dead[0])
        page.press("header input[name=q]", "Enter")
        page.wait_for_url(f"**/queues/{stocked.queue.name}/job?id={stocked.dead[0]}")
        assert page.locator("#state").inner_text() == "dead"
        page.reload()  # the job's address is the page
        assert page.locator("#state").inner_text() == "dead"
        # ids of our own share a start no other job on the shared server has: the hits are exactly them
        # (a default id's start is shared by every job minted in the same moment, past the 20 shown)
        start = fresh_name("find") + "-"
        ours = [stocked.queue.enqueue({"n": n}, id=f"{start}{n}").id for n in range(3)]
        page.fill("header input[name=q]", start)
        page.press("header input[name=q]", "Enter")
        page.wait_for_selector("#hits")
        assert sorted(page.locator("#hits td.id a").all_inner_texts()) == sorted(ours)
        assert page.locator("header input[name=q]").input_value() == start
        shot(page, "search")
        page.click(f"#hits a:text-is('{ours[0]}')")
        assert page.locator("#state").inner_text() == "pending"


def test_a_filtered_dead_list_survives_a_reload_refreshes_itself_and_is_reprocessed_in_bulk(conn, page):
    queue = Queue(conn, fresh_name("browser-bulk"))
    for n in range(6):
        queue.enqueue({"n": n}, id=f"job-{n}")
        queue.fail(queue.claim(60_000), "TimeoutError: the mailer" if n % 2 else "ValueError: bad row", max_attempts=1)
    with serving(conn, Settings(filtered_refresh_s=0.3)) as url:
        page.goto(f"{url}/queues/{queue.name}?state=dead")
        page.fill("#filter input[name=error]", "timeout")
        page.click("#filter button")
        page.wait_for_url("**error=timeout**")
        rows = page.locator("table.jobs tbody tr")
        assert rows.count() == 3
        page.reload()
        assert rows.count() == 3 and page.locator("#filter input[name=error]").input_value() == "timeout"
        queue.enqueue({}, id="job-late")  # dies now: the list shows it without a reload
        queue.fail(queue.claim(60_000), "TimeoutError: late", max_attempts=1)
        wait_until(lambda: rows.count() == 4, what="the filtered list to refresh itself")
        shot(page, "dead-filtered")

        page.click("#reprocess-all")
        assert "4 dead job(s) match error containing" in page.locator("#count").inner_text()
        shot(page, "bulk")
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.click("button:has-text('Reprocess 4 job(s)')")
        wait_until(lambda: asked, what="the confirm")
        assert asked == [f"Reprocess 4 dead job(s) of {queue.name}?"] and queue.counts().dead == 7  # dismissed
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("button:has-text('Reprocess 4 job(s)')")
        page.wait_for_selector(".message")
        assert "reprocessed 4 of 4 dead job(s) matching error containing" in page.locator(".message").inner_text()
        assert "error=timeout" in page.url and queue.counts().dead == 3 and queue.counts().pending == 4
        assert page.locator("table.jobs tbody tr").count() == 0


def test_the_times_of_a_busy_queue_and_its_workers_last_error(conn, page, caplog):
    caplog.set_level(logging.CRITICAL, logger="echomq.worker")  # every fifth job fails, by design
    name = fresh_name("browser-times")
    app = app_of_one_task(name, "deliver", lambda payload: payload["n"] % 5 == 0, ConnectionError("smtp refused"))
    queue = Queue(conn, name)
    queue.enqueue_many([{"n": n} for n in range(40)])
    worker = Worker(app, conn, config=WorkerConfig(concurrency=4, heartbeat=HeartbeatConfig(200, 2000)))
    with running(worker), serving(conn, Settings(queues=[name], refresh_s=0.3)) as url:
        page.goto(url + "/")
        failures = page.locator(f'tr[data-times="{name}"] [data-kind="failures"]')
        wait_until(lambda: failures.count() and failures.inner_text() == "ConnectionError 8",
                   what="the overview's times to show the failures")
        assert page.locator(f'tr[data-times="{name}"] [data-kind="run_p95"]').inner_text().endswith("ms")
        shot(page, "overview-times")
        page.goto(f"{url}/queues/{name}")
        assert page.locator('tr[data-times="deliver"] [data-kind="failed"]').inner_text() == "8"
        shot(page, "queue-times")
        page.goto(url + "/workers")
        last = page.locator(f'tr[data-worker="{worker.heartbeat.id}"] [data-kind="last_error"]')
        wait_until(lambda: "ConnectionError: smtp refused" in last.inner_text(), what="the worker's last error")
        assert f"{name}/deliver" in last.inner_text()
        shot(page, "workers-last-error")
        last.locator("a").click()  # the job it failed on
        assert page.locator("#state").inner_text() == "dead"
