"""Every native verb's ordinary path (SPEC §3, native column): the reply and exactly the
fields and set members it writes, plus the registration surface (EMQ.VERSION, COMMAND INFO,
COMMAND GETKEYS) and binary payloads."""

from __future__ import annotations

import pytest
import valkey

from support.dataset import digest
from support.native import OPTIONAL_TOKENS, TOKENS, VERBS, NativeQueue
from support.waiting import server_ms, wait_server_past


# -- registration -----------------------------------------------------------------------

def test_version_lists_the_job_core_tokens_then_the_optional_ones_in_table_order(c):
    assert c.execute_command("EMQ.VERSION") == f"{TOKENS} {OPTIONAL_TOKENS}".encode()


def test_version_takes_no_argument(c):
    with pytest.raises(valkey.ResponseError, match="wrong number of arguments"):
        c.execute_command("EMQ.VERSION", "x")


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_command_info_answers_for_every_verb(c, verb):
    numkeys = VERBS[verb][0]
    info = c.execute_command("COMMAND", "INFO", verb)
    entry = info[verb] if isinstance(info, dict) else info[0]
    assert entry, f"{verb} is not registered"
    flags = entry["flags"]
    assert "write" in flags and "denyoom" in flags
    assert ("blocking" in flags) == (verb == "EMQ.BCLAIM")
    # the N keys after numkeys: a fixed range, so cluster routing and clients see them
    assert (entry["first_key_pos"], entry["last_key_pos"], entry["step_count"]) == (2, 1 + numkeys, 1)
    specs = entry["key_specifications"]
    assert len(specs) == 1
    spec = dict(zip(specs[0][0::2], specs[0][1::2]))
    assert spec[b"flags"] == [b"RW", b"access", b"update"]
    assert spec[b"begin_search"] == [b"type", b"index", b"spec", [b"index", 2]]
    assert spec[b"find_keys"] == [
        b"type", b"range", b"spec", [b"lastkey", numkeys - 1, b"keystep", 1, b"limit", 0]
    ]


def test_command_info_version_is_readonly_fast_without_keys(c):
    info = c.execute_command("COMMAND", "INFO", "EMQ.VERSION")
    entry = info["EMQ.VERSION"]
    assert "readonly" in entry["flags"] and "fast" in entry["flags"]
    assert entry["key_specifications"] == []


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_command_getkeys_lists_the_declared_keys(c, nq, verb):
    line = nq.lines()[verb]
    numkeys = line[1]
    keys = c.command_getkeys(*line)
    assert [k.encode() if isinstance(k, str) else k for k in keys] == list(line[2 : 2 + numkeys])


def test_command_getkeys_after_numkeys_like_eval(c):
    assert c.command_getkeys("EMQ.CLAIM", 3, "a", "b", "c", 100) == ["a", "b", "c"]


# -- ENQUEUE, CLAIM, COMPLETE -----------------------------------------------------------

def test_enqueue_writes_row_and_pending(nq, c):
    t0 = server_ms(c)
    assert nq.enqueue("j1", b"payload") == 1
    row = nq.hrow("j1")
    assert t0 <= int(row.pop(b"created")) <= server_ms(c)  # the server clock at the call
    assert row == {b"state": b"pending", b"payload": b"payload", b"attempts": b"0"}
    assert nq.zset(nq.pending) == [(b"j1", 0.0)]


def test_enqueue_with_priority_scores_pending(nq):
    assert nq.enqueue("j1", b"p", 7) == 1
    row = nq.hrow("j1")
    assert row.pop(b"created")
    assert row == {b"state": b"pending", b"payload": b"p", b"attempts": b"0", b"priority": b"7"}
    assert nq.zset(nq.pending) == [(b"j1", 7.0)]


def test_enqueue_is_idempotent(nq, c):
    assert nq.enqueue("j1", b"first") == 1
    before = digest(c)
    assert nq.enqueue("j1", b"second", 3) == 0
    assert digest(c) == before
    assert nq.hrow("j1")[b"payload"] == b"first"


