"""Lanes and the reaper (docs/lanes-and-flows.md), on both wires and both clients.

A lane job (``enqueue(..., group=g)``) runs in its group's order, at most k of the group at
once, the groups taking turns; its settles are the lane scripts on both wires (SPEC §9.6), and
the native verbs refuse its row. The reaper recovers its expired leases with STALLED.CHECK's
verdicts. The worker-process tests run 4 ``emq worker`` processes (20 groups; 25 jobs each, or
200 with ``EMQ_LANES_FULL=1``) and a SIGKILL mid-lanes.
"""

from __future__ import annotations

import json
import os
import signal
from collections import defaultdict

import pytest

from echomq.worker import policy
from echomq import EmbeddedServer, Queue, Worker, WorkerConfig, connect, module_path
from echomq import Admission, Enqueued
from echomq.errors import (CommandRefused, ConfigurationError, CounterError, JobFailed, LeaseLost, StateError,
                           WrongType)
from echomq._protocol.keys import State
from echomq.worker.waiter import LANES_WAKE
from test_blocking_worker import Running, recording_app
from support import cli
from support.dataset import queue_unchanged, unchanged
from support.queues import AwaitingQueue, fresh_name
from support.waiting import server_ms, wait_server_past, wait_until
from support.workers import QUIET_TIMERS, processed

LEASE = 60_000
FAST_TIMERS = ("--promote-interval-ms", "50", "--sweep-interval-ms", "50")


@pytest.fixture(params=["sync", "asyncio"])
def lanes(request, queue, server, wire):
    """The test's queue through the sync client, or the same operations through the asyncio one."""
    if request.param == "sync":
        yield queue
        return
    awaiting = AwaitingQueue(server.url, wire, queue)
    yield awaiting
    awaiting.close()


def run_all(q, batch: int = 10) -> list:
    """Claim lane jobs and complete each claimed batch until none is left: the jobs in start order."""
    started = []
    while jobs := q.claim_lanes(batch, LEASE):
        started += jobs
        for job in jobs:
            q.complete(job)
    return started


def seqs_by_group(jobs) -> dict[str, list[int]]:
    by_group = defaultdict(list)
    for job in jobs:
        by_group[job.group].append(job.payload["seq"])
    return dict(by_group)


def test_each_group_runs_in_order_one_at_a_time_and_the_groups_take_turns(lanes):
    for seq in range(4):
        for group in ("a", "b", "c"):
            lanes.enqueue({"seq": seq}, group=group)
    first = lanes.claim_lanes(10, LEASE)
    assert sorted(job.group for job in first) == ["a", "b", "c"]  # k=1: one of each, whatever the batch
    assert lanes.claim_lanes(10, LEASE) == []
    assert {g: (c.waiting, c.running) for g, c in lanes.groups().items()} == {g: (3, 1) for g in "abc"}
    for job in first:
        lanes.complete(job)
    started = first + run_all(lanes)
    assert seqs_by_group(started) == {g: [0, 1, 2, 3] for g in "abc"}
    assert len({job.id for job in started}) == 12
    assert lanes.groups() == {} and lanes.counts().total == 0
    assert lanes.metrics()["completed"] == 12


def test_counts_show_the_lane_jobs_over_every_group(lanes):
    for group in ("a", "a", "b", "c"):
        lanes.enqueue({"seq": 0}, group=group)
    lanes.pause_group("c")  # a paused group's jobs still wait: counted
    assert len(lanes.claim_lanes(10, LEASE)) == 2
    c = lanes.counts()
    assert (c.lane_pending, c.lane_active, c.lanes, c.grouped, c.total) == (2, 2, "2/2", True, 0)
    assert (c.flow_waiting, c.flow_pending, c.flow_active, c.flow_scheduled) == (0, 0, 0, 0)


def test_k_per_group_and_per_queue(lanes):
    for seq in range(6):
        lanes.enqueue({"seq": seq}, group="a")
        lanes.enqueue({"seq": seq}, group="b")
    lanes.set_lane_limit(2, "a")
    assert sorted(job.group for job in lanes.claim_lanes(10, LEASE)) == ["a", "a", "b"]
    lanes.set_lane_limit(3)  # the queue's default: b (no k of its own) may run 3
    assert sorted(job.group for job in lanes.claim_lanes(10, LEASE)) == ["b", "b"]
    assert {g: c.limit for g, c in lanes.groups().items()} == {"a": 2, "b": 3}
    lanes.set_lane_limit(None, "a")  # back to the queue's 3
    assert [job.group for job in lanes.claim_lanes(10, LEASE)] == ["a"]
    with pytest.raises(ConfigurationError):
        lanes.set_lane_limit(0, "a")
    with pytest.raises(ConfigurationError):
        lanes.enqueue({}, group="bad{group}")


def test_a_lane_starts_its_lower_priorities_first_then_in_enqueue_order(lanes):
    """One score orders a lane: the priority, then the enqueue order (docs/spec.md §16.1). The
    groups still take turns: a priority orders a group's own jobs, not the round."""
    for seq, priority in enumerate([5, 0, 5, 1, 0]):
        lanes.enqueue({"seq": seq}, group="a", priority=priority)
    lanes.enqueue_many([{"seq": 5}, {"seq": 6}], group="a", priority=1)
    lanes.enqueue({"seq": 0}, group="b", priority=1023)  # b's turn comes whatever its priority
    started = run_all(lanes, batch=1)
    assert seqs_by_group(started) == {"a": [1, 4, 3, 5, 6, 0, 2], "b": [0]}
    assert [job.group for job in started[:2]] == ["a", "b"]
    # the row keeps a priority as a flat row does: only when it is not 0
    lanes.enqueue({}, group="c", id="urgent")
    lanes.enqueue({}, group="c", id="later", priority=7)
    assert "priority" not in lanes.job("urgent") and lanes.job("later")["priority"] == "7"


