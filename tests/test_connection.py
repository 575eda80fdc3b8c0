"""Connecting (SPEC §7), script loading, the pause read (§1, §3, §4) and error mapping (§5).

Brand tests run on a server of their own, unbranded, flushed per test: the brand is
node-wide, so they must not touch the session servers' brands.
"""

from __future__ import annotations

import asyncio

import pytest
import valkey

from echomq import (
    ArgumentError,
    BrandError,
    CommandRefused,
    ConfigurationError,
    ConnectionFailed,
    EmbeddedServer,
    PartitionedQueue,
    PermissionDenied,
    Queue,
    UnsupportedOnWire,
    WireError,
    hooks,
    WrongType,
    aio,
    brand_node,
    connect,
)
from echomq._client.connection import BRANDS, STREAM_ARGS, Call, Connection, Plain, build_call, cluster_mode, streamed
from echomq._protocol.keys import VERSION_KEY, Keyspace
from echomq._protocol.serializers import RAW
from echomq.local.server import free_port
from echomq._protocol.verbs import FLOWS, LANES, SCRIPTED, Verb
from support.dataset import dump, unchanged
from support.queues import awaited_connect, fresh_name

def fresh(prefix: str = "c") -> str:
    return fresh_name(prefix)


# --------------------------------------------------------------------------- brands


@pytest.fixture(params=["sync", "async"])
def open_conn(request):
    """The handshake checks run through ``echomq.connect`` and through ``echomq.aio.connect``."""
    return connect if request.param == "sync" else awaited_connect


@pytest.fixture(scope="module")
def bare_server():
    with EmbeddedServer() as server:  # no brand, no module
        yield server


@pytest.fixture
def bare(bare_server):
    client = bare_server.client()
    client.flushall()
    yield bare_server, client
    client.flushall()
    client.close()


@pytest.mark.parametrize("wire", [4, 6])
def test_an_unbranded_node_is_refused_and_left_unbranded(bare, wire, open_conn):
    server, client = bare
    with unchanged(client):
        with pytest.raises(BrandError if wire == 4 else WireError) as info:
            open_conn(server.url, wire=wire)
    assert client.exists(VERSION_KEY) == 0
    if wire == 4:
        assert VERSION_KEY in str(info.value) and "brand" in str(info.value)


@pytest.mark.parametrize("have", [b"echomq:6.0.0", b"echomq:5.0.0", b"acme:4.0.0", b""])
def test_another_brand_is_refused_and_kept(bare, have, open_conn):
    server, client = bare
    client.set(VERSION_KEY, have)
    with unchanged(client):
        with pytest.raises(BrandError) as info:
            open_conn(server.url, wire=4)
    assert repr(have.decode()) in str(info.value) and "echomq:4.0.0" in str(info.value)
    assert client.get(VERSION_KEY) == have


def test_a_wrong_typed_brand_is_a_brand_error(bare, open_conn):
    server, client = bare
    client.hset(VERSION_KEY, "brand", "echomq:4.0.0")
    with unchanged(client):
        with pytest.raises(BrandError):
            open_conn(server.url, wire=4)
        with pytest.raises(BrandError):
            brand_node(client, 4)


def test_auto_wire_reads_the_brand_and_refuses_what_names_no_wire(bare, open_conn):
    server, client = bare
    for planted in (None, b"acme:1", "hash"):
        client.delete(VERSION_KEY)
        if planted == "hash":
            client.hset(VERSION_KEY, "brand", "echomq:4.0.0")
        elif planted is not None:
            client.set(VERSION_KEY, planted)
        with unchanged(client):
            with pytest.raises(BrandError):
                open_conn(server.url, wire="auto")
    client.delete(VERSION_KEY)
    brand_node(client, 4)
    with unchanged(client), open_conn(server.url, wire="auto") as conn:
        assert conn.wire == 4


def test_without_a_wire_a_connection_takes_the_nodes_brand(server4, server6, open_conn):
    # what a new user writes first, `echomq.connect(url)`, works on either node as `emq` does
    for server, wire in ((server4, 4), (server6, 6)):
        with server.client() as client, unchanged(client, dump_keys=False), open_conn(server.url) as conn:
            assert conn.wire == wire


