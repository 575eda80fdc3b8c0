"""CLAIMS (docs/spec.md §17): up to ``count`` CLAIMs in one command, on both wires. Each batch is
checked against its definition, CLAIM run in a row on a twin queue set up the same way: the
same replies and the same dataset. Each refusal: its reply, and the dataset unchanged."""

from __future__ import annotations

import threading

import pytest

from echomq import App, Claims, CounterError, Job, Queue, RateLimit, Worker, WorkerConfig, connect
from echomq.errors import ArgumentError, ConfigurationError, ShapeError, WrongType
from echomq._protocol.serializers import RAW
from support.dataset import core_dump, mask_times, queue_unchanged
from support.queues import fresh_name, raw, round_trips
from support.waiting import server_ms, wait_until
from support.workers import QUIET_TIMERS
from test_results_layout import records_started

LEASE = 60_000


@pytest.fixture
def twins(conn):
    """Two queues on one connection: one claims with CLAIMS, the other with CLAIMs in a row."""
    queues = [Queue(conn, fresh_name("cs"), serializer=RAW) for _ in range(2)]
    yield queues
    conn.client.delete(*[q.keys.rate for q in queues])  # a short window's log is not left to expire later


def ghost(q, job_id, score=0):
    q.connection.client.zadd(q.keys.pending, {job_id: score})


def claims_by_claim(q, count, *rated):
    """CLAIMS' definition: CLAIM until ``count`` jobs are claimed, a ghost passed over (popped,
    uncounted), stopping at the first CLAIM that claims nothing (its wait, if rated, ends the reply)."""
    replies = []
    while len(replies) < count:
        pending = q.connection.client.zcard(q.keys.pending)
        reply = raw(q, "claim", LEASE, *rated)
        if isinstance(reply, int):
            return replies + [reply]
        if reply:
            replies.append(reply)
        elif q.connection.client.zcard(q.keys.pending) == pending:
            break  # idle: nothing popped
    return replies


def relative(q):
    """The queue's dataset with its name taken out of the keys, its rows' times masked
    (:func:`mask_times`), and each lease's deadline and each logged start checked to be a
    present time (+ the lease) and shown as such."""
    now = server_ms(q.connection.client)
    base = q.keys.base.encode()
    out = {}
    for key, (kind, value) in mask_times(core_dump(q.connection.client, q.keys), now).items():
        key = key.replace(base, b"<base>")
        if key in (b"<base>active", b"<base>rate"):
            lease = LEASE if key == b"<base>active" else 0
            assert all(now - 5_000 <= score - lease <= now for _, score in value), (key, value, now)
            value = sorted((member, "<now>") for member, _ in value)
        out[key] = (kind, value)
    return out


def setup(q, scenario):
    client = q.connection.client
    if scenario == "events":
        client.hset(q.keys.meta, "events", 100)
    if scenario in ("rate", "rate-ghost"):
        client.hset(q.keys.meta, mapping={"rate_limit": 3, "rate_window": 60_000})
    q.enqueue(b"pa", id="a")
    q.enqueue(b"pb", id="b", priority=1)
    if scenario in ("ghosts", "rate-ghost"):
        ghost(q, "g1")  # between a and c (ties by member)
        ghost(q, "d2", 1)  # between b and e
    q.enqueue(b"pc", id="c")
    q.enqueue(b"pe", id="e", priority=2)
    if scenario in ("rate", "rate-ghost"):
        raw(q, "claim", LEASE, 1)  # one start already in the window


# (scenario, count, rated, the ids claimed, a wait at the end)
CASES = [
    ("normal", 3, False, ["a", "c", "b"], False),
    ("normal", 1, False, ["a"], False),
    ("normal", 10, False, ["a", "c", "b", "e"], False),  # more than pending: stops when it is empty
    ("ghosts", 3, False, ["a", "c", "b"], False),
    ("ghosts", 10, False, ["a", "c", "b", "e"], False),
    ("events", 2, False, ["a", "c"], False),
    ("rate", 5, True, ["c", "b"], True),  # a took the first of 3 starts
    ("rate", 5, False, ["c", "b"], False),
    ("rate-ghost", 5, True, ["c", "b"], True),
]