def test_a_retried_or_reprocessed_lane_job_keeps_its_priority(lanes):
    lanes.enqueue({"seq": 0}, group="a", priority=2)
    lanes.enqueue({"seq": 1}, group="a", priority=2)
    (first,) = lanes.claim_lanes(1, LEASE)
    lanes.enqueue({"seq": 2}, group="a", priority=1)  # more urgent, enqueued while seq 0 ran
    lanes.enqueue({"seq": 3}, group="a", priority=3)
    assert lanes.fail(first, "boom", max_attempts=5) is State.PENDING  # back at its place: after seq 2
    (urgent,) = lanes.claim_lanes(1, LEASE)
    assert urgent.payload["seq"] == 2
    assert lanes.fail(urgent, "boom", max_attempts=1) is State.DEAD
    assert lanes.reprocess(urgent.id) is True  # at its priority's tail: still ahead of 2 and 3
    assert seqs_by_group(run_all(lanes, batch=1)) == {"a": [2, 0, 1, 3]}


def test_a_lane_score_is_exact_at_the_top_of_both_ranges(queue):
    """priority 1023 and a `seq` near 2^43: the score is the exact integer (Lua alone would print
    it with 14 digits), and the order holds."""
    client = queue.connection.client
    seq = 2**43 - 10
    client.set(queue.keys.key("lanes:seq"), seq)
    queue.enqueue({"n": 0}, group="a", id="last", priority=1023)
    queue.enqueue({"n": 1}, group="a", id="late", priority=1022)
    scores = dict(client.zrange(queue.keys.lane("a"), 0, -1, withscores=True, score_cast_func=int))
    rows = {job_id: queue.job(job_id) for job_id in ("last", "late")}
    assert all(seq < int(row["seq"]) < 2**43 for row in rows.values())
    assert scores == {job_id.encode(): int(row["priority"]) * 2**43 + int(row["seq"]) for job_id, row in rows.items()}
    assert list(scores) == [b"late", b"last"]


@pytest.mark.parametrize("priority", [1024, -1, 2**31 - 1, "1", True])
def test_a_lane_priority_out_of_its_range_is_refused_before_anything_is_written(queue, priority):
    client = queue.connection.client
    with unchanged(client, queue.keys), pytest.raises(ConfigurationError, match="bad lane_priority .* from 0 to 1023"):
        queue.enqueue({}, group="a", priority=priority)
    with unchanged(client, queue.keys), pytest.raises(ConfigurationError, match="bad lane_priority"):
        queue.enqueue_many([{}, {}], group="a", priority=priority)


def test_the_group_page_is_a_bounded_read_that_agrees_with_groups(lanes):
    for group in ("z", "y", "x", "y"):
        lanes.enqueue({}, group=group)
    lanes.set_lane_limit(3, "y")
    lanes.pause_group("x")
    every = lanes.groups()
    assert lanes.group_page(2) == (3, {g: every[g] for g in ("x", "y")})  # the first by name
    assert lanes.group_page(100) == (3, every)
    assert (every["y"].waiting, every["y"].limit, every["x"].paused) == (2, 3, True)
    with pytest.raises(ConfigurationError, match="bad most 0"):
        lanes.group_page(0)


def test_a_lane_jobs_unique_window_keeps_its_id_out_after_it_completes(lanes):
    assert lanes.enqueue({"n": 1}, id="report", group="a", unique_for=60) == Enqueued("report", True, Admission.CREATED)
    assert lanes.job("report")["unique"] == "60000" and lanes.groups()["a"].waiting == 1
    assert lanes.enqueue({"n": 2}, id="report", group="a", unique_for=60).reason is Admission.EXISTS
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.complete(job)
    client = lanes.connection.client
    marker = lanes.keys.unique("report")
    assert 0 < client.pttl(marker) <= 60_000
    with queue_unchanged(lanes):
        assert lanes.enqueue({"n": 3}, id="report", group="a", unique_for=60) == \
            Enqueued("report", False, Admission.UNIQUE)
    client.delete(marker)  # the window's end, brought forward
    assert lanes.enqueue({"n": 4}, id="report", group="a", unique_for=60).created


def test_replace_gives_a_waiting_lane_job_its_new_payload_in_its_place(lanes):
    lanes.enqueue({"v": 1}, id="x", group="a", replace=True)
    lanes.enqueue({"v": 0}, id="y", group="a")
    assert lanes.enqueue({"v": 2}, id="x", group="a", replace=True).reason is Admission.REPLACED
    (first,) = lanes.claim_lanes(1, LEASE)
    assert (first.id, first.payload) == ("x", {"v": 2})  # its place kept, its payload the new one
    assert lanes.enqueue({"v": 3}, id="x", group="a", replace=True).reason is Admission.EXISTS  # running
    assert lanes.job("x")["payload"] == {"v": 2}


