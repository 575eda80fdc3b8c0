"""The case catalogue: every verb's ordinary path and every SPEC §5 edge.

A case's ``expect`` lists the named differences it was written to show; the
instrument reports any it did not show (a case that misses its edge tests
nothing), and the suite fails on it.
"""

from __future__ import annotations

from .steps import (Case, append, bclaim, cancel, claim, complete, counts, delay, drain, enqueue, events_on, extend,
                    extends, fail, failures_incr, key, pause, promote, publish, purge, rate_limit, raw, remove,
                    reprocess, requeue, reschedule, restart, resume, schedule, stalled_check, state, tick, wait, Do)

Q, R = "q", "r"
LONG = 60_000
BIG = str(2**63 - 1)


def case(name: str, family: str, *steps, expect: tuple[str, ...] = (), note: str = "") -> Case:
    return Case(name, family, tuple(steps), frozenset(expect), note)


def held(job: str = "a", q: str = Q, lease: int = LONG, payload: str = "p"):
    """Enqueue one job and claim it (token 1)."""
    return (enqueue(q, job, payload), claim(q, lease))


def dead_job(job: str = "a", q: str = Q):
    """A job that went dead on its first failure (token 1)."""
    return (*held(job, q), fail(q, job, 1, "fatal", 1))


def lane(job: str = "a", q: str = Q, name: str = "group", value: str = "g1"):
    return raw("HSET", key(q, "job:" + job), name, value, label=f"mark {job} as a {'lane row' if name == 'group' else 'flow child'}")