def test_wire6_needs_the_module_even_on_a_node_branded_6(bare, open_conn):
    server, client = bare
    client.set(VERSION_KEY, BRANDS[6])
    with unchanged(client):
        with pytest.raises(WireError, match="EMQ.VERSION"):
            open_conn(server.url, wire=6)


def test_wire6_refuses_a_node_branded_4(server4, open_conn):
    with server4.client() as client, unchanged(client, dump_keys=False):
        with pytest.raises(WireError):  # no module on the script node: refused before the brand is read
            open_conn(server4.url, wire=6)


@pytest.fixture(scope="module")
def bare_native_server():
    from echomq import module_path

    with EmbeddedServer(module=module_path()) as server:  # the module, no brand
        yield server


@pytest.fixture
def bare_native(bare_native_server):
    client = bare_native_server.client()
    client.flushall()
    yield bare_native_server, client
    client.flushall()
    client.close()


def test_wire6_needs_the_brand_after_the_tokens(bare_native, open_conn):
    server, client = bare_native
    with unchanged(client):
        with pytest.raises(BrandError, match="not branded"):
            open_conn(server.url, wire=6)
    assert client.exists(VERSION_KEY) == 0


@pytest.mark.parametrize("have,want", [(4, 6), (6, 4)])
def test_wire6_node_and_script_brands_refuse_each_other(bare_native, have, want, open_conn):
    """SPEC §7: a node is one or the other, even when the module is loaded."""
    server, client = bare_native
    brand_node(client, have)
    with unchanged(client):
        with pytest.raises(BrandError) as info:
            open_conn(server.url, wire=want)
    assert BRANDS[have].decode() in str(info.value)
    with open_conn(server.url, wire=have) as conn:
        assert conn.wire == have


def test_brand_node_brands_once_and_repeats_as_a_no_op(bare):
    server, client = bare
    assert brand_node(client, 4) == BRANDS[4]
    assert client.get(VERSION_KEY) == BRANDS[4]
    with unchanged(client):
        assert brand_node(client, 4) == BRANDS[4]
        with connect(server.url, wire=4) as conn:  # the connection never writes the brand
            Queue(conn, fresh()).counts()


@pytest.mark.parametrize("have,want", [(4, 6), (6, 4)])
def test_brand_node_refuses_to_overwrite_the_other_brand(bare_native, have, want):
    _, client = bare_native
    brand_node(client, have)
    with unchanged(client):
        with pytest.raises(BrandError) as info:
            brand_node(client, want)
    assert BRANDS[have].decode() in str(info.value)
    assert f"--wire {want} --replace" in str(info.value)  # the way out, for a brand given by mistake
    assert client.get(VERSION_KEY) == BRANDS[have]


@pytest.mark.parametrize("replace", [False, True])
def test_brand_node_refuses_wire_6_on_a_node_without_trafikey(bare, replace):
    """Branded 6 without the module, every wire-6 call would fail and wire 4 be refused by the brand."""
    _, client = bare
    with unchanged(client):
        with pytest.raises(WireError) as info:
            brand_node(client, 6, replace=replace)
    assert "--loadmodule" in str(info.value) and "emq brand URL --wire 4" in str(info.value)
    assert client.exists(VERSION_KEY) == 0


def test_a_wrong_brand_is_replaced_only_while_the_node_holds_no_echomq_data(bare_native):
    server, client = bare_native
    brand_node(client, 4)
    with connect(server.url, wire=4) as conn:
        job = Queue(conn, fresh()).enqueue({"n": 1})
    with unchanged(client):
        with pytest.raises(BrandError) as info:
            brand_node(client, 6, replace=True)
    assert "holds EchoMQ data" in str(info.value) and "echomq:4.0.0" in str(info.value)
    assert f":job:{job.id}" in str(info.value) or ":pending" in str(info.value)  # names what it found
    client.delete(*client.keys("emq:*"))
    assert brand_node(client, 6, replace=True) == BRANDS[6]
    with connect(server.url, wire=6) as conn:
        assert conn.wire == 6