def test_lane_unique_refusals_write_nothing(queue):
    client = queue.connection.client
    queue.enqueue({}, id="a-job", group="a")
    queue.enqueue({}, id="flat")
    for job_id, refusal in (("a-job", "row is not a lane row of group b"), ("flat", "row is not a lane row of group b")):
        with unchanged(client, queue.keys), pytest.raises(StateError, match=refusal):
            queue.enqueue({}, id=job_id, group="b", replace=True)
    client.zrem(queue.keys.lane("a"), "a-job")  # drifted: waiting, out of its lane
    with unchanged(client, queue.keys), pytest.raises(StateError, match="^EMQSTATE EMQ.LANE.ENQUEUE.UNIQUE id is not in lane:a$"):
        queue.enqueue({}, id="a-job", group="a", replace=True)
    queue.enqueue({}, id="held", group="c", unique_for=5)
    (held,) = queue.claim_lanes(1, LEASE)
    client.hset(queue.keys.job("held"), "unique", "soon")
    with unchanged(client, queue.keys), pytest.raises(CounterError, match="not an integer"):
        queue.complete(held)
    client.hset(queue.keys.job("held"), "unique", "5000")
    client.set(queue.keys.unique("held"), "x")
    with unchanged(client, queue.keys), pytest.raises(WrongType):
        queue.complete(held)
    with pytest.raises(ConfigurationError, match="need the job's id"):
        queue.enqueue({}, group="a", unique_for=5)
    client.set(queue.keys.job("typed"), "x")  # a row, and a marker, of another type
    client.set(queue.keys.unique("marked"), "x")
    for job_id in ("typed", "marked"):
        with unchanged(client, queue.keys), pytest.raises(WrongType):
            queue.enqueue({}, id=job_id, group="a", unique_for=5)


def test_k2_never_runs_more_than_two_of_a_group_and_keeps_the_start_order(queue):
    for seq in range(30):
        for group in ("a", "b"):
            queue.enqueue({"seq": seq}, group=group)
    queue.set_lane_limit(2)
    held, started, most = [], [], 0
    for turn in range(200):
        jobs = queue.claim_lanes(3, LEASE)
        held += jobs
        started += jobs
        running = defaultdict(int)
        for job in held:
            running[job.group] += 1
        most = max([most, *running.values()])
        if not held:
            break
        # settle some: the oldest one, or every other held job, by turn
        for job in held[:1] if turn % 2 else held[::2]:
            queue.complete(job)
            held.remove(job)
    assert most == 2
    assert seqs_by_group(started) == {g: list(range(30)) for g in "ab"}


def test_a_group_with_ten_thousand_jobs_does_not_starve_one_with_ten(queue, record_property):
    queue.set_lane_limit(100)  # A could run 100 at once: only the turns keep B from waiting behind it
    for start in range(0, 10_000, 2_500):
        queue.enqueue_many([{"seq": seq} for seq in range(start, start + 2_500)], group="A")
    queue.enqueue_many([{"seq": seq} for seq in range(10)], group="B")
    starts = 0
    b_done = 0
    while b_done < 10:
        (job,) = queue.claim_lanes(1, LEASE)
        starts += 1
        queue.complete(job)
        b_done += job.group == "B"
    record_property("fairness_starts_for_b", starts)
    print(f"fairness: B's 10 jobs finished within the first {starts} starts (A: 10,000 queued)")
    assert starts <= 40
    assert starts == 20  # strict turns: A, B, A, B, ...
    client = queue.connection.client  # A's 9,990 rows out, or every later DEBUG DIGEST walks them
    client.unlink(*client.scan_iter(match=queue.keys.pattern(), count=1000))


def test_pause_and_resume_one_group(lanes):
    for seq in range(2):
        lanes.enqueue({"seq": seq}, group="a")
        lanes.enqueue({"seq": seq}, group="b")
    lanes.pause_group("a")
    assert lanes.groups()["a"].paused
    (job,) = lanes.claim_lanes(10, LEASE)
    assert job.group == "b"
    lanes.complete(job)
    assert [j.group for j in lanes.claim_lanes(10, LEASE)] == ["b"]
    assert lanes.resume_group("a") is True
    assert lanes.resume_group("a") is False
    assert [j.group for j in lanes.claim_lanes(10, LEASE)] == ["a"]
    lanes.pause()  # the queue's pause holds lanes too
    lanes.enqueue({"seq": 0}, group="c")
    assert lanes.claim_lanes(10, LEASE) == []
    lanes.resume()
    assert [j.group for j in lanes.claim_lanes(10, LEASE)] == ["c"]


def test_a_retry_keeps_its_place_and_a_backoff_holds_the_group(lanes):
    client = lanes.connection.client
    for seq in range(3):
        lanes.enqueue({"seq": seq}, group="a")
    lanes.enqueue({"seq": 0}, group="b")
    first = [j for j in lanes.claim_lanes(10, LEASE) if j.group == "a"][0]
    assert lanes.fail(first, "boom", max_attempts=5) is State.PENDING
    again = lanes.claim_lanes(10, LEASE)
    assert [(j.id, j.attempt) for j in again] == [(first.id, 2)]  # before seq 1
    assert lanes.fail(again[0], "boom", max_attempts=5, backoff_ms=150) is State.SCHEDULED
    due = server_ms(client) + 150  # read after the fail: no earlier than the group's time
    assert lanes.claim_lanes(10, LEASE) == []  # the group waits out the backoff
    assert lanes.job(first.id)["state"] == "pending"
    wait_server_past(client, due)
    third = lanes.claim_lanes(10, LEASE)
    assert [(j.id, j.attempt) for j in third] == [(first.id, 3)]
    assert lanes.fail(third[0], "boom", max_attempts=3) is State.DEAD
    assert lanes.job(first.id)["state"] == "dead" and lanes.ids("dead")[0][0] == first.id
    nxt = lanes.claim_lanes(10, LEASE)  # the dead job no longer holds the group
    assert [j.payload["seq"] for j in nxt] == [1]
    lanes.requeue(nxt[0])  # released: back at its place, no budget spent
    (back,) = lanes.claim_lanes(10, LEASE)
    assert (back.id, back.attempt, lanes.job(back.id).get("failures")) == (nxt[0].id, 2, None)
    assert lanes.delay(back, 10_000) == 1  # the group waits; the job keeps its place
    assert lanes.claim_lanes(10, LEASE) == []
    with pytest.raises(LeaseLost):
        lanes.complete(back)  # released: its token no longer holds