def test_claim_leases_the_head(nq, c, run_id):
    nq.enqueue("a", b"pa", 0)
    nq.enqueue("b", b"pb", 0)
    t0 = server_ms(c)
    got = nq.claim(5000)
    t1 = server_ms(c)
    assert got == [b"a", b"pa", 1]
    row = nq.hrow("a")
    assert row.pop(b"created") and t0 <= int(row.pop(b"started")) <= t1  # started: this claim
    assert row == {b"state": b"active", b"payload": b"pa", b"attempts": b"1", b"lease_epoch": run_id}
    [(member, score)] = nq.zset(nq.active)
    assert member == b"a" and t0 + 5000 <= score <= t1 + 5000
    assert nq.zset(nq.pending) == [(b"b", 0.0)]


def test_claim_serves_priority_then_fifo(nq):
    nq.enqueue("late", b"", 5)
    nq.enqueue("b", b"", 0)
    nq.enqueue("a", b"", 0)
    assert [nq.claim()[0] for _ in range(3)] == [b"a", b"b", b"late"]


def test_claim_empty_and_paused(nq, c):
    assert nq.claim() == []
    nq.enqueue("j", b"p")
    for flag in (b"1", b"0", b""):
        c.hset(nq.meta, "paused", flag)
        before = digest(c)
        assert nq.claim() == []
        assert digest(c) == before
    c.hdel(nq.meta, "paused")
    assert nq.claim()[0] == b"j"


def test_claim_attempts_count_up(nq):
    nq.enqueue("j", b"p")
    _, _, att = nq.claim()
    assert nq.requeue("j", att) == 1
    assert nq.claim()[2] == 2


def test_complete_deletes_row_and_counts(nq, c):
    nq.enqueue("j", b"p")
    _, _, att = nq.claim()
    assert nq.complete("j", att) == 1
    assert not c.exists(nq.row("j"))
    assert nq.zset(nq.active) == []
    assert c.hgetall(nq.completed) == {b"count": b"1"}
    nq.enqueue("k", b"p")
    nq.complete("k", nq.claim()[2])
    assert c.hgetall(nq.completed) == {b"count": b"2"}


def test_complete_wrong_token_or_no_row_answers_zero(nq, c):
    nq.enqueue("j", b"p")
    nq.claim()
    before = digest(c)
    assert nq.complete("j", "2") == 0
    assert nq.complete("j", "01") == 0  # compared as bytes
    assert nq.complete("nope", "1") == 0
    assert digest(c) == before


# -- EXTEND, EXTENDS --------------------------------------------------------------------

def test_extend_moves_the_deadline_and_restamps(nq, c, run_id):
    nq.enqueue("j", b"p")
    nq.claim(1000)
    c.hset(nq.row("j"), "lease_epoch", "older")
    t0 = server_ms(c)
    at = nq.extend("j", 1, 60000)
    assert t0 + 60000 <= at <= server_ms(c) + 60000
    assert c.zscore(nq.active, "j") == at
    assert nq.hrow("j")[b"lease_epoch"] == run_id
    assert nq.extend("j", 2, 60000) == 0
    assert nq.extend("nope", 1, 60000) == 0


def test_extends_answers_each_pair(nq, c, run_id):
    for j in ("a", "b", "c"):
        nq.enqueue(j, b"p")
    for _ in range(3):
        nq.claim(1000)
    nq.complete("c", 1)
    t0 = server_ms(c)
    reply = nq.extends(60000, "a", 1, "b", 9, "c", 1, "zz", 1)
    at = reply[0]
    assert t0 + 60000 <= at <= server_ms(c) + 60000
    assert reply == [at, 0, 0, 0]
    assert c.zscore(nq.active, "a") == at
    assert c.zscore(nq.active, "b") < at
    assert nq.hrow("a")[b"lease_epoch"] == run_id


# -- SCHEDULE, PROMOTE, RESCHEDULE, DELAY -----------------------------------------------

def test_schedule_writes_row_and_due_time(nq, c):
    t0 = server_ms(c)
    assert nq.schedule("s", b"sp", 60000, 4) == 1
    row = nq.hrow("s")
    assert t0 <= int(row.pop(b"created")) <= server_ms(c)
    assert row == {b"state": b"scheduled", b"payload": b"sp", b"attempts": b"0", b"priority": b"4"}
    [(member, score)] = nq.zset(nq.schedule_key)
    assert member == b"s" and t0 + 60000 <= score <= server_ms(c) + 60000
    assert nq.schedule("s", b"other", 0, 0) == 0


