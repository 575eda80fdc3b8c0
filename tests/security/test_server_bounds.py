"""Bounds on the bytes the server keeps (issue 43, item 4, the server's side), on both wires.

* FAIL, FAILURES.INCR, ``lane_fail`` and ``flow_fail`` refuse an ``error`` over 4096 bytes and a
  ``traceback`` over 8192 (``EMQARG``) before any write; the client cuts a long error instead, so a
  worker never meets the refusal.
* An event keeps at most the first 1024 bytes of each value (its error, progress, state), and a
  stream at most 100,000 entries (``enable_events`` refuses more; a larger ``meta events`` is read
  as the maximum): a stream is bounded by entries times an entry's size.
* ``lanes:paused`` and ``lanes:limit`` keep a group's setting while it has no jobs, so each holds at
  most 10,000 groups (names of at most 128 bytes): a new one past that is refused.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from echomq import ConfigurationError, Flow, Queue
from echomq.cli import main
from echomq.errors import ArgumentError, StateError
from echomq._protocol.verbs import (ERROR_MAX_LEN, EVENT_VALUE_MAX_LEN, EVENTS_MAX, GROUP_SETTINGS_MAX,
                                    TRACEBACK_MAX_LEN, bound_error, build_call)
from support.dataset import unchanged
from support.queues import fresh_name, take

LEASE = 60_000
LONG_ERROR = "e" * (ERROR_MAX_LEN + 1)
LONG_TRACEBACK = "t" * (TRACEBACK_MAX_LEN + 1)


# -- the error's bound -----------------------------------------------------------------------------


def test_the_client_cuts_a_long_error_to_its_head_at_a_character_boundary():
    assert bound_error("short") == "short"
    assert bound_error("x" * ERROR_MAX_LEN) == "x" * ERROR_MAX_LEN
    cut = bound_error("é" * ERROR_MAX_LEN)  # two bytes each: the cut falls inside a character
    assert len(cut.encode()) <= ERROR_MAX_LEN and cut.endswith("...") and set(cut[:-3]) == {"é"}
    assert bound_error("lone \udc80 surrogate") == "lone \\udc80 surrogate"  # UTF-8 cannot carry it


def held_in(queue: Queue, family: str):
    """A job of ``family`` (flat, lane, flow) held by this process, and the call that fails it with
    ``error`` and ``traceback``."""
    if family == "flat":
        queue.enqueue({"n": 1}, id="j")
        job = take(queue, LEASE)
        return lambda verb, error, tb: build_call(verb, queue.keys, (job.id, job.token, error, 5, 0, tb))
    if family == "lane":
        queue.enqueue({"n": 1}, id="j", group="g")
        (job,) = queue.claim_lanes(1, LEASE)
        return lambda verb, error, tb: build_call("lane_fail", queue.keys, (job.id, job.token, error, 5, 0, tb))
    queue.enqueue_flow("p", children=[Flow(queue.name, "c", id="j")], id="root")
    (job,) = queue.flow_claim(1, LEASE)
    return lambda verb, error, tb: build_call("flow_fail", queue.keys, (job.id, job.token, error, 5, 0, tb))


FAILURES = [("flat", "fail"), ("flat", "failures_incr"), ("lane", "lane_fail"), ("flow", "flow_fail")]


@pytest.mark.parametrize("family,verb", FAILURES)
def test_a_raw_failure_with_a_long_error_or_traceback_is_refused_and_writes_nothing(conn, family, verb):
    queue = Queue(conn, fresh_name("bounds"))
    call = held_in(queue, family)
    for error, tb, refusal in ((LONG_ERROR, "", f"EMQARG error must be at most {ERROR_MAX_LEN} bytes, got "
                                                f"{ERROR_MAX_LEN + 1}"),
                               ("e", LONG_TRACEBACK, f"EMQARG traceback must be at most {TRACEBACK_MAX_LEN} bytes, "
                                                     f"got {TRACEBACK_MAX_LEN + 1}")):
        with unchanged(conn.client, queue.keys), pytest.raises(ArgumentError) as info:
            conn.send(call(verb, error, tb))
        assert str(info.value) == refusal
    # at the bounds the failure is kept whole
    assert conn.send(call(verb, "e" * ERROR_MAX_LEN, "t" * TRACEBACK_MAX_LEN)) in (b"pending", "pending")
    row = queue.job("j")
    assert len(row["last_error"]) == ERROR_MAX_LEN and len(row["traceback"]) == TRACEBACK_MAX_LEN


def test_a_long_error_from_the_client_is_cut_not_refused(queue):
    queue.enqueue({"n": 1}, id="j")
    queue.fail(take(queue, LEASE), "ü" * ERROR_MAX_LEN, max_attempts=1)
    kept = queue.job("j")["last_error"]
    assert kept.endswith("...") and len(kept.encode()) <= ERROR_MAX_LEN and set(kept[:-3]) == {"ü"}


def test_a_parent_killed_by_a_child_keeps_a_bounded_error(conn):
    """``child <id> failed: <its error>`` grows by a prefix at each level it climbs: the server cuts it."""
    queue = Queue(conn, fresh_name("bounds"))
    queue.enqueue_flow("p", children=[Flow(queue.name, "m", id="mid", children=[Flow(queue.name, "c", id="c")])],
                       id="root")
    (child,) = queue.flow_claim(1, LEASE)
    queue.settle_many([queue.flow_fail_call(child, "x" * ERROR_MAX_LEN, max_attempts=1)])
    assert len(queue.job("c")["last_error"]) == ERROR_MAX_LEN
    for parent in ("mid", "root"):
        kept = queue.job(parent)["last_error"]
        assert (queue.job(parent)["state"], len(kept), kept[-3:]) == ("dead", ERROR_MAX_LEN, "...")


# -- the event stream's bounds ---------------------------------------------------------------------


def test_an_events_values_keep_their_first_kib_and_the_row_keeps_them_whole(queue):
    queue.enable_events(maxlen=100)
    queue.enqueue({"n": 1}, id="j")
    job = take(queue, LEASE)
    progress = list(range(2000))  # about 9 KiB of JSON
    queue.progress(job, progress)
    queue.fail(job, "f" * ERROR_MAX_LEN, max_attempts=5)
    raw = {fields[b"type"]: fields for _, fields in queue.connection.client.xrange(queue.keys.events)}
    assert len(raw[b"progress"][b"progress"]) == EVENT_VALUE_MAX_LEN
    assert raw[b"failed"][b"error"] == b"f" * EVENT_VALUE_MAX_LEN
    row = queue.job("j")
    assert len(row["last_error"]) == ERROR_MAX_LEN and len(row["progress"]) > EVENT_VALUE_MAX_LEN


def test_enable_events_refuses_a_bound_over_the_maximum_and_writes_nothing(server, queue):
    client = queue.connection.client
    queue.enqueue({"n": 1})
    with unchanged(client, queue.keys), pytest.raises(ConfigurationError, match=f"1 to {EVENTS_MAX}"):
        queue.enable_events(EVENTS_MAX + 1)
    with unchanged(client, queue.keys):
        result = CliRunner().invoke(main, ["events", "--url", server.url, "-q", queue.name,
                                           "--enable", str(EVENTS_MAX + 1)])
    assert result.exit_code == 2 and f"1<=x<={EVENTS_MAX}" in result.output
    queue.enable_events(EVENTS_MAX)
    assert client.hget(queue.keys.meta, "events") == str(EVENTS_MAX).encode()


def test_a_raw_switch_over_the_maximum_keeps_the_maximum(queue):
    """A stream already at the maximum, a switch written past it by a raw HSET: a verb's event trims
    the stream back to the maximum, not to the switch."""
    client = queue.connection.client
    pipe = client.pipeline(transaction=False)
    for n in range(EVENTS_MAX):
        pipe.xadd(queue.keys.events, {"type": "enqueued", "id": f"old{n}", "attempt": 0})
    pipe.execute()
    client.hset(queue.keys.meta, "events", str(10 * EVENTS_MAX))
    queue.enqueue({"n": 1}, id="new")
    assert client.xlen(queue.keys.events) == EVENTS_MAX
    (_, newest), = client.xrevrange(queue.keys.events, count=1)
    assert newest[b"id"] == b"new"
    client.delete(queue.keys.events)  # 100,000 entries: not left on the shared server


# -- the lanes' per-group settings -----------------------------------------------------------------


SETTINGS = {
    "pause": ("lanes:paused", lambda q, g: q.pause_group(g), "EMQ.LANE.PAUSE lanes:paused",
              "resume the groups no longer paused first"),
    "limit": ("lanes:limit", lambda q, g: q.set_lane_limit(3, g), "EMQ.LANE.LIMIT lanes:limit",
              r"remove the limits of groups that no longer need their own first \(k 0\)"),
}


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_a_groups_setting_past_the_most_kept_is_refused_and_writes_nothing(queue, setting):
    key, apply, where, free = SETTINGS[setting]
    client = queue.connection.client
    full = {f"g{n}": 2 for n in range(GROUP_SETTINGS_MAX)}
    if key == "lanes:paused":
        client.sadd(queue.keys.key(key), *full)
    else:
        client.hset(queue.keys.key(key), mapping=full)
    with unchanged(client, queue.keys), pytest.raises(StateError) as info:
        apply(queue, "one-more")
    assert str(info.value) == f"EMQSTATE {where} holds {GROUP_SETTINGS_MAX} groups, the most it keeps: " \
        + free.replace("\\", "")
    apply(queue, "g7")  # a group that has an entry already may set it again
    room = "g0"
    if key == "lanes:paused":
        assert queue.resume_group(room) is True
    else:
        queue.set_lane_limit(None, room)
    apply(queue, "one-more")  # room made: the new group's setting is kept


@pytest.mark.parametrize("verb,argv", [("lane_pause", ("g" * 129,)), ("lane_limit", (2, "g" * 129))])
def test_a_raw_group_name_over_128_bytes_is_refused_and_writes_nothing(conn, verb, argv):
    queue = Queue(conn, fresh_name("bounds"))
    call = build_call(verb, queue.keys, argv)
    with unchanged(conn.client, queue.keys), pytest.raises(ArgumentError, match="^EMQARG group must be 1 to 128 "
                                                                                 "bytes, got 129$"):
        conn.send(call)


def test_a_group_keeps_its_pause_and_its_limit_while_it_has_no_jobs(queue):
    """Why a bound and not a clean-up: a setting made ahead of a group's jobs holds when they come."""
    queue.pause_group("later")
    queue.set_lane_limit(2, "later")
    queue.enqueue({"n": 1}, group="later")
    queue.enqueue({"n": 2}, group="later")
    assert queue.groups()["later"].paused and queue.groups()["later"].limit == 2
    assert queue.claim_lanes(5, LEASE) == []