def test_a_lane_jobs_result_and_death_are_told_as_a_flat_jobs(lanes):
    lanes.enqueue({"seq": 0}, group="a")
    lanes.enqueue({"seq": 1}, group="a")
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.publish(job, {"total": 42}, retention_ms=60_000)
    assert lanes.result(job.id, timeout=5) == {"total": 42}
    assert lanes.status(job.id).value == "completed"
    (doomed,) = lanes.claim_lanes(1, LEASE)
    assert lanes.fail(doomed, "boom", max_attempts=1, traceback="Traceback: boom") is State.DEAD
    with pytest.raises(JobFailed, match="boom"):
        lanes.result(doomed.id, timeout=5)
    lanes.connection.client.delete(lanes.keys.key("done"))  # not left to expire under a later test's digest


def test_renewals_and_a_stale_token(lanes):
    lanes.enqueue({"seq": 0}, group="a")
    lanes.enqueue({"n": 1})
    (job,) = lanes.claim_lanes(1, LEASE)
    flat = lanes.claim(LEASE)
    deadlines = lanes.extend_many([flat, job], 90_000)
    assert all(d > 0 for d in deadlines)
    assert lanes.extend(job, 90_000) > 0
    with pytest.raises(LeaseLost):
        lanes.complete(job, token=job.attempt + 1)
    lanes.complete(job)
    assert lanes.extend_many([job, flat], 90_000)[0] == 0  # lost: gone
    with pytest.raises(LeaseLost):
        lanes.extend(job, 90_000)


def test_cancel_stops_a_running_lane_job_and_frees_its_groups_slot(lanes):
    lanes.enable_events()
    lanes.enqueue({"seq": 0}, group="a")
    lanes.enqueue({"seq": 1}, group="a")
    (running,) = lanes.claim_lanes(10, LEASE)
    assert lanes.claim_lanes(10, LEASE) == []  # k=1: seq 1 waits for it
    assert lanes.cancel(running.id) is True
    row = lanes.job(running.id)
    assert (row["state"], row["last_error"], row["group"]) == ("dead", "cancelled", "a")
    assert lanes.ids("dead")[0][0] == running.id and lanes.metrics()["failed"] == 1
    with pytest.raises(LeaseLost):  # its holder's settle is refused, its renewal answers 0
        lanes.complete(running)
    with pytest.raises(LeaseLost):
        lanes.extend(running, LEASE)
    (following,) = lanes.claim_lanes(10, LEASE)  # the group's slot is free again
    assert following.payload["seq"] == 1
    with queue_unchanged(lanes), pytest.raises(StateError, match="^EMQSTATE EMQ.LANE.CANCEL row is dead, not active$"):
        lanes.cancel(running.id)  # dead already
    client = lanes.connection.client
    told = [fields for _, fields in client.xrange(lanes.keys.events) if fields[b"type"] == b"dead"]
    assert told == [{b"type": b"dead", b"id": running.id.encode(), b"attempt": b"1", b"error": b"cancelled",
                     b"state": b"dead"}]
    lanes.disable_events()
    client.delete(lanes.keys.events)


def test_remove_deletes_a_waiting_or_dead_lane_job_and_a_group_left_empty_leaves_the_round(lanes):
    for seq in range(3):
        lanes.enqueue({"seq": seq}, group="a", id=f"a{seq}")
    lanes.enqueue({"seq": 0}, group="b", id="b0")
    assert lanes.remove("a1") is State.PENDING and lanes.job("a1") is None
    assert lanes.remove("b0") is State.PENDING  # b's only job, its turn taken back
    assert "b" not in lanes.groups()
    (first,) = lanes.claim_lanes(10, LEASE)  # only a takes a turn

    assert lanes.fail(first, "boom", max_attempts=1) is State.DEAD
    assert lanes.remove("a0") is State.DEAD and lanes.ids("dead") == []
    assert [job.payload["seq"] for job in run_all(lanes)] == [2]  # the group's order, a1 gone
    assert lanes.remove("a0") is None  # no row


