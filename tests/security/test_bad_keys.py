"""One bad key breaks nothing else (issue 43, item 2; that section of docs/guarantees.md), on both wires.

Keys a raw command wrote -- a queue name EchoMQ refuses, a workers-set member that is not UTF-8,
job ids holding CR/LF, markup or bytes that are not UTF-8 -- leave every page and command working:
the names are skipped and counted (``echomq_unreadable_keys``, a line in ``emq stats``), shown
escaped, and the jobs stay actionable by their escaped id (``--escaped``, the dashboard's forms).
Each test runs on a node of its own per wire (these keys would show on every other test's node)."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from echomq import Queue, aio
from echomq.dashboard import Settings, serving
from echomq._core.workers import RECORD_PREFIX, WORKERS_KEY
from echomq._protocol.shown import id_form
from support.dashboard import own_servers, server  # noqa: F401 (fixtures)
from support.dataset import unchanged
from support.queues import fresh_name, take

#: keys whose queue name EchoMQ refuses: a space, a brace, bytes that are not UTF-8
BAD_QUEUE_KEYS = [b"emq:{bad name}:pending", b"emq:{a{b}:meta", b"emq:{\xff\xfe}:dead"]
#: job ids a raw command can write, as the server holds them
HOSTILE_IDS = [b"job-\xff\xfe", b"a\r\nb", b"[/x]\x1b[2J", b"back\\slash"]


@pytest.fixture
def admin(server):
    with server.client() as client:
        yield client


def text(raw: bytes) -> str:
    """An id's bytes as echomq reads them (bytes that are not UTF-8 as surrogate escapes)."""
    return raw.decode("utf-8", "surrogateescape")