def test_promote_moves_due_rows_lowest_first_up_to_limit(nq, c):
    nq.schedule("a", b"", 0, 2)
    nq.schedule("b", b"", 0, 0)
    nq.schedule("c", b"", 0, 0)
    nq.schedule("later", b"", 3_600_000, 0)
    wait_server_past(c, int(max(s for m, s in nq.zset(nq.schedule_key) if m != b"later")))
    assert nq.promote(2) == 2
    assert nq.promote(10) == 1
    assert nq.zset(nq.pending) == [(b"b", 0.0), (b"c", 0.0), (b"a", 2.0)]
    assert [m for m, _ in nq.zset(nq.schedule_key)] == [b"later"]
    for j in ("a", "b", "c"):
        assert nq.hrow(j)[b"state"] == b"pending"
    assert nq.hrow("later")[b"state"] == b"scheduled"
    assert nq.promote(10) == 0


def test_reschedule_moves_the_due_time(nq, c):
    nq.schedule("s", b"", 60000, 0)
    t0 = server_ms(c)
    at = nq.reschedule("s", 5)
    assert t0 + 5 <= at <= server_ms(c) + 5
    assert c.zscore(nq.schedule_key, "s") == at
    assert nq.hrow("s")[b"state"] == b"scheduled"
    assert nq.reschedule("nope", 5) == 0


def test_delay_hands_back_to_schedule(nq, c):
    nq.enqueue("j", b"p", 3)
    nq.claim()
    t0 = server_ms(c)
    at = nq.delay("j", 1, 1000)
    assert t0 + 1000 <= at <= server_ms(c) + 1000
    assert nq.zset(nq.active) == []
    assert nq.zset(nq.schedule_key) == [(b"j", float(at))]
    assert nq.hrow("j")[b"state"] == b"scheduled"
    assert nq.hrow("j")[b"attempts"] == b"1"


# -- FAIL, REPROCESS, REQUEUE -----------------------------------------------------------

def test_fail_retries_to_pending_with_priority(nq, c):
    nq.enqueue("j", b"p", 6)
    nq.claim()
    assert nq.fail("j", 1, b"oops", 3, 0) == b"pending"
    row = nq.hrow("j")
    assert row[b"state"] == b"pending"
    assert row[b"last_error"] == b"oops"
    assert row[b"failures"] == b"1"
    assert row[b"attempts"] == b"1"
    assert nq.zset(nq.pending) == [(b"j", 6.0)]
    assert nq.zset(nq.active) == []


def test_fail_retries_to_schedule_after_backoff(nq, c):
    nq.enqueue("j", b"p")
    nq.claim()
    t0 = server_ms(c)
    assert nq.fail("j", 1, b"later", 3, 2000) == b"scheduled"
    [(member, score)] = nq.zset(nq.schedule_key)
    assert member == b"j" and t0 + 2000 <= score <= server_ms(c) + 2000
    assert nq.hrow("j")[b"state"] == b"scheduled"


def test_fail_dead_letters_when_the_budget_is_spent(nq, c):
    nq.enqueue("j", b"p")
    nq.claim()
    assert nq.fail("j", 1, b"e1", 2, 0) == b"pending"
    nq.claim()
    before = server_ms(c)
    assert nq.fail("j", 2, b"e2", 2, 0) == b"dead"
    row = nq.hrow("j")
    assert row[b"state"] == b"dead" and row[b"failures"] == b"2" and row[b"last_error"] == b"e2"
    ((member, died),) = nq.zset(nq.dead)
    assert member == b"j" and before <= died <= server_ms(c)  # scored the time it died
    assert c.hgetall(nq.failed) == {b"count": b"1"}
    assert nq.fail("j", 9, b"x", 2, 0) == 0


