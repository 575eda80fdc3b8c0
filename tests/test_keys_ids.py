"""Pure unit tests, no server: the keyspace, the job-id generator, number checks, error mapping.

SPEC §1 (keys, queue-name and id rules, default ids that sort FIFO), §3 (the number
grammar the Python side enforces before sending) and §5's error-code table.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import pytest
from valkey.exceptions import NoPermissionError, NoScriptError, ResponseError

from echomq import errors
from echomq._protocol import ids
from echomq._client.connection import as_refusal
from echomq._protocol.keys import MAX_ID_BYTES, STATE_SETS, VERSION_KEY, Keyspace, State, check_job_id, check_queue_name
from echomq._client.queue import I64_MAX, PRIORITY_MAX, check_int
from support.queues import former_default_id

# --------------------------------------------------------------------------- keyspace


def test_keys_are_the_base_plus_suffix():
    ks = Keyspace("mail.out:eu-1_x")
    base = "emq:{mail.out:eu-1_x}:"
    assert ks.base == base
    assert ks.key("") == base
    assert (ks.pending, ks.active, ks.schedule, ks.dead, ks.meta) == tuple(
        base + s for s in ("pending", "active", "schedule", "dead", "meta")
    )
    assert ks.job("j-1") == base + "job:j-1"
    assert ks.metrics("failed") == base + "metrics:failed"
    assert ks.metrics("completed") == base + "metrics:completed"
    assert VERSION_KEY == "{emq}:version"


def _hashtag(key: str) -> str:
    """The cluster hashtag rule: the text between the first '{' and the next '}', if non-empty."""
    start = key.index("{")
    end = key.index("}", start + 1)
    assert end > start + 1
    return key[start + 1 : end]


def test_every_key_of_a_queue_shares_one_hashtag():
    ks = Keyspace("q1")
    keys = [ks.base, ks.pending, ks.active, ks.schedule, ks.dead, ks.meta, ks.job("a{b}c"), ks.metrics("failed")]
    assert {_hashtag(k) for k in keys} == {"q1"}


def test_scan_pattern_escapes_the_braces():
    # escaped so the glob matches the braces as themselves and nothing of another queue
    assert Keyspace("a.b").pattern() == "emq:\\{a.b\\}:*"


@pytest.mark.parametrize("name", ["a", "A-Z.a_z:0-9", "x" * 128, "::", "..", "-"])
def test_queue_names_accepted(name):
    assert check_queue_name(name) == name
    assert Keyspace(name).queue == name


@pytest.mark.parametrize(
    "name", ["", "x" * 129, "a{b", "a}b", "{q}", "sp ace", "tab\t", "é", "new\nline", "star*", "q?", "a/b", None, 7, b"q"]
)
def test_queue_names_refused_naming_the_value(name):
    with pytest.raises(errors.ConfigurationError) as info:
        check_queue_name(name)
    assert repr(name) in str(info.value)
    with pytest.raises(errors.ConfigurationError):
        Keyspace(name)


@pytest.mark.parametrize("job_id", ["1", "x" * MAX_ID_BYTES, "é" * (MAX_ID_BYTES // 2), "a b{c}:*", "\u2603"])
def test_job_ids_accepted(job_id):
    assert check_job_id(job_id) == job_id


@pytest.mark.parametrize("job_id", ["", "x" * (MAX_ID_BYTES + 1), "é" * (MAX_ID_BYTES // 2) + "x"])
def test_job_ids_refused_by_utf8_length(job_id):
    with pytest.raises(errors.ConfigurationError) as info:
        check_job_id(job_id)
    message = str(info.value)
    assert repr(job_id[:40]) in message
    assert str(len(job_id.encode())) in message  # says how long it was


@pytest.mark.parametrize("job_id", [None, 5, b"id", ["id"]])
def test_job_ids_must_be_text(job_id):
    with pytest.raises(errors.ConfigurationError) as info:
        check_job_id(job_id)
    assert repr(job_id) in str(info.value)


def test_states_are_four_and_each_has_its_set():
    assert [s.value for s in State] == ["pending", "active", "scheduled", "dead"]
    assert set(STATE_SETS) == set(State)
    assert {s: s.set_suffix for s in State} == {
        State.PENDING: "pending",
        State.ACTIVE: "active",
        State.SCHEDULED: "schedule",
        State.DEAD: "dead",
    }
    # a str Enum: a state compares equal to the bytes-decoded text the server stores
    assert State("scheduled") is State.SCHEDULED and State.DEAD == "dead"


# --------------------------------------------------------------------------- ids

DEFAULT_ID = re.compile(r"[0-9A-Za-z]{16}")


def test_a_default_id_is_16_base62_characters_that_say_when_it_was_minted():
    before = time.time_ns() // 1_000_000
    value = ids.new_id()
    after = time.time_ns() // 1_000_000
    assert DEFAULT_ID.fullmatch(value), value
    # the generator may run ahead of the wall clock by a few ms after a burst, never behind it
    assert before <= ids.minted_ms(value) <= after + 50
    assert list(ids.ALPHABET) == sorted(ids.ALPHABET)  # text order is number order


def test_default_id_text_order_is_generation_order():
    values = [ids.new_id() for _ in range(20_000)]
    assert len(set(values)) == len(values)
    assert values == sorted(values)  # ZPOPMIN's lexicographic tie-break is therefore FIFO


class _FrozenClock:
    """Stands in for the ``time`` module inside echomq._protocol.ids: a wall clock we can hold or turn back."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def time_ns(self) -> int:
        return self.ms * 1_000_000


