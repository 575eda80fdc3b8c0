"""The parity instrument's pure logic, without a server: normalisation, comparison and the
classifier that names a difference (SPEC §5) or calls it UNEXPECTED."""

from __future__ import annotations

import pytest

from echomq.parity.compare import MISSING, Whole, diff, reply_same
from echomq.parity.differences import NAMED, argument_fault, classify, layout_fault, shape_fault
from echomq.parity.dump import Entry
from echomq.parity.normalise import (Offset, Origins, Window, err, extras_violations, normalise,
                                     normalise_reply, same, string2ll)
from echomq.parity.observation import Observation
from echomq.parity.steps import Do, complete, enqueue, extend, reprocess, stalled_check

B4, B6 = b"echomq:4.0.0", b"echomq:6.0.0"
RUN = b"r" * 40
ROW = b"emq:{q}:job:a"
ACTIVE = b"emq:{q}:active"


def h(**fields) -> Entry:
    return Entry("hash", {k.encode(): (v if isinstance(v, bytes) else str(v).encode()) for k, v in fields.items()})


def z(**members) -> Entry:
    return Entry("zset", {k.encode(): v for k, v in members.items()})


# -- time ------------------------------------------------------------------------------------
def test_an_offset_is_bounded_by_the_window_of_the_call_that_wrote_it():
    off = Offset.of(61_000, Window(1000, 1002))
    assert (off.lo, off.hi) == (59_998, 60_000)
    assert off.meets(Offset(60_000, 60_000))
    assert not off.meets(Offset(60_001, 60_001))
    assert not off.meets(Offset.of(121_000, Window(1000, 1002)))


def test_origins_keep_the_writer_of_an_unchanged_score_and_forget_removed_members():
    origins = Origins()
    w1, w2 = Window(100, 101), Window(200, 200)
    origins.update({}, {ACTIVE: z(a=60_100, b=5)}, w1)
    assert origins.of[(ACTIVE, b"a")] == w1
    origins.update({ACTIVE: z(a=60_100, b=5)}, {ACTIVE: z(a=60_100, c=3)}, w2)
    assert origins.of[(ACTIVE, b"a")] == w1  # unchanged: still the claim's window
    assert origins.of[(ACTIVE, b"c")] == w2 and (ACTIVE, b"b") not in origins.of
    origins.update({ACTIVE: z(a=60_100, c=3)}, {ACTIVE: z(a=60_100, c=0)}, None)
    assert origins.of[(ACTIVE, b"c")] is None  # a plain command's score stays absolute


def test_normalise_turns_verb_written_time_scores_into_offsets_and_nothing_else():
    origins = Origins()
    origins.update({}, {ACTIVE: z(a=60_100)}, Window(100, 100))
    raw = {ACTIVE: z(a=60_100), b"emq:{q}:pending": z(a=60_100), b"{emq}:version": Entry("string", B4)}
    out = normalise(raw, origins, brand=B4, native_extras=False)
    assert out[ACTIVE].value == {b"a": Offset(60_000, 60_000)}
    assert out[b"emq:{q}:pending"].value == {b"a": 60_100}  # pending scores are priorities: compared raw
    assert out[b"{emq}:version"].value == "<brand>"
    assert normalise(raw, origins, brand=B6, native_extras=True)[b"{emq}:version"].value == B4  # wrong brand shows


def test_only_the_native_node_drops_lease_epoch_and_failures_is_compared():
    raw = {ROW: h(state="active", attempts=1, lease_epoch=RUN, failures=1)}
    assert normalise(raw, Origins(), brand=B6, native_extras=True)[ROW].value == {
        b"state": b"active", b"attempts": b"1", b"failures": b"1"}
    assert b"lease_epoch" in normalise(raw, Origins(), brand=B4, native_extras=False)[ROW].value


def test_time_replies_become_offsets_and_errors_compare_by_code():
    assert normalise_reply("extend", 5_100, Window(100, 100)) == Offset(5000, 5000)
    assert normalise_reply("extend", 0, Window(100, 100)) == 0
    assert normalise_reply("extends", [5_100, 0], Window(100, 100)) == (Offset(5000, 5000), 0)
    assert normalise_reply("claim", [b"a", b"p", 1], Window(1, 1)) == ("a", "p", 1)
    assert reply_same(err("EMQSTATE row is pending"), err("EMQSTATE id is not in active"))
    assert not reply_same(err("ERR user_script:1: boom"), err("EMQARG lease_ms"))
    assert not same(1, 1.5) and same((Offset(1, 3),), (Offset(3, 4),))