def test_lane_cancel_and_remove_refuse_what_they_do_not_move_and_write_nothing(queue):
    client = queue.connection.client
    queue.enqueue({"seq": 0}, group="a", id="running")
    queue.enqueue({"seq": 1}, group="a", id="waiting")
    queue.claim_lanes(1, LEASE)
    queue.enqueue({"n": 1}, id="flat")
    client.zrem(queue.keys.lane("a"), "waiting")  # a drifted row: pending, missing from its lane
    for call, refusal in ((("lane_cancel", "waiting"), "^EMQSTATE EMQ.LANE.CANCEL row is pending, not active$"),
                          (("lane_cancel", "flat"), "^EMQSTATE EMQ.LANE.CANCEL row is not a lane row$"),
                          (("lane_remove", "running"), "^EMQSTATE EMQ.LANE.REMOVE row is active: cancel it instead$"),
                          (("lane_remove", "flat"), "^EMQSTATE EMQ.LANE.REMOVE row is not a lane row$"),
                          (("lane_remove", "waiting"), "^EMQSTATE EMQ.LANE.REMOVE id is not in lane:a$")):
        with unchanged(client, queue.keys), pytest.raises(StateError, match=refusal):
            queue.connection.send(queue.build(*call))
    with unchanged(client, queue.keys), pytest.raises(StateError, match="^EMQSTATE EMQ.LANE.REMOVE row is active"):
        queue.remove("running")  # through REMOVE's refusal, to the lane script's
    client.zrem(queue.keys.key("lanes:active"), "running")  # drifted: active, missing from lanes:active
    queue.enqueue({"seq": 0}, group="d", id="doomed")
    queue.fail(queue.claim_lanes(1, LEASE)[0], "boom", max_attempts=1)
    client.zrem(queue.keys.key("dead"), "doomed")  # drifted: dead, missing from dead
    queue.enqueue({"seq": 0}, group="s", id="odd")
    client.hset(queue.keys.job("odd"), "state", "scheduled")  # a state no lane set belongs to
    for call, refusal in ((("lane_cancel", "running"), "^EMQSTATE EMQ.LANE.CANCEL id is not in lanes:active$"),
                          (("lane_remove", "doomed"), "^EMQSTATE EMQ.LANE.REMOVE id is not in dead$"),
                          (("lane_remove", "odd"), "^EMQSTATE EMQ.LANE.REMOVE row is scheduled, not pending or dead$")):
        with unchanged(client, queue.keys), pytest.raises(StateError, match=refusal):
            queue.connection.send(queue.build(*call))
    assert queue.connection.send(queue.build("lane_cancel", "nobody")) == 0
    assert queue.connection.send(queue.build("lane_remove", "nobody")) == 0


def test_the_reaper_recovers_expired_lane_leases_with_the_sweeps_budget(lanes):
    client = lanes.connection.client
    lanes.enqueue({"seq": 0}, group="a")
    lanes.enqueue({"seq": 1}, group="a")
    lanes.enqueue({"n": 1})
    (job,) = lanes.claim_lanes(1, 1)
    flat = lanes.claim(1)
    wait_server_past(client, server_ms(client) + 2)
    sweep = lanes.stalled_check(2, 100)  # the flat sweep works beside expired lane leases
    assert (sweep.recovered, sweep.exempt, sweep.dead) == ([flat.id], [], [])
    reaped = lanes.reap(2, 100)
    assert (reaped.recovered, reaped.exempt, reaped.dead) == ([job.id], [], [])
    row = lanes.job(job.id)
    assert (row["state"], row["stalled"]) == ("pending", "1")
    (again,) = lanes.claim_lanes(1, 1)
    assert (again.id, again.attempt) == (job.id, 2)  # back at its place: before seq 1
    wait_server_past(client, server_ms(client) + 2)
    reaped = lanes.reap(2, 100)
    assert reaped.dead == [job.id]
    row = lanes.job(job.id)
    assert (row["state"], row["last_error"], row["stalled"]) == ("dead", "stalled", "2")
    assert [j.payload["seq"] for j in lanes.claim_lanes(5, LEASE)] == [1]  # the group goes on
    assert lanes.reap(2, 100) == lanes.reap(2, 100)  # nothing more: no move, empty sweeps


def test_a_lane_job_tells_its_moves_as_a_flat_job_does(lanes):
    """With the queue's events on, every lane script tells its move (docs/spec.md §12's kinds, in
    order); a lane job back in its lane is `pending`, even while its group waits."""
    client = lanes.connection.client
    lanes.enable_events(maxlen=100)
    a = lanes.enqueue("a", group="g").id
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.progress(job, 1)
    assert lanes.fail(job, "boom", max_attempts=3, backoff_ms=1) is State.SCHEDULED
    wait_server_past(client, server_ms(client) + 2)
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.delay(job, 1)
    wait_server_past(client, server_ms(client) + 2)
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.requeue(job)
    (job,) = lanes.claim_lanes(1, 1)
    wait_server_past(client, server_ms(client) + 2)
    assert lanes.reap(2, 100).recovered == [a]
    (job,) = lanes.claim_lanes(1, 1)
    wait_server_past(client, server_ms(client) + 2)
    assert lanes.reap(2, 100).dead == [a]
    assert lanes.reprocess(a)
    (job,) = lanes.claim_lanes(1, LEASE)
    lanes.complete(job)
    told = [(e.type, e.job_id, e.attempt, e.error, e.state, e.progress) for e in lanes.events()]
    assert told == [
        ("enqueued", a, 0, None, "pending", None), ("claimed", a, 1, None, None, None),
        ("progress", a, 1, None, None, 1), ("failed", a, 1, "boom", None, None),
        ("retried", a, 1, None, "pending", None), ("claimed", a, 2, None, None, None),
        ("delayed", a, 2, None, "pending", None), ("claimed", a, 3, None, None, None),
        ("requeued", a, 3, None, "pending", None), ("claimed", a, 4, None, None, None),
        ("stalled", a, 4, None, None, None), ("recovered", a, 4, None, "pending", None),
        ("claimed", a, 5, None, None, None), ("stalled", a, 5, None, None, None),
        ("dead", a, 5, "stalled", "dead", None), ("reprocessed", a, 5, None, "pending", None),
        ("claimed", a, 6, None, None, None), ("completed", a, 6, None, None, None)]


