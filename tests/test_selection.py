"""Which jobs an operator means (echomq/admin/selection.py) and the bulk actions on the dead
(echomq/admin/actions.py act_on_dead), shared by the dashboard and ``emq reprocess --all``: the
filter decided without a server, then on real servers (both wires) a filtered page that goes on
where it stopped, a count, and reprocess / remove of the chosen dead in batches that leave the
others and the later deaths alone."""

from __future__ import annotations

import pytest

from echomq import ConfigurationError, PartitionedQueue, Queue, State
from echomq.admin.actions import act_on_dead, acted, left_dead
from echomq._protocol.envelope import MAGIC, wrap
from echomq.admin.selection import NO_FILTER, JobFilter, count_dead, dead_as_of, matching_page, walk_dead
from support.dataset import queue_unchanged
from support.queues import fresh_name, take
from support.waiting import wait_server_past

HOUR_MS = 3_600_000


# -- pure ------------------------------------------------------------------------------------------


def test_a_filter_matches_error_text_in_any_case_and_ages_from_admission():
    now = 10 * HOUR_MS
    row = {"last_error": "TimeoutError: the mailer did not answer", "created": str(now - 2 * HOUR_MS)}
    assert NO_FILTER.empty and NO_FILTER.matches({}, now)
    assert JobFilter(error="timeouterror").matches(row, now)
    assert not JobFilter(error="ValueError").matches(row, now)
    assert not JobFilter(error="x").matches({"created": "1"}, now)  # no error: no match for error text
    assert JobFilter(min_age="1h").matches(row, now) and not JobFilter(min_age="3h").matches(row, now)
    assert JobFilter(max_age="3h").matches(row, now) and not JobFilter(max_age="1h").matches(row, now)
    assert JobFilter(min_age="1h", max_age="3h", error="mailer").matches(row, now)
    assert not JobFilter(min_age="1s").matches({"last_error": "x"}, now)  # a row without created: no age
    assert not JobFilter(max_age="1d").matches({"created": "soon"}, now)


@pytest.mark.parametrize("fields, says", [
    ({"min_age": "a week"}, "bad min age: 'a week' is not a duration"),
    ({"max_age": "7 days"}, "bad max age: '7 days' is not a duration"),
    ({"error": "x" * 201}, "error text of 201 characters: look for at most 200"),
])
def test_a_filter_that_does_not_read_is_refused_naming_what(fields, says):
    with pytest.raises(ValueError, match=says):
        JobFilter(**fields)


def test_a_filter_travels_in_a_link_and_says_itself_on_one_line():
    shown = JobFilter(error=' "boom"\n', min_age="1h", max_age="")
    assert shown.query() == {"error": '"boom"', "min_age": "1h"} and JobFilter(**shown.query()) == shown
    assert NO_FILTER.query() == {} and NO_FILTER.described() == "every job"
    assert shown.described() == "error containing '\"boom\"', at least 1h old"
    assert "\n" not in JobFilter(error="a\x1bb").described()


def test_a_task_filter_matches_the_task_a_jobs_headers_name_exactly():
    now = HOUR_MS
    named = wrap("q", b'{"to": "a"}', {"task": "send_email"})
    by_task = JobFilter(task=" send_email ")
    assert by_task.task == "send_email" and not by_task.empty and by_task.fields[-1] == "payload"
    assert by_task.matches({"state": "dead"}, now, named)
    assert not JobFilter(task="send").matches({}, now, named)  # a name, not a part of one
    assert not by_task.matches({}, now, b'{"to": "a"}')  # a job enqueued without a task names none
    assert not by_task.matches({}, now, MAGIC + b'{"emq": 5\x00')  # an envelope that does not read: no task
    assert not by_task.matches({}, now, b"\xff\xfe")  # a payload of no serializer's we know: no task
    assert not by_task.matches({}, now, None)  # no payload read (a row that vanished)
    assert not JobFilter(task="send_email", error="x").matches({"last_error": "y"}, now, named)
    assert NO_FILTER.fields[-1] != "payload"  # only a task filter reads payloads
    # the row as HMGET answers it: the listed fields, then the payload
    assert by_task.matches_row([b"dead", *[None] * (len(by_task.fields) - 2), named], now)
    assert not by_task.matches_row([None] * len(by_task.fields), now)
    odd = JobFilter(task='<b>"x"\n')
    assert odd.query() == {"task": '<b>"x"'} and JobFilter(**odd.query()) == odd
    assert odd.described() == "task '<b>\"x\"'" and "\n" not in JobFilter(task="a\x1bb").described()
    with pytest.raises(ValueError, match="a task name of 201 characters: a task's has at most 200"):
        JobFilter(task="t" * 201)


def test_what_each_bulk_answer_means():
    assert acted("reprocess", True) and left_dead("reprocess", True)
    assert not acted("reprocess", False) and left_dead("reprocess", False)  # not in dead (a ghost was removed)
    assert not acted("reprocess", ValueError()) and not left_dead("reprocess", ValueError())  # refused: stays
    assert acted("remove", State.DEAD) and left_dead("remove", State.DEAD)
    assert not acted("remove", None) and not left_dead("remove", None)  # no row: REMOVE leaves a ghost in dead


# -- on a node -------------------------------------------------------------------------------------


def kill(queue: Queue, job_id: str, error: str) -> None:
    queue.enqueue({"n": job_id}, id=job_id)
    queue.fail(take(queue), error, max_attempts=1)


def admitted_ago(queue: Queue, job_id: str, ms: int) -> None:
    """Plant an older admission time (the row's ``created``, server clock) than the test could wait for."""
    queue.connection.client.hset(queue.keys.job(job_id), "created", str(queue.server_ms() - ms))