@pytest.mark.parametrize("raw, value", [
    (None, 0), (b"0", 0), (b"12", 12), (b"-3", -3), (str(2**63 - 1).encode(), 2**63 - 1),
    (b"012", None), (b"-0", None), (b"+1", None), (b" 1", None), (b"1.0", None), (str(2**63).encode(), None),
])
def test_string2ll_follows_valkeys_integer_rules(raw, value):
    assert string2ll(raw) == value


# -- the native extras ---------------------------------------------------------------------------
def test_a_lease_must_carry_the_run_id_of_the_call_that_took_it():
    pre = {ROW: h(state="pending", attempts=0)}
    good = {ROW: h(state="active", attempts=1, lease_epoch=RUN)}
    assert extras_violations(pre, good, stamped=[ROW], run_id=RUN) == []
    stale = {ROW: h(state="active", attempts=1, lease_epoch=b"old")}
    assert "expected this run_id" in extras_violations(pre, stale, stamped=[ROW], run_id=RUN)[0]
    unstamped = {ROW: h(state="active", attempts=1)}
    assert extras_violations(pre, unstamped, stamped=[ROW], run_id=RUN)
    assert "took no lease" in extras_violations(pre, good, stamped=[], run_id=RUN)[0]


# -- comparison ------------------------------------------------------------------------------
def test_diff_names_fields_members_and_whole_keys():
    left = {ROW: h(state="pending", payload="p"), b"k": z(a=1), b"s": Entry("string", b"x")}
    right = {ROW: h(state="active", payload="p"), b"k": z(a=1, b=2), b"s": Entry("hash", {})}
    found = {(d.key, d.part): (d.left, d.right) for d in diff(left, right)}
    assert found[(ROW, "field state")] == (b"pending", b"active")
    assert found[(b"k", "member b")] == (MISSING, 2)
    assert isinstance(found[(b"s", None)][0], Whole)
    assert diff(left, left) == []


# -- SPEC §3 grammar, as the classifier checks a native refusal against it ------------------------
def test_argument_shape_and_layout_faults():
    assert argument_fault(_obs(enqueue("q", "a", priority="-1"))) is not None
    assert argument_fault(_obs(enqueue("q", "a", priority=2**31 - 1))) is None
    assert argument_fault(_obs(enqueue("q", "x" * 513))) is not None
    assert argument_fault(_obs(stalled_check("q", 1, 10_001))) is not None
    assert shape_fault(_obs(Do("extends", "q", ("1000", "a")))) is not None
    assert shape_fault(_obs(Do("extends", "q", ("1000", "a", "1")))) is None
    assert layout_fault(_obs(Do("enqueue", "q", ("a", "p", "0"), keys=("emq:{q}:pending", "emq:{r}:")))) is not None
    assert layout_fault(_obs(enqueue("q", "a"))) is None


# -- the classifier ------------------------------------------------------------------------------
def _obs(step, pre=None, native_post=None, script_post=None, native_reply=None, script_reply=None, violations=()):
    pre = pre if pre is not None else {}
    native_post = pre if native_post is None else native_post
    script_post = pre if script_post is None else script_post
    n = lambda d: normalise(d, Origins(), brand=B6, native_extras=True)  # noqa: E731
    s = lambda d: normalise(d, Origins(), brand=B4, native_extras=False)  # noqa: E731
    obs = Observation(
        case="t", index=1, step=step, script_reply=script_reply, native_reply=native_reply,
        script_window=Window(1000, 1001), native_window=Window(1000, 1001),
        script_pre=pre, script_post=script_post, native_pre=pre, native_post=native_post,
        script_pre_n=s(pre), script_post_n=s(script_post), native_pre_n=n(pre), native_post_n=n(native_post),
        run_id=RUN, native_is_native=True, violations=list(violations))
    obs.diffs = diff(obs.script_post_n, obs.native_post_n)
    return obs


PENDING_ROW = {ROW: h(state="pending", attempts=1, payload="p"), b"emq:{q}:pending": z(a=0)}
ACTIVE_ROW = {ROW: h(state="active", attempts=1, payload="p", lease_epoch=RUN), ACTIVE: z(a=5000)}


