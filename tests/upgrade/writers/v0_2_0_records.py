"""Writes completed records as EchoMQ 0.2.0 kept them (commit 97aca8b): a key ``done:<id>`` each
(``result``, ``attempts``, ``created``, ``started``, ``finished``, a key expiry), before records
became fields of the queue's hash ``done`` (issue 44 item 2). Run by make_fixtures.py as
``python v0_2_0_records.py URL FACTS`` with that tree first on PYTHONPATH, never by the suite. The
node is left unbranded: the tests brand it for either wire (0.2.0's PUBLISH wrote the same bytes on
both, as its parity instrument holds).

A JSON queue with two records and a RAW queue with one whose result holds commas and a NUL (the
bytes the packed layout keeps after its fourth comma), each kept ten years: the tests end one's
retention themselves."""

import json
import sys

import valkey

from echomq import RAW, Queue, brand_node, connect

TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000

url, facts_path = sys.argv[1], sys.argv[2]
node = valkey.Valkey.from_url(url)
brand_node(node, 4)  # to connect; taken off at the end
conn = connect(url, wire=4)
orders, blobs = Queue(conn, "orders"), Queue(conn, "blobs", serializer=RAW)
results: dict[str, dict[str, object]] = {}


def completed(queue: Queue, job_id: str, result: object) -> None:
    queue.enqueue({"id": job_id} if queue is orders else b"payload", id=job_id)
    job = queue.claim(60_000)
    assert job is not None and job.id == job_id, job
    queue.publish(job, result, retention_ms=TEN_YEARS_MS)
    record = node.hgetall(queue.keys.done(job_id))
    results.setdefault(queue.name, {})[job_id] = {
        "result": result if queue is orders else result.hex(), "finished": int(record[b"finished"])}


completed(orders, "order-1", {"total": 42})
completed(orders, "order-2", ["shipped", 2])
completed(blobs, "blob-1", b"a,b,\x00c")

node.delete("{emq}:version")
json.dump({"release": "0.2.0", "commit": "97aca8b", "records": results}, open(facts_path, "w"), indent=2,
          sort_keys=True)