ORDINARY = [
    # -- admission
    case("enqueue.ordinary", "admission",
         enqueue(Q, "a", "pa"), enqueue(Q, "b", "pb", 7), enqueue(Q, "a", "again"), enqueue(R, "a", "other queue")),
    case("schedule.ordinary", "admission",
         schedule(Q, "a", LONG, "pa"), schedule(Q, "b", 5000, "pb", 4), schedule(Q, "a", 1, "again"),
         enqueue(Q, "b", "taken")),
    # -- claim
    case("claim.ordinary", "claim",
         enqueue(Q, "a", "pa"), enqueue(Q, "b", "pb", 1), enqueue(Q, "c", "pc"),
         claim(Q, 30_000), claim(Q, 45_000), claim(Q, 1000), claim(Q, 1000)),
    case("claim.paused", "claim",
         enqueue(Q, "a"), pause(Q), claim(Q), enqueue(Q, "b"), resume(Q), claim(Q), pause(Q, "0"), claim(Q),
         pause(Q, ""), claim(Q)),
    case("claim.pending-ghost", "claim",
         raw("ZADD", key(Q, "pending"), "0", "ghost", label="ghost in pending"), enqueue(Q, "a", priority=1),
         claim(Q), claim(Q)),
    # BCLAIM where it does not block (a job is there), or blocks 1 ms and times out: CLAIM's outcome
    case("bclaim.ordinary", "claim",
         enqueue(Q, "a", "pa"), enqueue(Q, "b", "pb", 1), bclaim(Q, 30_000), bclaim(Q, 1000, 5000), bclaim(Q, 1000)),
    case("bclaim.paused", "claim",
         enqueue(Q, "a"), pause(Q), bclaim(Q), resume(Q), bclaim(Q, 1000, 5000), bclaim(Q)),
    # the rate limit (docs/spec.md §13): the sliding log, a held claim (its wait, or the empty
    # array for a caller that reads none), an empty pending, a retry's start, the window sliding
    case("claim.rate", "claim",
         rate_limit(Q, 2, LONG), enqueue(Q, "a"), enqueue(Q, "b"), enqueue(Q, "c"), claim(Q, rated=True),
         bclaim(Q, 30_000, 1, rated=True), claim(Q, rated=True), claim(Q), bclaim(Q, 1000, 5000, rated=True),
         rate_limit(Q, 3, LONG), fail(Q, "a", 1, "again", 3), claim(Q, rated=True), claim(Q, rated=True),
         rate_limit(Q, 0, LONG), claim(Q, rated=True)),
    # the window slides: a's start leaves it (trimmed by c's claim) before the log expires (the nodes tick
    # in turn, so each sees about twice the tick)
    case("claim.rate-window", "claim",
         rate_limit(Q, 2, 1000), enqueue(Q, "a"), enqueue(Q, "b"), enqueue(Q, "c"), claim(Q, rated=True),
         tick(300), claim(Q, rated=True), claim(Q, rated=True), tick(250), claim(Q, rated=True)),
    case("claim.rate-malformed", "claim",
         enqueue(Q, "a"), raw("HSET", key(Q, "meta"), "rate_limit", "many", label="rate_limit not an integer"),
         claim(Q, rated=True), rate_limit(Q, 5, 0), claim(Q), rate_limit(Q, 10001, 1000), bclaim(Q, rated=True),
         raw("HDEL", key(Q, "meta"), "rate_window", label="no window"), claim(Q), rate_limit(Q, 5, 1000),
         raw("SET", key(Q, "rate"), "x", label="the log is a string"), claim(Q, rated=True)),
    case("claim.lane-and-flow", "claim",
         enqueue(Q, "a"), lane("a"), enqueue(Q, "b"), lane("b", name="parent", value="p1"), claim(Q), claim(Q),
         note="CLAIM and EXTEND do not refuse lane rows or flow children"),
    # -- lease
    case("extend.ordinary", "lease",
         *held(), extend(Q, "a", 1, 90_000), extend(Q, "a", 2), extend(Q, "zz", 1), extend(Q, "a", 1, 5000)),
    case("extends.ordinary", "lease",
         *held("a"), *held("b"), extends(Q, 70_000, ("a", 1), ("b", 1)), extends(Q, 20_000, ("a", 1), ("b", 9), ("c", 1))),
    case("extend.after-restart", "lease",
         *held(), restart(), extend(Q, "a", 1, 80_000), extends(Q, 85_000, ("a", 1)),
         note="the renewed lease carries the new run_id"),
    # -- settle
    case("complete.ordinary", "settle",
         *held("a"), *held("b"), complete(Q, "a", 1), complete(Q, "b", 7), complete(Q, "a", 1), complete(Q, "b", 1)),
    case("fail.retry", "settle",
         enqueue(Q, "a", priority=3), claim(Q), fail(Q, "a", 1, "first", 3, 0), claim(Q), fail(Q, "a", 2, "second", 3, 0),
         fail(Q, "a", 1, "stale token")),
    case("fail.backoff", "settle", *held(), fail(Q, "a", 1, "later", 3, 25_000)),
    case("fail.dead", "settle",
         *held(), fail(Q, "a", 1, "one", 2), claim(Q), fail(Q, "a", 2, "two", 2)),
    case("fail.traceback", "settle",
         *held("b"), fail(Q, "b", 1, "ValueError: b", 3, 25_000, "Traceback (most recent call last):\n  b"),
         *held("a"), fail(Q, "a", 1, "ValueError: one", 4, 0, "Traceback (most recent call last):\n  one"),
         claim(Q), fail(Q, "a", 2, "two", 4), claim(Q), fail(Q, "a", 3, "Retry: later", 4, 0, ""),
         claim(Q), fail(Q, "a", 4, "ValueError: four", 4, 0, "Traceback\n  " + "x" * 8180),
         note="the sixth ARGV, written with the failure on every path (8192 bytes at most); without it the "
              "field is left as it is"),
    case("delay.ordinary", "settle", *held(), delay(Q, "a", 2), delay(Q, "b", 1), delay(Q, "a", 1, 15_000)),
    case("requeue.ordinary", "settle",
         enqueue(Q, "a", priority=2), claim(Q), requeue(Q, "a", 1), requeue(Q, "a", 5), claim(Q), requeue(Q, "a", 2),
         note="requeue.lua since SPEC §9.1"),
    # -- schedule
    case("promote.ordinary", "schedule",
         schedule(Q, "a", 0, priority=5), schedule(Q, "b", 1), schedule(Q, "c", LONG), wait(Q, "schedule", "b"),
         promote(Q), promote(Q), claim(Q)),
    case("promote.limit", "schedule",
         schedule(Q, "a", 0), schedule(Q, "b", 0), schedule(Q, "c", 0), wait(Q, "schedule"), promote(Q, 2), promote(Q, 2)),
    case("reschedule.ordinary", "schedule",
         schedule(Q, "a", LONG), reschedule(Q, "a", 2000), reschedule(Q, "zz", 10), reschedule(Q, "a", 0),
         wait(Q, "schedule", "a"), promote(Q),
         note="reschedule.lua since SPEC §9.1"),
    case("delay.then-promote", "schedule",
         *held(), delay(Q, "a", 1, 1), wait(Q, "schedule", "a"), promote(Q), claim(Q), complete(Q, "a", 2)),
    # -- recovery
    case("stalled.recover", "recovery",
         enqueue(Q, "a", priority=4), enqueue(Q, "b"), claim(Q, 1), claim(Q, LONG), wait(Q, "active", "b"),
         stalled_check(Q, 3), claim(Q, 1), wait(Q, "active", "b"), stalled_check(Q, 3)),
    case("stalled.die", "recovery",
         *held(lease=1), wait(Q), stalled_check(Q, 1), stalled_check(Q, 1)),
    case("stalled.limit", "recovery",
         enqueue(Q, "a"), enqueue(Q, "b"), enqueue(Q, "c"), claim(Q, 1), claim(Q, 1), claim(Q, 1), wait(Q),
         stalled_check(Q, 5, 2), stalled_check(Q, 5, 2)),
    case("reprocess.ordinary", "recovery",
         *dead_job("a"), reprocess(Q, "a"), reprocess(Q, "a"), reprocess(Q, "zz"), claim(Q)),
    case("reprocess.refills-budgets", "recovery",
         enqueue(Q, "a", priority=9), claim(Q, 1), wait(Q), stalled_check(Q, 1), reprocess(Q, "a"), claim(Q),
         fail(Q, "a", 2, "x", 2), claim(Q), fail(Q, "a", 3, "x", 2), reprocess(Q, "a"), claim(Q),
         note="SPEC §9.2: failures and stalled start again from 0, attempts goes on"),
    # -- the operator verbs (docs/spec.md §11.4)
    case("remove.ordinary", "operator",
         *dead_job("d"), enqueue(Q, "a", priority=2), schedule(Q, "b", LONG), claim(Q),
         remove(Q, "b"), remove(Q, "d"), remove(Q, "zz"), remove(Q, "a"), enqueue(Q, "c"), remove(Q, "c")),
    case("remove.edge.out-of-place", "operator",
         enqueue(Q, "a"), raw("ZREM", key(Q, "pending"), "a", label="a out of pending"), remove(Q, "a"),
         enqueue(Q, "b"), lane("b"), remove(Q, "b"), raw("HSET", key(Q, "job:c"), "state", "x", label="c in no state"),
         remove(Q, "c")),
    case("cancel.ordinary", "operator",
         *held("a"), cancel(Q, "a"), complete(Q, "a", 1), extends(Q, LONG, ("a", 1)), cancel(Q, "a"), cancel(Q, "zz"),
         reprocess(Q, "a"), claim(Q), complete(Q, "a", 2)),
    case("cancel.edge.not-in-active", "operator",
         *held("a"), raw("ZREM", key(Q, "active"), "a", label="a out of active"), cancel(Q, "a"),
         *held("b"), lane("b", name="parent", value="p1"), cancel(Q, "b")),
    case("purge.ordinary", "operator",
         *dead_job("a"), *dead_job("b"), *dead_job("c"), purge(Q, LONG), purge(Q, 0, 2), purge(Q), purge(Q)),
    case("purge.edge.ghost-and-drift", "operator",
         raw("ZADD", key(Q, "dead"), "0", "ghost", label="ghost in dead"), enqueue(Q, "a"),
         raw("ZADD", key(Q, "dead"), "0", "a", label="pending a also in dead"), *dead_job("b"), tick(), purge(Q, 1)),
    case("drain.ordinary", "operator",
         enqueue(Q, "a", priority=5), enqueue(Q, "b", priority=1), enqueue(Q, "c", priority=3),
         schedule(Q, "s", LONG), drain(Q, 2), drain(Q, 2), drain(Q), claim(Q)),
    case("drain.edge.ghost-and-drift", "operator",
         *held("a"), raw("ZADD", key(Q, "pending"), "0", "a", label="active a also in pending"),
         raw("ZADD", key(Q, "pending"), "0", "ghost", label="ghost in pending"), enqueue(Q, "b"), drain(Q)),
    # -- the bus (docs/spec.md §12): results, progress, failures told, and every verb's event
    case("publish.ordinary", "bus",
         *held("a"), *held("b"), publish(Q, "a", 1, '{"ok":1}'), publish(Q, "a", 1), publish(Q, "b", 7),
         publish(Q, "b", 1, "", 0), enqueue(Q, "a"), claim(Q), publish(Q, "a", 1, "again", 30_000),
         note="retention 0 keeps no record; a second completion of the same id replaces the record"),
    case("failures_incr.ordinary", "bus",
         enqueue(Q, "a", priority=2), claim(Q), failures_incr(Q, "a", 1, "first", 3, 0, "tb1"), claim(Q),
         failures_incr(Q, "a", 2, "later", 3, 20_000, "tb2"), failures_incr(Q, "a", 2, "stale"),
         *held("b"), failures_incr(Q, "b", 1, "fatal", 1, 0, "tb3"), failures_incr(Q, "b", 1, "again", 1)),
    case("append.ordinary", "bus",
         *held("a"), append(Q, "a", 1), append(Q, "a", 2), append(Q, "zz", 1), append(Q, "a", 1, '"done"')),
    case("events.lifecycle", "bus",
         events_on(Q, 100), enqueue(Q, "a", priority=1), schedule(Q, "s", LONG), claim(Q), append(Q, "a", 1),
         fail(Q, "a", 1, "first", 3, 0), claim(Q), failures_incr(Q, "a", 2, "second", 3, 0, "tb"), claim(Q),
         complete(Q, "a", 3), *held("b"), publish(Q, "b", 1, "rb"), *held("c"), cancel(Q, "c"), remove(Q, "s"),
         *dead_job("d"), remove(Q, "d"), enqueue(Q, "e"), claim(Q, 1), wait(Q), stalled_check(Q, 2),
         claim(Q, 1), wait(Q), stalled_check(Q, 2), *dead_job("f"), purge(Q), enqueue(Q, "g"), drain(Q)),
    case("events.bounded", "bus",
         events_on(Q, 3), *[enqueue(Q, f"j{n}") for n in range(6)], events_on(Q, 0), enqueue(Q, "off"),
         events_on(Q, "-1"), enqueue(Q, "off2")),
    # -- reads and restarts
    case("reads.counts-and-state", "reads",
         *held("a"), enqueue(Q, "b"), schedule(Q, "c", LONG), pause(Q), counts(Q), state(Q, "a"), state(Q, "zz")),
    case("restart.between-calls", "restart",
         enqueue(Q, "a"), schedule(Q, "b", LONG), restart(), claim(Q), restart(), complete(Q, "a", 1), counts(Q)),
    case("lifecycle.two-queues", "restart",
         enqueue(Q, "a"), enqueue(R, "a"), claim(Q), claim(R), fail(R, "a", 1, "x", 3, 10),
         complete(Q, "a", 1), wait(R, "schedule"), promote(R), claim(R), complete(R, "a", 2)),
]

