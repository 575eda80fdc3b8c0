"""Bad input: every native verb fuzzed with hypothesis against a real wire-6 server.

Each call mixes, at random: numkeys right or wrong (signs, spaces, leading zeros,
overflow, junk), key layouts (the right queue, braces in the name, the empty queue,
two queues mixed, random bytes), keys of the wrong type at every position (a queue
``wt`` whose every key, rows included, has the wrong type or a non-integer
counter), ARGV counts off by one or more, and every number in every spelling.

Every call must answer a valid reply or a SPEC §5 code (never EMQHOST), the server
must stay up, and a refusal must leave ``DEBUG DIGEST`` unchanged. The number of
calls tried is printed (``pytest -s``); ``ECHOMQ_FUZZ_EXAMPLES`` raises the count
per verb (CI: 200 per verb).
"""

from __future__ import annotations

import os

import pytest
import valkey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from echomq import EmbeddedServer, Queue, connect, module_path
from echomq._protocol.verbs import VERBS
from support.dataset import digest

pytestmark = pytest.mark.slow  # hypothesis: hundreds of bad calls per verb

EXAMPLES = int(os.environ.get("ECHOMQ_FUZZ_EXAMPLES", "200"))
CODES = {"EMQSHAPE", "EMQLAYOUT", "EMQARG", "NOPERM", "WRONGTYPE", "EMQSTATE", "EMQ"}
NUMERIC = {"lease_ms", "delay_ms", "priority", "backoff_ms", "max_attempts", "max_stalled", "limit"}
CALLS = {"tried": 0, "refused": 0, "answered": 0}


@pytest.fixture(scope="module")
def fuzz_server():
    with EmbeddedServer(module=module_path(), brand=6) as server:
        plant(server)
        yield server
    print(f"\nfuzz: {CALLS['tried']} native calls tried, {CALLS['refused']} refused, {CALLS['answered']} answered")


def plant(server: EmbeddedServer) -> None:
    """Queue ``fz`` with a job in every state; queue ``wt`` with every key wrong-typed."""
    with connect(server.url, wire=6) as conn:
        q = Queue(conn, "fz")
        for job_id in ("p1", "a1", "s1", "d1", "g", "f"):
            q.enqueue({"id": job_id}, id=job_id)
        held = [q.claim(60_000) for _ in range(4)]
        q.fail(held[3], "x", max_attempts=1)  # d1 dead
        q.delay(held[2], 60_000)  # s1 scheduled
        c = conn.client
        c.hset("emq:{fz}:job:g", "group", "lane")  # a lane row
        c.hset("emq:{fz}:job:f", "parent", "flow")  # a flow child
        c.zadd("emq:{fz}:pending", {"ghost": 0})
        c.zadd("emq:{fz}:dead", {"ghost2": 0})
        c.set("emq:{wt}:pending", "s")
        c.hset("emq:{wt}:active", "a", "b")
        c.rpush("emq:{wt}:schedule", "l")
        c.sadd("emq:{wt}:dead", "m")
        c.set("emq:{wt}:meta", "s")
        c.set("emq:{wt}:metrics:completed", "s")
        c.hset("emq:{wt}:metrics:failed", "count", "not-a-number")
        c.set("emq:{wt}:job:x", "a string row")
        c.hset("emq:{wt}:job:y", mapping={"state": "active", "attempts": "abc", "stalled": "x", "priority": "-"})
        c.hset("emq:{wt}:job:z", mapping={"state": "active", "attempts": "9223372036854775807",
                                         "failures": "9223372036854775807", "stalled": "9223372036854775807"})
        c.zadd("emq:{wt2}:active", {"x": 0, "y": 0, "z": 0})
        c.zadd("emq:{wt2}:schedule", {"x": 0, "y": 0, "z": 0})
        c.zadd("emq:{wt2}:dead", {"x": 0, "y": 0, "z": 0})
        c.zadd("emq:{wt2}:pending", {"x": 0, "y": 0, "z": 0})
        for job_id in ("x", "y", "z"):
            c.copy(f"emq:{{wt}}:job:{job_id}", f"emq:{{wt2}}:job:{job_id}")


# -- strategies -----------------------------------------------------------------------------------