def test_a_lane_job_that_dies_of_failures_tells_failed_then_dead_and_a_bad_switch_refuses(queue):
    """FAIL's budget spent: `failed`, then `dead`. A malformed `meta events` refuses every lane script
    that reads it before its first write: nothing changes (the move is not half made)."""
    client = queue.connection.client
    queue.enable_events(maxlen=100)
    queue.enqueue("a", group="g")
    (job,) = queue.claim_lanes(1, LEASE)
    assert queue.fail(job, "fatal", max_attempts=1) is State.DEAD
    assert [(e.type, e.error, e.state) for e in queue.events()][-2:] == [("failed", "fatal", None),
                                                                         ("dead", None, "dead")]
    queue.enqueue("b", group="g")
    (held,) = queue.claim_lanes(1, LEASE)
    client.hset(queue.keys.meta, "events", "many")
    for attempt in (lambda: queue.enqueue("c", group="g"), lambda: queue.claim_lanes(1, LEASE),
                    lambda: queue.complete(held), lambda: queue.fail(held, "e", max_attempts=3),
                    lambda: queue.requeue(held), lambda: queue.reap(2, 100)):
        with unchanged(client), pytest.raises(CommandRefused, match="not an integer"):
            attempt()


def test_the_restart_exemption_where_the_epoch_is_stamped(queue, wire):
    """Wire 6 stamps the server's run_id on a lane lease; an expiry whose stamp is another run's
    (the lease crossed a restart) is recovered without a stall. Wire 4 stamps nothing and counts
    every expiry, as its STALLED.CHECK does."""
    client = queue.connection.client
    for seq in range(2):
        queue.enqueue({"seq": seq}, group=f"g{seq}")
    crossed, counted = queue.claim_lanes(2, 1)
    run_id = client.info("server")["run_id"]
    assert queue.job(crossed.id).get("lease_epoch") == (run_id if wire == 6 else None)
    if wire == 6:
        client.hset(queue.keys.job(crossed.id), "lease_epoch", "0" * 40)  # as a lease of the previous run
    wait_server_past(client, server_ms(client) + 2)
    reaped = queue.reap(3, 100)
    if wire == 6:
        assert (reaped.recovered, reaped.exempt) == ([counted.id], [crossed.id])
        assert queue.job(crossed.id).get("stalled") is None
    else:
        assert sorted(reaped.recovered) == sorted([crossed.id, counted.id]) and reaped.exempt == []
    assert queue.job(counted.id)["stalled"] == "1"


def test_a_lane_lease_that_crossed_a_real_restart(wire):
    """The same with a real restart (the AOF keeps the dataset, the run_id changes): the lease taken
    before it is exempt on wire 6, the one taken after it counts; wire 4 counts both."""
    with EmbeddedServer(module=module_path() if wire == 6 else None, aof=True, appendfsync="always",
                        brand=wire) as server:
        name = fresh_name("r")
        with connect(server.url, wire=wire) as conn:
            queue = Queue(conn, name)
            before = queue.enqueue({"seq": 0}, group="a")
            after = queue.enqueue({"seq": 0}, group="b")
            (crossed,) = queue.claim_lanes(1, 1)
        server.restart()
        with connect(server.url, wire=wire) as conn:
            queue = Queue(conn, name)
            (counted,) = queue.claim_lanes(1, 1)
            assert (crossed.id, counted.id) == (before.id, after.id)
            wait_server_past(conn.client, server_ms(conn.client) + 2)
            reaped = queue.reap(3, 100)
            if wire == 6:
                assert (reaped.recovered, reaped.exempt, reaped.dead) == ([counted.id], [crossed.id], [])
            else:
                assert sorted(reaped.recovered) == sorted([crossed.id, counted.id]) and reaped.exempt == []


def test_the_native_verbs_refuse_lane_rows_and_write_nothing(queue, wire):
    """The flat verbs on a held lane job: wire 6 refuses the row (EMQSTATE lane row is not native);
    wire 4's scripts find it outside active (EMQSTATE). Either way nothing is written."""
    client = queue.connection.client
    queue.enqueue({"seq": 0}, group="a")
    (job,) = queue.claim_lanes(1, LEASE)
    calls = [queue.build("complete", job.id, job.token),
             queue.build("fail", job.id, job.token, "x", 3, 0),
             queue.build("delay", job.id, job.token, 10),
             queue.build("requeue", job.id, job.token)]
    for call in calls:
        with unchanged(client, queue.keys):
            (reply,) = queue.connection.round_trip([call])
        assert isinstance(reply, StateError), (call.verb.name, reply)
        if wire == 6:
            assert str(reply) == "EMQSTATE lane row is not native"
    queue.fail(job, "x", max_attempts=1)  # dead, through the lane script
    # REPROCESS refuses it on both wires (wire 4's script would have made it a flat job)
    with unchanged(client, queue.keys), pytest.raises(StateError, match="^EMQSTATE lane row is not native$"):
        queue.connection.send(queue.build("reprocess", job.id))
    # a lane script refuses a flat row, and writes nothing
    queue.enqueue({"n": 1}, id="flat")
    flat = queue.claim(LEASE)
    with unchanged(client, queue.keys), pytest.raises(StateError, match="not a lane row"):
        queue.connection.send(queue.build("lane_complete", flat.id, flat.token, b"", 0))


