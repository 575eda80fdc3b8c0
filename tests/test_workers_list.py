"""The workers list: heartbeat records written by real workers, read by `emq workers`, gone on
a clean stop and, after a crash, within their TTL."""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest
from click.testing import CliRunner

from echomq import App, Worker, WorkerConfig
from echomq.cli import main
from echomq.errors import ConfigurationError
from echomq._core.workers import WORKERS_KEY, WorkerRecord, decode_record, encode_record, record_key
from echomq.admin.workers import list_workers
from echomq.worker.heartbeat import Heartbeat, HeartbeatConfig
from test_worker import running
from support.queues import fresh_name
from support.waiting import wait_until


def test_a_record_round_trips_through_its_hash_fields():
    record = WorkerRecord("h:1:ab", "h", 1, ["a", "b"], 4, 6, 10.5, 12.25, 2, 7, 3)
    fields = {k.encode(): v.encode() for k, v in encode_record(record).items()}
    assert decode_record("h:1:ab", fields) == record
    assert decode_record("h:1:ab", {}) is None  # expired between the SMEMBERS and the HGETALL
    assert decode_record("h:1:ab", {**fields, b"pid": b"x"}) is None


@pytest.mark.parametrize("interval, ttl", [(0, 100), (100, 100), (200, 100)])
def test_a_ttl_that_does_not_outlast_the_interval_is_refused(interval, ttl):
    with pytest.raises(ConfigurationError, match="heartbeat"):
        HeartbeatConfig(interval_ms=interval, ttl_ms=ttl)


def test_the_workers_list_is_public():
    import echomq

    assert echomq.list_workers is list_workers and echomq.HeartbeatConfig is HeartbeatConfig


def test_a_running_worker_is_listed_and_a_clean_stop_removes_it(conn, server):
    name = fresh_name("w")
    app = App()
    app.task(queue=name)(lambda payload: None)
    worker = Worker(app, conn, config=WorkerConfig(concurrency=3))
    with running(worker):
        record = wait_until(lambda: next((r for r in list_workers(conn) if r.id == worker.heartbeat.id), None),
                            what="the worker's record")
        assert (record.host, record.pid, record.queues, record.concurrency, record.wire) == \
            (socket.gethostname(), os.getpid(), [name], 3, conn.wire)
        assert 0 < conn.client.pttl(record_key(record.id)) <= HeartbeatConfig().ttl_ms
        result = CliRunner().invoke(main, ["workers", "--json", "--url", server.url])
        assert result.exit_code == 0, result.output
        listed = {row["id"]: row for row in json.loads(result.stdout)}
        assert listed[record.id]["queues"] == [name] and listed[record.id]["pid"] == os.getpid()
        table = CliRunner().invoke(main, ["workers", "--url", server.url])
        assert record.id in table.stdout and "live worker(s)" in table.stdout
    assert record.id not in {r.id for r in list_workers(conn)}
    assert not conn.client.exists(record_key(record.id))
    assert not conn.client.sismember(WORKERS_KEY, record.id)


def test_a_worker_that_dies_disappears_within_its_ttl_and_the_next_one_forgets_its_id(conn):
    fast = HeartbeatConfig(interval_ms=50, ttl_ms=300)
    dead = Heartbeat(conn.client, queues=["q"], concurrency=1, wire=conn.wire, config=fast)
    dead.run_due(0, held=1, completed=5, failed=1)
    (shown,) = [r for r in list_workers(conn) if r.id == dead.id]
    assert (shown.held, shown.completed, shown.failed) == (1, 5, 1)
    # no more beats: the process "died"; its record expires on the server's clock
    wait_until(lambda: dead.id not in {r.id for r in list_workers(conn)}, what="the record to expire")
    assert conn.client.sismember(WORKERS_KEY, dead.id)  # readers skip it without writing
    later = Heartbeat(conn.client, queues=["q"], concurrency=1, wire=conn.wire, config=fast)
    later.run_due(0, held=0, completed=0, failed=0)
    assert not conn.client.sismember(WORKERS_KEY, dead.id)  # registering drops the dead ids
    later.remove()


def test_beats_follow_the_interval(conn):
    beat = Heartbeat(conn.client, queues=["q"], concurrency=1, wire=conn.wire,
                     config=HeartbeatConfig(interval_ms=1000, ttl_ms=3000))
    try:
        assert beat.run_due(5000, held=0, completed=0, failed=0)
        assert not beat.run_due(5999, held=0, completed=1, failed=0)
        assert beat.next_due_ms() == 6000
        assert beat.run_due(6000, held=0, completed=2, failed=0)
        (shown,) = [r for r in list_workers(conn) if r.id == beat.id]
        assert shown.completed == 2
    finally:
        beat.remove()


def test_a_worker_process_killed_outright_leaves_a_record_that_expires(spawn, conn, server, out):
    name = fresh_name("wk")
    proc = spawn(name)
    wait_until(lambda: any(r.pid == proc.pid for r in list_workers(conn)), what="the process's record")
    (record,) = [r for r in list_workers(conn) if r.pid == proc.pid]
    proc.signal(signal.SIGKILL)
    proc.wait()
    assert conn.client.exists(record_key(record.id))  # no clean stop: it is still there, for at most its TTL
    ttl = conn.client.pttl(record_key(record.id))
    assert 0 < ttl <= HeartbeatConfig().ttl_ms
    # gone now rather than in 15 s: a later test comparing the whole node must not see it expire
    conn.client.delete(record_key(record.id))
