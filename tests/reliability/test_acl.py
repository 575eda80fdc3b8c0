"""ACL: a matrix of users × every verb × both wires, against real valkey-server ACLs.

Users (each may read the brand and run any non-admin command; keys as granted):

* ``confined`` — every key of queues ``qa*`` and nothing else;
* ``declared`` — only the keys a verb declares (``pending``, ``active``,
  ``schedule``, ``dead`` and the base) of ``qa*``: rows, meta and metrics are
  derived keys outside its grant;
* ``reader`` — read-only on every key of ``qa*``.

Each cell plants a queue with a job in every state as the admin, calls one verb as
the user, and checks: inside the grant the verb answers; outside it the reply is
NOPERM and ``DEBUG DIGEST`` is unchanged (nothing written).
"""

from __future__ import annotations

import itertools

import pytest

from echomq import PermissionDenied, Queue, connect
from echomq._client.connection import build_call
from echomq.errors import CommandRefused
from echomq._protocol.keys import Keyspace
from echomq._protocol.verbs import BUS, VERBS
from support.dataset import digest
from support.queues import argv_for, plant_every_state

PASSWORD = "pw-acl-1"
COMMON = ["on", f">{PASSWORD}", "+@all", "-@admin", "-@dangerous", "+script", "%R~{emq}:version"]
USERS = {
    "confined": ["~emq:{qa*}:*", "&emq:{qa*}:outcome:*"],  # the channels: PUBLISH tells the outcome
    "declared": [f"~emq:{{qa*}}:{suffix}" for suffix in ("pending", "active", "schedule", "dead", "")],
    "reader": ["%R~emq:{qa*}:*"],
}
_n = itertools.count()


@pytest.fixture
def acl_server(server, wire):
    with server.client() as admin:
        for user, rules in USERS.items():
            admin.execute_command("ACL", "SETUSER", user, "reset", *COMMON, *rules)
    return server


# A script meets the ACL only at the redis.call that touches a derived key; Lua does not roll
# back. Every script now reads a derived key (the row, or the event switch in meta) before its
# first write, or puts back what it popped (CLAIM): refused whole (docs/guarantees.md).

VERB_NAMES = [v.name for v in VERBS + BUS] + ["counts", "state"]


def expected(user: str, verb: str, inside: bool) -> str:
    if not inside:
        return "NOPERM"
    if user == "confined":
        return "ok"
    if user == "declared":
        return "NOPERM"  # every verb reads or writes its row, meta or metrics
    # reader: a read-only user may read, never write
    return "ok" if verb in ("counts", "state") else "NOPERM"


@pytest.mark.parametrize("verb", VERB_NAMES)
@pytest.mark.parametrize("user", list(USERS))
def test_acl_matrix(acl_server, wire, user, verb):
    if wire == 4 and verb in ("reschedule", "requeue"):
        pytest.skip("wire 6 only")
    n = next(_n)
    with acl_server.client() as admin:
        outcomes = {}
        for inside in (True, False):
            name = f"{'qa' if inside else 'qb'}-{wire}-{n}"
            with connect(acl_server.url, wire=wire) as conn:
                held = plant_every_state(conn, name)
            user_conn = connect(f"redis://{user}:{PASSWORD}@127.0.0.1:{acl_server.port}", wire=wire)
            call = build_call(verb, Keyspace(name), argv_for(verb, held))
            before = digest(admin)
            try:
                user_conn.send(call)
                outcome = "ok"
            except CommandRefused as exc:
                # a script meets the ACL at its redis.call, and Valkey answers "ERR ACL failure in
                # script: No permissions ...": the same refusal, spelled ERR (test_connection pins it)
                script_acl = exc.code == "ERR" and "ACL failure in script" in str(exc)
                outcome = "NOPERM" if isinstance(exc, PermissionDenied) or script_acl else f"{exc.code}: {exc}"
                if outcome == "NOPERM":
                    assert digest(admin) == before, f"{user} {verb}: refused but the dataset changed ({exc})"
            user_conn.close()
            outcomes[inside] = outcome
            assert outcome == expected(user, verb, inside), (user, verb, inside, outcome)


def test_acl_refusal_names_the_key_and_the_user_connects_by_url(acl_server, wire):
    """AUTH through the URL (user:password@) works, and a wrong password is refused at connect."""
    from echomq import errors

    conn = connect(f"redis://confined:{PASSWORD}@127.0.0.1:{acl_server.port}", wire=wire)
    q = Queue(conn, f"qa-url-{wire}-{next(_n)}")
    assert q.enqueue({"ok": 1}).created
    conn.close()
    with pytest.raises(Exception) as info:
        connect(f"redis://confined:wrong@127.0.0.1:{acl_server.port}", wire=wire)
    assert "WRONGPASS" in str(info.value) or "invalid username-password" in str(info.value)


@pytest.mark.parametrize("verb", ["publish", "failures_incr", "cancel"])
def test_an_outcome_is_told_only_where_the_caller_may_publish(acl_server, wire, verb):
    """A user with every key of the queue but no channel: the move goes through (the outcome message
    is a wake-up, not state), and nothing is published; with the channel granted it is."""
    name = f"qa-ch-{wire}-{next(_n)}"
    with acl_server.client() as admin:
        admin.execute_command("ACL", "SETUSER", "keys-only", "reset", *COMMON, "~emq:{qa*}:*")
        with connect(acl_server.url, wire=wire) as conn:
            held = plant_every_state(conn, name)
        argv = {"publish": (held.id, held.token, b'"r"', 60_000),
                "failures_incr": (held.id, held.token, "e", 1, 0, "tb"), "cancel": (held.id,)}[verb]
        listener = admin.pubsub()
        listener.ssubscribe(Keyspace(name).outcome(held.id))
        assert listener.get_sharded_message(timeout=5)["type"] == "ssubscribe"
        user = connect(f"redis://keys-only:{PASSWORD}@127.0.0.1:{acl_server.port}", wire=wire)
        try:
            assert user.send(build_call(verb, Keyspace(name), argv)) in (1, b"dead")
            # the next message on the channel is the admin's own: the user's move told no one
            admin.execute_command("SPUBLISH", Keyspace(name).outcome(held.id), "marker")
            assert listener.get_sharded_message(timeout=5)["data"] == b"marker"
        finally:
            user.close()
            listener.close()
