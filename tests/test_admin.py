"""The operator's library (``echomq/admin/``, shared by ``emq`` and the dashboard), and what ``emq``
hands the worker package and ``observe``: each function that decides something, on real servers
(both wires) where it reads or writes, without one where it is pure."""

from __future__ import annotations

import sys

import pytest

from echomq import ConfigurationError, PartitionedQueue, Queue, State
from echomq._client.queue import Counts
from echomq.admin import actions
from echomq.admin.actions import ENQUEUE_BATCH, Drained, act_on_dead, each_job, enqueue_jobs, reprocess_dead
from echomq.admin.selection import NO_FILTER, dead_as_of
from echomq.admin.workers import list_workers
from echomq.admin.inventory import (QueueNumbers, dead_jobs, events_setting, jobs_held, job_story, queues_holding,
                                    rates, with_partitions)
from echomq.errors import StateError
from echomq.observe.serving import is_loopback, serve_worker_metrics
from echomq.worker.loading import NotAnApp, load_app
from echomq.worker.heartbeat import Heartbeat
from echomq.worker.supervisor import process_commands
from support.queues import fresh_name, take


def numbers(name: str, completed: int, dead: int) -> QueueNumbers:
    return QueueNumbers(name, Counts(0, 0, 0, 0, False), completed, dead)


# -- pure ------------------------------------------------------------------------------------------


def test_rates_are_the_change_per_second_and_none_before_a_second_sample():
    before = {"a": numbers("a", 10, 1)}
    now = {"a": numbers("a", 30, 2), "new": numbers("new", 5, 0)}
    assert rates(now, None, 2.0) == {} and rates(now, before, 0) == {}
    assert rates(now, before, 2.0) == {"a": {"completed_per_s": 10.0, "dead_per_s": 0.5},
                                       "new": {"completed_per_s": 0.0, "dead_per_s": 0.0}}  # new: from now on


def test_jobs_held_counts_every_set_flat_lane_and_flow():
    counts = Counts(1, 2, 3, 4, False, lane_pending=5, lane_active=6, flow_waiting=7, flow_pending=8, flow_active=9,
                    flow_scheduled=10)
    assert jobs_held(counts) == sum(range(1, 11))


def test_with_partitions_puts_a_partitioned_queues_partitions_under_it_only_when_asked(conn):
    plain, parted = Queue(conn, fresh_name("a")), PartitionedQueue(conn, fresh_name("p"), partitions=3)
    assert with_partitions([plain, parted], detail=False) == [plain, parted]
    assert with_partitions([plain, parted], detail=True) == [plain, parted, *parted.partitions]


def test_each_job_acts_on_every_id_and_a_refusal_stops_only_its_own():
    def act(job_id: str) -> int:
        if job_id == "held":
            raise StateError("EMQSTATE the job is active: cancel it")
        return 0 if job_id == "gone" else 1

    answers, refused = each_job(["a", "held", "gone", "b"], act)
    assert answers == {"a": 1, "gone": 0, "b": 1}
    assert refused == {"held": "EMQSTATE the job is active: cancel it"}


def test_each_worker_process_gets_the_options_and_a_metrics_port_of_its_own():
    commands = process_commands(["app:app", "-c", "3"], 3, 9100)
    assert [c[:5] for c in commands] == [[sys.executable, "-P", "-m", "echomq.cli", "worker"]] * 3
    assert [c[5:] for c in commands] == [["app:app", "-c", "3", "--metrics-port", str(9100 + i)] for i in range(3)]
    assert [c[-1] for c in process_commands(["app:app"], 2, 0)] == ["0", "0"]  # 0: a free port each
    assert process_commands(["app:app"], 2, None) == \
        [[sys.executable, "-P", "-m", "echomq.cli", "worker", "app:app"]] * 2


@pytest.mark.parametrize("host, only_here", [("127.0.0.1", True), ("localhost", True), ("::1", True),
                                             ("[::1]", True), ("127.5.0.1", True), ("0.0.0.0", False),
                                             ("10.0.0.5", False), ("example.com", False), ("[2001:db8::1]", False)])
def test_an_address_is_loopback_only_when_only_this_machine_reaches_it(host, only_here):
    assert is_loopback(host) is only_here


def test_metrics_on_a_port_in_use_is_a_configuration_error_naming_it():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            # the worker is read only when scraped: a port that cannot be bound is refused before
            serve_worker_metrics(None, "127.0.0.1", port)  # type: ignore[arg-type]


