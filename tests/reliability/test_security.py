"""Security basics: memory pressure, authentication, TLS, and payloads that are never evaluated.

* ``maxmemory`` reached under ``noeviction`` (what EchoMQ requires: an evicted row
  is a lost job): every writing verb is refused ``OOM`` before it writes, on both
  wires (the EMQ verbs are flagged ``deny-oom``; a script is refused at its first
  denied write -- measured per verb below), and the declared reads still answer.
* ``requirepass`` and an ACL user in the URL; a wrong password is refused at connect.
* ``rediss://`` (TLS): a real TLS server (Debian's redis-server, wire 4; the bundled
  valkey-server has no TLS) -- and TLS never falls back to plaintext.
* a payload is bytes the core never reads: Lua source, a pickle that would run a
  command if unpickled, and NUL-laden binary come back byte for byte, unevaluated.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import valkey

import echomq
from echomq import EmbeddedServer, Queue, connect, errors
from echomq._client.connection import build_call
from echomq._protocol.keys import Keyspace
from echomq._protocol.serializers import RAW
from echomq._protocol.verbs import VERBS
from support.dataset import digest
from support.queues import argv_for, plant_every_state

VERB_NAMES = [v.name for v in VERBS] + ["counts", "state"]


# A script without flags is judged at its first write: refused OOM if that write is
# deny-oom (HSET, ZADD, HINCRBY), else let run to the end, every later write included
# (ZPOPMIN, ZREM free memory). So on wire 4 these verbs run whole past maxmemory, the
# others are refused whole (FAIL since its first write is HINCRBY failures, SPEC §9.1); on
# wire 6 every writer is flagged deny-oom and refused.
WIRE_4_RUNS_PAST_MAXMEMORY = {"claim", "complete", "promote", "delay", "reprocess", "requeue", "stalled_check"}


def consistent(client, keys: Keyspace) -> None:
    """Every row in exactly the set its state names, every set member with a row."""
    where = {}
    for state, suffix in (("pending", "pending"), ("active", "active"), ("scheduled", "schedule"), ("dead", "dead")):
        for member in client.zrange(keys.key(suffix), 0, -1):
            assert member not in where, f"{member} in {where[member]} and {state}"
            where[member] = state
    rows = {key[len(keys.job("")):].encode(): client.hget(key, "state")
            for key in (k.decode() for k in client.scan_iter(match=keys.pattern())) if ":job:" in key}
    assert set(rows) == set(where)
    assert all(rows[i].decode() == where[i] for i in rows)


@pytest.mark.parametrize("verb", VERB_NAMES)
def test_maxmemory_refuses_writes_whole_never_halfway(server, wire, verb):
    with connect(server.url, wire=wire) as conn, server.client() as admin:
        name = f"oom-{wire}-{verb}"
        call = build_call(verb, Keyspace(name), argv_for(verb, plant_every_state(conn, name)))
        assert admin.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        before = digest(admin)
        admin.config_set("maxmemory", 1)  # every byte is over the limit
        try:
            try:
                reply = conn.send(call)
                outcome = "ok"
            except errors.CommandRefused as exc:
                outcome, reply = exc.code, exc
            after = digest(admin)
        finally:
            admin.config_set("maxmemory", 0)
        consistent(admin, Keyspace(name))
    if verb in ("counts", "state") or (wire == 4 and verb in WIRE_4_RUNS_PAST_MAXMEMORY):
        assert outcome == "ok", reply  # reads answer under memory pressure; see above for the scripts
    else:
        assert outcome == "OOM", (verb, reply)
        assert after == before, f"{verb} refused OOM but wrote"


def test_requirepass_in_the_url(wire, tmp_path):
    module = echomq.module_path() if wire == 6 else None
    with EmbeddedServer(module=module, brand=wire, directory=tmp_path) as server:
        with server.client() as admin:
            admin.config_set("requirepass", "s3cret-pw")
        try:
            with connect(f"redis://:s3cret-pw@127.0.0.1:{server.port}", wire=wire) as conn:
                q = Queue(conn, "auth")
                assert q.enqueue({"n": 1}).created and q.claim(1000) is not None
            with pytest.raises((errors.ConnectionFailed, valkey.AuthenticationError)):
                connect(f"redis://127.0.0.1:{server.port}", wire=wire)
            with pytest.raises((errors.ConnectionFailed, valkey.AuthenticationError)):
                connect(f"redis://:wrong@127.0.0.1:{server.port}", wire=wire)
        finally:
            with valkey.Valkey(host="127.0.0.1", port=server.port, password="s3cret-pw") as admin:
                admin.config_set("requirepass", "")


def test_rediss_never_falls_back_to_plaintext(server4):
    """A plain server behind a rediss:// URL: the TLS handshake fails, nothing is sent in clear."""
    with pytest.raises(errors.ConnectionFailed):
        connect(f"rediss://127.0.0.1:{server4.port}", wire=4, socket_timeout=1, socket_connect_timeout=1)