def test_a_wire_6_brand_on_a_node_without_trafikey_is_replaced_by_wire_4(bare):
    """The state an older `emq brand --wire 6` left on a plain node: no wire served it. --replace gets out."""
    server, client = bare
    client.set(VERSION_KEY, BRANDS[6])
    with unchanged(client):
        with pytest.raises(BrandError, match="--wire 4 --replace"):
            brand_node(client, 4)
    assert brand_node(client, 4, replace=True) == BRANDS[4]
    with connect(server.url, wire=4) as conn:
        Queue(conn, fresh()).enqueue({"n": 1})


@pytest.mark.parametrize("wire", [5, 0, "4", None])
def test_brand_node_refuses_a_bad_wire_without_writing(bare, wire):
    _, client = bare
    with unchanged(client):
        with pytest.raises(ConfigurationError) as info:
            brand_node(client, wire)
    assert repr(wire) in str(info.value)


@pytest.mark.parametrize("wire", [5, 0, "6", None])
def test_a_bad_wire_is_a_configuration_error(server4, wire):
    client = server4.client()
    with unchanged(client, dump_keys=False):
        with pytest.raises(ConfigurationError) as info:
            Connection(client, wire)
    assert repr(wire) in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1", "nonsense", "tcp://x:1"])
def test_a_bad_url_is_a_configuration_error(url, open_conn):
    with pytest.raises(ConfigurationError) as info:
        open_conn(url)
    assert repr(url) in str(info.value)


QUEUE_MAKERS = {
    "Queue": (lambda conn: Queue(conn, "x"), "echomq.connect(url)"),
    "PartitionedQueue": (lambda conn: PartitionedQueue(conn, "x", partitions=2), "echomq.connect(url)"),
    "aio.Queue": (lambda conn: aio.Queue(conn, "x"), "await echomq.aio.connect(url)"),
    "aio.PartitionedQueue": (lambda conn: aio.PartitionedQueue(conn, "x", ["x~0.a"]), "await echomq.aio.connect(url)"),
    "aio.PartitionedQueue.open": (lambda conn: asyncio.run(aio.PartitionedQueue.open(conn, "x")),
                                  "await echomq.aio.connect(url)"),
}


@pytest.mark.parametrize("kind", QUEUE_MAKERS)
def test_a_queue_given_a_url_is_a_type_error_naming_the_call_that_connects(server4, kind):
    """The first thing a new user types (today an AttributeError: 'str' object has no attribute
    'wire'); the blocking client's connection given to an asyncio queue is refused the same way."""
    make, opened_by = QUEUE_MAKERS[kind]
    with server4.client() as client, unchanged(client):
        with pytest.raises(TypeError) as given_a_url:
            make(server4.url)
        with connect(server4.url, wire=4) as blocking:
            if kind.startswith("aio"):
                with pytest.raises(TypeError, match=r"not a value of type echomq\.Connection: "):
                    make(blocking)
    said = str(given_a_url.value)
    assert f"not the URL {server4.url!r}" in said and f"conn = {opened_by}" in said


def test_no_server_is_connection_failed(open_conn):
    url = f"redis://127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionFailed) as info:
        open_conn(url, socket_connect_timeout=2)
    assert url in str(info.value)


def test_a_database_the_node_does_not_have_is_connection_failed_naming_the_fix(server4, open_conn):
    url = f"{server4.url}/99"  # the node has 16
    with pytest.raises(ConnectionFailed) as info:
        open_conn(url, wire="auto")
    assert url in str(info.value) and "use /0" in str(info.value)


def test_a_port_that_is_not_valkey_is_connection_failed_not_a_protocol_traceback(open_conn):
    import http.server
    import threading

    with http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler) as web:
        threading.Thread(target=web.serve_forever, daemon=True).start()
        url = f"redis://127.0.0.1:{web.server_address[1]}"
        try:
            with pytest.raises(ConnectionFailed) as info:
                open_conn(url, wire="auto", socket_timeout=5)
        finally:
            web.shutdown()
    assert url in str(info.value) and "is not Valkey or Redis" in str(info.value)


# --------------------------------------------------------------------------- scripts: load, NOSCRIPT, wire 6 refusal


def _loaded(conn) -> list[bool]:
    return conn.client.script_exists(*[s.sha for s in conn.scripts.values()])