EDGES = [
    # §5.1 CLAIM
    case("claim.edge.meta-wrongtype", "claim",
         enqueue(Q, "a"), raw("SET", key(Q, "meta"), "x", label="meta as a string"), claim(Q), expect=("5.1",)),
    case("claim.edge.row-wrongtype", "claim",
         raw("ZADD", key(Q, "pending"), "0", "a", label="a in pending"),
         raw("SET", key(Q, "job:a"), "x", label="a's row as a string"), claim(Q), expect=("5.1",)),
    case("claim.edge.attempts-not-integer", "claim",
         enqueue(Q, "a"), raw("HSET", key(Q, "job:a"), "attempts", "x1", label="attempts not an integer"), claim(Q),
         expect=("5.1",)),
    case("claim.edge.attempts-overflow", "claim",
         enqueue(Q, "a"), raw("HSET", key(Q, "job:a"), "attempts", BIG, label="attempts at i64 max"), claim(Q),
         expect=("5.1",)),
    case("claim.edge.active-wrongtype", "claim",
         enqueue(Q, "a"), raw("SET", key(Q, "active"), "x", label="active as a string"), claim(Q), expect=("5.1",)),
    # once §5.2 not active: the scripts refuse as the native verbs do since SPEC §9.1
    case("extend.edge.not-active", "lease",
         *held(), fail(Q, "a", 1, "retry", 3), extend(Q, "a", 1)),
    case("extend.edge.not-in-active", "lease",
         *held(), raw("ZREM", key(Q, "active"), "a", label="a out of active, state kept"), extend(Q, "a", 1)),
    case("extends.edge.not-active", "lease",
         *held("a"), *held("b"), fail(Q, "b", 1, "retry", 3), extends(Q, 50_000, ("a", 1), ("b", 1))),
    case("complete.edge.not-active", "settle",
         *held(), delay(Q, "a", 1), complete(Q, "a", 1)),
    case("delay.edge.not-active", "settle",
         *held(), fail(Q, "a", 1, "retry", 3), delay(Q, "a", 1)),
    case("fail.edge.not-active", "settle",
         *held(), delay(Q, "a", 1), fail(Q, "a", 1, "late")),
    case("requeue.edge.not-active", "settle",
         *held(), fail(Q, "a", 1, "retry", 3), requeue(Q, "a", 1)),
    case("complete.edge.active-state-not-in-set", "settle",
         *held(), raw("ZREM", key(Q, "active"), "a", label="a out of active"), complete(Q, "a", 1)),
    case("reschedule.edge.not-scheduled", "schedule",
         enqueue(Q, "a"), reschedule(Q, "a", 100)),
    case("reprocess.edge.state-not-dead", "recovery",
         enqueue(Q, "a"), raw("ZADD", key(Q, "dead"), "0", "a", label="pending a also in dead"), reprocess(Q, "a")),
    # once §5.3 repeated terminal failure: refused on both wires since SPEC §9.1
    case("fail.edge.repeated-terminal", "settle",
         *dead_job(), fail(Q, "a", 1, "again", 1)),
    # §5.4 ghosts
    case("promote.edge.ghost", "schedule",
         raw("ZADD", key(Q, "schedule"), "0", "ghost", label="ghost in schedule"), schedule(Q, "a", 0, priority=2),
         wait(Q, "schedule", "a"), promote(Q), expect=("5.4",)),
    case("stalled.edge.ghost", "recovery",
         raw("ZADD", key(Q, "active"), "0", "ghost", label="ghost in active"), enqueue(Q, "a"), claim(Q, 1), wait(Q),
         stalled_check(Q, 1), expect=("5.4",)),
    case("stalled.edge.ghost-recovered", "recovery",
         raw("ZADD", key(Q, "active"), "0", "ghost", label="ghost in active"), stalled_check(Q, 3), expect=("5.4",)),
    case("reprocess.ghost", "recovery",
         raw("ZADD", key(Q, "dead"), "0", "ghost", label="ghost in dead"), reprocess(Q, "ghost")),
    # §5.5 lanes and flows
    *[case(f"{verb}.edge.lane", family, *setup, lane(), call, expect=("5.5",)) for verb, family, setup, call in (
        ("complete", "settle", held(), complete(Q, "a", 1)),
        ("fail", "settle", held(), fail(Q, "a", 1, "x")),
        ("delay", "settle", held(), delay(Q, "a", 1)),
        ("requeue", "settle", held(), requeue(Q, "a", 1)),
        ("reprocess", "recovery", dead_job(), reprocess(Q, "a")),
        ("reschedule", "schedule", (schedule(Q, "a", LONG),), reschedule(Q, "a", 5)),
        ("stalled", "recovery", held(lease=1) + (wait(Q),), stalled_check(Q, 3)),
    )],
    case("complete.edge.flow", "settle", *held(), lane(name="parent", value="p1"), complete(Q, "a", 1), expect=("5.5",)),
    case("fail.edge.flow", "settle", *held(), lane(name="parent", value="p1"), fail(Q, "a", 1, "x"), expect=("5.5",)),
    case("publish.edge.flow", "bus", *held(), lane(name="parent", value="p1"), publish(Q, "a", 1), expect=("5.5",)),
    case("failures_incr.edge.lane", "bus", *held(), lane(), failures_incr(Q, "a", 1), expect=("5.5",)),
    case("publish.edge.not-active", "bus", *held(), delay(Q, "a", 1), publish(Q, "a", 1), append(Q, "a", 1),
         failures_incr(Q, "a", 1)),
    # §5.6 types and arguments first
    case("enqueue.edge.pending-wrongtype", "admission",
         raw("SET", key(Q, "pending"), "x", label="pending as a string"), enqueue(Q, "a"), expect=("5.6",),
         note="the script writes the row, then ZADD fails: the row is left behind"),
    case("enqueue.edge.negative-priority", "admission", enqueue(Q, "a", priority="-1"), expect=("5.6",)),
    case("enqueue.edge.priority-not-a-number", "admission", enqueue(Q, "a", priority="high"), expect=("5.6",)),
    case("enqueue.edge.priority-too-big", "admission", enqueue(Q, "a", priority=2**31), expect=("5.6",)),
    case("enqueue.edge.id-too-long", "admission", enqueue(Q, "x" * 513), expect=("5.6",)),
    case("enqueue.edge.shape", "admission",
         Do("enqueue", Q, ("a", "p", "0"), keys=(key(Q, "pending"),)), expect=("5.6",)),
    case("enqueue.edge.layout", "admission",
         Do("enqueue", Q, ("a", "p", "0"), keys=(key(Q, "pending"), "emq:{r}:")), expect=("5.6",),
         note="the script writes q's pending and r's row"),
    case("schedule.edge.negative-delay", "admission", schedule(Q, "a", "-5000"), expect=("5.6",)),
    case("claim.edge.lease-not-a-number", "claim", enqueue(Q, "a"), claim(Q, "soon"), expect=("5.6",),
         note="the script pops, increments attempts and marks active before its arithmetic fails"),
    case("claim.edge.lease-zero", "claim", enqueue(Q, "a"), claim(Q, 0), expect=("5.6",)),
    case("bclaim.edge.row-wrongtype", "claim",
         raw("ZADD", key(Q, "pending"), "0", "a", label="a in pending"),
         raw("SET", key(Q, "job:a"), "x", label="a's row as a string"), bclaim(Q), expect=("5.1",)),
    case("bclaim.edge.timeout-not-a-number", "claim", enqueue(Q, "a"), bclaim(Q, 1000, "later"), expect=("5.6",),
         note="the script node's stand-in (the claim) takes the job; native refuses the timeout first"),
    case("extend.edge.lease-zero", "lease", *held(), extend(Q, "a", 1, 0), expect=("5.6",)),
    case("extends.edge.shape", "lease", *held(), Do("extends", Q, ("1000", "a")), expect=("5.6",)),
    case("complete.edge.metrics-wrongtype", "settle",
         *held(), raw("SET", key(Q, "metrics:completed"), "x", label="metrics:completed as a string"),
         complete(Q, "a", 1), expect=("5.6",), note="the script deletes the row, then HINCRBY fails: the job is lost"),
    case("fail.edge.max-attempts-zero", "settle", *held(), fail(Q, "a", 1, "x", 0), expect=("5.6",)),
    case("fail.edge.traceback-too-long", "settle", *held(), fail(Q, "a", 1, "x", 3, 0, "t" * 8193),
         expect=("5.6",), note="the script stores it; the Python client refuses it before sending"),
    case("fail.edge.shape", "settle", *held(), Do("fail", Q, ("a", "1", "x", "3", "0", "tb", "extra")),
         expect=("5.6",)),
    case("fail.edge.dead-wrongtype", "settle",
         *held(), raw("SET", key(Q, "dead"), "x", label="dead as a string"), fail(Q, "a", 1, "x", 1), expect=("5.6",)),
    case("delay.edge.schedule-wrongtype", "settle",
         *held(), raw("SET", key(Q, "schedule"), "x", label="schedule as a string"), delay(Q, "a", 1), expect=("5.6",)),
    case("promote.edge.limit-zero", "schedule", schedule(Q, "a", 0), promote(Q, 0), expect=("5.6",)),
    case("promote.edge.limit-too-big", "schedule", schedule(Q, "a", 0), promote(Q, 10_001), expect=("5.6",)),
    case("promote.edge.pending-wrongtype", "schedule",
         schedule(Q, "a", 0), raw("SET", key(Q, "pending"), "x", label="pending as a string"), wait(Q, "schedule"),
         promote(Q), expect=("5.6",)),
    case("stalled.edge.max-stalled-zero", "recovery", stalled_check(Q, 0), expect=("5.6",)),
    case("purge.edge.limit-zero", "operator", *dead_job(), purge(Q, 0, 0), expect=("5.6",)),
    case("stalled.edge.stalled-not-integer", "recovery",
         *held(lease=1), raw("HSET", key(Q, "job:a"), "stalled", "x", label="stalled not an integer"), wait(Q),
         stalled_check(Q, 3), expect=("5.6",)),
    case("publish.edge.retention-negative", "bus", *held(), publish(Q, "a", 1, "r", "-1"), expect=("5.6",)),
    case("append.edge.progress-too-big", "bus", *held(), append(Q, "a", 1, "x" * 65537),
         note="the script checks the bound before any write, as the native verb does"),
    case("publish.edge.record-wrongtype", "bus",
         *held(), raw("SET", key(Q, "done:a"), "x", label="a's record as a string"), publish(Q, "a", 1),
         expect=("5.6",), note="native refuses the wrong-typed record; the script's DEL of the old record replaces it"),
    case("events.edge.stream-wrongtype", "bus",
         events_on(Q), raw("SET", key(Q, "events"), "x", label="events as a string"), enqueue(Q, "a"),
         expect=("5.6",), note="the script admits the job, then XADD fails"),
    case("events.edge.switch-not-integer", "bus",
         *held(), raw("HSET", key(Q, "meta"), "events", "many", label="events switch not an integer"),
         complete(Q, "a", 1), enqueue(Q, "b")),
    case("reprocess.edge.pending-wrongtype", "recovery",
         *dead_job(), raw("SET", key(Q, "pending"), "x", label="pending as a string"), reprocess(Q, "a"),
         expect=("5.6",)),
    # once §5.7 budgets: one budget (failures) on both wires since SPEC §9.1
    case("fail.edge.budget-after-stall", "settle",
         enqueue(Q, "a"), claim(Q, 1), wait(Q), stalled_check(Q, 5), claim(Q), fail(Q, "a", 2, "x", 2)),
    case("fail.edge.budget-after-requeue", "settle",
         *held(), requeue(Q, "a", 1), claim(Q), fail(Q, "a", 2, "x", 2, 500)),
    case("fail.one-budget-trial", "settle",
         enqueue(Q, "a"), claim(Q, 1), wait(Q), stalled_check(Q, 3), claim(Q, 1), wait(Q), stalled_check(Q, 3),
         claim(Q), fail(Q, "a", 3, "real", 3, 500),
         note="issue 13's trial: two expired leases, then one real failure with max_attempts=3: scheduled on both"),
    case("fail.edge.budget-same-on-ordinary-path", "settle",
         *held(), fail(Q, "a", 1, "x", 3), claim(Q), fail(Q, "a", 2, "x", 3), claim(Q), fail(Q, "a", 3, "x", 3)),
    # the restart exemption
    case("stalled.edge.restart-exempt", "recovery",
         enqueue(Q, "a"), enqueue(Q, "b"), claim(Q, 1), restart(), claim(Q, 1), wait(Q), stalled_check(Q, 1),
         expect=("5.exempt",), note="a leased before the restart is exempt; b leased after it is counted"),
    case("events.edge.restart-exempt", "bus",
         events_on(Q), enqueue(Q, "a"), enqueue(Q, "b"), claim(Q, 1), restart(), claim(Q, 1),
         raw("ZADD", key(Q, "active"), "0", "ghost", label="ghost in active"), wait(Q), stalled_check(Q, 1),
         expect=("5.4", "5.exempt"), note="native: a recovered (its event only), b stalled and dead, the ghost "
                                          "silent; the script counts all three and tells each"),
    case("stalled.edge.exempt-and-ghost", "recovery",
         enqueue(Q, "a"), claim(Q, 1), restart(), raw("ZADD", key(Q, "active"), "0", "ghost", label="ghost in active"),
         wait(Q), stalled_check(Q, 2), expect=("5.4", "5.exempt")),
]

CATALOGUE: tuple[Case, ...] = tuple(ORDINARY + EDGES)
BY_NAME = {c.name: c for c in CATALOGUE}
assert len(BY_NAME) == len(CATALOGUE), "case names are unique"
