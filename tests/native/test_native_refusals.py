"""Every refusal code of SPEC §5 and every native edge, each refusal shown with its reply and
an unchanged DEBUG DIGEST (a refusal writes nothing)."""

from __future__ import annotations

import pytest

from support.dataset import digest, refused
from support.native import LATE, VERBS, NativeQueue
from support.waiting import wait_server_past

LANE = "EMQSTATE lane row is not native"
FLOW = "EMQSTATE flow child is not native"
NOT_INTEGER = "EMQ hash value is not an integer"
OVERFLOW = "EMQ increment or decrement would overflow"
I64_MAX = "9223372036854775807"


def claimed(nq, id="j", priority=0, lease_ms=60000):
    """A row enqueued and claimed (token 1)."""
    nq.enqueue(id, b"p", priority)
    got = nq.claim(lease_ms)
    assert got[0] == (id.encode() if isinstance(id, str) else id)
    return got[2]


def set_line(line, index, value):
    line = list(line)
    line[index] = value
    return tuple(line)


# -- EMQSHAPE ---------------------------------------------------------------------------

@pytest.mark.parametrize("verb", sorted(VERBS))
def test_shape_numkeys_must_be_the_verbs(c, nq, verb):
    line = nq.lines()[verb]
    n = line[1]
    refused(c, "EMQSHAPE", *set_line(line, 1, n + 1))
    refused(c, "EMQSHAPE", *set_line(line, 1, n - 1))
    refused(c, "EMQSHAPE", *set_line(line, 1, "x"))
    refused(c, "EMQSHAPE", *set_line(line, 1, f"-{n}"))


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_shape_argv_count_must_be_the_verbs(c, nq, verb):
    line = nq.lines()[verb]
    refused(c, "EMQSHAPE", *line, *LATE.get(verb, ()), "extra")
    refused(c, "EMQSHAPE", *line[:-1])
    refused(c, "EMQSHAPE", *line[:2])
    refused(c, "EMQSHAPE", verb)


def test_shape_extends_is_odd_between_3_and_2001(c, nq):
    head = ("EMQ.EXTENDS", 2, nq.active, nq.base)
    refused(c, "EMQSHAPE", *head, 1000)
    refused(c, "EMQSHAPE", *head, 1000, "id")
    refused(c, "EMQSHAPE", *head, 1000, "id", "1", "id2")
    pairs = [x for i in range(1001) for x in (f"id{i}", "1")]
    refused(c, "EMQSHAPE", *head, 1000, *pairs)
    assert len(c.execute_command(*head, 1000, *pairs[:2000])) == 1000


# -- EMQLAYOUT --------------------------------------------------------------------------

@pytest.mark.parametrize("verb", sorted(VERBS))
def test_layout_base_must_be_a_queue_base(c, nq, verb):
    line = nq.lines()[verb]
    last = 1 + line[1]
    for bad in (b"emq:q:", b"emq:{}:", b"emq:{a{b}:", b"emq:{a}b}:", b"emq:{q}", b"x"):
        refused(c, "EMQLAYOUT", *set_line(line, last, bad))


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_layout_keys_must_be_one_queues(c, nq, verb):
    line = nq.lines()[verb]
    other = NativeQueue(c)
    first = line[2]
    refused(c, "EMQLAYOUT", *set_line(line, 2, other.base + first[len(nq.base):]))
    refused(c, "EMQLAYOUT", *set_line(line, 2, first + b"x"))
    refused(c, "EMQLAYOUT", *set_line(line, 2, nq.base + b"wrong"))
    if line[1] >= 3:  # swapped suffixes
        refused(c, "EMQLAYOUT", *set_line(set_line(line, 2, line[3]), 3, line[2]))


def test_layout_comes_before_arguments_and_shape_before_layout(c, nq):
    msg = refused(c, "EMQLAYOUT", "EMQ.CLAIM", 3, nq.pending, nq.active, b"emq:q:", "bad")
    assert "key 3" in msg
    refused(c, "EMQSHAPE", "EMQ.CLAIM", 3, nq.pending, nq.active, b"emq:q:")


# -- EMQARG -----------------------------------------------------------------------------