@pytest.fixture
def tls_server(tmp_path, monkeypatch):
    redis = shutil.which("redis-server")
    openssl = shutil.which("openssl")
    if not redis or not openssl:
        pytest.skip("needs a TLS-capable redis-server (apt-get install redis-server) and openssl")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    monkeypatch.setenv("ECHOMQ_VALKEY_SERVER", redis)
    for attempt in range(1, echomq.local.server.PORT_ATTEMPTS + 1):
        # the TLS port is ours to choose: taken before the server binds it, choose again
        tls_port = echomq.local.server.free_port()
        server = EmbeddedServer(brand=4, directory=tmp_path / "data", extra_args=(
            "--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"))
        try:
            server.start()
            break
        except errors.PortInUse:
            if attempt == echomq.local.server.PORT_ATTEMPTS:
                raise
    with server:
        yield f"rediss://127.0.0.1:{tls_port}", str(cert)


def test_rediss_url_serves_wire_4_over_tls(tls_server):
    url, ca = tls_server
    with connect(url, wire=4, ssl_ca_certs=ca) as conn:
        q = Queue(conn, "tls")
        q.enqueue({"over": "tls"}, id="t1")
        job = q.claim(5000)
        assert job.payload == {"over": "tls"}
        q.complete(job)
        assert q.metrics()["completed"] == 1
        assert issubclass(conn.client.connection_pool.connection_class, valkey.SSLConnection)
    with pytest.raises(errors.ConnectionFailed):  # a certificate from an unknown CA is refused
        connect(url, wire=4, socket_timeout=2)


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/echomq-payload-was-unpickled",))


PAYLOADS = [
    b"redis.call('FLUSHALL') return 1",
    b"]] redis.call('SET', 'pwned', 1) --[[",
    pickle.dumps(_Boom()),
    b"\x00\xff\x00" * 50,
    b'{"__class__": "os.system", "args": ["true"]}',
]


def test_payloads_are_opaque_bytes_never_evaluated(conn, wire):
    marker = Path("/tmp/echomq-payload-was-unpickled")
    marker.unlink(missing_ok=True)
    q = Queue(conn, f"opaque-{wire}", serializer=RAW)
    for i, payload in enumerate(PAYLOADS):
        q.enqueue(payload, id=f"p{i}")
    seen = []
    while (job := q.claim(5000)) is not None:
        seen.append(job.raw_payload)
        q.complete(job)
    assert seen == PAYLOADS
    assert conn.client.exists("pwned") == 0 and conn.client.dbsize() > 0
    assert not marker.exists()


#: The one place pickle may be: the pipe between a worker and the children of its own process pool,
#: whose bytes both ends wrote (a payload is decoded by its serializer before it is pickled), never
#: bytes read from the node.
PICKLE_PIPE = Path(echomq.__file__).parent / "worker" / "children.py"


def test_the_package_evaluates_nothing():
    """No eval/exec in the package, and pickle only on the process pool's own pipe: a payload
    cannot become code on the client either."""
    package = Path(echomq.__file__).parent
    evaluates = re.compile(r"(?<![\w.])(eval|exec)\(|\bmarshal\.loads|\byaml\.load\(")
    pickles = re.compile(r"\bpickle\b")
    offenders = [f"{path.name}:{n}" for path in package.rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if evaluates.search(line) or (pickles.search(line) and path != PICKLE_PIPE)]
    assert offenders == []
    assert "pickle" in PICKLE_PIPE.read_text()  # the allowance names a file that still needs it
