"""EMQ.BCLAIM (SPEC §9.3, docs/spec.md §9): CLAIM, but where CLAIM would answer empty
having written nothing (pending empty, or the queue paused) the caller blocks until a write
can serve it or timeout_ms passes. Real servers, real blocked connections: each blocked call
runs on its own connection in a thread, and "blocked" is read from CLIENT LIST (flag ``b``),
never guessed from a sleep."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import valkey

from echomq import EmbeddedServer, module_path
from support.dataset import digest, error_code, refused
from support.native import Blocker, NativeQueue, client_entries, is_blocked, still_blocked, wait_blocked
from support.queues import fresh_name
from support.waiting import wait_link_up, wait_server_past, wait_until

NOT_INTEGER = "EMQ hash value is not an integer"


def bclaim(client, q: NativeQueue, lease_ms=30000, timeout_ms=1):
    return client.execute_command("EMQ.BCLAIM", 3, q.pending, q.active, q.base, lease_ms, timeout_ms)


def claimed_ok(q: NativeQueue, reply, id: bytes, attempts: int, run_id: bytes) -> None:
    assert reply == [id, b"p", attempts]
    row = q.hrow(id)
    assert row[b"state"] == b"active" and row[b"attempts"] == str(attempts).encode()
    assert row[b"lease_epoch"] == run_id
    assert [m for m, _ in q.zset(q.active)] == [id]


# -- it is CLAIM where CLAIM serves ----------------------------------------------------------

def test_a_job_there_is_claimed_at_once_as_claim_claims_it(admin, run_id):
    a, b = NativeQueue(admin), NativeQueue(admin)
    for q in (a, b):
        q.enqueue("j", b"p", 3)
    by_claim = a.claim(30000)
    by_bclaim = bclaim(admin, b, 30000, 0)  # 0 = no timeout: had it blocked, this would hang
    assert by_bclaim == by_claim == [b"j", b"p", 1]
    timeless = ({k: v for k, v in q.hrow("j").items() if k not in (b"created", b"started")} for q in (a, b))
    assert next(timeless) == next(timeless)  # the same row but for the server times it was written at
    assert b.hrow("j")[b"lease_epoch"] == run_id
    assert b.zset(b.pending) == a.zset(a.pending) == []
    (_, sa), (_, sb) = a.zset(a.active)[0], b.zset(b.active)[0]
    assert abs(sa - sb) < 5000  # both now + lease on the server clock


def test_a_ghost_head_is_popped_and_answered_empty_as_claim_does(admin):
    q = NativeQueue(admin)
    admin.zadd(q.pending, {"0ghost": 0})
    q.enqueue("j", b"p")
    assert bclaim(admin, q, 30000, 0) == []
    assert q.zset(q.pending) == [(b"j", 0.0)]
    assert not admin.exists(q.row("0ghost"))
    assert bclaim(admin, q, 30000, 0)[0] == b"j"


def test_timeout_answers_empty_and_writes_nothing(admin):
    q = NativeQueue(admin)
    before = digest(admin)
    started = time.monotonic()
    assert bclaim(admin, q, 30000, 50) == []
    assert time.monotonic() - started >= 0.04
    assert digest(admin) == before
    assert admin.exists(q.pending, q.active, q.schedule_key, q.meta) == 0


# -- what wakes it ---------------------------------------------------------------------------

def _claimed_once(q):
    q.enqueue("j", b"p")
    return q.claim(30000)[2]


def _wake_enqueue(q):
    return lambda: q.enqueue("j", b"p"), 1


def _wake_plain_commands(q):
    def wake():
        p = q.c.pipeline(transaction=True)
        p.hset(q.row("j"), mapping={"state": "pending", "payload": "p", "attempts": "0"})
        p.zadd(q.pending, {"j": 0})
        p.execute()
    return wake, 1


def _wake_promote(q):
    q.schedule("j", b"p", 0)
    wait_server_past(q.c, int(q.c.zscore(q.schedule_key, "j")))
    return lambda: q.promote() == 1 or pytest.fail("nothing promoted"), 1


def _wake_reprocess(q):
    token = _claimed_once(q)
    assert q.fail("j", token, b"e", 1, 0) == b"dead"
    return lambda: q.reprocess("j"), 2


def _wake_fail_to_pending(q):
    token = _claimed_once(q)
    return lambda: q.fail("j", token, b"e", 5, 0) == b"pending" or pytest.fail("not to pending"), 2


def _wake_requeue(q):
    token = _claimed_once(q)
    return lambda: q.requeue("j", token), 2


def _expired(q, epoch=None):
    q.enqueue("j", b"p")
    q.claim(1)
    if epoch is not None:
        q.c.hset(q.row("j"), "lease_epoch", epoch)
    wait_server_past(q.c, int(q.c.zscore(q.active, "j")))


def _wake_stalled_recover(q):
    _expired(q)
    return lambda: q.stalled_check(5, 10) == [[b"j"], [], []] or pytest.fail("not recovered"), 2


def _wake_stalled_exempt(q):
    _expired(q, epoch="another-run")
    return lambda: q.stalled_check(5, 10) == [[], [b"j"], []] or pytest.fail("not exempt"), 2


WAKES = {
    "enqueue": _wake_enqueue,
    "plain-zadd-hset": _wake_plain_commands,
    "promote": _wake_promote,
    "reprocess": _wake_reprocess,
    "fail-to-pending": _wake_fail_to_pending,
    "requeue": _wake_requeue,
    "stalled-recover": _wake_stalled_recover,
    "stalled-exempt": _wake_stalled_exempt,
}


@pytest.mark.parametrize("how", sorted(WAKES))
def test_a_blocked_claimer_gets_the_job_a_write_makes_claimable(native_server, admin, run_id, how):
    q = NativeQueue(admin)
    wake, attempts = WAKES[how](q)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    wake()
    claimed_ok(q, blocker.result(), b"j", attempts, run_id)


def test_ten_blocked_claimers_and_one_job_it_is_claimed_once(native_server, admin, run_id):
    q = NativeQueue(admin)
    blockers = [Blocker(native_server, q).start() for _ in range(10)]
    wait_blocked(admin, *blockers)
    q.enqueue("j", b"p")
    wait_until(lambda: any(b.done for b in blockers), what="one claimer served")
    served = [b for b in blockers if b.done]
    assert len(served) == 1
    others = [b for b in blockers if b not in served]
    still_blocked(admin, *others)
    claimed_ok(q, served[0].result(), b"j", 1, run_id)
    # the others time out (CLIENT UNBLOCK runs the timeout path now), empty, writing nothing
    before = digest(admin)
    for b in others:
        (entry,) = client_entries(admin, b.name)
        assert admin.client_unblock(entry["id"]) == 1
    assert [b.result() for b in others] == [[]] * 9
    assert digest(admin) == before


def test_a_ghost_at_a_wake_is_popped_and_answered_empty_as_claim_does(native_server, admin):
    q = NativeQueue(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    admin.zadd(q.active, {"x": 1})  # a write to a key it does not wait on
    still_blocked(admin, blocker)
    admin.zadd(q.pending, {"ghost": 0})  # no row
    assert blocker.result() == []
    assert admin.exists(q.pending, q.row("ghost")) == 0


# -- pause ---------------------------------------------------------------------------------

@pytest.mark.parametrize("resume", ["hdel", "hdel-other-fields-stay", "del", "unlink", "expire", "rename"])
def test_paused_it_stays_blocked_and_a_resume_is_seen_at_once(native_server, admin, run_id, resume):
    q = NativeQueue(admin)
    admin.hset(q.meta, "paused", 1)
    if resume == "hdel-other-fields-stay":
        admin.hset(q.meta, "note", "x")
    q.enqueue("j", b"p")
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    q.enqueue("k", b"p")  # claimable but for the pause: still blocked
    still_blocked(admin, blocker)
    started = time.monotonic()
    if resume == "del":
        admin.delete(q.meta)
    elif resume == "unlink":
        admin.unlink(q.meta)
    elif resume == "expire":  # the server's expiry cycle deletes it: an "expired" event
        admin.pexpire(q.meta, 1)
    elif resume == "rename":
        admin.rename(q.meta, q.key("meta-was"))
    else:
        admin.hdel(q.meta, "paused")
    reply = blocker.result(within_s=1.0)
    took = time.monotonic() - started
    claimed_ok(q, reply, b"j", 1, run_id)
    assert took < 1.0


def test_paused_while_blocked_it_stays_blocked_until_the_resume(native_server, admin, run_id):
    q = NativeQueue(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    admin.hset(q.meta, "paused", 1)
    still_blocked(admin, blocker)
    q.enqueue("j", b"p")
    still_blocked(admin, blocker)
    admin.hdel(q.meta, "paused")
    claimed_ok(q, blocker.result(within_s=1.0), b"j", 1, run_id)


def test_paused_and_empty_a_resume_alone_does_not_wake_it(native_server, admin):
    q = NativeQueue(admin)
    admin.hset(q.meta, "paused", 1)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    admin.hdel(q.meta, "paused")
    still_blocked(admin, blocker)
    q.enqueue("j", b"p")
    assert blocker.result()[0] == b"j"


# -- an earlier due time wakes it (exact timers) -------------------------------------------

def test_schedule_that_brings_the_due_time_earlier_answers_empty(native_server, admin):
    """The caller bounds its timeout by schedule's next due time; a write that moves that time
    earlier wakes it with the empty array, so it re-reads the due time. A later one does not."""
    q = NativeQueue(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    q.schedule("far", b"p", 60_000)  # schedule was empty: a new next due time
    assert blocker.result() == []
    assert admin.exists(q.pending, q.active) == 0  # the wake wrote nothing
    assert q.hrow("far")[b"state"] == b"scheduled"

    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    q.schedule("later", b"p", 120_000)  # after the next due time: no wake
    assert q.reschedule("later", 180_000) > 0  # moved, still after it
    still_blocked(admin, blocker)
    assert q.reschedule("later", 1_000) > 0  # now the earliest
    assert blocker.result() == []


def test_delay_and_fail_with_backoff_wake_only_when_earlier(native_server, admin):
    q = NativeQueue(admin)
    q.schedule("due", b"p", 60_000)
    for id in ("a", "b", "c"):
        q.enqueue(id, b"p")
    tokens = {id: q.claim(30000)[2] for id in ("a", "b", "c")}
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    assert q.fail("a", tokens["a"], b"e", 5, 120_000) == b"scheduled"  # after "due": no wake
    still_blocked(admin, blocker)
    assert q.delay("b", tokens["b"], 30_000) > 0  # before "due": wake
    assert blocker.result() == []

    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    assert q.fail("c", tokens["c"], b"e", 5, 10) == b"scheduled"  # before "b": wake
    assert blocker.result() == []
    assert q.zset(q.pending) == [] and q.zset(q.active) == []


# -- never blocks inside MULTI or a script ---------------------------------------------------

def test_inside_multi_it_is_claim(admin):
    q = NativeQueue(admin)
    p = admin.pipeline(transaction=True)
    p.execute_command("EMQ.BCLAIM", 3, q.pending, q.active, q.base, 30000, 0)
    p.execute_command("EMQ.ENQUEUE", 2, q.pending, q.base, "j", "p", 0)
    p.execute_command("EMQ.BCLAIM", 3, q.pending, q.active, q.base, 30000, 0)
    assert p.execute() == [[], 1, [b"j", b"p", 1]]
    assert [e for e in admin.client_list() if "b" in e["flags"] and e["cmd"].lower() == "emq.bclaim"] == []


def test_inside_a_script_it_is_claim(admin):
    q = NativeQueue(admin)
    script = "return redis.call('EMQ.BCLAIM', 3, KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])"
    assert admin.eval(script, 3, q.pending, q.active, q.base, 30000, 0) == []
    q.enqueue("j", b"p")
    assert admin.eval(script, 3, q.pending, q.active, q.base, 30000, 0) == [b"j", b"p", 1]


def test_inside_a_function_it_is_claim(admin):
    library = fresh_name("bclaimlib").replace("-", "_")
    admin.function_load(
        f"#!lua name={library}\n"
        f"server.register_function('{library}_bclaim', function(keys, args)\n"
        "  return server.call('EMQ.BCLAIM', 3, keys[1], keys[2], keys[3], args[1], args[2])\n"
        "end)"
    )
    try:
        q = NativeQueue(admin)
        assert admin.fcall(f"{library}_bclaim", 3, q.pending, q.active, q.base, 30000, 0) == []
        q.enqueue("j", b"p")
        assert admin.fcall(f"{library}_bclaim", 3, q.pending, q.active, q.base, 30000, 0)[0] == b"j"
    finally:
        admin.function_delete(library)


# -- a blocked client that goes away leaves no trace ----------------------------------------

def resp(*parts) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        raw = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def raw_blocked(port: int, q: NativeQueue, name: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(resp("CLIENT", "SETNAME", name))
    assert sock.recv(64) == b"+OK\r\n"
    sock.sendall(resp("EMQ.BCLAIM", 3, q.pending, q.active, q.base, 30000, 0))
    return sock


def test_a_closed_socket_while_blocked_leaves_no_trace(native_server, admin):
    q = NativeQueue(admin)
    name = fresh_name("raw")
    before = digest(admin)
    sock = raw_blocked(native_server.port, q, name)
    wait_until(lambda: is_blocked(admin, name), what="the raw client blocked")
    sock.close()
    wait_until(lambda: client_entries(admin, name) == [], what="the client gone from CLIENT LIST")
    assert digest(admin) == before
    q.enqueue("j", b"p")  # nobody takes it on the dead connection's behalf
    assert q.zset(q.pending) == [(b"j", 0.0)]
    assert q.claim()[0] == b"j"


def test_client_kill_while_blocked_leaves_no_trace(native_server, admin):
    q = NativeQueue(admin)
    before = digest(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    (entry,) = client_entries(admin, blocker.name)
    assert admin.client_kill_filter(_id=entry["id"]) == 1
    with pytest.raises(valkey.ConnectionError):
        blocker.result()
    assert client_entries(admin, blocker.name) == []
    assert digest(admin) == before
    q.enqueue("j", b"p")
    assert q.zset(q.pending) == [(b"j", 0.0)]


def test_client_unblock_answers_empty_and_writes_nothing(native_server, admin):
    q = NativeQueue(admin)
    before = digest(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    (entry,) = client_entries(admin, blocker.name)
    assert admin.client_unblock(entry["id"]) == 1  # as a timeout
    assert blocker.result() == []
    assert digest(admin) == before


def test_a_server_restart_while_blocked_is_a_connection_error_and_the_data_stays():
    with EmbeddedServer(module=module_path(), aof=True, appendfsync="always") as server:
        admin = server.client()
        other = NativeQueue(admin)
        other.enqueue("kept", b"p")
        served = NativeQueue(admin)  # a claim made from a wake: its effects reach the AOF
        blocker = Blocker(server, served).start()
        wait_blocked(admin, blocker)
        served.enqueue("j", b"p")
        assert blocker.result()[0] == b"j"
        assert bclaim(admin, served, 30000, 5) == []  # a timeout: nothing reaches the AOF
        q = NativeQueue(admin)
        blocker = Blocker(server, q).start()
        wait_blocked(admin, blocker)
        before = digest(admin)
        admin.close()
        server.restart()
        with pytest.raises(valkey.ConnectionError):
            blocker.result()
        with server.client() as admin:
            assert digest(admin) == before
            assert NativeQueue(admin, other.name).zset(other.pending) == [(b"kept", 0.0)]
            assert NativeQueue(admin, served.name).hrow("j")[b"state"] == b"active"
            assert admin.exists(q.pending, q.active) == 0
        server.stop()
        aof = b"".join(p.read_bytes() for p in Path(server.dir).rglob("*.aof"))
        assert b"EMQ." not in aof.upper()  # effects, never the verb


# -- replication ---------------------------------------------------------------------------

def test_a_replica_sees_the_claims_that_happened_and_no_timeout():
    no_pings = ("--repl-ping-replica-period", "3600")  # the offset moves only with writes
    with EmbeddedServer(module=module_path(), extra_args=no_pings) as primary:
        with EmbeddedServer(module=module_path(), replicaof=("127.0.0.1", primary.port)) as replica:
            wait_link_up(replica)
            c, r = primary.client(), replica.client()
            q = NativeQueue(c)
            q.enqueue("seed", b"p")
            assert c.execute_command("WAIT", 1, 5000) == 1
            offset = c.info("replication")["master_repl_offset"]
            # served at once: its effects travel
            assert bclaim(c, q, 30000, 1) == [b"seed", b"p", 1]
            moved = c.info("replication")["master_repl_offset"]
            assert moved > offset
            # a timeout: nothing written, nothing propagated
            assert bclaim(c, q, 30000, 30) == []
            assert c.info("replication")["master_repl_offset"] == moved
            # a blocked claim that is served replicates its effects from the wake
            blockers = [Blocker(primary, q, timeout_ms=0).start() for _ in range(2)]
            wait_blocked(c, *blockers)
            q.enqueue("j", b"p")
            wait_until(lambda: any(b.done for b in blockers), what="one claimer served")
            (served,) = [b for b in blockers if b.done]
            assert served.result()[0] == b"j"
            (waiting,) = [b for b in blockers if b is not served]
            (entry,) = client_entries(c, waiting.name)
            c.client_unblock(entry["id"])
            assert waiting.result() == []
            assert c.execute_command("WAIT", 1, 5000) == 1
            assert digest(r) == digest(c)
            assert r.hgetall(q.row("j")) == c.hgetall(q.row("j"))
            assert r.hgetall(q.row("j"))[b"lease_epoch"] == primary.run_id()
            assert r.zrange(q.active, 0, -1, withscores=True) == c.zrange(q.active, 0, -1, withscores=True)
            c.close()
            r.close()


# -- ACL -----------------------------------------------------------------------------------



def test_a_user_confined_to_one_queue_cannot_block_on_another(native_server, admin, make_user):
    a = NativeQueue(admin, fresh_name("a"))
    b = NativeQueue(admin, fresh_name("b"))
    user = make_user(f"~emq:{{{a.name}}}:*", "+@all", "-@dangerous")
    before = digest(admin)
    with pytest.raises(valkey.ResponseError) as info:
        bclaim(user, NativeQueue(user, b.name), 30000, 0)  # would hang had it blocked
    assert error_code(info.value) == "NOPERM"
    assert digest(admin) == before
    # on its own queue it blocks, and is served
    blocker = Blocker(native_server, a, username=user.connection_pool.connection_kwargs["username"], password="pw")
    blocker.start()
    wait_blocked(admin, blocker)
    a.enqueue("j", b"p")
    assert blocker.result()[0] == b"j"


def test_waiting_on_schedule_needs_read_access_to_it(admin, make_user):
    """Blocking waits on schedule, a derived key: the fence checks it before blocking."""
    q = NativeQueue(admin)
    allowed = [q.pending, q.active, q.base, q.meta, q.row("j")]
    user = make_user(*(f"~{k.decode()}" for k in allowed), "+@all")
    uq = NativeQueue(user, q.name)
    before = digest(admin)
    with pytest.raises(valkey.ResponseError) as info:
        bclaim(user, uq, 30000, 0)
    assert error_code(info.value) == "NOPERM" and "schedule" in str(info.value)
    assert digest(admin) == before
    q.enqueue("j", b"p")  # a job there: CLAIM's path, schedule never read
    assert bclaim(user, uq, 30000, 0)[0] == b"j"


# -- refusals, as CLAIM's, at the call and at a wake ------------------------------------------

@pytest.mark.parametrize("verb", ["EMQ.CLAIM", "EMQ.BCLAIM"])
def test_wrongtype_as_claim(admin, verb):
    q = NativeQueue(admin)
    q.enqueue("j", b"p")
    line = q.lines()[verb]
    admin.set(q.meta, "x")
    refused(admin, "WRONGTYPE", *line)
    admin.delete(q.meta)
    admin.set(q.active, "x")
    refused(admin, "WRONGTYPE", *line)
    admin.delete(q.active)
    admin.delete(q.row("j"))
    admin.set(q.row("j"), "x")
    refused(admin, "WRONGTYPE", *line)
    q2 = NativeQueue(admin)
    admin.set(q2.pending, "x")
    refused(admin, "WRONGTYPE", *q2.lines()[verb])


@pytest.mark.parametrize("verb", ["EMQ.CLAIM", "EMQ.BCLAIM"])
def test_counter_as_claim(admin, verb):
    q = NativeQueue(admin)
    q.enqueue("j", b"p")
    admin.hset(q.row("j"), "attempts", "x")
    assert refused(admin, "EMQ", *q.lines()[verb]) == NOT_INTEGER
    assert q.zset(q.pending) == [(b"j", 0.0)]


def test_bclaim_arguments(admin):
    q = NativeQueue(admin)
    line = q.lines()["EMQ.BCLAIM"]
    for lease in ("0", "-1", "x"):
        assert refused(admin, "EMQARG", *line[:5], lease, 0).startswith("EMQARG lease_ms ")
    for timeout in ("-1", "1.5", "2147483648", "x", ""):
        assert refused(admin, "EMQARG", *line[:5], 30000, timeout).startswith("EMQARG timeout_ms ")
    assert bclaim(admin, q, 30000, 1) == []
    q.enqueue("j", b"p")
    assert bclaim(admin, q, 1, 2**31 - 1)[0] == b"j"  # both bounds accepted
    # the lease is checked before blocking: a clock overflow is refused at the call
    assert refused(admin, "EMQARG", *line[:5], 2**63 - 1, 0).startswith("EMQARG lease_ms ")


def test_a_refusal_at_a_wake_is_answered_and_writes_nothing(native_server, admin):
    """A wake runs CLAIM's checks again: a row that appears with a bad counter is refused."""
    q = NativeQueue(admin)
    blocker = Blocker(native_server, q).start()
    wait_blocked(admin, blocker)
    p = admin.pipeline(transaction=True)
    p.hset(q.row("j"), mapping={"state": "pending", "payload": "p", "attempts": "x"})
    p.zadd(q.pending, {"j": 0})
    p.execute()
    with pytest.raises(valkey.ResponseError) as info:
        blocker.result()
    assert str(info.value) == NOT_INTEGER
    assert q.zset(q.pending) == [(b"j", 0.0)] and q.hrow("j")[b"attempts"] == b"x"
    assert admin.exists(q.active) == 0