def test_wire4_loads_every_script_and_wire6_only_the_reads_and_the_lanes(conn, wire):
    names = set(conn.scripts)
    if wire == 4:
        assert names == {v.name for v in SCRIPTED}
    else:  # SPEC §9.6: besides the EMQ verbs, exactly the lane and flow scripts and the two reads
        assert names == {"counts", "state"} | {v.name for v in LANES + FLOWS}
    assert all(_loaded(conn))


def test_noscript_after_script_flush_reloads_and_retries_once(conn, wire):
    q = Queue(conn, fresh(), serializer=RAW)
    q.enqueue(b"p", id="a")
    conn.client.script_flush()
    assert not any(_loaded(conn))
    assert q.counts().pending == 1  # EVALSHA on both wires
    assert all(_loaded(conn))
    conn.client.script_flush()
    job = q.claim(60_000)
    assert job.id == "a" and job.attempt == 1  # ran once, not twice
    conn.client.script_flush()
    q.complete(job)
    assert q.metrics()["completed"] == 1


def test_noscript_in_a_pipeline_reloads_and_resends(conn):
    q = Queue(conn, fresh(), serializer=RAW)
    conn.client.script_flush()
    made = q.enqueue_many([b"1", b"2", b"3"])
    assert [e.created for e in made] == [True, True, True]
    jobs = [q.claim(60_000) for _ in made]
    conn.client.script_flush()
    assert q.complete_many(jobs) == [True, True, True]
    assert q.metrics()["completed"] == 3 and q.counts().total == 0


def test_noscript_retry_resends_only_the_calls_that_did_not_run(conn4):
    """FAIL on a dead row counts again (SPEC §5.3), so a resent FAIL would show as count 2."""
    q = Queue(conn4, fresh(), serializer=RAW)
    q.enqueue(b"p", id="a")
    job = q.claim(60_000)
    conn4.client.script_flush()
    conn4.client.script_load(conn4.scripts["fail"].source)  # only FAIL is cached: ENQUEUE answers NOSCRIPT
    replies = conn4.send_many([
        build_call("fail", q.keys, ["a", job.token, "x", 1, 0]),
        build_call("enqueue", q.keys, ["b", b"p", 0]),
    ])
    assert replies == [b"dead", 1]
    assert q.metrics()["failed"] == 1
    assert q.state("b") is not None


@pytest.mark.parametrize("name", ["bogus", "pause"])
def test_a_script_outside_the_table_is_refused_client_side(conn, wire, name):
    verb = Verb(name, ("pending", ""), ("id",), command=None)
    call = Call(verb, tuple(Keyspace("x").key(s) for s in verb.keys), ("a",))
    with unchanged(conn.client, Keyspace("x")):
        with pytest.raises(UnsupportedOnWire) as info:
            conn.send(call)
    assert repr(name) in str(info.value) or name in str(info.value)


# --------------------------------------------------------------------------- pause


@pytest.mark.parametrize("value", ["1", "0", "", "no", "false"])
def test_any_paused_value_holds_claims(conn, value):
    q = Queue(conn, fresh(), serializer=RAW)
    q.enqueue(b"p", id="a")
    conn.client.hset(q.keys.meta, "paused", value)
    with unchanged(conn.client, q.keys):
        assert q.claim(60_000) is None
        assert q.counts().paused is True
    q.resume()
    assert q.counts().paused is False
    assert q.claim(60_000).id == "a"


def test_a_wrong_typed_meta_reads_as_paused_on_wire4_and_is_refused_on_wire6(conn, wire):
    q = Queue(conn, fresh(), serializer=RAW)
    q.enqueue(b"p", id="a")
    conn.client.set(q.keys.meta, "not a hash")
    with unchanged(conn.client, q.keys):
        if wire == 4:
            assert q.claim(60_000) is None  # SPEC §4: an error reply to the pause read means paused
        else:
            with pytest.raises(WrongType):
                q.claim(60_000)
        with pytest.raises(WrongType):
            q.counts()