def test_fail_writes_the_traceback_with_the_failure_and_a_five_argv_fail_leaves_it(nq, c):
    """docs/spec.md §11.6: the sixth ARGV is written in FAIL's HSET on every path; any bytes up to 8192."""
    nq.enqueue("j", b"p")
    nq.claim()
    assert nq.fail("j", 1, b"ValueError: one", 4, 0, b"Traceback\n  one") == b"pending"
    assert nq.hrow("j")[b"traceback"] == b"Traceback\n  one"
    nq.claim()
    assert nq.fail("j", 2, b"two", 4, 0) == b"pending"  # five ARGV: the field is left as it is
    row = nq.hrow("j")
    assert (row[b"last_error"], row[b"traceback"]) == (b"two", b"Traceback\n  one")
    nq.claim()
    assert nq.fail("j", 3, b"later", 4, 1000, b"") == b"scheduled"
    assert nq.hrow("j")[b"traceback"] == b""
    nq.enqueue("k", b"p")
    nq.claim()
    longest = b"\xff" * 8192
    assert nq.fail("k", 1, b"last", 1, 0, longest) == b"dead"
    assert nq.hrow("k")[b"traceback"] == longest


def test_reprocess_returns_dead_to_pending_with_both_budgets_refilled(nq, c):
    nq.enqueue("j", b"p", 2)
    nq.claim()
    nq.fail("j", 1, b"e", 1, 0)
    before = nq.hrow("j")
    assert nq.reprocess("j") == 1
    after = nq.hrow("j")
    assert after == {**before, b"state": b"pending", b"failures": b"0", b"stalled": b"0"}
    assert nq.zset(nq.pending) == [(b"j", 2.0)]
    assert nq.zset(nq.dead) == []
    assert nq.reprocess("j") == 0


def test_requeue_releases_without_counters(nq):
    nq.enqueue("j", b"p", 1)
    nq.claim()
    before = nq.hrow("j")
    assert nq.requeue("j", 1) == 1
    assert nq.hrow("j") == {**before, b"state": b"pending"}
    assert nq.zset(nq.pending) == [(b"j", 1.0)]
    assert nq.zset(nq.active) == []
    assert nq.requeue("nope", 1) == 0


# -- STALLED.CHECK ----------------------------------------------------------------------

def test_stalled_check_recovers_then_kills(nq, c):
    nq.enqueue("j", b"p", 4)
    nq.expire_all()
    assert nq.stalled_check(2, 10) == [[b"j"], [], []]
    row = nq.hrow("j")
    assert row[b"state"] == b"pending" and row[b"stalled"] == b"1"
    assert nq.zset(nq.pending) == [(b"j", 4.0)]
    nq.expire_all()
    assert nq.stalled_check(2, 10) == [[], [], [b"j"]]
    row = nq.hrow("j")
    assert row[b"state"] == b"dead" and row[b"stalled"] == b"2" and row[b"last_error"] == b"stalled"
    ((member, died),) = nq.zset(nq.dead)
    assert member == b"j" and died <= server_ms(c)  # scored the time it died
    assert c.hgetall(nq.failed) == {b"count": b"1"}


def test_stalled_check_leaves_live_leases(nq):
    nq.enqueue("j", b"p")
    nq.claim(60000)
    assert nq.stalled_check(2, 10) == [[], [], []]
    assert nq.hrow("j")[b"state"] == b"active"


def test_stalled_check_selects_lowest_first_up_to_limit(nq, c):
    for j in ("a", "b", "c"):
        nq.enqueue(j, b"p")
    nq.claim(1)
    nq.claim(1)
    last = nq.claim(1)
    wait_server_past(c, int(c.zscore(nq.active, last[0])))
    first = nq.stalled_check(5, 2)
    assert first == [[b"a", b"b"], [], []]
    assert nq.stalled_check(5, 2) == [[b"c"], [], []]


# -- binary payloads --------------------------------------------------------------------

BINARY = bytes(range(256)) + b"\xff\xfe\x00\x80not utf-8 \xc3\x28"


def test_binary_payloads_and_ids_round_trip(nq, c):
    bid = b"id-\x00\xff\x80"
    assert nq.enqueue(bid, BINARY) == 1
    got = nq.claim()
    assert got == [bid, BINARY, 1]
    assert nq.fail(bid, 1, b"err \xff\x00", 3, 0) == b"pending"
    assert nq.hrow(bid)[b"last_error"] == b"err \xff\x00"
    assert nq.claim() == [bid, BINARY, 2]
    assert nq.complete(bid, 2) == 1
    assert nq.schedule(b"s\xff", BINARY, 0, 0) == 1
    assert nq.hrow(b"s\xff")[b"payload"] == BINARY


