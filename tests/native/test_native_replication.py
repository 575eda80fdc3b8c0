"""Replication (SPEC §5 check 7): the verbs' writes travel as effects, so a replica (with or
without the module) ends with exactly the primary's dataset, whatever its own clock and
run_id."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import pytest

from echomq import EmbeddedServer, module_path
from support.dataset import digest
from support.native import NativeQueue
from support.waiting import wait_link_up, wait_server_past

pytestmark = pytest.mark.slow  # replicas started per test


def workload(q: NativeQueue) -> None:
    """Every verb, ordinary paths and edges, with the queue's events on (every move appends)."""
    c = q.c
    c.hset(q.meta, "events", 50)
    for j, prio in (("a", 0), ("b", 3), ("c", 0), ("d", 0), ("e", 1), ("f", 0)):
        q.enqueue(j, b"payload-" + j.encode() + b"\xff\x00", prio)
    _, _, ta = q.claim(60000)  # a
    assert q.extend("a", ta, 120000) > 0
    _, _, tc = q.claim(60000)  # c
    assert q.extends(90000, "a", ta, "c", tc, "zz", 1)[2] == 0
    assert q.complete("a", ta) == 1
    assert q.fail("c", tc, b"boom", 1, 0) == b"dead"
    assert q.reprocess("c") == 1
    _, _, t = q.claim(60000)  # c again
    assert q.requeue("c", t) == 1
    _, _, t = q.claim(60000)  # c
    assert q.delay("c", t, 0) > 0
    assert q.fail(*q.claim(60000)[::2], b"retry", 5, 0, b"Traceback\n  d") == b"pending"  # d
    assert q.fail(*q.claim(60000)[::2], b"later", 5, 1) == b"scheduled"  # f
    q.schedule("s", b"sp", 0, 2)
    q.schedule("far", b"sp", 3_600_000, 0)
    assert q.reschedule("far", 7_200_000) > 0
    c.zadd(q.schedule_key, {"ghost-s": 0})
    wait_server_past(c, int(c.zscore(q.schedule_key, "s")))
    assert q.promote(100) >= 2
    c.zadd(q.active, {"ghost-a": 0})
    q.claim(1)
    q.claim(1)
    last = q.claim(1)
    c.hset(q.row(last[0]), "lease_epoch", "another-run")
    wait_server_past(c, int(c.zscore(q.active, last[0])))
    swept = q.stalled_check(1, 100)
    assert sum(len(part) for part in swept) == 3
    c.zadd(q.dead, {"ghost-d": 0})
    assert q.reprocess("ghost-d") == 0
    # the bus: progress, a kept result (its expiry an absolute time), a failure with its traceback
    q.enqueue("bus", b"p")
    q.enqueue("bus2", b"p")
    while (got := q.claim(60000)) and got[0] != b"bus":
        q.complete(got[0], got[2])
    assert q.append("bus", got[2], b'{"pct":50}') == 1
    assert q.publish("bus", got[2], b"result", 60000) == 1
    got = q.claim(60000)
    assert q.failures_incr(got[0], got[2], b"boom", 1, 0, b"Traceback ...") == b"dead"
    # a batch of claims in one command (CLAIMS), a ghost passed over in the middle of it
    for n in range(3):
        q.enqueue(f"batch{n}", b"p")
    c.zadd(q.pending, {"batch1-ghost": 0})  # sorts between batch1 and batch2
    claimed = [reply[0] for reply in q.claims(5, 60000)]
    assert claimed[:3] == [b"batch0", b"batch1", b"batch2"] and len(claimed) == 5  # and two promoted earlier
    assert c.zscore(q.pending, "batch1-ghost") is None
    # a batch of completes in one command (COMPLETES): a lost pair and a unique window among them
    c.hset(q.row("batch1"), "unique", 30000)
    assert q.completes("batch0", 1, "batch1", 1, "batch2", 9, "nothing", 1) == [1, 1, 0, 0]


@pytest.mark.parametrize("replica_module", [True, False], ids=["replica-with-module", "plain-replica"])
def test_a_replica_ends_with_the_primarys_dataset(replica_module):
    with EmbeddedServer(module=module_path()) as primary:
        with EmbeddedServer(
            module=module_path() if replica_module else None,
            replicaof=("127.0.0.1", primary.port),
        ) as replica:
            wait_link_up(replica)
            c = primary.client()
            q = NativeQueue(c)
            workload(q)
            assert c.execute_command("WAIT", 1, 5000) == 1
            r = replica.client()
            assert digest(r) == digest(c)
            # the replica kept the primary's stamp: effects, not a re-run on its own clock
            for key in c.keys(q.base + b"job:*"):
                assert r.hgetall(key) == c.hgetall(key)
            assert r.zrange(q.active, 0, -1, withscores=True) == c.zrange(q.active, 0, -1, withscores=True)
            assert primary.run_id() != replica.run_id()
            c.close()
            r.close()