@pytest.mark.parametrize("scenario, count, rated, ids, waits", CASES,
                         ids=[f"{c[0]}-{c[1]}{'-rated' if c[2] else ''}" for c in CASES])
def test_a_batch_is_that_many_claims_in_a_row(twins, scenario, count, rated, ids, waits):
    batch, by_claim = twins
    for q in twins:
        setup(q, scenario)
    late = (1,) if rated else ()
    reply = raw(batch, "claims", LEASE, count, *late)
    expected = claims_by_claim(by_claim, count, *late)
    jobs = [r for r in reply if isinstance(r, list)]
    assert [job[0].decode() for job in jobs] == ids
    assert jobs == [[i.encode(), b"p" + i.encode(), 1] for i in ids]
    assert isinstance(reply[-1], int) == waits and 0 < (reply[-1] if waits else 1) <= 60_000
    assert len(reply) == len(expected) and jobs == [r for r in expected if isinstance(r, list)]
    assert relative(batch) == relative(by_claim)


def test_the_python_answers_are_the_claim_answers(twins):
    batch, _ = twins
    setup(batch, "rate")
    jobs = batch.claim_many(5, LEASE)
    assert [(job.id, job.payload, job.attempt) for job in jobs] == [("c", b"pc", 1), ("b", b"pb", 1)]
    assert 0 < jobs.wait_ms <= 60_000
    assert (held := batch.claim_many(5, LEASE)) == [] and held.wait_ms is not None


def test_claims_is_the_list_of_jobs_with_what_the_round_learned():
    """No server: what a claim learned travels with its jobs, and the jobs stay a list to their callers."""
    job = Job("q", "a", b"p", b"p", 1)
    held = Claims([], wait_ms=250)
    assert held == [] and not held and held.wait_ms == 250 and (held.paused, held.no_lanes, held.due_ms) == (
        False, False, None)
    assert Claims([job], paused=False) == [job] and Claims([job])[0] is job
    assert repr(held) == "Claims([], wait_ms=250)" and repr(Claims(paused=True)) == "Claims([], paused=True)"


def test_paused_or_empty_claims_nothing_and_writes_nothing(twins):
    q, _ = twins
    with queue_unchanged(q):
        assert q.claim_many(3, LEASE) == []
        assert raw(q, "claims", LEASE, 3) == []
    q.enqueue(b"p", id="a")
    q.pause()
    with queue_unchanged(q):
        held = q.claim_many(3, LEASE)  # wire 4: the client's pause read, which says so; wire 6: the verb's
        assert held == [] and held.paused is (q.wire == 4)
    q.resume()
    assert [job.id for job in q.claim_many(3, LEASE)] == ["a"]


def test_claim_many_is_one_command(twins, wire):
    q, _ = twins
    q.enqueue_many([b"p"] * 6)
    client = q.connection.client
    before = client.info("commandstats")
    with round_trips() as sent:
        assert len(q.claim_many(5, LEASE)) == 5
    after = client.info("commandstats")
    calls = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"]
             for name in after if name.startswith(("cmdstat_EMQ.", "cmdstat_evalsha"))}
    calls = {name: n for name, n in calls.items() if n}
    assert calls == ({"cmdstat_EMQ.CLAIMS": 1} if wire == 6 else {"cmdstat_evalsha": 1})
    # one round trip: on wire 4 the pause read rides with the claims
    assert sent == ([["claims"]] if wire == 6 else [["hget", "claims"]])
    # one job: CLAIM; a batch of more than CLAIMS_MAX: one CLAIMS per 1000
    assert [call.verb.name for call in q._claim_calls(1, LEASE)] == ["claim"]
    assert [call.verb.name for call in q._claim_calls(2500, LEASE)] == ["claims"] * 3
    assert [call.argv[1] for call in q._claim_calls(2500, LEASE)] == [1000, 1000, 500]