ARG_CASES = [
    # verb, argv index (from the line's ARGV), bad values, the argument's name
    ("EMQ.ENQUEUE", 0, ["", "x" * 513], "id"),
    ("EMQ.ENQUEUE", 2, ["-1", "2147483648", "1.5", " 1", "+1", "0x1", ""], "priority"),
    ("EMQ.ENQUEUES", 0, ["", "x" * 513], "id"),
    ("EMQ.ENQUEUES", 2, ["-1", "2147483648", "1.5", ""], "priority"),
    ("EMQ.CLAIM", 0, ["0", "-1", "abc", "9223372036854775808", I64_MAX], "lease_ms"),
    ("EMQ.BCLAIM", 0, ["0", "-1", "abc", "9223372036854775808", I64_MAX], "lease_ms"),
    ("EMQ.BCLAIM", 1, ["-1", "2147483648", "1.5", "x", ""], "timeout_ms"),
    ("EMQ.EXTEND", 2, ["0", "x"], "lease_ms"),
    ("EMQ.EXTEND", 0, [""], "id"),
    ("EMQ.EXTENDS", 0, ["0", "-3"], "lease_ms"),
    ("EMQ.EXTENDS", 1, ["", "y" * 600], "id"),
    ("EMQ.COMPLETE", 0, [""], "id"),
    ("EMQ.SCHEDULE", 2, ["-1", "1e3", I64_MAX], "delay_ms"),
    ("EMQ.SCHEDULE", 3, ["-1", "2147483648"], "priority"),
    ("EMQ.PROMOTE", 0, ["0", "10001", "-1", "x"], "limit"),
    ("EMQ.RESCHEDULE", 1, ["x", "-1"], "delay_ms"),
    ("EMQ.DELAY", 2, ["+1", "-1"], "delay_ms"),
    ("EMQ.FAIL", 3, ["0", "-1", "x"], "max_attempts"),
    ("EMQ.FAIL", 4, ["-5", "x"], "backoff_ms"),
    ("EMQ.FAIL", 5, ["t" * 8193], "traceback"),
    ("EMQ.CLAIM", 1, ["0", "2", "x", ""], "rated"),
    ("EMQ.BCLAIM", 2, ["0", "2", "x", ""], "rated"),
    ("EMQ.REPROCESS", 0, [""], "id"),
    ("EMQ.REQUEUE", 0, [""], "id"),
    ("EMQ.STALLED.CHECK", 0, ["0", "x"], "max_stalled"),
    ("EMQ.STALLED.CHECK", 1, ["0", "10001"], "limit"),
    ("EMQ.APPEND", 0, [""], "id"),
    ("EMQ.APPEND", 2, ["x" * 65537], "progress"),
    ("EMQ.FAILURES.INCR", 3, ["0", "x"], "max_attempts"),
    ("EMQ.FAILURES.INCR", 4, ["-1"], "backoff_ms"),
    ("EMQ.PUBLISH", 0, ["", "x" * 513], "id"),
    ("EMQ.PUBLISH", 3, ["-1", "x", I64_MAX], "retention_ms"),
    ("EMQ.ENQUEUE.UNIQUE", 0, ["", "x" * 513], "id"),
    ("EMQ.ENQUEUE.UNIQUE", 2, ["-1", "2147483648"], "priority"),
    ("EMQ.ENQUEUE.UNIQUE", 3, ["-1", "x", ""], "unique_ms"),
    ("EMQ.ENQUEUE.UNIQUE", 4, ["2", "-1", "yes", ""], "replace"),
    ("EMQ.ENQUEUE.UNIQUE", 5, ["-1", "x", I64_MAX], "delay_ms"),
]


@pytest.mark.parametrize("verb,index,values,name", ARG_CASES, ids=lambda v: str(v)[:20])
def test_arguments_outside_their_grammar(c, nq, verb, index, values, name):
    line = (*nq.lines()[verb], *LATE.get(verb, ()))
    at = 2 + line[1] + index
    for value in values:
        msg = refused(c, "EMQARG", *set_line(line, at, value))
        assert msg.startswith(f"EMQARG {name} "), msg


def test_arguments_at_their_bounds_pass(nq):
    assert nq.enqueue("x" * 512, b"p", 2**31 - 1) == 1
    assert nq.promote(10000) == 0
    assert nq.stalled_check(1, 10000) == [[], [], []]


# -- WRONGTYPE --------------------------------------------------------------------------

