"""An idle worker waits on the server instead of polling (SPEC §9.3), on both wires: BZPOPMIN on
the wake marker (wire 4), EMQ.BCLAIM (wire 6). Each test runs on a server of its own, so the
blocked clients it counts (CLIENT LIST) are its workers' and no one else's."""

from __future__ import annotations

import signal
import threading

import pytest

from echomq import App, EmbeddedServer, IdlePolicy, Queue, TimerConfig, Worker, WorkerConfig, connect, module_path
from echomq.errors import ConfigurationError, UnsupportedOnWire
from support.dataset import dump
from support.queues import fresh_name
from support.waiting import server_ms, wait_server_past, wait_until
from support.workers import QUIET_TIMERS, WorkerProcess, blocked_waiters, processed

#: only exact timers run: promotes at due times, an idle queue's sweeps at lease deadlines


@pytest.fixture
def own_server(wire):
    with EmbeddedServer(module=module_path() if wire == 6 else None, aof=True, appendfsync="always",
                        brand=wire) as server:
        yield server


@pytest.fixture
def own_conn(own_server, wire):
    with connect(own_server.url, wire=wire) as connection:
        yield connection


def commands_total(client) -> int:
    """Every command any client sent (INFO commandstats), but the reads the test itself sends."""
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_client|list", "cmdstat_time"))


class Running:
    """A worker on a thread of this process, stopped (and joined) on exit."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.worker.stop("test over")
        self.thread.join(10)
        assert not self.thread.is_alive()


def recording_app(names, seen):
    app = App()
    for name in names:
        app.handler(name, lambda payload, ctx: seen.append((ctx.queue, ctx.id, ctx.attempt)))
    return app


def test_an_idle_worker_blocks_and_sends_nothing_until_a_job_comes(own_conn):
    name, seen = fresh_name("b"), []
    queue = Queue(own_conn, name)
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked")
        before = commands_total(own_conn.client)
        # two seconds of the server's clock with nothing to do: a polling worker would have claimed a dozen times
        wait_server_past(own_conn.client, server_ms(own_conn.client) + 2000)
        assert commands_total(own_conn.client) - before == 0
        job = queue.enqueue({})
        wait_until(lambda: seen == [(name, job.id, 1)], what="the job run")
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked again")
    assert blocked_waiters(own_conn.client) == 0  # the stop ended the block


def test_the_queue_is_watched_again_as_soon_as_the_job_a_block_took_is_done(own_conn):
    # however long the idle back-off: a job a block took (wire 6's BCLAIM) leaves the queue busy, and
    # a busy queue that finds nothing goes straight back to the blocked wait, not to polling after
    # the back-off of the empty claims before that job (a minute here: jobs meanwhile waited for it)
    name, seen = fresh_name("w"), []
    queue = Queue(own_conn, name)
    config = WorkerConfig(timers=QUIET_TIMERS, idle=IdlePolicy(min_ms=60_000, max_ms=60_000))
    with Running(Worker(recording_app([name], seen), own_conn, config=config)):
        for n in (1, 2, 3):
            wait_until(lambda: blocked_waiters(own_conn.client) == 1, what=f"the worker blocked before job {n}")
            job = queue.enqueue({})
            wait_until(lambda: (name, job.id, 1) in seen, what=f"job {n} run")
    assert len(seen) == 3


def test_twenty_queues_still_block(own_conn, wire):
    names, seen = [fresh_name(f"m{i}") for i in range(20)], []
    with Running(Worker(recording_app(names, seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        # wire 4: one BZPOPMIN over twenty wake markers; wire 6: one BCLAIM per queue
        wait_until(lambda: blocked_waiters(own_conn.client) == (1 if wire == 4 else 20), what="the worker blocked")
        for name in (names[17], names[3]):
            job = Queue(own_conn, name).enqueue({})
            wait_until(lambda: (name, job.id, 1) in seen, what=f"the job of {name}")
        wait_until(lambda: blocked_waiters(own_conn.client) == (1 if wire == 4 else 20), what="blocked again on all")
    assert len(seen) == 2


def test_pause_while_blocked_then_a_plain_resume(own_conn):
    name, seen = fresh_name("p"), []
    queue = Queue(own_conn, name)
    queue.pause()
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))) as worker:
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked")
        job = queue.enqueue({})
        # the enqueue wakes it (the marker on wire 4; on wire 6 BCLAIM re-checks) and the pause holds it back
        wait_until(lambda: blocked_waiters(own_conn.client) == 1 and queue.counts().pending == 1,
                   what="blocked on the pause")
        assert worker.tally.claimed == 0 and seen == []
        own_conn.client.hdel(queue.keys.meta, "paused")  # a plain HDEL: no wake marker on wire 4
        wait_until(lambda: seen == [(name, job.id, 1)], timeout=5, what="the job run after the resume")


def test_queue_resume_wakes_a_blocked_worker(own_conn):
    name, seen = fresh_name("p"), []
    queue = Queue(own_conn, name)
    queue.pause()
    job = queue.enqueue({})
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked on the paused queue")
        queue.resume()
        wait_until(lambda: seen == [(name, job.id, 1)], what="the job run after the resume")


def test_a_delayed_job_is_promoted_at_its_due_time_not_by_an_interval(own_conn):
    """The promote interval is a minute: only the exact timer (the schedule's head) can run it."""
    name, seen = fresh_name("d"), []
    queue = Queue(own_conn, name)
    job = queue.schedule({}, 300)
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: seen == [(name, job.id, 1)], what="the delayed job run")