def test_a_module_without_the_token_gets_that_many_claims(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 always has the script")
    q = Queue(conn, fresh_name("cs"), serializer=RAW)
    conn.tokens = conn.tokens - {"claims"}  # a module that predates the verb
    try:
        q.enqueue_many([b"p"] * 3)
        assert [call.verb.name for call in q._claim_calls(3, LEASE)] == ["claim"] * 3
        assert len(q.claim_many(3, LEASE)) == 3
    finally:
        conn.tokens = conn.tokens | {"claims"}


@pytest.mark.parametrize("count", [0, 1001, "x", "-1", "1.5", ""])
def test_a_bad_count_is_refused_before_any_write(twins, count):
    q, _ = twins
    q.enqueue(b"p", id="a")
    with queue_unchanged(q), pytest.raises(ArgumentError, match="^EMQARG count "):
        raw(q, "claims", LEASE, count)
    with pytest.raises(ConfigurationError):
        q.build("claims", LEASE, count)  # the client refuses it before sending


def test_a_malformed_rate_limit_is_refused_before_any_write(twins):
    q, _ = twins
    q.enqueue(b"p", id="a")
    q.connection.client.hset(q.keys.meta, "rate_limit", "many")
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ hash value is not an integer$"):
        raw(q, "claims", LEASE, 2)


def test_native_checks_every_job_of_the_run_before_its_first_write(conn, wire):
    if wire == 4:
        pytest.skip("wire 4 is claim.lua's executor: it pops first and checks after (docs/spec.md §4, §17)")
    q = Queue(conn, fresh_name("cs"), serializer=RAW)
    client = conn.client
    q.enqueue(b"p", id="a")
    ghost(q, "b")
    client.set(q.keys.job("b"), "x")  # the second head's row is a string
    with queue_unchanged(q), pytest.raises(WrongType):
        raw(q, "claims", LEASE, 2)
    client.delete(q.keys.job("b"))
    q.enqueue(b"p", id="c")
    client.hset(q.keys.job("c"), "attempts", "x1")  # past a ghost: c's attempts cannot be incremented
    with queue_unchanged(q), pytest.raises(CounterError, match="^EMQ hash value is not an integer$"):
        raw(q, "claims", LEASE, 3)
    for argv, refusal in (((0, 2), ArgumentError), ((LEASE,), ShapeError), ((LEASE, 2, 1, 1), ShapeError),
                          ((LEASE, 2, 2), ArgumentError)):
        with queue_unchanged(q), pytest.raises(refusal):
            raw(q, "claims", *argv)
    client.set(q.keys.meta, "x")
    try:
        with queue_unchanged(q), pytest.raises(WrongType):
            raw(q, "claims", LEASE, 2)
    finally:
        client.delete(q.keys.meta)
    assert [job.id for job in q.claim_many(1, LEASE)] == ["a"]


def test_a_worker_drains_a_queue_with_ghosts_under_a_rate_limit(server, wire):
    """Batches of 8 claims (CLAIMS) under 4 starts per 400 ms: every job runs once, every ghost
    leaves pending, and no 400 ms holds more than 4 starts (server clock)."""
    name, seen = fresh_name("cw"), []
    app = App()
    app.handler(name, lambda payload, ctx: seen.append(ctx.id), rate_limit=RateLimit(4, 400))
    with connect(server.url, wire=wire) as conn:
        queue = Queue(conn, name)
        ids = [e.id for e in queue.enqueue_many([{"n": n} for n in range(10)])]
        for n in range(3):
            ghost(queue, f"ghost{n}", 0)
        worker = Worker(app, conn, config=WorkerConfig(timers=QUIET_TIMERS, claim_batch=8, concurrency=8))
        thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
        with round_trips() as sent:  # before the worker starts: its first claims count too
            thread.start()
            try:
                wait_until(lambda: all(conn.client.hexists(queue.keys.key("done"), i) for i in ids), 20,
                           what="every job settled")
            finally:
                worker.stop("test over")
                thread.join(10)
                conn.client.delete(queue.keys.rate)
        assert any("claims" in verbs for verbs in sent)  # the worker's batches are CLAIMS
        assert sorted(seen) == sorted(ids)
        assert conn.client.zcard(queue.keys.pending) == 0 and queue.counts().total == 0
        started = sorted(records_started(conn.client, queue.keys, ids))
        assert all(later - first >= 400 for first, later in zip(started, started[4:])), started
