"""Flows under SIGKILL, both wires: worker processes killed while they hold flow children; every
lease they held is recovered by the flow reaper once it expires, nothing is lost, and the parent
runs once, after its last child (as tests/reliability/chaos.py does for flat jobs, at flow size)."""

from __future__ import annotations

import signal
from typing import Any

from echomq import Flow, Queue, connect
from support.queues import fresh_name
from support.waiting import wait_server_past, wait_until
from support.workers import processed, started

CHILDREN = 40
HELD = 8  # children that hold until released: the kill finds them mid-run


def test_sigkill_mid_flow_loses_nothing_and_every_expired_lease_is_recovered(server, wire, spawn, out):
    name = fresh_name("fc")
    with connect(server.url, wire=wire) as conn:
        q = Queue(conn, name)
        client: Any = conn.client
        children = [Flow(name, {"hold": n < HELD, "echo": n}, id=f"c{n}") for n in range(CHILDREN)]
        q.enqueue_flow({"echo": "parent"}, children=children, id="root")
        workers = [spawn(name, "-c", "6", "--lease-ms", "800") for _ in range(2)]
        wait_until(lambda: all(started(out, f"c{n}", 1) for n in range(HELD)), timeout=30,
                   what="every held child to start")
        for worker in workers:
            worker.signal(signal.SIGKILL)
            worker.process.wait()
        leases = dict(client.zrange(q.keys.key("flow:active"), 0, -1, withscores=True))
        held = {member.decode() for member in leases}
        assert {f"c{n}" for n in range(HELD)} <= held  # killed while holding them
        assert "root" not in {line[0] for line in processed(out)}

        # the killed workers' leases run out; the flow reaper recovers every one (a stall each)
        wait_server_past(client, max(leases.values()))
        found = q.reap_flows(max_stalled=3)
        assert sorted(found.recovered) == sorted(held) and not found.dead and not found.exempt
        assert client.zcard(q.keys.key("flow:active")) == 0

        (out / "release").touch()
        spawn(name, "-c", "6", "--lease-ms", "800", "--sweep-interval-ms", "100", "--idle-sweep-interval-ms", "100")
        wait_until(lambda: "root" in {line[0] for line in processed(out)}, timeout=60, what="the parent to run")
        wait_until(lambda: q.metrics()["completed"] == CHILDREN + 1, timeout=20, what="every completion")
        runs = [line[0] for line in processed(out)]
        assert runs.count("root") == 1 and runs[-1] == "root"
        assert set(runs) == {f"c{n}" for n in range(CHILDREN)} | {"root"}
        for key in ("flow:pending", "flow:active", "flow:schedule", "flow:waiting", "dead"):
            assert client.zcard(q.keys.key(key)) == 0, key
        assert q.metrics() == {"completed": CHILDREN + 1, "failed": 0}
