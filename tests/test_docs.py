"""The docs that restate the verb table stay in step with it."""

from pathlib import Path

from echomq._protocol.verbs import FLOWS, LANES, OPTIONAL, VERBS

DOCS = Path(__file__).parent.parent / "docs"


def moves(doc: str, head: str) -> dict[str, str]:
    """A doc's three-column moves table (``head | move | performed by``): name -> move."""
    rows = {}
    for line in (DOCS / doc).read_text().splitlines():
        cells = [cell.strip().replace("\\|", "|") for cell in line.strip().strip("|").split(" | ")]
        if len(cells) == 3 and cells[1] not in ("move", "---") and cells[0] not in (head, "---"):
            rows[cells[0]] = cells[1]
    return rows


def test_lifecycle_lists_every_verb_with_its_move():
    assert moves("lifecycle.md", "verb") == {verb.name: verb.move for verb in VERBS + OPTIONAL + FLOWS}


def test_lanes_doc_lists_every_lane_script_with_its_move():
    rows = moves("lanes-and-flows.md", "script")  # the flows' own rows may sit beside them
    assert {verb.name: rows.get(verb.name) for verb in LANES} == {verb.name: verb.move for verb in LANES}


# --------------------------------------------------------------------------- docs/examples run


def load_example(name: str):
    import importlib.util
    import sys

    path = DOCS / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_example_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_asyncio_web_service_example_enqueues_from_concurrent_requests(server, wire, conn):
    import asyncio
    import json

    from echomq import Queue
    from echomq.local.server import free_port
    from echomq.testing import assert_enqueued, drain

    example = load_example("web_service")
    port = free_port()
    emails = Queue(conn, "welcome-emails")
    sent = Queue(conn, "sent-emails")
    with server.client() as admin:  # the example names its queues: start them empty on the shared server
        for queue in (emails, sent):
            keys = list(admin.scan_iter(match=queue.keys.pattern()))
            if keys:
                admin.delete(*keys)

    async def request(method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        answer = await reader.read()
        writer.close()
        head, _, data = answer.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), json.loads(data)

    async def main() -> list[tuple[int, dict]]:
        http, connection = await example.serve(server.url, wire=wire, port=port, max_connections=5)
        async with connection, http:
            signups = [request("POST", "/signup", json.dumps({"email": f"u{i}@example.com"}).encode())
                       for i in range(50)]
            answers = await asyncio.gather(*signups)
            answers.append(await request("POST", "/signup", b'{"email": "nobody"}'))
            answers.append(await request("GET", "/stats"))
            return answers

    answers = asyncio.run(main())
    assert [status for status, _ in answers[:50]] == [202] * 50
    assert answers[50] == (400, {"error": "bad email 'nobody'"})
    assert answers[51] == (200, {"pending": 50, "active": 0, "scheduled": 0, "dead": 0, "paused": False,
                                 "lane_pending": 0, "lane_active": 0, "flow_waiting": 0, "flow_pending": 0,
                                 "flow_active": 0, "flow_scheduled": 0})
    assert {row["id"] for row in assert_enqueued(emails, count=50)} == {body["job"] for _, body in answers[:50]}
    assert drain(example.app, emails).completed == 50  # the async handler enqueues through ctx.producer
    assert sorted(row["payload"]["to"] for row in assert_enqueued(sent, count=50)) == sorted(
        f"u{i}@example.com" for i in range(50))


# --------------------------------------------------------------------------- docs/migrating.md's examples


def doc_block(page: str, first_line: str) -> str:
    """The code block of ``page`` whose first line is ``first_line``."""
    import re

    for block in re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S):
        if block.startswith(first_line + "\n"):
            return block
    raise AssertionError(f"{page} has no code block starting {first_line!r}")


def emptied(server, *names: str) -> None:
    """The example's queues start empty on the shared server (an example names its own queues)."""
    from echomq._protocol.keys import Keyspace

    with server.client() as admin:
        for name in names:
            keys = list(admin.scan_iter(match=Keyspace(name).pattern()))
            if keys:
                admin.delete(*keys)


def test_the_celery_app_is_ported_with_four_lines_changed_and_runs(server, conn):
    import difflib

    from echomq import Queue
    from echomq.testing import drain

    before = doc_block("migrating.md", "# shop.py, with Celery").splitlines()[1:]
    after = doc_block("migrating.md", "# shop.py, with EchoMQ")
    source = (DOCS / "examples" / "celery_shop.py").read_text()
    assert source.endswith(after), "migrating.md shows examples/celery_shop.py as it is"
    changed = [line for line in difflib.ndiff(before, after.splitlines()[1:]) if line.startswith("+ ")]
    assert len(changed) == 4, changed
    shop = load_example("celery_shop")
    emptied(server, "shop")
    shop.app.connect(conn)
    handle = shop.checkout("ada", {"apple": 2, "fig": 1})
    assert drain(shop.app, Queue(conn, "shop")).completed == 4  # two prices, the invoice, the receipt
    assert handle.get(timeout=5) == "sent 13 to ada"


def test_the_rq_example_enqueues_with_options_and_fetches_by_id(server, conn):
    from echomq import Status, Worker
    from test_worker import running

    words = load_example("rq_words")
    emptied(server, "default")
    words.app.connect(conn)
    job, later, at = words.enqueue_some()
    with running(Worker(words.app, conn)):
        assert words.fetch(job.id).get(timeout=10) == 6
    assert (later.status(), at.status()) == (Status.SCHEDULED, Status.SCHEDULED)


def test_the_arq_example_runs_an_async_task_whose_context_comes_first(server, conn, wire):
    import asyncio

    from echomq import Worker
    from test_worker import running

    crawler = load_example("arq_crawler")
    emptied(server, "arq")
    crawler.app.connect(server.url, wire=wire)

    async def crawl() -> list:
        try:
            return await crawler.crawl(["https://a.example", "https://b.example"])
        finally:
            await crawler.app.aclose()

    with running(Worker(crawler.app, conn)):
        results = asyncio.run(crawl())
    assert results == [{"url": "https://a.example", "depth": 1, "try": 1},
                       {"url": "https://b.example", "depth": 1, "try": 1},
                       {"url": "https://example.com/deep", "depth": 2, "try": 1}]


def test_the_bullmq_example_runs_named_jobs_a_flow_and_tells_its_events(server, conn):
    from echomq import Queue
    from echomq.testing import drain

    media = load_example("bullmq_media")
    emptied(server, "media")
    media.app.connect(conn)
    queue = Queue(conn, "media")
    queue.enable_events()
    one, album = media.add_jobs()
    assert drain(media.app, queue).completed == 4
    assert one.get(timeout=5) == "cat.png@640"
    assert album.get(timeout=5) == "holiday: a.png@320, b.png@320"
    events = [event.type for event in queue.events()]
    assert events.count("completed") == 4 and events.count("progress") == 3