def test_a_connection_fault_on_the_pause_read_is_connection_failed(conn4):
    """SPEC §4: only a link fault is not read as paused -- and then the claim fails on it."""
    q = Queue(conn4, fresh())
    good = conn4.client
    conn4.client = valkey.Valkey(port=free_port(), socket_connect_timeout=1)
    try:
        with pytest.raises(ConnectionFailed, match="claim|hget") as info:
            q.claim(60_000)
        assert isinstance(info.value.__cause__, valkey.ConnectionError)
    finally:
        conn4.client.close()
        conn4.client = good


def test_enqueue_schedule_and_promote_admit_while_paused(conn):
    q = Queue(conn, fresh(), serializer=RAW)
    q.pause()
    assert q.enqueue(b"p", id="a").created
    assert q.schedule(b"s", 0, id="s").created
    from support.waiting import wait_server_past

    wait_server_past(conn.client, q.ids("scheduled")[0][1])
    assert q.promote() == 1
    counts = q.counts()
    assert (counts.pending, counts.scheduled, counts.paused) == (2, 0, True)
    assert q.claim(60_000) is None
    q.resume()
    assert {q.claim(60_000).id, q.claim(60_000).id} == {"a", "s"}


def test_pause_and_resume_write_only_the_meta_flag_and_on_wire_4_the_wake_marker(conn, wire):
    q = Queue(conn, fresh(), serializer=RAW)
    q.pause()
    assert dump(conn.client, q.keys) == {q.keys.meta.encode(): ("hash", {b"paused": b"1"})}
    q.resume()
    # wire 4: a worker blocked on the paused queue wakes and claims (wire 6's BCLAIM hears the HDEL itself)
    assert dump(conn.client, q.keys) == ({q.keys.wake.encode(): ("zset", [(b"w", 0.0)])} if wire == 4 else {})


def test_the_scripted_claim_is_one_round_trip_with_its_pause_read_and_the_native_one_a_command(conn, wire):
    """docs/spec.md §4: wire 4 sends ``HGET meta paused`` in the EVALSHA's round trip (the script
    reads the pause itself too); §5.1: wire 6 folds it into EMQ.CLAIM."""
    q = Queue(conn, fresh(), serializer=RAW)
    q.enqueue(b"p", id="a")
    round_trips: list[list[str]] = []
    off = hooks.subscribe("verb.start", lambda event, data: round_trips.append(data["verbs"]))
    try:
        assert q.claim(60_000).id == "a"
    finally:
        off()
    assert round_trips == ([["hget", "claim"]] if wire == 4 else [["claim"]])


# --------------------------------------------------------------------------- pipelines


def test_a_pipelined_round_trip_answers_as_valkey_pys_pipeline_does(conn, wire):
    """Connection._pipelined reads a round trip's replies itself: each as valkey-py's pipeline
    gives it (its reply callbacks: HGETALL's dict), an error reply in its place."""
    q = Queue(conn, fresh())
    q.enqueue({"n": 1}, id="a")
    conn.client.sadd(q.keys.pending + ":set", "x", "y")
    conn.client.set(q.keys.pending + ":str", "s")
    request = [Plain(("HGETALL", q.keys.job("a"))), Plain(("SMEMBERS", q.keys.pending + ":set")),
               Plain(("HGET", q.keys.pending + ":str", "f")), Plain(("ZCARD", q.keys.pending)),
               Plain(("HMGET", q.keys.job("a"), "state", "nothing"))]
    ours = conn.send_many(request)
    pipe = conn.client.pipeline(transaction=False)
    for item in request:
        pipe.execute_command(*conn.args_of(item))
    theirs = conn.refusals(request, pipe.execute(raise_on_error=False))
    assert isinstance(ours[0], dict) and ours[0][b"state"] == b"pending"
    assert isinstance(ours[2], WrongType) and type(theirs[2]) is type(ours[2]) and str(theirs[2]) == str(ours[2])
    assert ours[:2] + ours[3:] == theirs[:2] + theirs[3:] == [ours[0], [b"x", b"y"], 1, [b"pending", None]]


def test_a_link_fault_mid_pipeline_is_connection_failed_and_the_next_round_trip_reads_its_own_replies(conn):
    """The server closes the socket after the second of three replies (QUIT): the round trip
    raises ConnectionFailed; the next one, on a new socket, is not read out of step."""
    with pytest.raises(ConnectionFailed):
        conn.send_many([Plain(("ECHO", "one")), Plain(("QUIT",)), Plain(("ECHO", "three"))])
    assert conn.send_many([Plain(("ECHO", "four")), Plain(("ECHO", "five"))]) == [b"four", b"five"]


