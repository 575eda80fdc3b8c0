"""What a client outside the verb can see of how it touches keys, the same on both wires (issue 18).

A native verb opens a key it only writes (pending for CLAIM's pop and ENQUEUE's ZADD, active for
CLAIM's ZADD and COMPLETE's ZREM, ``metrics:completed`` for COMPLETE's HINCRBY) once, for read and write, and signals
modified keys itself after each write. Each test is a case that would show a difference if that
were done wrong:

* WATCH: a verb that opened such a key and then wrote nothing (an empty pending, a refusal after
  the type check) leaves a WATCHing client's EXEC to run; a verb that wrote aborts it;
* keyspace notifications, ``keymiss`` included (``notify-keyspace-events KEAm``): the write
  events a lifecycle fires on the queue's keys are the script's, in its order, and the keys read
  as missing are the script's (it may read one twice: its ENQUEUE's ``EXISTS row row meta``);
* INFO stats ``keyspace_hits`` / ``keyspace_misses`` per verb: one per key read, none for a key
  only written.

Wire 4's own keys and reads are left out where they are its own: the wake marker ``wake`` that
its ENQUEUE writes, and its claim's ``HGET meta paused`` round trip before the script.
"""

from __future__ import annotations

import pytest

from echomq import EmbeddedServer, Queue, brand_node, connect, module_path

WIRES = (4, 6)


@pytest.fixture(scope="module")
def nodes():
    with EmbeddedServer(module=module_path(), brand=4) as s4, EmbeddedServer(module=module_path(), brand=6) as s6:
        yield {4: s4, 6: s6}


@pytest.fixture
def queues(nodes, request):
    """A fresh queue per wire (same name on both nodes), with its own clients."""
    name = "fx-" + request.node.name.split("[")[0][-24:]
    out, opened = {}, []
    for wire, server in nodes.items():
        c = server.client()
        c.flushall()
        brand_node(c, wire)
        conn = connect(server.url, wire=wire)
        out[wire] = (Queue(conn, name), c, server)
        opened.append((conn, c))
    yield out
    for conn, c in opened:
        conn.close()
        c.close()


def exec_runs(server, keys, act) -> bool:
    """WATCH ``keys`` on a client of its own, ``act()`` on another, then MULTI/EXEC: did EXEC run?"""
    watcher = server.client()
    try:
        pipe = watcher.pipeline(transaction=True)
        pipe.watch(*keys)
        act()
        pipe.multi()
        pipe.ping()
        try:
            pipe.execute()
            return True
        except Exception as exc:  # valkey-py's WatchError: EXEC answered nil
            if type(exc).__name__ == "WatchError":
                return False
            raise
    finally:
        watcher.close()


@pytest.mark.parametrize("wire", WIRES)
def test_a_claim_of_an_empty_queue_leaves_a_watch_alone(queues, wire):
    q, _, server = queues[wire]
    assert exec_runs(server, [q.keys.pending, q.keys.active], lambda: q.claim(60000)) is True


@pytest.mark.parametrize("wire", WIRES)
def test_a_refusal_after_the_type_checks_leaves_a_watch_alone(queues, wire):
    # ENQUEUE checks pending's type (opening it to write) and then reads a malformed event
    # switch: refused, nothing written, so pending is not touched
    q, c, server = queues[wire]
    c.hset(q.keys.meta, "events", "many")

    def enqueue():
        with pytest.raises(Exception, match="not an integer"):
            q.enqueue("x", id="j1")
    assert exec_runs(server, [q.keys.pending], enqueue) is True
    assert c.exists(q.keys.pending) == 0


@pytest.mark.parametrize("wire", WIRES)
def test_a_write_aborts_a_watch_of_each_key_it_writes(queues, wire):
    q, _, server = queues[wire]
    assert exec_runs(server, [q.keys.pending], lambda: q.enqueue("x", id="j1")) is False
    job = None

    def claim():
        nonlocal job
        job = q.claim(60000)
    assert exec_runs(server, [q.keys.active], claim) is False
    assert exec_runs(server, [q.keys.base + "metrics:completed"], lambda: q.complete(job)) is False
    q.enqueue("x", id="j2")
    claim()
    assert exec_runs(server, [q.keys.active], lambda: q.complete(job)) is False


@pytest.mark.parametrize("wire", WIRES)
def test_a_complete_refused_by_its_lease_check_leaves_a_watch_of_active_alone(queues, wire):
    # COMPLETE checks that the id is in active on active's write handle (the script's check is its
    # ZREM): a row held with the right token whose id left active is refused, active untouched
    q, c, server = queues[wire]
    q.enqueue("x", id="j1")
    job = q.claim(60000)
    c.zadd(q.keys.active, {"other": 1})
    c.zrem(q.keys.active, "j1")
    before = c.zrange(q.keys.active, 0, -1, withscores=True)

    def complete():
        with pytest.raises(Exception, match="EMQSTATE"):
            q.complete(job)
    assert exec_runs(server, [q.keys.active], complete) is True
    assert c.zrange(q.keys.active, 0, -1, withscores=True) == before
    assert c.hget(q.keys.base + "job:j1", "state") == b"active"