def gauges(page: str) -> dict[str, float]:
    return {s.name + str(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(page) for s in family.samples}


def test_a_queue_name_echomq_refuses_is_skipped_and_counted_and_the_rest_is_shown(emq, conn, admin):
    good = Queue(conn, fresh_name("good"))
    good.enqueue({"n": 1})
    admin.zadd(BAD_QUEUE_KEYS[0], {b"x": 0})
    admin.hset(BAD_QUEUE_KEYS[1], b"paused", b"1")
    admin.zadd(BAD_QUEUE_KEYS[2], {b"y": 0})
    try:
        stats = emq("stats")
        assert stats.exit_code == 0, stats.output
        assert good.name in stats.stdout and "bad name" not in stats.stdout
        assert "3 key(s) skipped" in stats.stderr and "emq:{\\xff\\xfe}:dead" in stats.stderr
        with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
            for path in ("/", "/parts/overview", "/workers", "/metrics"):
                assert site.get(path).status_code == 200, path
            overview = site.get("/").text
            assert f'href="/queues/{good.name}"' in overview and "3 key(s) skipped" in overview
            found = gauges(site.get("/metrics").text)
            assert found["echomq_unreadable_keys[]"] == 3
            assert found[f"echomq_jobs[('queue', '{good.name}'), ('state', 'pending')]"] == 1
    finally:
        admin.delete(*BAD_QUEUE_KEYS)


def test_a_count_that_is_not_an_integer_hides_its_queue_alone(emq, conn, admin):
    """A metrics count a raw command wrote (``many``) made ``emq stats`` raise ValueError: now that
    queue reads as unreadable, named with what its count holds, and every other queue is shown."""
    good, bad = Queue(conn, fresh_name("good")), Queue(conn, fresh_name("bad"))
    good.enqueue({"n": 1})
    bad.enqueue({"n": 2})
    admin.hset(bad.keys.metrics("completed"), "count", "many")
    with unchanged(admin):
        stats = emq("stats")
        listed = emq("stats", "--json")
        with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
            pages = {path: site.get(path) for path in ("/", "/metrics", f"/queues/{good.name}")}
    assert stats.exit_code == 0, stats.output
    assert re.search(rf"{good.name}\s+1\s", stats.stdout) and "count holds b'many'" in stats.stdout
    rows = {row["queue"]: row for row in json.loads(listed.stdout)}
    assert rows[good.name]["pending"] == 1 and "not an integer" in rows[bad.name]["error"]
    assert all(page.status_code == 200 for page in pages.values()), {p: r.status_code for p, r in pages.items()}
    assert gauges(pages["/metrics"].text)[f"echomq_jobs[('queue', '{good.name}'), ('state', 'pending')]"] == 1


def test_worker_ids_that_are_not_utf8_or_hold_markup_are_listed_escaped(emq, conn, admin):
    record = {b"host": b"h\x1b[2J", b"pid": b"1", b"queues": b"q[/x]", b"concurrency": b"1", b"wire": b"4",
              b"started": b"1700000000", b"last_beat": b"1700000000", b"held": b"0", b"completed": b"0",
              b"failed": b"0"}
    ids = [b"w-\xff\xfe", b"[link=https://evil.example]w[/link]\x1b[2J"]
    for worker_id in ids:
        admin.hset(RECORD_PREFIX.encode() + worker_id, mapping=record)
        admin.sadd(WORKERS_KEY, worker_id)
    try:
        listed = emq("workers")
        assert listed.exit_code == 0, listed.output
        assert "w-\\xff\\xfe" in listed.stdout and "[link=https://evil.example]w[/link]\\x1b[2J" in listed.stdout
        assert "q[/x]" in listed.stdout and "\x1b" not in listed.stdout
        with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
            page = site.get("/workers")
            assert page.status_code == 200 and "w-\\xff\\xfe" in page.text and "\x1b" not in page.text
            assert site.get("/").status_code == 200 and site.get("/metrics").status_code == 200
    finally:
        admin.srem(WORKERS_KEY, *ids)
        admin.delete(*(RECORD_PREFIX.encode() + worker_id for worker_id in ids))


def plant_dead(admin, queue: Queue, job_ids: list[bytes]) -> None:
    """Dead jobs as a raw command would write them (the ids are bytes, any bytes)."""
    for job_id in job_ids:
        admin.hset(queue.keys.job("").encode() + job_id,
                   mapping={b"state": b"dead", b"payload": b"{}", b"attempts": b"1", b"failures": b"1",
                            b"last_error": b"boom"})
        admin.zadd(queue.keys.dead, {job_id: 0})


def test_hostile_job_ids_are_listed_escaped_and_acted_on_by_their_escaped_form(emq, conn, admin):
    queue = Queue(conn, fresh_name("ids"))
    queue.enqueue({"n": 1})
    queue.fail(take(queue), "boom", max_attempts=1)  # an ordinary dead job beside them
    plant_dead(admin, queue, HOSTILE_IDS)
    listed = emq("dead", "-q", queue.name)
    assert listed.exit_code == 0, listed.output
    shown = [id_form(text(job_id)) for job_id in HOSTILE_IDS]
    assert shown == ["job-\\xff\\xfe", "a\\r\\nb", "[/x]\\x1b[2J", "back\\\\slash"]
    assert all(form in listed.stdout for form in shown) and "\r" not in listed.stdout and "\x1b" not in listed.stdout
    assert "--escaped" in listed.stderr  # how to name them
    assert emq("dead", "-q", queue.name, "--json").exit_code == 0
    assert emq("inspect", "--escaped", "-q", queue.name, shown[0]).exit_code == 0
    assert emq("inspect", "--escaped", shown[1]).exit_code == 0  # found by SCAN, without -q

    removed = emq("remove", "--escaped", "-q", queue.name, shown[0])
    assert removed.exit_code == 0 and "removed 1 job(s)" in removed.stdout
    moved = emq("reprocess", "--escaped", "-q", queue.name, shown[1], shown[3])
    assert moved.exit_code == 0 and "reprocessed 2 job(s)" in moved.stdout
    assert not admin.exists(queue.keys.job("").encode() + HOSTILE_IDS[0])
    assert sorted(admin.zrange(queue.keys.pending, 0, -1)) == sorted([HOSTILE_IDS[1], HOSTILE_IDS[3]])
    # what the shell hands Python for raw bytes (surrogate escapes) names the job too
    assert emq("remove", "-q", queue.name, text(HOSTILE_IDS[3])).exit_code == 0
    assert not admin.exists(queue.keys.job("").encode() + HOSTILE_IDS[3])

    with unchanged(admin):
        bad = emq("remove", "--escaped", "-q", queue.name, "job\\q")
        assert bad.exit_code == 2 and "'\\\\q' is not an escape" in bad.stderr


def test_the_dashboard_lists_hostile_ids_escaped_and_removes_them_with_its_forms(conn, admin):
    queue = Queue(conn, fresh_name("dash-ids"))
    queue.enqueue({"n": 1})
    queue.fail(take(queue), "boom", max_attempts=1)
    plant_dead(admin, queue, HOSTILE_IDS)
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        page = site.get(f"/queues/{queue.name}", params={"state": "dead"})
        assert page.status_code == 200 and "\x1b" not in page.text
        links = re.findall(r'/job\?id=([^"]+)"', page.text)
        assert len(links) == len(HOSTILE_IDS) + 1
        for job_id in HOSTILE_IDS:
            form = id_form(text(job_id))
            job_page = site.get(f"/queues/{queue.name}/job", params={"id": form})
            assert job_page.status_code == 200, (form, job_page.text)
            secret = re.search(r'name="secret" value="([^"]+)"', job_page.text).group(1)
            assert f'name="id" value="{form.replace("&", "&amp;")}"' in job_page.text.replace("&#34;", '"')
            done = site.post(f"/queues/{queue.name}/remove", data={"secret": secret, "id": form})
            assert done.status_code == 303, (form, done.text)
            assert not admin.exists(queue.keys.job("").encode() + job_id), form
        assert queue.counts().dead == 1  # the ordinary one is left
        assert site.get(f"/queues/{queue.name}/job", params={"id": "x\\q"}).status_code == 400
        secret = re.search(r'name="secret" value="([^"]+)"', page.text).group(1)
        with unchanged(admin):
            refused = site.post(f"/queues/{queue.name}/remove", data={"secret": secret, "id": "x\\q"})
        assert refused.status_code == 400 and "is not an escape" in refused.text


def test_the_asyncio_client_lists_and_acts_on_an_id_that_is_not_utf8(server, conn, admin):
    queue = Queue(conn, fresh_name("aio-ids"))
    queue.enqueue({"n": 1})
    plant_dead(admin, queue, [HOSTILE_IDS[0]])

    async def act() -> tuple[list, bool]:
        async with await aio.connect(server.url) as connection:
            twin = aio.Queue(connection, queue.name)
            listed = await twin.ids("dead")
            return listed, await twin.reprocess(listed[0][0])

    listed, moved = asyncio.run(act())
    assert listed == [(text(HOSTILE_IDS[0]), 0.0)] and moved
    assert HOSTILE_IDS[0] in admin.zrange(queue.keys.pending, 0, -1)