def test_verbs_inside_multi_and_scripts_replicate_as_effects():
    """A verb queued in MULTI/EXEC or called from a script replicates its effects inside
    the transaction or the script's own effects, and a refusal in the middle writes nothing."""
    with EmbeddedServer(module=module_path()) as primary:
        with EmbeddedServer(replicaof=("127.0.0.1", primary.port)) as replica:
            wait_link_up(replica)
            c = primary.client()
            q = NativeQueue(c)
            p = c.pipeline(transaction=True)
            p.execute_command("EMQ.ENQUEUE", 2, q.pending, q.base, "j", "p", 0)
            p.execute_command("EMQ.CLAIM", 3, q.pending, q.active, q.base, 60000)
            p.execute_command("EMQ.CLAIM", 2, q.pending, q.active, q.base, 60000)
            replies = p.execute(raise_on_error=False)
            assert replies[:2] == [1, [b"j", b"p", 1]]
            assert str(replies[2]).startswith("EMQSHAPE")
            script = "return redis.call('EMQ.COMPLETE', 2, KEYS[1], KEYS[2], ARGV[1], ARGV[2])"
            assert c.eval(script, 2, q.active, q.base, "j", 1) == 1
            assert c.eval(script, 2, q.active, q.base, "j", 1) == 0
            assert c.execute_command("WAIT", 1, 5000) == 1
            r = replica.client()
            assert digest(r) == digest(c)
            assert r.hgetall(q.completed) == {b"count": b"1"}
            c.close()
            r.close()



def aof_commands(server: EmbeddedServer) -> list[list[bytes]]:
    """Every command in the server's incremental AOF file, in order (RESP arrays of bulks)."""
    (path,) = (server.dir / "appendonlydir").glob("*.incr.aof")
    data, at, commands = path.read_bytes(), 0, []

    def line() -> bytes:
        nonlocal at
        end = data.index(b"\r\n", at)
        text, at = data[at:end], end + 2
        return text

    while at < len(data):
        head = line()
        assert head[:1] == b"*", head
        args = []
        for _ in range(int(head[1:])):
            size = line()
            assert size[:1] == b"$", size
            args.append(data[at:at + int(size[1:])])
            at += int(size[1:]) + 2
        commands.append(args)
    return commands


@contextmanager
def replicated_with_aof():
    """A primary with its AOF on and a plain replica linked to it: yields (primary, its client, a queue)."""
    # the replica's sync starts at once, not after the default 5 s wait for more replicas
    with EmbeddedServer(module=module_path(), aof=True, appendfsync="always",
                        extra_args=("--repl-diskless-sync-delay", "0")) as primary:
        with EmbeddedServer(replicaof=("127.0.0.1", primary.port)) as replica:
            wait_link_up(replica)
            c = primary.client()
            yield primary, c, NativeQueue(c)
            assert c.execute_command("WAIT", 1, 5000) == 1
            with replica.client() as r:
                assert digest(r) == digest(c)
            held = digest(c)
            c.execute_command("DEBUG", "LOADAOF")
            assert digest(c) == held
            c.close()


def last_effects(primary: EmbeddedServer) -> Callable[[bytes, bytes], list[list[bytes]]]:
    """The last command's effects, as its MULTI/EXEC in the AOF holds them: the arguments after the
    key of each effect of one command on one key."""
    commands = aof_commands(primary)
    multi = len(commands) - 1 - commands[::-1].index([b"MULTI"])
    effects = commands[multi + 1:]
    assert effects[-1] == [b"EXEC"]
    return lambda name, key: [e[2:] for e in effects if e[:2] == [name, key]]