def test_a_full_lifecycle_on_one_queue(c):
    q = NativeQueue(c)
    assert q.enqueue("j", b"x") == 1
    _, _, att = q.claim()
    assert q.extend("j", att, 10000) > 0
    assert q.complete("j", att) == 1
    assert c.keys(q.base + b"*") == [q.completed]


# -- keyspace events --------------------------------------------------------------------

def test_writes_fire_keyspace_events_when_enabled():
    """The verbs write through key handles; the events the inner commands would fire still
    fire (when the server enables them)."""
    from echomq import EmbeddedServer, module_path

    with EmbeddedServer(module=module_path(), extra_args=("--notify-keyspace-events", "KEA")) as s:
        c = s.client()
        q = NativeQueue(c)
        sub = c.pubsub()
        sub.psubscribe("__keyevent@0__:*")
        assert sub.get_message(timeout=5)["type"] == "psubscribe"
        q.enqueue("j", b"p")
        _, _, att = q.claim()
        q.complete("j", att)
        c.publish("__keyevent@0__:end", "end")  # the events above reach the subscriber first
        events = []
        while True:
            m = sub.get_message(timeout=5)
            assert m is not None, f"no end marker after {events}"
            if m["data"] == b"end":
                break
            events.append((m["channel"].split(b":", 1)[1], m["data"]))
        assert events == [
            (b"hset", q.row("j")), (b"zadd", q.pending),
            (b"zpopmin", q.pending), (b"del", q.pending),
            (b"hset", q.row("j")), (b"zadd", q.active),  # the start: one HSET of attempts, state, epoch
            (b"zrem", q.active), (b"del", q.active), (b"del", q.row("j")),
            (b"hincrby", q.completed),
        ]
        sub.close()
        c.close()


# -- the operator verbs (docs/spec.md §11.4) ----------------------------------------------

def test_remove_deletes_a_waiting_or_dead_row_with_its_membership(nq, c):
    nq.enqueue("p", b"p")
    nq.schedule("s", b"s", 60000)
    nq.enqueue("d", b"d", 5)
    nq.enqueue("w")
    assert nq.claim()[0] == b"p"
    nq.fail("p", 1, b"x", 1, 0)  # p is dead now
    assert nq.remove("p") == b"dead" and nq.remove("s") == b"scheduled" and nq.remove("w") == b"pending"
    assert nq.hrow("p") == {} and nq.hrow("s") == {} and nq.hrow("w") == {}
    assert nq.zset(nq.dead) == [] and nq.zset(nq.schedule_key) == [] and nq.zset(nq.pending) == [(b"d", 5.0)]
    assert nq.remove("p") == 0


def test_cancel_sends_an_active_job_to_dead_and_fences_its_holder(nq, c):
    nq.enqueue("j", b"p")
    nq.claim()
    before = server_ms(c)
    assert nq.cancel("j") == 1
    row = nq.hrow("j")
    assert row[b"state"] == b"dead" and row[b"last_error"] == b"cancelled" and row[b"attempts"] == b"1"
    ((member, died),) = nq.zset(nq.dead)
    assert member == b"j" and before <= died <= server_ms(c)
    assert nq.zset(nq.active) == [] and c.hgetall(nq.failed) == {b"count": b"1"}
    assert nq.extends(30000, "j", "1") == [0]
    assert nq.cancel("nope") == 0


def test_purge_deletes_dead_rows_by_age_and_drain_the_head_of_pending(nq, c):
    for id in ("a", "b"):
        nq.enqueue(id)
        nq.claim()
        nq.fail(id, 1, b"x", 1, 0)
    assert nq.purge(3_600_000, 10) == 0  # none died an hour ago
    assert nq.purge(0, 1) == 1 and nq.hrow("a") == {} and nq.hrow("b") != {}
    assert nq.purge(0, 10) == 1 and nq.zset(nq.dead) == []
    for id, prio in (("x", 3), ("y", 1), ("z", 2)):
        nq.enqueue(id, b"p", prio)
    assert nq.drain(2) == 2 and nq.zset(nq.pending) == [(b"x", 3.0)] and nq.hrow("y") == {}
    assert nq.drain(10) == 1 and nq.drain(10) == 0