JUNK_NUMBERS = ["-1", "+1", " 1", "1 ", "01", "00", "", "0x10", "1e3", "1.5", "-0", "9223372036854775807",
                "9223372036854775808", "18446744073709551616", "99999999999999999999999", "٣", "1\x00"]
numbers = st.one_of(
    st.integers(0, 3).map(str),
    st.integers(0, 2**63 - 1).map(str),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(JUNK_NUMBERS),
    st.binary(max_size=12),
)
ids = st.one_of(st.sampled_from(["p1", "a1", "s1", "d1", "g", "f", "ghost", "ghost2", "x", "y", "z", "new", ""]),
                st.just("i" * 513), st.binary(max_size=40))
tokens = st.one_of(st.sampled_from(["0", "1", "2", "01", " 1", "abc", "9223372036854775807"]), st.binary(max_size=8))
queues = st.sampled_from(["fz", "fz", "fz", "wt", "wt2", "new", "", "a{b", "a}b", "{fz}", "fz:x"])


def key_for(queue: str, suffix: str) -> str:
    return f"emq:{{{queue}}}:{suffix}"


@st.composite
def calls(draw, verb):
    n = len(verb.keys)
    queue = draw(queues)
    keys: list = []
    for suffix in verb.keys:
        mode = draw(st.integers(0, 9))
        if mode <= 6:
            keys.append(key_for(queue, suffix))
        elif mode == 7:
            keys.append(key_for(draw(queues), suffix))  # mixed queues
        elif mode == 8:
            keys.append(key_for(queue, draw(st.sampled_from(["pending", "active", "schedule", "dead", "", "meta", "job:x"]))))
        else:
            keys.append(draw(st.binary(max_size=20)))
    if draw(st.integers(0, 9)) == 0:  # drop or add keys
        keys = keys[: draw(st.integers(0, n))] + draw(st.lists(st.binary(max_size=8), max_size=2))
    numkeys = str(n) if draw(st.integers(0, 6)) else draw(st.one_of(st.sampled_from(
        [str(n - 1), str(n + 1), f"+{n}", f" {n}", f"0{n}", f"-{n}", "", "x"]), numbers))
    argv: list = []
    names = list(verb.argv)
    if verb.name == "extends":
        names = ["lease_ms"] + ["id", "token"] * draw(st.integers(0, 4))
    for name in names:
        if name in NUMERIC:
            argv.append(draw(numbers))
        elif name == "id":
            argv.append(draw(ids))
        elif name == "token":
            argv.append(draw(tokens))
        else:  # payload, error: opaque bytes
            argv.append(draw(st.binary(max_size=30)))
    if draw(st.integers(0, 7)) == 0:  # ARGV count off
        argv = argv[: draw(st.integers(0, len(argv)))] + draw(st.lists(numbers, max_size=3))
    return (verb.command, numkeys, *keys, *argv)


def code_of(exc: valkey.ResponseError) -> str:
    text = str(exc)
    if isinstance(exc, valkey.exceptions.NoPermissionError):
        return "NOPERM"
    return text.split(" ", 1)[0]


@pytest.mark.parametrize("verb", [v for v in VERBS], ids=[v.name for v in VERBS])
def test_every_bad_call_is_a_coded_refusal_that_writes_nothing(fuzz_server, verb):
    client = fuzz_server.client()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(calls(verb))
    def one(args):
        before = digest(client)
        CALLS["tried"] += 1
        try:
            reply = client.execute_command(*args)
        except valkey.ResponseError as exc:
            CALLS["refused"] += 1
            code = code_of(exc)
            assert code in CODES, f"{args!r} -> {exc}"
            assert digest(client) == before, f"refusal {exc} wrote: {args!r}"
        else:
            CALLS["answered"] += 1
            assert isinstance(reply, (int, bytes, list)), (args, reply)
        assert client.ping()

    one()
    assert fuzz_server.running


def test_version_takes_no_arguments(fuzz_server):
    client = fuzz_server.client()
    before = digest(client)
    for args in ([], ["x"], ["1", "emq:{fz}:"]):
        CALLS["tried"] += 1
        if not args:
            assert client.execute_command("EMQ.VERSION").split()[0] == b"enqueue"
            continue
        with pytest.raises(valkey.ResponseError, match="wrong number of arguments"):
            client.execute_command("EMQ.VERSION", *args)
        CALLS["refused"] += 1
    assert digest(client) == before
