"""The dashboard in headless Chromium (Debian's `chromium`, driven by Playwright), on both wires:
every page loads, a confirmed click reprocesses a dead job, removes a pending one, purges the
dead and pauses a queue, and the page shows the new state, all under the dashboard's own CSP; another site's
frame gets nothing of it. With EMQ_DASHBOARD_SCREENSHOTS=DIR the main pages are saved there
(docs/img holds the ones docs/dashboard.md shows)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from echomq import App, Queue, Worker, WorkerConfig
from echomq.dashboard import Settings, serving
from support.dashboard import PENDING, own_servers, server, stock  # noqa: F401 (fixtures)
from support.queues import fresh_name
from support.waiting import wait_until
from test_worker import running

playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: ./run setup")
CHROMIUM = shutil.which("chromium")
SHOTS = os.environ.get("EMQ_DASHBOARD_SCREENSHOTS")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is needed for the browser tests: ./run setup installs it")
    with playwright.sync_playwright() as driver:
        instance = driver.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    yield context.new_page()
    context.close()


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


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
    app = App()

    @app.task(queue=name, max_attempts=1)
    def send(payload):
        if payload["n"] % 10 == 0:
            raise ValueError("mailbox full")

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
            if SHOTS:  # a picture worth showing: a few seconds of history on the chart
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