def test_a_filtered_page_reads_a_window_at_a_time_and_goes_on_where_it_stopped(queue):
    for n in range(12):
        kill(queue, f"j{n:02}", "TimeoutError: slow" if n % 3 == 0 else "ValueError: bad")
    slow = JobFilter(error="timeout")
    first = matching_page(queue, State.DEAD, slow, start=0, count=2, window=4)
    assert [v.id for v in first.jobs] == ["j00", "j03"] and first.next_start == 4 and first.scanned == 4
    rest = matching_page(queue, State.DEAD, slow, start=first.next_start, count=25, window=4)
    assert [v.id for v in rest.jobs] == ["j06", "j09"] and rest.next_start is None and rest.scanned == 8
    bounded = matching_page(queue, State.DEAD, JobFilter(error="nothing like it"), start=0, count=25, budget=5,
                            window=2)
    assert bounded.jobs == [] and (bounded.scanned, bounded.next_start) == (5, 5)  # the budget spent: go on from 5
    every = matching_page(queue, State.DEAD, NO_FILTER, start=10, count=25)
    assert [v.id for v in every.jobs] == ["j10", "j11"] and every.next_start is None
    assert every.jobs[0].fields["last_error"] == "ValueError: bad" and every.jobs[0].where == "dead"


def test_a_filtered_page_of_a_partitioned_queue_reads_every_partition(conn):
    queue = PartitionedQueue(conn, fresh_name("sel"), partitions=3)
    ids = [e.id for e in queue.enqueue_many([{"n": n} for n in range(9)])]
    for job_id in ids[:4]:
        admitted_ago(queue.find(job_id), job_id, 2 * HOUR_MS)
    found = matching_page(queue, State.PENDING, JobFilter(min_age="1h"), start=0, count=25, window=2)
    assert sorted(v.id for v in found.jobs) == sorted(ids[:4]) and found.next_start is None


def test_reprocess_of_the_dead_a_filter_chooses_moves_them_in_batches_and_leaves_the_rest(queue):
    for n in range(9):
        kill(queue, f"d{n}", "TimeoutError: slow" if n % 2 == 0 else "ValueError: bad")
    as_of = dead_as_of(queue)
    wait_server_past(queue.connection.client, as_of)
    kill(queue, "later", "TimeoutError: after the count")  # died after the operator looked: left alone
    slow = JobFilter(error="timeout")
    assert count_dead(queue, slow, as_of) == 5 and count_dead(queue, NO_FILTER, as_of) == 9
    done = act_on_dead(queue, "reprocess", slow, as_of, batch=2)  # ranks shift as each batch leaves
    assert sorted(done.done) == ["d0", "d2", "d4", "d6", "d8"] and done.not_done == []
    assert {job_id: queue.state(job_id) for job_id in ("d0", "d1", "later")} == {
        "d0": State.PENDING, "d1": State.DEAD, "later": State.DEAD}
    assert queue.counts().dead == 5 and queue.counts().pending == 5
    assert queue.job("d0")["failures"] == "0"  # its budget refilled, as REPROCESS does


def test_remove_of_the_dead_a_filter_chooses_deletes_them_and_passes_over_a_ghost(queue):
    for n in range(4):
        kill(queue, f"d{n}", "boom")
    admitted_ago(queue, "d1", 3 * HOUR_MS)
    admitted_ago(queue, "d2", 3 * HOUR_MS)
    done = act_on_dead(queue, "remove", JobFilter(min_age="2h"), dead_as_of(queue), batch=2)
    assert sorted(done.done) == ["d1", "d2"] and done.not_done == []
    assert queue.state("d1") is None and queue.state("d0") is State.DEAD
    # a ghost (an id in dead whose row a raw command deleted): REMOVE finds no row and leaves it, and
    # the walk goes on past it
    queue.connection.client.zadd(queue.keys.dead, {"ghost": 0})
    every = act_on_dead(queue, "remove", NO_FILTER, dead_as_of(queue), batch=1)
    assert sorted(every.done) == ["d0", "d3"] and every.not_done == ["ghost"]
    assert queue.connection.client.zrange(queue.keys.dead, 0, -1) == [b"ghost"]


def test_a_lane_job_is_reprocessed_into_its_lane(queue):
    queue.enqueue({}, group="tenant", id="lane-job")
    queue.fail(queue.claim_lanes(1, 10_000)[0], "boom", max_attempts=1)
    kill(queue, "flat", "boom")
    done = act_on_dead(queue, "reprocess", NO_FILTER, dead_as_of(queue))
    assert sorted(done.done) == ["flat", "lane-job"] and queue.groups()["tenant"].waiting == 1


def test_the_dead_of_a_partitioned_queue_are_walked_partition_by_partition(conn):
    queue = PartitionedQueue(conn, fresh_name("sel"), partitions=3)
    queue.enqueue_many([{"n": n} for n in range(7)])
    for part in queue.partitions:
        while (job := part.claim(60_000)) is not None:
            part.fail(job, "boom", max_attempts=1)
    as_of = dead_as_of(queue)
    assert count_dead(queue, NO_FILTER, as_of) == 7 == walk_dead(queue, JobFilter(error="BOOM"), as_of).chosen
    assert len(act_on_dead(queue, "remove", NO_FILTER, as_of, batch=2).done) == 7 and queue.counts().dead == 0


def test_a_bulk_action_it_does_not_know_is_refused_and_writes_nothing(queue):
    kill(queue, "d0", "boom")
    with queue_unchanged(queue), pytest.raises(ConfigurationError, match="bad bulk action 'purge': one of reprocess"):
        act_on_dead(queue, "purge", NO_FILTER, dead_as_of(queue))