def test_wrongtype_enqueue_and_schedule(c, nq):
    c.set(nq.pending, "x")
    c.set(nq.schedule_key, "x")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.ENQUEUE"])
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.SCHEDULE"])


def test_enqueue_unique_refusals_write_nothing(c, nq):
    """The row, the marker, the target set and the events switch, each wrong-typed; a lane row,
    a row missing from its set, an unknown state under replace (docs/spec.md §14)."""
    line = nq.lines()["EMQ.ENQUEUE.UNIQUE"]  # id "x", no replace
    c.set(nq.row("x"), "s")
    refused(c, "WRONGTYPE", *line)
    c.delete(nq.row("x"))
    c.set(nq.key("unique:x"), "s")
    refused(c, "WRONGTYPE", *line)
    c.delete(nq.key("unique:x"))
    c.set(nq.pending, "s")
    refused(c, "WRONGTYPE", *line)
    c.delete(nq.pending)
    c.set(nq.schedule_key, "s")
    refused(c, "WRONGTYPE", *line, 10)  # the scheduled path's set
    c.delete(nq.schedule_key)
    c.hset(nq.meta, "events", "many")
    assert refused(c, "EMQ", *line) == NOT_INTEGER
    c.delete(nq.meta)
    replace = set_line(line, 9, 1)
    c.hset(nq.row("x"), mapping={"state": "pending", "group": "g"})
    assert refused(c, "EMQSTATE", *replace) == LANE
    c.hset(nq.row("x"), mapping={"state": "pending", "parent": "p"})
    c.hdel(nq.row("x"), "group")
    assert refused(c, "EMQSTATE", *replace) == FLOW
    c.hdel(nq.row("x"), "parent")
    assert "id is not in pending" in refused(c, "EMQSTATE", *replace)
    c.hset(nq.row("x"), "state", "odd")
    assert "row is odd, not pending, scheduled, active or dead" in refused(c, "EMQSTATE", *replace)
    assert c.execute_command(*line) == b"exists"  # without replace: no refusal, nothing written


def test_completion_refuses_a_bad_unique_window(c):
    q = NativeQueue(c)
    c.execute_command(*set_line(q.lines()["EMQ.ENQUEUE.UNIQUE"], 5, "j"))
    assert q.claim(60000)[2] == 1
    c.set(q.key("unique:j"), "s")
    refused(c, "WRONGTYPE", "EMQ.COMPLETE", 2, q.active, q.base, "j", 1)
    refused(c, "WRONGTYPE", "EMQ.PUBLISH", 2, q.active, q.base, "j", 1, "r", 100)
    c.delete(q.key("unique:j"))
    c.hset(q.row("j"), "unique", "soon")
    assert refused(c, "EMQ", "EMQ.COMPLETE", 2, q.active, q.base, "j", 1) == NOT_INTEGER
    assert refused(c, "EMQ", "EMQ.PUBLISH", 2, q.active, q.base, "j", 1, "r", 100) == NOT_INTEGER


