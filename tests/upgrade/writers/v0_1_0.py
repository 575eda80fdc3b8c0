"""Writes the data of an EchoMQ 0.1.0 node (commit 7b480d4) with 0.1.0's own package: run by
make_fixtures.py as ``python v0_1_0.py URL WIRE FACTS`` with that tree first on PYTHONPATH, never
by the suite. FACTS (JSON) says what each job is, for the upgrade tests to check.

The shapes of 0.1.0: UUIDv7 ids, rows without timestamps, dead scores of 0, no completed
records, and (wire 6) a lease_epoch of the server run that wrote it."""

import json
import sys

import valkey

import echomq
from echomq import RAW, Queue, connect

TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000

url, wire, facts_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
echomq.brand_node(valkey.Valkey.from_url(url), wire)
conn = connect(url, wire=wire)
orders, blobs, held = Queue(conn, "orders"), Queue(conn, "blobs", serializer=RAW), Queue(conn, "held")
payloads: dict[str, object] = {}


def add(queue: Queue, payload: object, delay_ms: int | None = None, **options: object) -> str:
    made = queue.enqueue(payload, **options) if delay_ms is None else queue.schedule(payload, delay_ms, **options)
    payloads[made.id] = payload if isinstance(payload, dict) else payload.hex()
    return made.id


# claimed first (a claim takes the head of pending), then what stays pending
completed = [add(orders, {"n": n}) for n in range(3)]
for _ in completed:
    orders.complete(orders.claim(60_000))  # counted; no record kept (0.1.0 kept none)
dead = [add(orders, {"n": n, "poison": True}) for n in (3, 4)]
for _ in dead:
    orders.fail(orders.claim(60_000), "ValueError: poison", max_attempts=1)  # dead, score 0
retry = add(orders, {"n": 5})
assert orders.fail(orders.claim(60_000), "TimeoutError: slow", max_attempts=3, backoff_ms=1) == "scheduled"
lease = add(orders, {"n": 6})
holder = orders.claim(TEN_YEARS_MS)  # a worker that still holds its job: the lease outlives the upgrade
expired = add(orders, {"n": 7})
orders.claim(1)  # a worker that died holding its job: its lease ran out long before the upgrade
pending = [add(orders, {"n": 8}, priority=5), add(orders, {"n": 9}, id="order-9"),
           *(add(orders, {"n": n}) for n in (10, 11, 12))]
due = add(orders, {"n": 13}, delay_ms=1)  # due before the upgrade
later = add(orders, {"n": 14}, delay_ms=TEN_YEARS_MS)  # due long after it
raw = add(blobs, b"\x00\xffnot UTF-8\n")
paused = [add(held, {"n": n}) for n in (15, 16)]
held.pause()

json.dump({
    "release": "0.1.0", "commit": "7b480d4", "wire": wire,
    "queues": {
        "orders": {"pending": pending, "active": [lease, expired], "scheduled": [retry, due, later], "dead": dead,
                   "completed": completed, "completed_total": len(completed), "dead_total": len(dead)},
        "blobs": {"pending": [raw]},
        "held": {"pending": paused, "paused": True},
    },
    "held_lease": {"queue": "orders", "id": lease, "token": holder.token},
    "expired_lease": {"queue": "orders", "id": expired},
    "scheduled_later": {"queue": "orders", "id": later},
    "payloads": payloads,  # a RAW payload as hex
}, open(facts_path, "w"), indent=2, sort_keys=True)