def test_an_app_that_is_not_one_is_not_an_app_and_a_shadowing_file_is_warned_of(tmp_path, monkeypatch):
    (tmp_path / "imaplib.py").write_text("raise SystemExit('the standard library was shadowed')\n")
    (tmp_path / "shadowed_app.py").write_text("from echomq import App\napp = App('x')\nnot_an_app = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    warned: list[str] = []
    assert load_app("shadowed_app:app", warn=warned.append).name == "x"
    assert warned == ["warning: ./imaplib.py is not imported as `imaplib`: the standard library's comes first "
                      "(rename it if your app means it)"]
    with pytest.raises(NotAnApp, match="shadowed_app:not_an_app is a int, not an echomq.App"):
        load_app("shadowed_app:not_an_app", warn=warned.append)
    assert issubclass(NotAnApp, ConfigurationError)


# -- on a node -------------------------------------------------------------------------------------


def test_enqueue_jobs_makes_every_copy_a_batch_at_a_time(queue):
    made = enqueue_jobs(queue, [{"n": 1}, {"n": 2}], count=ENQUEUE_BATCH)
    assert queue.counts().pending == 0  # nothing sent before the answers are read
    first = next(made)
    assert first.created and queue.counts().pending == ENQUEUE_BATCH  # the first batch, whole
    assert sum(1 for _ in made) + 1 == 2 * ENQUEUE_BATCH and queue.counts().pending == 2 * ENQUEUE_BATCH


def test_enqueue_jobs_refuses_a_key_or_a_group_that_does_not_fit_the_queue_before_any_write(conn, queue):
    parted = PartitionedQueue(conn, fresh_name("p"), partitions=2)
    with pytest.raises(ConfigurationError, match="--key picks a partition: queue .* is not partitioned"):
        enqueue_jobs(queue, [{}], key="k")
    with pytest.raises(ConfigurationError, match="is partitioned: lanes are one queue's"):
        enqueue_jobs(parted, [{}], group="g")
    assert queue.counts().total == 0 and parted.counts().total == 0
    (keyed,) = enqueue_jobs(parted, [{}], key="k")
    assert parted.partition(key="k").state(keyed.id) is State.PENDING


def test_reprocess_dead_moves_the_named_or_every_dead_job_and_says_which_were_not_dead(queue):
    dead = []
    for n in range(3):
        queue.enqueue({}, id=f"d{n}")
        queue.fail(take(queue), "no", max_attempts=1)
        dead.append(f"d{n}")
    queue.enqueue({}, id="pending")
    assert reprocess_dead(queue, ["d0", "pending", "nothing"]) == (["d0"], ["pending", "nothing"])
    every = act_on_dead(queue, "reprocess", NO_FILTER, dead_as_of(queue))
    assert (every.done, every.not_done) == (["d1", "d2"], [])
    assert queue.counts().dead == 0 and queue.counts().pending == 4


def test_drain_deletes_flat_and_lane_pending_jobs_and_counts_them_apart(queue):
    queue.enqueue_many([{}] * 3)
    queue.enqueue_many([{}] * 2, group="g")
    assert actions.drain(queue, batch=2) == Drained(pending=5, lanes=2, flows_left=0)
    assert queue.counts().pending == 0 and queue.counts().lane_pending == 0


def test_the_reads_emq_shows(queue, conn):
    queue.enqueue({}, id="doomed")
    queue.fail(take(queue), "no", max_attempts=1)
    queue.enqueue({}, id="x[1]*")  # glob characters: only this id is matched
    queue.enqueue({}, id="x11")
    assert queues_holding(conn, "x[1]*") == {queue.name}
    assert queues_holding(conn, "x1") == set()
    total, views = dead_jobs(queue, 10)
    assert total == 1 and [view.id for view in views] == ["doomed"]
    story = job_story(queue, "x11")
    assert story is not None and story.state == "pending" and job_story(queue, "nothing") is None
    assert events_setting(queue) == (None, False)
    queue.enable_events(10)
    queue.enqueue({})
    assert events_setting(queue) == (b"10", True)


def test_the_workers_list_takes_the_connection_and_a_raw_client_still_works_with_a_warning(conn, server):
    beat = Heartbeat(conn.client, queues=["q"], concurrency=1, wire=conn.wire)
    beat.run_due(0, held=0, completed=0, failed=0)
    try:
        listed = [r for r in list_workers(conn) if r.id == beat.id]
        with pytest.warns(DeprecationWarning, match=r"echomq.list_workers\(echomq.connect\(url\)\)"):
            assert [r for r in list_workers(conn.client) if r.id == beat.id] == listed != []
        with pytest.raises(TypeError, match=r"echomq.list_workers takes a connection, not the URL .*: open one with "
                                            r"conn = echomq.connect\(url\), then echomq.list_workers\(conn\)"):
            list_workers(server.url)
    finally:
        beat.remove()