def test_reprocess_sends_a_dead_lane_job_to_its_lanes_tail_with_its_budgets_refilled(lanes):
    lanes.enable_events()
    lanes.enqueue({"seq": 0}, group="a")
    lanes.enqueue({"seq": 1}, group="a")
    (doomed,) = lanes.claim_lanes(10, LEASE)
    assert lanes.fail(doomed, "boom", max_attempts=1) is State.DEAD
    lanes.enqueue({"seq": 2}, group="a")
    assert lanes.reprocess(doomed.id) is True
    row = lanes.job(doomed.id)
    assert (row["state"], row["failures"], row["stalled"], row["group"]) == ("pending", "0", "0", "a")
    assert lanes.ids("dead") == [] and lanes.ids("pending") == []  # in its lane, never flat
    assert lanes.groups()["a"].waiting == 3
    assert lanes.reprocess(doomed.id) is False  # no longer dead
    started = run_all(lanes)
    assert seqs_by_group(started) == {"a": [1, 2, 0]}  # at the tail, the group's order kept
    assert started[-1].attempt == 2  # the token goes on
    client = lanes.connection.client
    told = [fields for _, fields in client.xrange(lanes.keys.events) if fields[b"type"] == b"reprocessed"]
    assert told == [{b"type": b"reprocessed", b"id": doomed.id.encode(), b"attempt": b"1", b"state": b"pending"}]
    lanes.disable_events()
    client.delete(lanes.keys.events)


def test_lane_reprocess_refuses_a_flat_or_live_row_and_drops_a_ghost(queue):
    client = queue.connection.client
    queue.enqueue({"n": 1}, id="flat")
    queue.fail(queue.claim(LEASE), "x", max_attempts=1)
    queue.enqueue({"seq": 0}, group="a", id="live")
    client.zadd(queue.keys.key("dead"), {"live": 0, "ghost": 0})
    for job_id, refusal in (("flat", "^EMQSTATE EMQ.LANE.REPROCESS row is not a lane row$"),
                            ("live", "^EMQSTATE EMQ.LANE.REPROCESS row is pending, not dead$")):
        with unchanged(client, queue.keys), pytest.raises(StateError, match=refusal):
            queue.connection.send(queue.build("lane_reprocess", job_id))
    assert queue.connection.send(queue.build("lane_reprocess", "ghost")) == 0
    assert queue.connection.send(queue.build("lane_reprocess", "nobody")) == 0
    assert queue.reprocess("flat") is True and queue.job("flat")["state"] == "pending"  # flat: REPROCESS
    assert {job_id for job_id, _ in queue.ids("dead")} == {"live"}


def test_a_wire_6_connection_sends_the_lane_scripts_and_only_them(conn, queue):
    """SPEC §9.6: besides the EMQ verbs and the two reads, exactly the lane scripts go as EVALSHA."""
    for name in ("lane_enqueue", "lane_claim", "lane_reap"):
        assert conn.command_args(queue.build(name, *{"lane_enqueue": ("i", b"p", "g", 0),
                                                     "lane_claim": (10, 0), "lane_reap": (1, 10, 0)}[name]))[0] \
            == "EVALSHA"
    if conn.wire == 6:
        assert conn.command_args(queue.build("claim", 10))[0] == "EMQ.CLAIM"
        assert "stalled_check" not in conn.scripts and "lane_claim" in conn.scripts


def test_emq_group_commands(server, conn):
    name = fresh_name("c")
    queue = Queue(conn, name)

    def emq(*args):
        result = cli.emq(*args, url=server.url)
        assert result.exit_code == 0, result.output
        return result.stdout

    queue.enqueue({}, group="tenant-42")
    queue.enqueue({}, group="tenant-7")
    assert "paused" in emq("group", "pause", "-q", name, "tenant-42")
    assert "at most 3 at once" in emq("group", "limit", "-q", name, "3", "--group", "tenant-7")
    listed = json.loads(emq("group", "list", "-q", name, "--json"))
    assert listed == {"tenant-42": {"waiting": 1, "running": 0, "paused": True, "limit": 1},
                      "tenant-7": {"waiting": 1, "running": 0, "paused": False, "limit": 3}}
    assert "tenant-42" in emq("group", "list", "-q", name)
    assert [job.group for job in queue.claim_lanes(5, LEASE)] == ["tenant-7"]
    assert "resumed" in emq("group", "resume", "-q", name, "tenant-42")
    (job,) = queue.claim_lanes(5, LEASE)
    conn.client.zadd(queue.keys.key("lanes:active"), {job.id: 0})  # its lease ran out
    assert "recovered 1" in emq("sweep", "-q", name)  # the sweep and the reaper
    assert "in its set" not in emq("inspect", job.id, "-q", name)  # found in its lane, not called lost


# -- workers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("count,capacity,flat_found,lanes_found,turn,no_lanes,split", [
    (0, 5, True, True, 0, False, (0, 0)),
    (10, 10, True, True, 0, False, (5, 5)),  # both give jobs: half each
    (7, 10, False, False, 0, False, (4, 3)),
    (10, 10, True, False, 0, False, (9, 1)),  # lanes came back empty: one probe
    (10, 10, False, True, 0, False, (1, 9)),
    (1, 2, True, True, 0, False, (1, 1)),  # a lone claim with room for two probes both
    (1, 1, True, True, 0, False, (0, 1)),  # no room: the kinds take turns
    (1, 1, True, True, 1, False, (1, 0)),
    (1, 1, True, False, 1, False, (1, 0)),  # only flat gives jobs: flat, lanes one round in four
    (1, 1, True, False, 4, False, (0, 1)),
    (1, 1, False, True, 1, False, (0, 1)),
    (10, 10, True, False, 3, True, (10, 0)),  # a queue without lanes: all flat ...
    (10, 10, True, False, 8, True, (9, 1)),  # ... but one round in eight
])
def test_split_claims(count, capacity, flat_found, lanes_found, turn, no_lanes, split):
    assert policy.split_claims(count, capacity, flat_found, lanes_found, turn, no_lanes) == split



def waiting_on_markers(client, wire) -> bool:
    """A client blocked in BZPOPMIN: a worker's wait on the wake markers (on wire 6 its lanes' wake,
    named LANES_WAKE)."""
    return any("b" in c["flags"] and c["cmd"].lower() == "bzpopmin" and (wire == 4 or c.get("name") == LANES_WAKE)
               for c in client.client_list())


