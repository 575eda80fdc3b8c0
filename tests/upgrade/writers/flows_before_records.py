"""Writes in-flight flows as EchoMQ wrote them before a parent kept a record of its children
(``flow:children:<id>``, issue 43): main at 8fc76d0, which still called itself 0.1.0. Run by
make_fixtures.py as ``python flows_before_records.py URL FACTS`` with that tree first on
PYTHONPATH, never by the suite. The node is left unbranded: the tests brand it for either wire
(flows are scripts on both).

Three flows, each under way: one in a single queue, one whose children sit in another queue,
and one nested across the two queues (its middle job a parent in `pages` of leaves in `pages`)."""

import json
import sys

import valkey

from echomq import Flow, Queue, brand_node, connect

TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000

url, facts_path = sys.argv[1], sys.argv[2]
node = valkey.Valkey.from_url(url)
brand_node(node, 4)  # to connect; taken off at the end
conn = connect(url, wire=4)
reports, pages = Queue(conn, "reports"), Queue(conn, "pages")


def done(queue: Queue, job, result: str) -> None:
    """FLOW_COMPLETE as that tree's worker sent it, keeping no completed record (none to expire)."""
    queue._run(queue.op_fenced(queue.flow_complete_call(job, json.dumps(result).encode(), retention_ms=0)))


# one queue: the first child finished (its parent told), the second held, the third waiting
same = reports.enqueue_flow({"flow": "same"}, id="same",
                            children=[Flow("reports", {"c": i}, id=f"same-{i}") for i in range(3)]).id
(first,) = reports.flow_claim(1, 60_000)
done(reports, first, "same-0 done")
(held,) = reports.flow_claim(1, TEN_YEARS_MS)
# across queues: the parent in reports, its children in pages (one pending, one whose lease ran out)
cross = reports.enqueue_flow({"flow": "cross"}, id="cross",
                             children=[Flow("pages", {"c": i}, id=f"cross-{i}") for i in range(2)]).id
# nested: reports' root waits for a parent in pages, which waits for two leaves in pages
nested = reports.enqueue_flow({"flow": "nested"}, id="nested", children=[
    Flow("pages", {"m": 0}, id="nested-mid", children=[Flow("pages", {"l": i}, id=f"nested-leaf-{i}")
                                                        for i in range(2)])]).id
claimed = pages.flow_claim(1, 1)  # cross-0: its holder died; the lease ran out long before the upgrade
assert [job.id for job in claimed] == ["cross-0"], claimed

node.delete("{emq}:version")
json.dump({
    "commit": "8fc76d0", "release": "0.1.0 (main before issue 43's flow records)",
    "flows": {"same": {"parent": "reports/same", "children": ["reports/same-1", "reports/same-2"],
                       "told": {"same-0": "same-0 done"}},
              "cross": {"parent": "reports/cross", "children": ["pages/cross-0", "pages/cross-1"]},
              "nested": {"parent": "reports/nested", "children": ["pages/nested-mid"]},
              "nested-mid": {"parent": "pages/nested-mid", "children": ["pages/nested-leaf-0", "pages/nested-leaf-1"]}},
    "held_lease": {"queue": "reports", "id": held.id, "token": held.token},
    "expired_lease": {"queue": "pages", "id": "cross-0"},
}, open(facts_path, "w"), indent=2, sort_keys=True)
