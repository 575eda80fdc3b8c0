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
