"""Bounds on what the operator's tools read and hold (issue 43, item 4's client side;
docs/guarantees.md "Lists read what they show"), on both wires.

A list (the dashboard's job page, ``emq dead``) reads only the fields it shows, never a payload
or a traceback, and clips a long error; ``emq enqueue --count N`` holds a batch, not N jobs; a
payload nested 100,000 deep or holding a lone surrogate is refused with a clear error and
nothing written, and one another client wrote is still shown. Bytes read are the server's own
count (INFO stats), on a node of its own per wire."""

from __future__ import annotations

import json
import tracemalloc

import httpx
import pytest

from echomq import PayloadError, Queue
from echomq.admin.actions import ENQUEUE_BATCH
from echomq.dashboard import Settings, serving
from echomq._protocol.serializers import RAW
from echomq._protocol.shown import LISTED_CHARS
from support.dashboard import own_servers, server  # noqa: F401 (fixtures)
from support.dataset import unchanged
from support.queues import fresh_name, take

BIG = 200 * 1024  #: each listed job's payload: a page of 25 whole rows would read 5 MB of them
LONG_ERROR = "E" * 10_000  #: the server keeps its first 4 KiB


def sent_bytes(client) -> int:
    return int(client.info("stats")["total_net_output_bytes"])


@pytest.fixture
def heavy(conn):
    """30 dead jobs, each with a 200 KiB payload, an 8 KB traceback and a long error."""
    queue = Queue(conn, fresh_name("heavy"), serializer=RAW, max_payload_bytes=BIG + 1)
    for n in range(30):
        queue.enqueue(b"p" * BIG)
        queue.fail(take(queue), LONG_ERROR, max_attempts=1, traceback="T" * 8000)
    return queue


def test_a_page_of_jobs_reads_only_what_it_shows_and_clips_long_errors(conn, server, heavy):
    with serving(conn, Settings(sample_interval_s=60)) as url, httpx.Client(base_url=url) as site, \
            server.client() as admin:
        before = sent_bytes(admin)
        page = site.get(f"/queues/{heavy.name}", params={"state": "dead"})
        read = sent_bytes(admin) - before
        assert page.status_code == 200 and page.text.count("/job?id=") == 25
        # the 25 listed rows with their errors are 0.11 MB; whole rows (payload, traceback) would be 5.3 MB
        assert read < 1_000_000, f"the page read {read} bytes: whole rows, not the listed fields"
        assert "E" * LISTED_CHARS + "…" in page.text and "E" * (LISTED_CHARS + 1) not in page.text
        first = heavy.ids("dead", count=1)[0][0]
        job = site.get(f"/queues/{heavy.name}/job", params={"id": first})
        stored = heavy.job(first)["last_error"]  # the server keeps an error's first 4 KiB
        assert job.status_code == 200 and len(stored) > LISTED_CHARS and stored in job.text  # shown whole


def test_emq_dead_reads_only_what_it_lists(emq, server, heavy):
    with server.client() as admin:
        before = sent_bytes(admin)
        listed = emq("dead", "-q", heavy.name, "--limit", "30", "--json")
        read = sent_bytes(admin) - before
    assert listed.exit_code == 0 and read < 1_000_000, read  # 30 whole rows: 6.4 MB
    table = emq("dead", "-q", heavy.name)
    assert table.exit_code == 0 and "E" * LISTED_CHARS + "…" in table.stdout
    assert "E" * (LISTED_CHARS + 1) not in table.stdout and '"payload"' not in listed.stdout


def test_enqueue_count_holds_a_batch_not_every_job(emq, conn):
    name = fresh_name("count")
    payload = '{"blob": "' + "x" * 2000 + '"}'
    count = 12 * ENQUEUE_BATCH
    tracemalloc.start()
    try:
        done = emq("enqueue", "-q", name, "--count", str(count), payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done.exit_code == 0 and f"... {count} jobs in all" in done.stdout
    assert Queue(conn, name).counts().pending == count
    # every job at once held 12 batches of encoded payloads and calls; a batch (one round trip of
    # enqueue_many's, ENQUEUE_BATCH jobs) holds about 4.5 KB a job of this 2 KB payload
    assert peak < 6 * len(payload) * ENQUEUE_BATCH, f"peak {peak} bytes"
    ids = emq("enqueue", "-q", name, "--count", str(ENQUEUE_BATCH + 3), "--json", "{}")
    answered = json.loads(ids.stdout)
    assert len(answered) == ENQUEUE_BATCH + 3 and all(item["created"] for item in answered)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("args,says", [
    ([DEEP], "nested deeper than Python's JSON reads"),
    (['"\\ud800"'], "lone surrogate"),
    (['{"k": "\\udcff"}'], "lone surrogate"),
    (["\udcc3("], "is not UTF-8 text"),  # bytes that are not UTF-8 (C3 28), as Python reads them from argv
])
def test_a_payload_json_cannot_carry_is_refused_with_nothing_written(emq, server, args, says):
    with server.client() as admin, unchanged(admin):
        refused = emq("enqueue", "-q", fresh_name("refused"), *args)
    assert refused.exit_code == 1 and says in refused.stderr, refused.output


def test_the_library_refuses_them_too(conn):
    queue = Queue(conn, fresh_name("lib"))
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    for payload, says in ((deep, "nested deeper"), ("\ud800", "lone surrogate")):
        with pytest.raises(PayloadError, match=says):
            queue.enqueue(payload)
    assert queue.counts().pending == 0


def test_a_deep_or_binary_payload_another_client_wrote_is_still_shown(emq, conn):
    queue = Queue(conn, fresh_name("deep"), serializer=RAW)
    job = queue.enqueue(DEEP.encode())
    raw_args = emq("enqueue", "-q", queue.name, "--raw", "\udcff\udcfe")  # --raw: the argument's bytes as given
    assert raw_args.exit_code == 0
    shown = emq("inspect", job.id, "-q", queue.name)
    assert shown.exit_code == 0 and "b'[[[[" in shown.stdout
    assert queue.job(raw_args.stdout.split("\t")[0])["payload"] == b"\xff\xfe"
    with serving(conn, Settings()) as url, httpx.Client(base_url=url) as site:
        assert site.get(f"/queues/{queue.name}/job", params={"id": job.id}).status_code == 200