def test_equal_replies_and_datasets_are_equal():
    assert classify(_obs(enqueue("q", "a"), PENDING_ROW, native_reply=0, script_reply=0)).kind == "equal"


def test_a_not_active_refusal_on_both_nodes_is_equal_and_a_script_that_acts_is_unexpected():
    """Since SPEC §9.1 the script checks the state too: §5.2 is no named difference any more."""
    refusal = err("EMQSTATE row is pending")
    assert classify(_obs(complete("q", "a", 1), PENDING_ROW, native_reply=refusal, script_reply=refusal)).kind == "equal"
    script_post = {b"emq:{q}:pending": z(a=0), b"emq:{q}:metrics:completed": h(count=1)}
    verdict = classify(_obs(complete("q", "a", 1), PENDING_ROW, script_post=script_post,
                            native_reply=refusal, script_reply=1))
    assert verdict.kind == "unexpected"
    assert {d.key for d in verdict.left_behind} == {ROW, b"emq:{q}:metrics:completed"}


def test_a_refusal_of_an_active_row_is_unexpected():
    verdict = classify(_obs(complete("q", "a", 1), ACTIVE_ROW, script_post={b"emq:{q}:metrics:completed": h(count=1)},
                            native_reply=err("EMQSTATE row is active"), script_reply=1))
    assert verdict.kind == "unexpected"


def test_a_refusal_that_wrote_something_is_unexpected():
    native_post = {**PENDING_ROW, b"emq:{q}:metrics:completed": h(count=1)}
    verdict = classify(_obs(complete("q", "a", 1), PENDING_ROW, native_post=native_post,
                            script_post={b"emq:{q}:metrics:completed": h(count=1)},
                            native_reply=err("EMQSTATE row is pending"), script_reply=1))
    assert verdict.kind == "unexpected"


def test_an_argument_refusal_must_be_outside_the_grammar():
    named = classify(_obs(enqueue("q", "a", priority="-1"), {}, script_post={ROW: h(state="pending")},
                          native_reply=err("EMQARG priority"), script_reply=1))
    assert named.names == ("5.6",)
    wrong = classify(_obs(enqueue("q", "a", priority=3), {}, script_post={ROW: h(state="pending")},
                          native_reply=err("EMQARG priority"), script_reply=1))
    assert wrong.kind == "unexpected"


def test_a_broken_extras_rule_is_unexpected_even_when_everything_else_is_equal():
    verdict = classify(_obs(extend("q", "a", 1), ACTIVE_ROW, native_reply=0, script_reply=0,
                            violations=["emq:{q}:job:a lease_epoch 'x'→'y' by a call that took no lease"]))
    assert verdict.kind == "unexpected" and verdict.violations


def test_a_ghost_in_dead_is_no_named_difference_since_the_script_removes_it_too():
    pre = {b"emq:{q}:dead": z(g=0)}
    assert classify(_obs(reprocess("q", "g"), pre, native_post={}, script_post={}, native_reply=0,
                         script_reply=0)).kind == "equal"
    script_post = {b"emq:{q}:pending": z(g=0), b"emq:{q}:job:g": h(state="pending")}
    partial = classify(_obs(reprocess("q", "g"), pre, native_post={}, script_post=script_post, native_reply=0,
                            script_reply=1))
    assert partial.kind == "unexpected"  # the old partial row is now a defect of the script


def test_a_difference_outside_the_named_ids_is_unexpected():
    pre = {b"emq:{q}:dead": z(g=0), b"emq:{q}:job:b": h(state="pending")}
    script_post = {b"emq:{q}:pending": z(g=0), b"emq:{q}:job:g": h(state="pending"), b"emq:{q}:job:b": h(state="x")}
    verdict = classify(_obs(reprocess("q", "g"), pre, native_post={b"emq:{q}:job:b": h(state="pending")},
                            script_post=script_post, native_reply=0, script_reply=1))
    assert verdict.kind == "unexpected"


def test_the_named_differences_are_data_with_an_example_each():
    from echomq.parity.cases import BY_NAME as CASES

    assert set(NAMED) == {"5.1", "5.4", "5.5", "5.6", "5.exempt"}  # §5.2, §5.3, §5.7 gone since SPEC §9.1
    for named in NAMED.values():
        assert named.id in CASES[named.example].expect, named.example