def test_an_idle_queue_is_swept_when_its_earliest_lease_expires_not_by_an_interval(own_conn):
    """A holder that died leaves its job active: the idle worker's first sweep read the lease's
    deadline and sweeps again then (the intervals are a minute), so the job runs again at once."""
    name, seen = fresh_name("b"), []
    queue = Queue(own_conn, name)
    lost = queue.enqueue({}).id
    assert queue.claim(700).id == lost  # the holder dies with it: its lease runs out in 0.7 s
    deadline = int(own_conn.client.zscore(queue.keys.active, lost))
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))) as worker:
        wait_until(lambda: seen == [(name, lost, 2)], what="the stalled job run again")
        assert server_ms(own_conn.client) - deadline < 10_000  # long before any interval's sweep
        wait_until(lambda: queue.job(lost) is None, what="its completion")  # settled after the handler returned
        assert (worker.tally.stalled, worker.tally.recovered, worker.tally.stalled_dead) == (1, 0, 0)  # sweep.*


def test_an_idle_worker_probes_with_one_claim_after_a_block_times_out(own_conn, monkeypatch):
    """A block that ends with nothing (its timeout, the backstop) is followed by one claim, not a
    batch (claim_batch 10): the idle worker's backstop costs a few commands, not a dozen."""
    from echomq.worker import policy

    monkeypatch.setattr(policy, "BLOCK_MAX_MS", 200)  # blocks time out five times a second
    name = fresh_name("p")
    with Running(Worker(recording_app([name], []), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked")
        own_conn.client.config_resetstat()
        wait_server_past(own_conn.client, server_ms(own_conn.client) + 1500)
        stats = own_conn.client.info("commandstats")
    calls = {k.split("_", 1)[1].lower(): v["calls"] for k, v in stats.items()}
    blocks = calls.get("bzpopmin", 0) + calls.get("emq.bclaim", 0)
    claims = calls.get("zpopmin", 0) + calls.get("emq.claim", 0)  # wire 4's claim script pops with ZPOPMIN
    assert blocks >= 3, calls
    assert claims <= blocks, calls  # one probe per timed-out block at most (wire 6's BCLAIM claims by itself)


def test_a_wire_6_block_reads_the_schedules_head_with_it(own_conn, wire):
    """The head read rides in BCLAIM's packet: a SCHEDULE that moved the head earlier just before
    the block (when no blocked claimer was there to answer) is still seen, and reported first."""
    if wire == 4:
        pytest.skip("wire 4's wake marker persists until popped: a block after the write still sees it")
    from queue import SimpleQueue

    from echomq.worker import waiter

    queue = Queue(own_conn, fresh_name("h"))
    queue.schedule({}, 60_000)
    reports: SimpleQueue = SimpleQueue()
    w = waiter.Waiter(own_conn, [queue], lease_ms=30_000, report=reports.put, clock_ms=lambda: 0.0)
    w.start()
    try:
        w.request([queue.name], 50)
        head = reports.get(timeout=10)
        assert isinstance(head, waiter.HeadRead) and head.queue == queue.name
        assert 55_000 < head.due_in_ms <= 60_000
        assert reports.get(timeout=10) == waiter.Recheck(queue.name)  # then the block's own answer (timed out)
    finally:
        w.close()
        w.join(5)


def test_a_schedule_that_brings_the_due_time_earlier_wakes_the_waiter(own_conn):
    name, seen = fresh_name("d"), []
    queue = Queue(own_conn, name)
    queue.schedule({}, 3_600_000)  # the head: an hour away
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked until the hour's job")
        soon = queue.schedule({}, 200)  # earlier than the head: the waiter hears it and re-reads the head
        wait_until(lambda: seen == [(name, soon.id, 1)], what="the earlier job run")


def test_a_reschedule_that_brings_the_due_time_earlier_wakes_the_waiter(own_conn):
    name, seen = fresh_name("d"), []
    queue = Queue(own_conn, name)
    job = queue.schedule({}, 3_600_000)  # the head: an hour away
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked until the hour's job")
        queue.reschedule(job.id, 200)  # reschedule.lua / EMQ.RESCHEDULE: earlier than the head, so it wakes
        wait_until(lambda: seen == [(name, job.id, 1)], what="the rescheduled job run")


def test_a_requeue_wakes_a_blocked_worker(own_conn):
    """Another holder releases its job (requeue.lua writes the marker; EMQ.REQUEUE signals pending)."""
    name, seen = fresh_name("r"), []
    queue = Queue(own_conn, name)
    queue.enqueue({})
    held = queue.claim(60_000)
    with Running(Worker(recording_app([name], seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == 1, what="the worker blocked on the empty queue")
        queue.requeue(held)
        wait_until(lambda: seen == [(name, held.id, 2)], what="the requeued job run")


# -- worker processes ---------------------------------------------------------------------------

@pytest.fixture
def spawn_own(own_server, wire, out):
    procs: list[WorkerProcess] = []

    def start(queue: str, *args: str) -> WorkerProcess:
        proc = WorkerProcess(own_server.url, wire, queue, out, *args)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()


def test_ten_idle_workers_and_one_job_it_runs_once_and_the_others_stay_blocked(own_conn, spawn_own, out, wire):
    name = fresh_name("ten")
    queue = Queue(own_conn, name)
    workers = [spawn_own(name) for _ in range(10)]
    wait_until(lambda: blocked_waiters(own_conn.client) == 10, 60, "ten workers blocked")
    job = queue.enqueue({})
    wait_until(lambda: processed(out), 10, "the job run")
    wait_until(lambda: blocked_waiters(own_conn.client) == 10, 10, "all ten blocked again")
    assert [(i, a) for i, a, _ in processed(out)] == [(job.id, 1)]
    assert queue.counts().total == 0 and queue.metrics()["completed"] == 1
    for worker in workers:
        worker.signal(signal.SIGTERM)
    tallies = []
    for worker in workers:
        assert worker.wait() == 0
        tallies.append(worker.log().rsplit("done: ", 1)[-1].strip())
    assert sorted(tallies) == ["claimed 1, completed 1"] + ["nothing"] * 9  # one claimed, nine never did


def test_sigterm_while_blocked_exits_within_the_grace_time(own_conn, spawn_own):
    worker = spawn_own(fresh_name("s"), "--grace", "3")
    wait_until(lambda: blocked_waiters(own_conn.client) == 1, 20, "the worker blocked")
    worker.signal(signal.SIGTERM)
    assert worker.wait(3) == 0
    assert "stopped with nothing held" in worker.log()
    wait_until(lambda: blocked_waiters(own_conn.client) == 0, 5, "no blocked client left")


def test_a_server_restart_while_blocked_is_ridden_out(own_server, own_conn, spawn_own, out, wire):
    name = fresh_name("r")
    worker = spawn_own(name)
    wait_until(lambda: blocked_waiters(own_conn.client) == 1, 20, "the worker blocked")
    own_server.restart()
    with connect(own_server.url, wire=wire) as conn:
        wait_until(lambda: blocked_waiters(conn.client) == 1, 20, "the worker blocked again after the restart")
        job = Queue(conn, name).enqueue({})
        wait_until(lambda: [(i, a) for i, a, _ in processed(out)] == [(job.id, 1)], 10, "the job run")
    assert "blocked read failed" in worker.log()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_worker_killed_while_blocked_leaves_no_trace(own_conn, spawn_own, out, wire):
    name = fresh_name("k")
    queue = Queue(own_conn, name)
    worker = spawn_own(name)
    wait_until(lambda: blocked_waiters(own_conn.client) == 1, 20, "the worker blocked")
    before = dump(own_conn.client)
    worker.kill()
    wait_until(lambda: blocked_waiters(own_conn.client) == 0, 5, "the block gone with the client")
    assert dump(own_conn.client) == before
    job = queue.enqueue({})  # nobody takes it: no claim is left waiting on the server's side
    assert queue.counts().pending == 1 and queue.state(job.id).value == "pending"
    if wire == 4:  # the marker stays, harmless: the next worker pops it and claims
        assert own_conn.client.zrange(queue.keys.wake, 0, -1) == [b"w"]
    spawn_own(name)
    wait_until(lambda: [(i, a) for i, a, _ in processed(out)] == [(job.id, 1)], 20, "the next worker run it")


# -- Queue.bclaim --------------------------------------------------------------------------------

def test_bclaim_claims_as_claim_waits_while_empty_and_is_wire_6_only(own_conn, wire):
    queue = Queue(own_conn, fresh_name("bc"))
    if wire == 4:
        before = dump(own_conn.client)
        with pytest.raises(UnsupportedOnWire, match="wake marker"):
            queue.bclaim(1000, 10)
        assert dump(own_conn.client) == before
        return
    job = queue.enqueue({"n": 1})
    got = queue.bclaim(5000, 10)
    assert got.id == job.id and got.attempt == 1 and got.payload == {"n": 1}
    assert queue.bclaim(5000, 10) is None  # empty: waited 10 ms, then nothing
    with pytest.raises(ConfigurationError):
        queue.bclaim(5000, -1)


def test_a_wire_6_node_without_claim_block_is_polled(own_conn, wire):
    """An older trafikey lists no claim.block: bclaim is refused before sending, and the worker polls."""
    if wire == 4:
        pytest.skip("wire 6's optional token")
    own_conn.tokens = own_conn.tokens - {"claim.block"}
    queue = Queue(own_conn, fresh_name("old"))
    with pytest.raises(UnsupportedOnWire, match="claim.block"):
        queue.bclaim(1000, 10)
    seen = []
    with Running(Worker(recording_app([queue.name], seen), own_conn)) as worker:
        wait_until(lambda: commands_total(own_conn.client) > 0 and not worker.blocking, what="the worker polling")
        job = queue.enqueue({})
        wait_until(lambda: seen == [(queue.name, job.id, 1)], what="the job run by polling")
        assert blocked_waiters(own_conn.client) == 0


def test_a_queue_that_goes_idle_joins_the_blocked_wait(own_conn, wire):
    """Wire 4 waits on every idle queue in one BZPOPMIN: one that empties while the others are
    waited on is added (CLIENT UNBLOCK, then a new block over all of them)."""
    names, seen = [fresh_name("j0"), fresh_name("j1")], []
    with Running(Worker(recording_app(names, seen), own_conn, config=WorkerConfig(timers=QUIET_TIMERS))):
        wait_until(lambda: blocked_waiters(own_conn.client) == (1 if wire == 4 else 2), what="blocked on both")
        for _ in range(3):  # each time j0 drains, it must be waited on again, next to j1
            job = Queue(own_conn, names[0]).enqueue({})
            wait_until(lambda: (names[0], job.id, 1) in seen, what="the job of j0")
            wait_until(lambda: blocked_waiters(own_conn.client) == (1 if wire == 4 else 2),
                       what="blocked on both again")
        job = Queue(own_conn, names[1]).enqueue({})
        wait_until(lambda: (names[1], job.id, 1) in seen, what="the job of j1, still waited on")


def test_a_burst_worker_runs_the_job_its_block_took_as_the_queue_went_empty(own_conn, wire):
    """A BCLAIM may take a job the moment it is promoted, and answer after the worker has read the
    counts (the job shows as active only). The burst worker must not stop then: it ends its claiming
    blocks and looks again once each has answered, so it runs the job instead of requeueing it."""
    if wire == 4:
        pytest.skip("wire 4's waiters pop wake markers; only wire 6's take a job")
    from echomq.worker import waiter

    name, ran = fresh_name("race"), []
    app = App()
    app.handler(name, lambda payload: ran.append(payload["n"]))
    queue = Queue(own_conn, name)
    queue.schedule({"n": 1}, 200)
    worker = Worker(app, own_conn, queues=[name],
                    config=WorkerConfig(burst=True, grace_s=0, timers=TimerConfig(promote_interval_ms=10)))
    taken, looked_after = threading.Event(), threading.Event()
    report, drained = worker.waiting.report, worker.drained

    def late_report(answer: waiter.Report) -> None:  # the block's job reaches the worker after its next look
        if isinstance(answer, waiter.Claimed):
            taken.set()
            looked_after.wait(10)
        report(answer)

    def watched_drained() -> bool:
        # the worker's own claim has come back empty since the promote: the queue looks idle again
        after_the_take = taken.is_set() and name in worker.pacing.idle
        verdict = drained()
        if after_the_take:
            looked_after.set()
        return verdict

    worker.waiting.report, worker.drained = late_report, watched_drained
    tally = worker.run(install_signals=False)
    assert taken.is_set() and looked_after.is_set()  # the race was run: the worker looked while the job was out
    assert (tally.claimed, tally.completed, ran) == (1, 1, [1])
    assert queue.counts().total == 0


def test_a_burst_worker_stops_though_its_ended_blocks_answer_while_it_looks(own_conn, wire):
    """The answers of the blocks a burst worker ended to confirm its queues are empty may arrive as
    it looks at them again: they are no news, it must not start over (re-arming, ending again...)."""
    if wire == 4:
        pytest.skip("wire 4's waiters pop wake markers; only wire 6's take a job")
    from echomq.worker import waiter

    names = [fresh_name("quiet"), fresh_name("quiet")]
    app = App()
    for name in names:
        app.handler(name, lambda payload: None)
    worker = Worker(app, own_conn, queues=names, config=WorkerConfig(burst=True, grace_s=0, timers=QUIET_TIMERS))
    gate = threading.Condition()
    waiting_answers, looking = 0, False
    report, drained = worker.waiting.report, worker.drained

    def answer_while_it_looks(answer: waiter.Report) -> None:
        nonlocal waiting_answers
        if not isinstance(answer, waiter.Recheck):  # an ended block's answer (wire 6: BCLAIM answered empty)
            return report(answer)
        with gate:
            waiting_answers += 1
            gate.notify_all()
            gate.wait_for(lambda: looking, timeout=10)
            report(answer)
            waiting_answers -= 1
            gate.notify_all()

    def looks_with_answers_arriving() -> bool:
        nonlocal looking
        with gate:
            looking = True
            gate.notify_all()
            gate.wait_for(lambda: waiting_answers == 0, timeout=10)
            looking = False
        return drained()

    worker.waiting.report, worker.drained = answer_while_it_looks, looks_with_answers_arriving
    gave_up = threading.Event()
    fallback = threading.Timer(20, lambda: (gave_up.set(), worker.stop("test: still running after 20 s")))
    fallback.start()
    try:
        worker.run(install_signals=False)
    finally:
        fallback.cancel()
    assert not gave_up.is_set()