def test_streamed_cuts_a_round_trip_where_a_part_reaches_its_arguments():
    commands = [("A", 1), ("B", 1, 2, 3), ("C",), ("D", 1, 2), ("E", 1)]
    assert streamed(commands, 4) == [[("A", 1), ("B", 1, 2, 3)], [("C",), ("D", 1, 2)], [("E", 1)]]
    assert streamed(commands, 1) == [[c] for c in commands]
    assert streamed(commands, 100) == [commands]  # a round trip within the bound: one part, as before
    assert streamed(commands[:2], 6) == [commands[:2]]  # ends where the bound is met: no empty part after


def test_a_streamed_round_trip_sends_the_next_part_before_reading_and_pairs_each_reply(conn, wire):
    """Parts of a command or two: the second part is written before the first reply is read, and
    every reply (a callback's dict, a refusal) lands in its own command's place."""
    base = fresh()
    conn.client.set(base + ":str", "s")
    request = []
    for i in range(100):
        request += [Plain(("HSET", f"{base}:{i}", "f", i)), Plain(("HGETALL", f"{base}:{i}")),
                    Plain(("HGET", base + ":str", "f"))]
    events: list[str] = []
    pool = conn.client.connection_pool
    real = pool.get_connection

    def spied(*args, **kwargs):
        link = real(*args, **kwargs)
        send, read = link.send_packed_command, link.read_response
        link.send_packed_command = lambda *a, **k: (events.append("send"), send(*a, **k))[1]
        link.read_response = lambda *a, **k: (events.append("read"), read(*a, **k))[1]
        return link

    pool.get_connection = spied
    conn.stream_args = 5
    try:
        replies = conn.send_many(request)
    finally:
        conn.stream_args = STREAM_ARGS
        del pool.get_connection
        conn.client.close()  # the spied link leaves the pool
    assert events[:2] == ["send", "send"] and events.count("send") == len(
        streamed([conn.args_of(item) for item in request], 5))
    for i in range(100):
        assert replies[3 * i] == 1 and replies[3 * i + 1] == {b"f": str(i).encode()}
        assert isinstance(replies[3 * i + 2], WrongType)


def test_a_link_fault_mid_stream_is_connection_failed_and_the_next_round_trip_reads_its_own_replies(conn):
    """QUIT in a later part of a streamed round trip: the parts after it find the socket closed;
    ConnectionFailed, and the next streamed round trip, on a new socket, reads its own replies."""
    conn.stream_args = 4
    try:
        with pytest.raises(ConnectionFailed):
            conn.send_many([Plain(("ECHO", n)) for n in range(30)] + [Plain(("QUIT",))]
                           + [Plain(("ECHO", n)) for n in range(30)])
        assert conn.send_many([Plain(("ECHO", n)) for n in range(40)]) == [str(n).encode() for n in range(40)]
    finally:
        conn.stream_args = STREAM_ARGS


# --------------------------------------------------------------------------- error replies → exceptions


def test_wrongtype_maps_to_wrong_type(conn):
    q = Queue(conn, fresh())
    conn.client.set(q.keys.pending, "x")
    with unchanged(conn.client, q.keys):
        with pytest.raises(WrongType) as info:
            q.counts()
    assert info.value.code == "WRONGTYPE" and info.value.reply.startswith("WRONGTYPE ")


def test_a_script_runtime_error_keeps_its_err_code_and_native_refuses_the_argument(conn, wire):
    q = Queue(conn, fresh())
    with unchanged(conn.client, q.keys):
        with pytest.raises(CommandRefused) as info:
            conn.send(build_call("enqueue", q.keys, ["a", "p", "high"]))  # past the Python-side check
    if wire == 4:
        assert type(info.value) is CommandRefused
        assert info.value.code == "ERR" and str(info.value).startswith("ERR ")
    else:
        assert type(info.value) is ArgumentError and info.value.code == "EMQARG"