def test_wrongtype_claim_meta_pending_row_active(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    line = q.lines()["EMQ.CLAIM"]
    c.set(q.meta, "x")
    refused(c, "WRONGTYPE", *line)
    c.delete(q.meta)
    c.set(q.active, "x")
    refused(c, "WRONGTYPE", *line)
    c.delete(q.active)
    c.delete(q.row("j"))
    c.set(q.row("j"), "x")
    refused(c, "WRONGTYPE", *line)
    q2 = NativeQueue(c)
    c.set(q2.pending, "x")
    refused(c, "WRONGTYPE", *q2.lines()["EMQ.CLAIM"])


def test_wrongtype_token_verbs_row_and_sets(c):
    q = NativeQueue(c)
    claimed(q)
    c.set(q.row("x"), "s")
    for verb in ("EMQ.EXTEND", "EMQ.COMPLETE", "EMQ.DELAY", "EMQ.FAIL", "EMQ.REQUEUE"):
        refused(c, "WRONGTYPE", *q.lines()[verb])  # the lines name id "x", token "1"
    refused(c, "WRONGTYPE", *q.lines()["EMQ.EXTENDS"])
    # the target sets, for a held row
    c.set(q.schedule_key, "s")
    refused(c, "WRONGTYPE", "EMQ.DELAY", 3, q.active, q.schedule_key, q.base, "j", 1, 10)
    refused(c, "WRONGTYPE", *set_line(set_line(q.lines()["EMQ.FAIL"], 7, "j"), 11, 10))
    c.set(q.pending, "s")
    refused(c, "WRONGTYPE", "EMQ.REQUEUE", 3, q.active, q.pending, q.base, "j", 1)
    refused(c, "WRONGTYPE", *set_line(q.lines()["EMQ.FAIL"], 7, "j"))
    c.set(q.dead, "s")
    refused(c, "WRONGTYPE", *set_line(set_line(q.lines()["EMQ.FAIL"], 7, "j"), 10, 1))
    c.set(q.completed, "s")
    refused(c, "WRONGTYPE", "EMQ.COMPLETE", 2, q.active, q.base, "j", 1)


def test_wrongtype_active_for_a_held_row(c):
    q = NativeQueue(c)
    claimed(q)
    c.delete(q.active)
    c.set(q.active, "s")
    refused(c, "WRONGTYPE", "EMQ.EXTEND", 2, q.active, q.base, "j", 1, 100)
    refused(c, "WRONGTYPE", "EMQ.COMPLETE", 2, q.active, q.base, "j", 1)
    refused(c, "WRONGTYPE", *q.lines()["EMQ.STALLED.CHECK"])


def test_wrongtype_metrics_failed_on_dead(c):
    q = NativeQueue(c)
    claimed(q)
    c.set(q.failed, "s")
    refused(c, "WRONGTYPE", "EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base,
            "j", 1, "e", 1, 0)


def test_wrongtype_promote_reschedule_reprocess(c):
    q = NativeQueue(c)
    q.schedule("s", b"p", 0, 0)
    c.set(q.pending, "x")
    wait_server_past(c, int(c.zscore(q.schedule_key, "s")))
    refused(c, "WRONGTYPE", *q.lines()["EMQ.PROMOTE"])
    c.delete(q.pending)
    c.zadd(q.schedule_key, {"str": 0})
    c.set(q.row("str"), "x")
    refused(c, "WRONGTYPE", *q.lines()["EMQ.PROMOTE"])
    refused(c, "WRONGTYPE", "EMQ.RESCHEDULE", 2, q.schedule_key, q.base, "str", 5)
    c.zadd(q.dead, {"str": 0})
    refused(c, "WRONGTYPE", "EMQ.REPROCESS", 3, q.dead, q.pending, q.base, "str")
    q2 = NativeQueue(c)
    c.set(q2.dead, "x")
    c.set(q2.schedule_key, "x")
    refused(c, "WRONGTYPE", *q2.lines()["EMQ.REPROCESS"])
    refused(c, "WRONGTYPE", *q2.lines()["EMQ.PROMOTE"])


def test_wrongtype_reprocess_pending(c):
    q = NativeQueue(c)
    claimed(q)
    q.fail("j", 1, b"e", 1, 0)
    c.set(q.pending, "x")
    refused(c, "WRONGTYPE", "EMQ.REPROCESS", 3, q.dead, q.pending, q.base, "j")


def test_wrongtype_sweep_refuses_whole_command(c):
    q = NativeQueue(c)
    q.enqueue("good", b"p")
    q.expire_all()
    c.zadd(q.active, {"str": 0})
    c.set(q.row("str"), "x")
    refused(c, "WRONGTYPE", *q.lines()["EMQ.STALLED.CHECK"])
    c.zrem(q.active, "str")
    c.set(q.pending, "x")
    refused(c, "WRONGTYPE", *q.lines()["EMQ.STALLED.CHECK"])
    c.delete(q.pending)
    c.set(q.dead, "x")
    refused(c, "WRONGTYPE", *set_line(q.lines()["EMQ.STALLED.CHECK"], 6, 1))
    c.delete(q.dead)
    c.set(q.failed, "x")
    refused(c, "WRONGTYPE", *set_line(q.lines()["EMQ.STALLED.CHECK"], 6, 1))


# -- EMQ: counters predicted with HINCRBY's rules ----------------------------------------

@pytest.mark.parametrize("verb", ["EMQ.CLAIM", "EMQ.BCLAIM"])
@pytest.mark.parametrize("meta,text", [
    ({"rate_limit": "x"}, NOT_INTEGER),
    ({"rate_limit": "5", "rate_window": "1e3"}, NOT_INTEGER),
    ({"rate_limit": "5"}, "EMQ rate limit must be 1 to 10000 starts per rate_window of 1 to 86400000 ms"),
    ({"rate_limit": "10001", "rate_window": "1000"}, "EMQ rate limit must be"),
    ({"rate_limit": "1", "rate_window": "86400001"}, "EMQ rate limit must be"),
])
def test_counter_a_malformed_rate_limit(c, verb, meta, text):
    """docs/spec.md §13: the rate limit in meta is read like a counter, by every claim."""
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    c.hset(q.meta, mapping=meta)
    for line in (q.lines()[verb], (*q.lines()[verb], "1")):
        assert refused(c, "EMQ", *line).startswith(text)
    assert q.zset(q.pending) == [(b"j", 0.0)]  # not popped


def test_wrongtype_rate_log(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    c.hset(q.meta, mapping={"rate_limit": 5, "rate_window": 1000})
    c.set(q.base + b"rate", "x")
    refused(c, "WRONGTYPE", *q.lines()["EMQ.CLAIM"], "1")
    refused(c, "WRONGTYPE", *q.lines()["EMQ.BCLAIM"])

@pytest.mark.parametrize("value,text", [("x", NOT_INTEGER), ("007", NOT_INTEGER), (I64_MAX, OVERFLOW)])
def test_counter_claim_attempts(c, value, text):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    c.hset(q.row("j"), "attempts", value)
    assert refused(c, "EMQ", *q.lines()["EMQ.CLAIM"]) == text
    assert q.zset(q.pending) == [(b"j", 0.0)]  # not popped


@pytest.mark.parametrize("value,text", [("1.5", NOT_INTEGER), (I64_MAX, OVERFLOW)])
def test_counter_fail_failures(c, value, text):
    q = NativeQueue(c)
    claimed(q)
    c.hset(q.row("j"), "failures", value)
    assert refused(c, "EMQ", "EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base,
                   "j", 1, "e", 3, 0) == text


@pytest.mark.parametrize("value,text", [("nope", NOT_INTEGER), (I64_MAX, OVERFLOW)])
def test_counter_metrics(c, value, text):
    q = NativeQueue(c)
    claimed(q)
    c.hset(q.completed, "count", value)
    assert refused(c, "EMQ", "EMQ.COMPLETE", 2, q.active, q.base, "j", 1) == text
    c.hset(q.failed, "count", value)
    assert refused(c, "EMQ", "EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base,
                   "j", 1, "e", 1, 0) == text


@pytest.mark.parametrize("value,text", [("x", NOT_INTEGER), (I64_MAX, OVERFLOW)])
def test_counter_stalled_refuses_the_whole_sweep(c, value, text):
    q = NativeQueue(c)
    q.enqueue("a", b"p")
    q.enqueue("b", b"p")
    q.claim(1)
    q.expire_all()
    c.hset(q.row("b"), "stalled", value)
    assert refused(c, "EMQ", *q.lines()["EMQ.STALLED.CHECK"]) == text
    assert q.hrow("a")[b"state"] == b"active"


def test_counter_sweep_metrics_failed(c):
    q = NativeQueue(c)
    q.enqueue("a", b"p")
    q.expire_all()
    c.hset(q.failed, "count", I64_MAX)
    assert refused(c, "EMQ", *set_line(q.lines()["EMQ.STALLED.CHECK"], 6, 1)) == OVERFLOW


def test_counter_priority_must_score(c):
    q = NativeQueue(c)
    claimed(q)
    c.hset(q.row("j"), "priority", "high")
    assert refused(c, "EMQ", "EMQ.REQUEUE", 3, q.active, q.pending, q.base, "j", 1) == NOT_INTEGER


# -- EMQSTATE: not active (§5.2), repeated terminal failure (§5.3) ------------------------

def not_active_lines(q, token=1):
    return [
        ("EMQ.EXTEND", 2, q.active, q.base, "j", token, 1000),
        ("EMQ.COMPLETE", 2, q.active, q.base, "j", token),
        ("EMQ.DELAY", 3, q.active, q.schedule_key, q.base, "j", token, 10),
        ("EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base, "j", token, "e", 3, 0),
        ("EMQ.REQUEUE", 3, q.active, q.pending, q.base, "j", token),
    ]


def test_state_token_matches_but_row_not_active(c):
    q = NativeQueue(c)
    claimed(q)
    q.requeue("j", 1)  # pending, attempts still 1
    for line in not_active_lines(q):
        assert "not active" in refused(c, "EMQSTATE", *line)
    before = digest(c)
    assert q.extends(1000, "j", 1) == [0]
    assert digest(c) == before


def test_state_active_row_missing_from_active(c):
    q = NativeQueue(c)
    claimed(q)
    c.zrem(q.active, "j")
    for line in not_active_lines(q):
        assert "not in active" in refused(c, "EMQSTATE", *line)
    before = digest(c)
    assert q.extends(1000, "j", 1) == [0]
    assert digest(c) == before


def test_state_repeated_terminal_fail_writes_nothing(c):
    q = NativeQueue(c)
    claimed(q)
    assert q.fail("j", 1, b"e", 1, 0) == b"dead"
    msg = refused(c, "EMQSTATE", "EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base,
                  "j", 1, "e", 1, 0)
    assert "dead" in msg
    assert q.hrow("j")[b"failures"] == b"1"
    assert c.hgetall(q.failed) == {b"count": b"1"}


def test_state_reschedule_needs_scheduled_and_in_schedule(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    refused(c, "EMQSTATE", "EMQ.RESCHEDULE", 2, q.schedule_key, q.base, "j", 5)
    q.schedule("s", b"p", 60000, 0)
    c.zrem(q.schedule_key, "s")
    assert "not in schedule" in refused(c, "EMQSTATE", "EMQ.RESCHEDULE", 2, q.schedule_key, q.base, "s", 5)


def test_state_reprocess_needs_dead(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    c.zadd(q.dead, {"j": 0})
    refused(c, "EMQSTATE", "EMQ.REPROCESS", 3, q.dead, q.pending, q.base, "j")
    # not in dead at all: 0, nothing written
    q2 = NativeQueue(c)
    q2.enqueue("j", b"p")
    before = digest(c)
    assert q2.reprocess("j") == 0
    assert digest(c) == before


# -- §5.5 lanes and flows ---------------------------------------------------------------

def lane_lines(q):
    return {
        "EMQ.COMPLETE": ("EMQ.COMPLETE", 2, q.active, q.base, "j", 1),
        "EMQ.FAIL": ("EMQ.FAIL", 5, q.active, q.pending, q.schedule_key, q.dead, q.base, "j", 1, "e", 3, 0),
        "EMQ.DELAY": ("EMQ.DELAY", 3, q.active, q.schedule_key, q.base, "j", 1, 10),
        "EMQ.REQUEUE": ("EMQ.REQUEUE", 3, q.active, q.pending, q.base, "j", 1),
    }


def test_lane_rows_are_refused(c):
    q = NativeQueue(c)
    claimed(q)
    c.hset(q.row("j"), "group", "g1")
    for line in lane_lines(q).values():
        assert refused(c, "EMQSTATE", *line) == LANE
    # a lane row with another token is refused too: the row is not native whoever holds it
    assert refused(c, "EMQSTATE", "EMQ.COMPLETE", 2, q.active, q.base, "j", 7) == LANE
    q.c.zadd(q.dead, {"j": 0})
    c.hset(q.row("j"), "state", "dead")
    assert refused(c, "EMQSTATE", "EMQ.REPROCESS", 3, q.dead, q.pending, q.base, "j") == LANE
    c.hset(q.row("j"), "state", "scheduled")
    c.zadd(q.schedule_key, {"j": 0})
    assert refused(c, "EMQSTATE", "EMQ.RESCHEDULE", 2, q.schedule_key, q.base, "j", 5) == LANE


def test_lane_row_refuses_the_whole_sweep(c):
    q = NativeQueue(c)
    q.enqueue("a", b"p")
    q.enqueue("b", b"p")
    q.claim(1)
    q.expire_all()
    c.hset(q.row("b"), "group", "g")
    assert refused(c, "EMQSTATE", *q.lines()["EMQ.STALLED.CHECK"]) == LANE


def test_flow_children_are_refused_by_complete_and_fail_only(c):
    q = NativeQueue(c)
    claimed(q)
    c.hset(q.row("j"), "parent", "p1")
    lines = lane_lines(q)
    assert refused(c, "EMQSTATE", *lines["EMQ.COMPLETE"]) == FLOW
    assert refused(c, "EMQSTATE", *lines["EMQ.FAIL"]) == FLOW
    assert q.requeue("j", 1) == 1  # REQUEUE and DELAY move a flow child
    q.claim()
    assert q.delay("j", 2, 10) > 0


# -- §5.4 ghosts ------------------------------------------------------------------------

def test_ghost_in_pending_is_popped_by_claim(c):
    q = NativeQueue(c)
    c.zadd(q.pending, {"ghost": 0})
    q.enqueue("real", b"p", 1)
    assert q.claim() == []
    assert not c.exists(q.row("ghost"))
    assert q.zset(q.pending) == [(b"real", 1.0)]
    assert q.claim()[0] == b"real"


def test_ghost_in_schedule_is_removed_by_promote(c):
    q = NativeQueue(c)
    c.zadd(q.schedule_key, {"ghost": 0})
    q.schedule("real", b"p", 0, 0)
    wait_server_past(c, int(c.zscore(q.schedule_key, "real")))
    assert q.promote(10) == 1
    assert q.zset(q.schedule_key) == []
    assert q.zset(q.pending) == [(b"real", 0.0)]
    assert not c.exists(q.row("ghost"))


def test_ghost_in_active_is_removed_by_the_sweep(c):
    q = NativeQueue(c)
    c.zadd(q.active, {"ghost": 0})
    assert q.stalled_check(3, 10) == [[], [], []]
    assert q.zset(q.active) == [] and q.zset(q.pending) == []
    assert not c.exists(q.row("ghost"))


def test_ghost_in_dead_is_removed_by_reprocess(c):
    q = NativeQueue(c)
    c.zadd(q.dead, {"ghost": 0})
    assert q.reprocess("ghost") == 0
    assert q.zset(q.dead) == [] and q.zset(q.pending) == []
    assert not c.exists(q.row("ghost"))


def test_ghosts_elsewhere_answer_zero_and_create_nothing(c):
    q = NativeQueue(c)
    c.zadd(q.active, {"ghost": 99999999999999})
    c.zadd(q.schedule_key, {"sghost": 99999999999999})
    before = digest(c)
    assert q.complete("ghost", 1) == 0
    assert q.extend("ghost", 1) == 0
    assert q.requeue("ghost", 1) == 0
    assert q.delay("ghost", 1, 5) == 0
    assert q.fail("ghost", 1) == 0
    assert q.reschedule("sghost", 5) == 0
    assert digest(c) == before


# -- §5 sweep verdicts and §5.7 budgets ---------------------------------------------------

def test_sweep_exempts_a_foreign_or_missing_epoch_without_reading_stalled(c):
    q = NativeQueue(c)
    for j in ("a", "b"):
        q.enqueue(j, b"p", 2)
    q.claim(1)
    q.expire_all()
    c.hset(q.row("a"), "lease_epoch", "another-run")
    c.hdel(q.row("b"), "lease_epoch")
    c.hset(q.row("b"), "stalled", "not a number")
    assert q.stalled_check(1, 10) == [[], [b"a", b"b"], []]
    assert b"stalled" not in q.hrow("a")
    assert q.hrow("b")[b"stalled"] == b"not a number"
    assert q.zset(q.pending) == [(b"a", 2.0), (b"b", 2.0)]


def test_sweep_mixes_verdicts_in_selection_order(c, run_id):
    q = NativeQueue(c)
    for j in ("a", "b", "c", "d"):
        q.enqueue(j, b"p")
    q.claim(1)
    q.claim(1)
    q.claim(1)
    q.expire_all()
    c.zadd(q.active, {"ghost": 0})
    c.hset(q.row("b"), "lease_epoch", "old")
    c.hset(q.row("c"), "stalled", "2")
    assert q.stalled_check(3, 10) == [[b"a", b"d"], [b"b"], [b"c"]]
    assert q.hrow("c")[b"state"] == b"dead" and q.hrow("c")[b"stalled"] == b"3"
    assert q.hrow("a")[b"stalled"] == b"1"
    assert not c.exists(q.row("ghost"))


def test_requeue_spends_no_retry_budget(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    for token in (1, 2):
        assert q.claim()[2] == token
        assert q.requeue("j", token) == 1
    assert q.claim()[2] == 3
    assert q.fail("j", 3, b"e", 2, 0) == b"pending"  # the script would dead-letter (attempts 3 ≥ 2)
    row = q.hrow("j")
    assert row[b"failures"] == b"1" and row[b"attempts"] == b"3"


def test_a_recovered_stall_spends_no_retry_budget(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    q.expire_all()
    assert q.stalled_check(5, 10) == [[b"j"], [], []]
    assert q.claim()[2] == 2
    assert q.fail("j", 2, b"e", 2, 0) == b"pending"
    assert q.hrow("j")[b"failures"] == b"1"


def test_stall_budget_counts_each_counted_expiry(c):
    q = NativeQueue(c)
    q.enqueue("j", b"p")
    for _ in range(2):
        q.expire_all()
        assert q.stalled_check(3, 10)[0] == [b"j"]
    q.expire_all()
    assert q.stalled_check(3, 10)[2] == [b"j"]
    assert q.hrow("j")[b"stalled"] == b"3"
    assert b"failures" not in q.hrow("j")
    assert c.hgetall(q.failed) == {b"count": b"1"}


# -- the operator verbs (docs/spec.md §11.4) ----------------------------------------------

def test_remove_refuses_an_active_row_a_lane_row_and_a_row_out_of_its_set(c, nq):
    claimed(nq, "a")
    refused(c, "EMQSTATE", *nq.lines()["EMQ.REMOVE"][:-1], "a")
    nq.enqueue("l")
    c.hset(nq.row("l"), "group", "g")
    assert refused(c, "EMQSTATE", *nq.lines()["EMQ.REMOVE"][:-1], "l") == LANE
    nq.enqueue("f")
    c.hset(nq.row("f"), "parent", "p")
    assert refused(c, "EMQSTATE", *nq.lines()["EMQ.REMOVE"][:-1], "f") == FLOW
    nq.enqueue("o")
    c.zrem(nq.pending, "o")
    assert "id is not in pending" in refused(c, "EMQSTATE", *nq.lines()["EMQ.REMOVE"][:-1], "o")
    c.hset(nq.row("w"), "state", "weird")
    assert "not pending, scheduled or dead" in refused(c, "EMQSTATE", *nq.lines()["EMQ.REMOVE"][:-1], "w")
    c.set(nq.row("t"), "x")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.REMOVE"][:-1], "t")
    refused(c, "EMQARG", *nq.lines()["EMQ.REMOVE"][:-1], "x" * 513)


def test_cancel_refuses_a_row_not_active_or_not_in_active_and_a_bad_metric(c, nq):
    nq.enqueue("p")
    assert "row is pending, not active" in refused(c, "EMQSTATE", *nq.lines()["EMQ.CANCEL"][:-1], "p")
    claimed(nq, "p")
    c.zrem(nq.active, "p")
    assert "id is not in active" in refused(c, "EMQSTATE", *nq.lines()["EMQ.CANCEL"][:-1], "p")
    claimed(nq, "q")
    c.hset(nq.failed, "count", "x")
    assert refused(c, "EMQ", *nq.lines()["EMQ.CANCEL"][:-1], "q") == NOT_INTEGER
    c.delete(nq.failed)
    c.set(nq.dead, "x")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.CANCEL"][:-1], "q")


@pytest.mark.parametrize("verb, bad", [("EMQ.PURGE", (0, 0)), ("EMQ.PURGE", (0, 10001)), ("EMQ.PURGE", ("-1", 10)),
                                       ("EMQ.DRAIN", (0,)), ("EMQ.DRAIN", ("x",))])
def test_purge_and_drain_refuse_bad_arguments(c, nq, verb, bad):
    nq.enqueue("a")
    line = nq.lines()[verb]
    refused(c, "EMQARG", *line[: len(line) - len(bad)], *bad)


def test_purge_and_drain_refuse_a_wrong_typed_row_before_any_write(c, nq):
    nq.enqueue("a")
    c.zadd(nq.pending, {"t": 1})
    c.set(nq.row("t"), "x")
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.DRAIN"])
    c.zadd(nq.dead, {"d": 0, "t": 1})
    refused(c, "WRONGTYPE", *nq.lines()["EMQ.PURGE"])