def test_counter_overflow_advances_the_millisecond(monkeypatch):
    clock = _FrozenClock(time.time_ns() // 1_000_000 + 10)
    monkeypatch.setattr(ids, "time", clock)
    values = [ids.new_id() for _ in range(3 * ids.COUNTER_SPAN)]  # the counter must run out twice
    assert values == sorted(values) and len(set(values)) == len(values)
    stamps = [ids.minted_ms(v) for v in values]
    assert stamps[0] == clock.ms and stamps[-1] == clock.ms + 2  # ran ahead rather than repeating or wrapping


def test_a_batch_of_ids_is_minted_as_one_at_a_time_would_be(monkeypatch):
    """new_ids (enqueue_many's ids, one hold of the lock) crosses a millisecond's counter as new_id does."""
    clock = _FrozenClock(time.time_ns() // 1_000_000 + 10)
    monkeypatch.setattr(ids, "time", clock)
    first = ids.new_id()
    batch = ids.new_ids(2 * ids.COUNTER_SPAN + 5)  # runs out of this ms's counter twice
    after = ids.new_id()
    values = [first, *batch, after]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert [ids.minted_ms(v) for v in values].count(clock.ms) == ids.COUNTER_SPAN
    assert ids.minted_ms(after) == clock.ms + 2
    assert ids.new_ids(0) == []


def test_ids_never_go_backwards_when_the_wall_clock_does(monkeypatch):
    first = ids.new_id()
    clock = _FrozenClock(ids.minted_ms(first) - 60_000)  # the wall clock jumps a minute back
    monkeypatch.setattr(ids, "time", clock)
    later = [ids.new_id() for _ in range(100)]
    assert [first] + later == sorted([first] + later)
    assert all(ids.minted_ms(v) >= ids.minted_ms(first) for v in later)


# echomq/_protocol/ids.py loaded on its own (it needs only the standard library): a process starts in
# a fraction of the time the whole package takes to import
MINT_IN_ONE_MS = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("ids", sys.argv[3])
ids = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ids)
class Frozen:
    time_ns = staticmethod(lambda: int(sys.argv[1]) * 1_000_000)
ids.time = Frozen
values = [ids.new_id() for _ in range(int(sys.argv[2]))]
assert values == sorted(values), "out of order"
print("\\n".join(values))
"""


def test_processes_minting_in_the_same_milliseconds_never_mint_the_same_id():
    # every process's clock held at the same ms: only the per-process tag can keep them apart
    ms, count = time.time_ns() // 1_000_000, 2 * ids.COUNTER_SPAN
    procs = [subprocess.Popen([sys.executable, "-c", MINT_IN_ONE_MS, str(ms), str(count), ids.__file__],
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    minted = [proc.communicate(timeout=60)[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6
    assert all(len(values) == count for values in minted)
    assert len(set().union(*minted)) == 6 * count
    assert {ids.minted_ms(values[0]) for values in minted} == {ms}


def test_a_forked_child_draws_its_own_tag(monkeypatch):
    monkeypatch.setattr(ids, "time", _FrozenClock(time.time_ns() // 1_000_000 + 5))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: same clock, same counter state as the parent at the fork
        os.write(write, ids.new_id().encode())
        os._exit(0)
    os.close(write)
    parent_id = ids.new_id()
    child_id = os.read(read, 64).decode()
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    assert child_id != parent_id and ids.minted_ms(child_id) == ids.minted_ms(parent_id)
    assert child_id[ids.TIME_CHARS:] != parent_id[ids.TIME_CHARS:]


def test_minted_ms_reads_default_ids_and_the_former_uuid7_ids_only():
    now_ms = time.time_ns() // 1_000_000
    assert ids.minted_ms(former_default_id(now_ms)) == now_ms  # jobs queued by an older client
    too_early = "0" * 16  # the default shape, but its time reads 1970: someone's own id
    for other in ("job-1", str(uuid.uuid4()), former_default_id(now_ms).replace("-", ""), too_early,
                  "zzzzzzzzzzzzzzzz", "0VcYkar2vSXm-Ejg", "0VcYkar2vSXmrEj", "0VcYkar2vSXmrEjgA"):
        assert ids.minted_ms(other) is None, other


def test_minted_ms_reads_each_ids_own_time_in_any_order_alone_or_in_a_batch():
    # the worker reads every claimed id and a claim batch's ids mostly share their millisecond: the
    # last time part read is kept; any order of ids, of any shapes, still reads each one's own time
    def reference(text: str) -> int:
        return sum(ids.ALPHABET.index(c) * 62 ** (ids.TIME_CHARS - 1 - i) for i, c in enumerate(text[:ids.TIME_CHARS]))

    first, second = (time.time_ns() // 1_000_000) - 5_000, time.time_ns() // 1_000_000
    head_a, head_b = ids.fixed_width(first, ids.TIME_CHARS), ids.fixed_width(second, ids.TIME_CHARS)
    sequence = [head_a + "00000001", head_a + "zzzzzzzz", head_b + "00000001", head_a + "0000000A",
                head_a + "-0000000",  # the same time part, but not the default shape: someone's own id
                head_a + "00000002", head_b + "0000000B", head_b + "0000-000", head_b + "00000003"]
    expected = [reference(text) if text.isalnum() else None for text in sequence * 2]
    for text, minted in zip(sequence * 2, expected):
        assert ids.minted_ms(text) == minted, text
    assert ids.minted_ms_of(sequence * 2) == expected  # a claim batch's ids, read in one call
    defaults = [(text, minted) for text, minted in zip(sequence * 2, expected) if minted is not None]
    assert ids.minted_ms_of(text for text, _ in defaults) == [minted for _, minted in defaults]  # default ids only
    assert ids.minted_ms_of([]) == []
    assert reference(head_a + "00000001") == first and reference(head_b + "00000001") == second


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("value,low,high", [(0, 0, I64_MAX), (I64_MAX, 0, I64_MAX), (1, 1, 1), (PRIORITY_MAX, 0, PRIORITY_MAX)])
def test_check_int_accepts_the_bounds(value, low, high):
    assert check_int("n", value, low, high) == value


@pytest.mark.parametrize(
    "value,low,high",
    [(-1, 0, I64_MAX), (I64_MAX + 1, 0, I64_MAX), (0, 1, I64_MAX), (PRIORITY_MAX + 1, 0, PRIORITY_MAX),
     (True, 0, 5), (False, 0, 5), (1.0, 0, 5), ("1", 0, 5), (None, 0, 5), (b"1", 0, 5)],
)
def test_check_int_refuses_naming_name_and_value(value, low, high):
    with pytest.raises(errors.ConfigurationError) as info:
        check_int("lease_ms", value, low, high)
    message = str(info.value)
    assert "lease_ms" in message and repr(value) in message and str(low) in message


# --------------------------------------------------------------------------- errors


def test_every_error_is_an_echomq_error_and_configuration_is_a_value_error():
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert issubclass(obj, errors.EchoMQError), name
    assert issubclass(errors.ConfigurationError, ValueError)


SPEC_CODES = {"EMQSHAPE", "EMQLAYOUT", "EMQARG", "NOPERM", "WRONGTYPE", "EMQSTATE", "EMQ", "EMQHOST"}


def test_one_exception_class_per_spec_code():
    assert set(errors.REFUSALS) == SPEC_CODES
    assert len(set(errors.REFUSALS.values())) == len(SPEC_CODES)
    for code, cls in errors.REFUSALS.items():
        assert issubclass(cls, errors.CommandRefused) and cls.code == code


@pytest.mark.parametrize(
    "reply,cls",
    [
        ("EMQSHAPE EMQ.CLAIM takes 3 keys", errors.ShapeError),
        ("EMQLAYOUT keys are not one queue", errors.LayoutError),
        ("EMQARG lease_ms must be digits", errors.ArgumentError),
        ("NOPERM No permissions to access a key", errors.PermissionDenied),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", errors.WrongType),
        ("EMQSTATE lane row is not native", errors.StateError),
        ("EMQ hash value is not an integer", errors.CounterError),
        ("EMQ increment or decrement would overflow", errors.CounterError),
        ("EMQHOST unexpected reply", errors.HostError),
    ],
)
def test_refusal_maps_the_first_word(reply, cls):
    err = errors.refusal(reply)
    assert type(err) is cls
    assert err.reply == reply and str(err) == reply and err.code == reply.split()[0]


@pytest.mark.parametrize("reply", ["ERR unknown command", "EMQSTATEX x", "emqstate lower", "BUSY script", "EMQ"])
def test_unknown_codes_stay_command_refused_with_their_code(reply):
    err = errors.refusal(reply)
    if reply == "EMQ":  # a bare code still maps by its word
        assert type(err) is errors.CounterError
        return
    assert type(err) is errors.CommandRefused
    assert err.code == reply.split()[0]
    assert errors.CommandRefused.code == ""  # the instance's code did not leak onto the class


def test_lease_lost_names_verb_id_and_token():
    err = errors.LeaseLost("complete", "job-7", "3")
    assert (err.verb, err.job_id, err.token) == ("complete", "job-7", "3")
    assert "complete" in str(err) and "'job-7'" in str(err) and "3" in str(err)


# valkey-py strips some codes (ERR, NOPERM, NOSCRIPT, ...) off the reply and raises its own class;
# as_refusal puts the code back so `code` is always the reply's first word on the wire.
@pytest.mark.parametrize(
    "exc,cls,code",
    [
        (ResponseError("user_script:1: attempt to perform arithmetic on a nil value script: on @user_script:1."), errors.CommandRefused, "ERR"),
        (ResponseError("hash value is not an integer script: on @user_script:14."), errors.CommandRefused, "ERR"),
        (ResponseError("ACL failure in script: No permissions to access a key script: on @user_script:4."), errors.CommandRefused, "ERR"),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), errors.WrongType, "WRONGTYPE"),
        (NoPermissionError("No permissions to access a key"), errors.PermissionDenied, "NOPERM"),
        (NoScriptError("No matching script."), errors.CommandRefused, "NOSCRIPT"),
        (ResponseError("EMQSTATE row is not active"), errors.StateError, "EMQSTATE"),
        (ResponseError("EMQ increment or decrement would overflow"), errors.CounterError, "EMQ"),
        (ResponseError("EMQARG lease_ms must be ASCII digits"), errors.ArgumentError, "EMQARG"),
        (ResponseError("BUSY Valkey is busy running a script."), errors.CommandRefused, "BUSY"),
    ],
)
def test_as_refusal_restores_the_code_valkey_py_strips(exc, cls, code):
    err = as_refusal(exc)
    assert type(err) is cls and err.code == code
    assert err.reply.startswith(code + " ") and err.reply.endswith(str(exc))