def test_an_idle_worker_wakes_for_a_lane_job_on_both_wires(wire):
    """The lane scripts write the wake marker on both wires; an idle worker blocks on it (wire 6:
    beside its BCLAIM, which never wakes for a lane job). Its blocks last 30 s: a job run within
    10 s was woken for."""
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire) as server, \
            connect(server.url, wire=wire) as conn:
        name, seen = fresh_name("w"), []
        queue = Queue(conn, name)
        with Running(Worker(recording_app([name], seen), conn, config=WorkerConfig(timers=QUIET_TIMERS))):
            wait_until(lambda: waiting_on_markers(conn.client, wire), what="the worker waiting on the markers")
            job = queue.enqueue({}, group="g")
            wait_until(lambda: seen == [(name, job.id, 1)], timeout=10, what="the lane job run")
            wait_until(lambda: waiting_on_markers(conn.client, wire), what="the worker waiting again")
            second = queue.enqueue({}, group="g")
            wait_until(lambda: (name, second.id, 1) in seen, timeout=10, what="the second lane job run")
            wait_until(lambda: queue.groups() == {}, what="the second lane job settled")


# -- worker processes ------------------------------------------------------------------------

def lane_rows(out):
    """lanes.log as (group, seq, start_ns, end_ns, id) tuples."""
    rows = []
    for line in (out / "lanes.log").read_text().splitlines():
        group, seq, start, end, job_id = line.split()
        rows.append((group, int(seq), int(start), int(end), job_id))
    return rows


def test_four_worker_processes_keep_each_groups_order_and_limit(conn, spawn, out, record_property):
    groups, per_group = 20, 200 if os.environ.get("EMQ_LANES_FULL") else 25
    name = fresh_name("lanes")
    queue = Queue(conn, name)
    pairs = {f"g{g}": 2 for g in range(5)}  # five groups run two at a time, the rest one
    for group, k in pairs.items():
        queue.set_lane_limit(k, group)
    for g in range(groups):
        queue.enqueue_many([{"lane": f"g{g}", "seq": seq, "work_ms": 1} for seq in range(per_group)], group=f"g{g}")
    total = groups * per_group
    workers = [spawn(name, "-c", "4") for _ in range(4)]
    wait_until(lambda: queue.metrics()["completed"] == total, 120, f"{total} completions")
    rows = lane_rows(out)
    assert len(rows) == total and len({row[4] for row in rows}) == total  # every job exactly once
    assert {attempt for _, attempt, _ in processed(out)} == {1}
    by_group = defaultdict(list)
    for group, seq, start, end, _ in rows:
        by_group[group].append((start, end, seq))
    for group, runs in by_group.items():
        runs.sort()
        k = pairs.get(group, 1)
        assert sorted(seq for _, _, seq in runs) == list(range(per_group))
        # in order: seq j starts only after j - k + 1 of the jobs before it ended (k=1: all of them),
        # since its claim waited for their settles (two handlers of a k=2 group may begin either way)
        for start, _, seq in runs:
            ends = sorted(e for _, e, before in runs if before < seq)
            assert seq < k or ends[seq - k] < start, f"{group}: seq {seq} started before its turn (k={k})"
        for at, (start, _, _) in enumerate(runs):  # at most k of the group run at any start
            overlapping = sum(1 for s, e, _ in runs[:at] if e > start)
            assert overlapping < k, f"{group}: {overlapping + 1} jobs at once at seq {runs[at][2]} (k={k})"
    assert queue.groups() == {}
    record_property("lanes_jobs", total)
    for worker in workers:
        worker.kill()


def test_a_sigkilled_worker_leaves_nothing_lost_the_reaper_recovers_its_leases(conn, spawn, out):
    name = fresh_name("lanes")
    queue = Queue(conn, name)
    groups, per_group = 8, 12
    for g in range(groups):
        queue.enqueue_many([{"lane": f"g{g}", "seq": seq, "work_ms": 20} for seq in range(per_group)], group=f"g{g}")
    total = groups * per_group
    victim = spawn(name, "-c", "4", "--lease-ms", "400", *FAST_TIMERS, "--max-stalled", "5")
    leases = queue.keys.key("lanes:active")
    wait_until(lambda: (out / "lanes.log").exists() and len(lane_rows(out)) >= 8 and conn.client.zcard(leases) >= 3,
               30, "the victim at work, holding leases")
    victim.kill()  # SIGKILL mid-lanes: its leases are left to expire
    held = {j for j, _ in queue.ids("active", count=1)}  # nothing flat: lane leases are elsewhere
    assert held == set()
    orphans = {member.decode() for member in conn.client.zrange(leases, 0, -1)}
    assert orphans, "the victim held lane leases when it died"
    survivor = spawn(name, "-c", "4", "--lease-ms", "400", *FAST_TIMERS, "--max-stalled", "5")
    wait_until(lambda: queue.metrics()["completed"] == total, 60, f"{total} completions")
    runs = processed(out)
    done = {job_id for job_id, _, _ in runs}
    assert len(done) == total  # nothing lost
    retried = {job_id for job_id, attempt, _ in runs if attempt > 1}
    assert orphans <= retried  # every lease the victim held was recovered and run again
    assert "reaper" in survivor.log() and "recovered" in survivor.log()
    assert queue.counts().total == 0 and queue.groups() == {}
    assert conn.client.zcard(leases) == 0
    survivor.signal(signal.SIGTERM)
    assert survivor.wait() == 0