def lifecycle_seen(q: Queue, c, wire: int) -> list[tuple[str, object]]:
    """Per step of a lifecycle (and a claim of the then empty queue): the keyspace events on the
    queue's keys (`keymiss` included) and the (hits, misses) the step added."""
    c.config_set("notify-keyspace-events", "KEAm")
    sub = c.pubsub()
    sub.psubscribe(f"__keyspace@0__:{q.keys.base}*")
    assert sub.get_message(timeout=5)["type"] == "psubscribe"
    marker = q.keys.base + "step"

    def events_until_marker(claim: bool) -> list[tuple[str, str]]:
        c.set(marker, 1)  # the last event of the step: every event before it has been delivered
        out = []
        while (m := sub.get_message(timeout=5)) is not None:
            key = m["channel"].decode().split(":", 1)[1][len(q.keys.base):]
            if key == "step":
                break
            out.append((key, m["data"].decode()))
        else:
            raise AssertionError("the step marker never arrived")
        # wire 4's own: the wake marker, and the claim's pause read before the script
        out = [e for e in out if e[0] != "wake"]
        if wire == 4 and claim:
            assert out[0] == ("meta", "keymiss")
            out = out[1:]
        return out

    def stats() -> tuple[int, int]:
        info = c.info("stats")
        return int(info["keyspace_hits"]), int(info["keyspace_misses"])

    seen: list[tuple[str, object]] = []
    job = None

    def claim():
        nonlocal job
        job = q.claim(60000)
    for name, step in (("enqueue", lambda: q.enqueue("x", id="j1")), ("claim", claim),
                       ("complete", lambda: q.complete(job)), ("claim empty", lambda: q.claim(60000))):
        before = stats()
        step()
        after = stats()
        if wire == 4 and name.startswith("claim"):
            after = (after[0], after[1] - 1)  # the pause read's miss (the queue has no meta)
        seen.append((name, events_until_marker(name.startswith("claim"))))
        seen.append((name + " stats", (after[0] - before[0], after[1] - before[1])))
    sub.close()
    return seen


def test_notifications_and_keyspace_stats_are_the_scripts(queues):
    by_wire = {wire: lifecycle_seen(q, c, wire) for wire, (q, c, _) in queues.items()}
    events = {w: {name: e for name, e in seen if not name.endswith("stats")} for w, seen in by_wire.items()}
    stats = {w: {name[:-6]: st for name, st in seen if name.endswith("stats")} for w, seen in by_wire.items()}
    for step in events[4]:
        script, native = events[4][step], events[6][step]
        # the writes' events, in order, are the script's
        assert [e for e in native if e[1] != "keymiss"] == [e for e in script if e[1] != "keymiss"], step
        # the keys read as missing are the script's (it may read one twice, or after its pop)
        missed = {k for k, e in native if e == "keymiss"}
        assert missed == {k for k, e in script if e == "keymiss"}, step
        # a key the verb only writes is not read as a miss, and counted as nothing
        assert not missed & {"pending", "active", "metrics:completed"}, step
        # each key read is counted once (the script may count one twice: EXISTS row row meta)
        assert stats[6][step][1] == len(missed), step
        assert stats[6][step][0] <= stats[4][step][0], step
    # hits: CLAIM's row; COMPLETE's row (its lease is checked on active's write handle, as the
    # script checks it with its ZREM); none for the keys only written (pending, active)
    assert {step: stats[6][step][0] for step in stats[6]} == {"enqueue": 0, "claim": 1, "complete": 1,
                                                              "claim empty": 0}


def test_a_batch_of_completes_notifies_as_the_script_does(queues):
    """COMPLETES' writes fire the script's keyspace events, in its order: one `zrem` of active (its
    `del` when emptied), each row's `del`, one `hincrby` of the count; a WATCH of active is aborted."""
    seen = {}
    for wire, (q, c, server) in queues.items():
        q.enqueue_many(["x"] * 3)
        jobs = q.claim_many(3, 60000)
        c.config_set("notify-keyspace-events", "KEA")
        sub = c.pubsub()
        sub.psubscribe(f"__keyspace@0__:{q.keys.base}*")
        assert sub.get_message(timeout=5)["type"] == "psubscribe"
        assert exec_runs(server, [q.keys.active], lambda: q.complete_many(jobs)) is False
        c.set(q.keys.base + "step", 1)  # the last event: every one before it has been delivered
        events = []
        while (m := sub.get_message(timeout=5))["data"] != b"set":
            events.append((m["channel"].decode().split(":", 1)[1][len(q.keys.base):], m["data"].decode()))
        sub.close()
        seen[wire] = [(key if not key.startswith("job:") else "job", e) for key, e in events]
    assert seen[6] == seen[4] == [("active", "zrem"), ("active", "del"), ("job", "del"), ("job", "del"),
                                  ("job", "del"), ("metrics:completed", "hincrby")]