@pytest.fixture
def limited_user(server):
    """An ACL user who may touch a queue's declared keys, the queue-level lane and flow sets the
    counts read sums (docs/spec.md §16), and the brand, but no row."""
    name, queue = fresh("u"), fresh("acl")
    ks = Keyspace(queue)
    with server.client() as admin:
        admin.execute_command(
            "ACL", "SETUSER", name, "on", ">pw", "+@all", f"~{ks.pending}", f"~{ks.base}", f"~{ks.meta}",
            f"~{ks.active}", f"~{ks.schedule}", f"~{ks.dead}", f"%R~{ks.base}lane*", f"%R~{ks.base}flow:*",
            f"%R~{VERSION_KEY}",
        )
        try:
            yield f"redis://{name}:pw@127.0.0.1:{server.port}", queue
        finally:
            admin.execute_command("ACL", "DELUSER", name)


def test_noperm_on_a_derived_key_maps_to_permission_denied(limited_user, server, wire):
    url, queue = limited_user
    with connect(url, wire=wire) as conn, server.client() as admin:
        q = Queue(conn, queue)
        assert q.counts().total == 0  # declared keys and the lane/flow sets, read only: allowed
        with unchanged(admin, q.keys):
            with pytest.raises(CommandRefused) as info:
                q.enqueue({"n": 1}, id="a")
    if wire == 4:
        # a script's own ACL failure is an ERR reply ("ACL failure in script: No permissions ...")
        assert type(info.value) is CommandRefused and info.value.code == "ERR"
        assert "No permissions" in info.value.reply
    else:
        assert type(info.value) is PermissionDenied
        assert info.value.code == "NOPERM" and info.value.reply.startswith("NOPERM")


def test_noperm_on_the_command_maps_to_permission_denied(server, wire):
    name = fresh("u")
    with server.client() as admin:
        denied = "-evalsha" if wire == 4 else "-emq.enqueue"
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw", "+@all", denied, "~*")
        try:
            with connect(f"redis://{name}:pw@127.0.0.1:{server.port}", wire=wire) as conn:
                q = Queue(conn, fresh())
                with unchanged(admin, q.keys):
                    with pytest.raises(PermissionDenied, match="^NOPERM"):
                        q.enqueue(1)
        finally:
            admin.execute_command("ACL", "DELUSER", name)


# --------------------------------------------------------------------------- cluster="auto": HELLO's mode


@pytest.mark.parametrize("reply, cluster", [
    ([b"server", b"valkey", b"proto", 2, b"mode", b"cluster", b"role", b"master"], True),  # RESP2: flat
    ([b"server", b"valkey", b"proto", 2, b"mode", b"standalone"], False),
    ({b"server": b"valkey", b"mode": b"cluster"}, True),  # RESP3: a map
    ({"mode": "standalone"}, False),
])
def test_cluster_mode_reads_hellos_mode(reply, cluster):
    assert cluster_mode(reply) is cluster


def test_auto_asks_a_standalone_node_with_hello_in_place_of_the_ping(server4):
    def calls(client, command: str) -> int:
        return client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)

    with server4.client() as admin:
        before = calls(admin, "hello"), calls(admin, "ping")
        with connect(server4.url, wire=4) as conn:
            assert not conn.cluster
        assert (calls(admin, "hello"), calls(admin, "ping")) == (before[0] + 1, before[1])  # no extra round trip


def test_a_node_that_refuses_hello_is_taken_as_standalone(server, wire, open_conn):
    name = fresh("u")
    with server.client() as admin:
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw", "+@all", "-hello", "~*", "&*")
        try:
            with open_conn(f"redis://{name}:pw@127.0.0.1:{server.port}", wire=wire) as conn:
                assert conn.wire == wire and not getattr(conn, "conn", conn).cluster
        finally:
            admin.execute_command("ACL", "DELUSER", name)


@pytest.mark.parametrize("cluster", ["yes", 1.5, None])
def test_a_bad_cluster_choice_is_a_configuration_error(server4, cluster, open_conn):
    with pytest.raises(ConfigurationError) as info:
        open_conn(server4.url, wire=4, cluster=cluster)
    assert repr(cluster) in str(info.value)
