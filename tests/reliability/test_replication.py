"""Replication and failover: a primary and a replica under the chaos workload, and a
promotion (REPLICAOF NO ONE) in the middle of leases.

* the chaos run keeps a replica attached through a crash of the primary and two
  coordinated failovers (writes paused on the old primary until the replica has
  caught up, the old primary SIGKILLed with every worker, the replica promoted, a
  fresh replica attached): the ledger accounts for every job and the final
  DEBUG DIGESTs of primary and replica are equal;
* a lease granted by the old primary expires on the new one: exempt on wire 6
  (``lease_epoch`` names the old primary's run_id), counted on wire 4; a lease
  granted by the new primary is counted; a holder whose lease is still running
  settles on the new primary with the token the old one gave it.
"""

from __future__ import annotations

import json

import pytest

from chaos import Config, run
from echomq import EmbeddedServer, Queue, connect, module_path
from support.dataset import digest
from support.waiting import caught_up, server_ms, wait_server_past

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]  # replicas, failovers and chaos runs


def test_chaos_with_a_replica_and_two_failovers(wire, tmp_path):
    report = run(Config(wire=wire, jobs=1500, replica=True, restarts=3, failovers=2, power_cuts=0, seed=31 + wire),
                 str(tmp_path))
    print(json.dumps({k: v for k, v in report.__dict__.items() if k != "config"}, sort_keys=True))
    assert report.violations == []
    assert report.replica_digest_equal is True
    assert report.lost == report.in_two_sets == report.row_set_mismatch == 0
    assert report.completed + sum(report.dead.values()) == 1500
    if wire == 6:
        assert report.crossed_restart_counted == 0
    else:
        assert report.crossed_restart_exempt == 0


def test_failover_exempts_the_old_primarys_leases(wire, tmp_path):
    module = module_path() if wire == 6 else None
    primary = EmbeddedServer(module=module, brand=wire, aof=True, directory=tmp_path / "p",
                             extra_args=("--repl-diskless-sync-delay", "0")).start()
    replica = EmbeddedServer(module=module, aof=True, directory=tmp_path / "r",
                             replicaof=("127.0.0.1", primary.port)).start()
    try:
        with connect(primary.url, wire=wire) as conn:
            q = Queue(conn, "failover")
            for job_id in ("a-old", "b-held", "c-new"):
                q.enqueue({"id": job_id}, id=job_id)
            expiring = q.claim(200)  # its holder dies with the old primary
            held = q.claim(60_000)  # its holder survives the failover
        caught_up(primary.client(), replica.client())
        assert digest(primary.client()) == digest(replica.client())

        with primary.client() as client:
            client.execute_command("CLIENT", "PAUSE", 10_000, "WRITE")
        caught_up(primary.client(), replica.client())
        primary.kill()
        with replica.client() as client:
            client.execute_command("REPLICAOF", "NO", "ONE")

        with connect(replica.url, wire=wire) as conn, replica.client() as client:
            q = Queue(conn, "failover")
            fresh = q.claim(200)  # granted by the new primary
            assert (expiring.id, held.id, fresh.id) == ("a-old", "b-held", "c-new")
            wait_server_past(client, server_ms(client) + 250)
            sweep = q.stalled_check(max_stalled=5)
            if wire == 6:
                assert sweep.exempt == ["a-old"] and sweep.recovered == ["c-new"]
                assert "stalled" not in q.job("a-old")
            else:
                assert sweep.exempt == [] and sorted(sweep.recovered) == ["a-old", "c-new"]
                assert q.job("a-old")["stalled"] == "1"
            q.complete(held)  # the old primary's token still fences the job on the new one
            assert q.state("b-held") is None
            assert q.counts().pending == 2
    finally:
        primary.cleanup()
        replica.cleanup()