def test_a_batch_of_claims_replicates_one_effect_per_key_and_command():
    """One CLAIMS run of several jobs, ghosts among them, on a rate-limited queue with events on:
    its pops travel as one ZREM pending and its leases as one ZADD active (issue 18: effects of
    one command on one key merged), one HSET per row; the replica and the AOF replay it to the
    primary's dataset."""
    with replicated_with_aof() as (primary, c, q):
        c.hset(q.meta, mapping={"events": 50, "rate_limit": 4, "rate_window": 60000})
        for n in range(5):
            q.enqueue(f"j{n}", b"p")
        c.zadd(q.pending, {"a-ghost": 0, "j1-ghost": 0})  # at the head, and between j1 and j2
        now = int(c.time()[0]) * 1000
        rate = q.key("rate")
        c.zadd(rate, {"old:1": 1, "recent:1": now})  # one stale start, one within the window
        claimed = q.claims(10, 60000)
        # three leases: the fourth start of the window is the last the limit lets through
        assert [job[0] for job in claimed] == [b"j0", b"j1", b"j2"]
        deadline = c.zscore(q.active, "j0")
        on = last_effects(primary)
        assert on(b"ZREM", q.pending) == [[b"a-ghost", b"j0", b"j1", b"j1-ghost", b"j2"]]
        stamp = str(int(deadline)).encode()
        assert on(b"ZADD", q.active) == [[stamp, b"j0", stamp, b"j1", stamp, b"j2"]]
        assert [len(on(b"HSET", q.row(f"j{n}"))) for n in range(3)] == [1, 1, 1]
        assert len(on(b"XADD", q.events)) == 3
        assert on(b"ZREM", rate) == [[b"old:1"]]


def five_settling(c, q) -> list:
    """Five claimed jobs j0..j4 (their tokens), with events on, a unique window on j1 and j3 made a
    lane row (a batch refuses it and settles the others)."""
    c.hset(q.meta, "events", 50)
    for n in range(5):
        q.enqueue(f"j{n}", b"p")
    tokens = [job[2] for job in q.claims(5, 60000)]
    c.hset(q.row("j1"), "unique", 30000)
    c.hset(q.row("j3"), "group", "g")
    return tokens


def test_a_batch_of_completes_replicates_one_effect_per_key_and_command():
    """One COMPLETES of several jobs, with events on, a unique window and a refused pair among them:
    its removals travel as one ZREM active, its rows as one DEL and its count as one HINCRBY by their
    number (issue 18); the replica and the AOF replay it to the primary's dataset."""
    with replicated_with_aof() as (primary, c, q):
        tokens = five_settling(c, q)
        c.hset(q.completed, "count", 7)
        pairs = [part for n, t in enumerate(tokens) for part in (f"j{n}", t)]
        reply = q.completes(*pairs, "j0", tokens[0])
        assert reply[:3] + reply[4:] == [1, 1, 1, 1, 0] and str(reply[3]).startswith("EMQSTATE lane row")
        on = last_effects(primary)
        assert on(b"ZREM", q.active) == [[b"j0", b"j1", b"j2", b"j4"]]
        assert on(b"HINCRBY", q.completed) == [[b"count", b"4"]]
        assert on(b"DEL", q.row("j0")) == [[q.row(f"j{n}") for n in (1, 2, 4)]]  # one DEL of the four rows
        assert len(on(b"XADD", q.events)) == 4
        assert len(on(b"HSET", q.key("unique:j1"))) == 1 and len(on(b"PEXPIREAT", q.key("unique:j1"))) == 1
        assert c.hget(q.completed, "count") == b"11"


def test_a_batch_of_publishes_replicates_one_effect_per_key_and_command():
    """One PUBLISHES of several jobs, with events on, a unique window, an older record and a refused
    triple among them: its removals travel as one ZREM active, its rows as one DEL and its count as
    one HINCRBY, its records as one HSETEX of `done` (docs/spec.md §12: the older field replaced, its
    deadline absolute); the replica and the AOF replay it."""
    with replicated_with_aof() as (primary, c, q):
        tokens = five_settling(c, q)
        c.hset(q.key("done"), "j2", "1,5,,,older")
        triples = [part for n, t in enumerate(tokens) for part in (f"j{n}", t, f"r{n}")]
        reply = q.publishes(60000, *triples)
        assert reply[:3] + reply[4:] == [1, 1, 1, 1] and str(reply[3]).startswith("EMQSTATE lane row")
        on = last_effects(primary)
        assert on(b"ZREM", q.active) == [[b"j0", b"j1", b"j2", b"j4"]]
        assert on(b"HINCRBY", q.completed) == [[b"count", b"4"]]
        assert len(on(b"XADD", q.events)) == 4
        (records,) = on(b"HSETEX", q.key("done"))
        assert records[0] == b"PXAT" and records[2:4] == [b"FIELDS", b"4"]
        assert records[4::2] == [b"j0", b"j1", b"j2", b"j4"] and all(v.endswith(b",r" + j[1:]) for j, v in
                                                                       zip(records[4::2], records[5::2]))
        assert c.hget(q.key("done"), "j2").endswith(b",r2") and c.hget(q.key("done"), "j3") is None
