"""ACL: the declared KEYS are checked by the server through the key-specs; the derived keys
(row, meta, metrics) by the verb itself, as the calling user, read before read and write
before write (SPEC §5 check 4). Every NOPERM leaves the dataset unchanged."""

from __future__ import annotations

import valkey

from echomq._protocol.verbs import OPTIONAL, VERBS
from support.dataset import refused, unchanged
from support.native import NativeQueue
from support.queues import fresh_name


def test_a_queue_scoped_user_cannot_touch_another_queue(admin, make_user):
    a = NativeQueue(admin, fresh_name("a"))
    b = NativeQueue(admin, fresh_name("b"))
    user = make_user(f"~emq:{{{a.name}}}:*", "+@all", "-@dangerous")
    ua = NativeQueue(user, a.name)
    ub = NativeQueue(user, b.name)
    # queue a: the whole lifecycle works
    assert ua.enqueue("j", b"p") == 1
    _, _, att = ua.claim()
    assert ua.complete("j", att) == 1
    # queue b: every verb is refused by the server's key-spec check
    b.enqueue("j", b"p")
    b.claim()
    for line in ub.lines().values():
        refused(user, "NOPERM", *line, observer=admin)
    assert b.hrow("j")[b"state"] == b"active"


def test_the_declared_keys_of_claim_are_not_enough(admin, make_user):
    """Allowed exactly CLAIM's KEYS (pending, active, base): the server's key-spec check
    passes, the verb's own fence refuses at the first derived key (meta, the pause read)."""
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    base = q.base.decode()
    user = make_user(f"~{base}pending", f"~{base}active", f"~{base}", "+@all", "-@dangerous")
    refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.CLAIM"], observer=admin)
    assert q.zset(q.pending) == [(b"j", 0.0)]


def test_declared_keys_alone_do_not_reach_the_row(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    declared = [f"~{k.decode()}" for k in (q.pending, q.active, q.base, q.meta)]
    user = make_user(*declared, "+@all")
    msg = refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.CLAIM"], observer=admin)
    assert "job:j" in msg and "read" in msg
    assert q.zset(q.pending) == [(b"j", 0.0)]  # not popped


def test_declared_keys_without_meta_are_refused_at_the_pause_read(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    declared = [f"~{k.decode()}" for k in (q.pending, q.active, q.base)]
    user = make_user(*declared, f"~{q.base.decode()}job:*", "+@all")
    msg = refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.CLAIM"], observer=admin)
    assert "meta" in msg


def test_read_only_row_access_is_refused_before_the_first_write(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    base = q.base.decode()
    user = make_user(
        f"~{base}pending", f"~{base}active", f"~{base}", f"~{base}meta", f"%R~{base}job:*", "+@all"
    )
    msg = refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.CLAIM"], observer=admin)
    assert "write" in msg


def test_enqueue_needs_the_row(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    base = q.base.decode()
    user = make_user(f"~{base}pending", f"~{base}", "+@all")
    refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.ENQUEUE"], observer=admin)


def test_complete_needs_the_metrics(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    q.claim()
    base = q.base.decode()
    # meta: the event switch every moving verb reads (docs/spec.md §12)
    user = make_user(f"~{base}active", f"~{base}", f"~{base}job:*", f"%R~{base}meta", "+@all")
    uq = NativeQueue(user, q.name)
    msg = refused(user, "NOPERM", "EMQ.COMPLETE", 2, uq.active, uq.base, "j", 1, observer=admin)
    assert "metrics:completed" in msg
    admin.execute_command("ACL", "SETUSER", user.connection_pool.connection_kwargs["username"],
                          f"~{base}metrics:*")
    assert uq.complete("j", 1) == 1


def test_completes_refuses_a_row_pair_by_pair_and_the_metrics_whole(admin, make_user):
    """COMPLETES (docs/spec.md §18): a row the caller may not read is that pair's NOPERM, the
    others complete; metrics it may not write refuse the whole command, nothing written."""
    q = NativeQueue(admin, fresh_name("a"))
    for job in ("j1", "k1", "j2"):
        q.enqueue(job, b"p")
    q.claims(3)
    base = q.base.decode()
    user = make_user(f"~{base}active", f"~{base}", f"~{base}job:j*", f"%R~{base}meta", "+@all")
    uq = NativeQueue(user, q.name)
    msg = refused(user, "NOPERM", "EMQ.COMPLETES", 2, uq.active, uq.base, "j1", 1, "k1", 1, observer=admin)
    assert "metrics:completed" in msg
    admin.execute_command("ACL", "SETUSER", user.connection_pool.connection_kwargs["username"],
                          f"~{base}metrics:*")
    reply = uq.completes("j1", 1, "k1", 1, "j2", 1)
    assert reply[0] == 1 and reply[2] == 1
    assert isinstance(reply[1], valkey.ResponseError) and "job:k1" in str(reply[1]) and "read" in str(reply[1])
    assert q.hrow("k1")[b"state"] == b"active" and q.zset(q.active)[0][0] == b"k1"
    assert admin.hget(q.completed, "count") == b"2"


def test_publishes_refuses_a_row_or_a_record_triple_by_triple_and_the_metrics_whole(admin, make_user):
    """PUBLISHES (docs/spec.md §19): a row the caller may not read, or a record it may not write, is
    that triple's NOPERM, the others publish; metrics it may not write refuse the whole command.
    Under `meta results record`, each record its own key `done:<id>`."""
    q = NativeQueue(admin, fresh_name("a"))
    admin.hset(q.meta, "results", "record")
    for job in ("j1", "k1", "j2", "j3"):
        q.enqueue(job, b"p")
    q.claims(4)
    base = q.base.decode()
    user = make_user(f"~{base}active", f"~{base}", f"~{base}job:j*", f"~{base}done:j1", f"~{base}done:j2",
                     f"%R~{base}meta", "+@all")
    uq = NativeQueue(user, q.name)
    msg = refused(user, "NOPERM", "EMQ.PUBLISHES", 2, uq.active, uq.base, 1000, "j1", 1, "r", "k1", 1, "r",
                  observer=admin)
    assert "metrics:completed" in msg
    admin.execute_command("ACL", "SETUSER", user.connection_pool.connection_kwargs["username"],
                          f"~{base}metrics:*")
    reply = uq.publishes(60_000, "j1", 1, "r1", "k1", 1, "r", "j2", 1, "r2", "j3", 1, "r3")
    assert reply[0] == 1 and reply[2] == 1
    assert isinstance(reply[1], valkey.ResponseError) and "job:k1" in str(reply[1])
    assert isinstance(reply[3], valkey.ResponseError) and "done:j3" in str(reply[3])
    assert [admin.hget(q.key(f"done:{job}"), "result") for job in ("j1", "j2", "j3")] == [b"r1", b"r2", None]
    assert sorted(member for member, _ in q.zset(q.active)) == [b"j3", b"k1"]
    assert admin.hget(q.completed, "count") == b"2"


def test_publishes_refuses_each_held_triple_whose_records_hash_it_may_not_write(admin, make_user):
    """As fields (docs/spec.md §12) every record is written to `done`: a caller that may not write it
    has each held triple refused NOPERM, nothing written; one that may, publishes them all."""
    q = NativeQueue(admin, fresh_name("a"))
    for job in ("j1", "j2"):
        q.enqueue(job, b"p")
    q.claims(2)
    base = q.base.decode()
    keys = (f"~{base}active", f"~{base}", f"~{base}job:*", f"~{base}metrics:*", f"%R~{base}meta", "+@all")
    uq = NativeQueue(make_user(*keys), q.name)
    with unchanged(admin, dump_keys=False):
        reply = uq.publishes(60_000, "j1", 1, "r1", "zz", 1, "r", "j2", 1, "r2")
    assert reply[1] == 0 and all(isinstance(r, valkey.ResponseError) and f"'{base}done'" in str(r)
                                 for r in (reply[0], reply[2])), reply
    uq = NativeQueue(make_user(*keys, f"~{base}done"), q.name)
    assert uq.publishes(60_000, "j1", 1, "r1", "j2", 1, "r2") == [1, 1]
    assert [admin.hget(q.key("done"), job).split(b",")[-1] for job in ("j1", "j2")] == [b"r1", b"r2"]
    admin.delete(q.key("done"))  # its fields expire: no later digest sees them go


def test_sweep_checks_each_member_row(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    q.expire_all()
    base = q.base.decode()
    user = make_user(f"~{base}active", f"~{base}pending", f"~{base}dead", f"~{base}", "+@all")
    refused(user, "NOPERM", *NativeQueue(user, q.name).lines()["EMQ.STALLED.CHECK"], observer=admin)
    assert q.hrow("j")[b"state"] == b"active"


def test_a_user_allowed_only_some_commands(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    user = make_user(f"~{q.base.decode()}*", "+emq.enqueue", "+emq.version")
    uq = NativeQueue(user, q.name)
    assert uq.enqueue("j", b"p") == 1
    assert user.execute_command("EMQ.VERSION")
    refused(user, "NOPERM", *uq.lines()["EMQ.CLAIM"], observer=admin)


def test_every_command_is_in_the_emq_category(admin):
    """The registration table gives every row the module's ACL category (valkey-bloom gives its
    commands theirs): ``ACL CAT emq`` lists exactly the EMQ commands, so ``+@emq`` grants them all."""
    registered = {verb.command.lower() for verb in VERBS + OPTIONAL} | {"emq.version"}
    assert {name.decode().lower() for name in admin.execute_command("ACL", "CAT", "emq")} == registered


def test_a_user_granted_the_emq_category_runs_the_verbs_and_nothing_else(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    user = make_user(f"~{q.base.decode()}*", "+@emq")
    uq = NativeQueue(user, q.name)
    assert user.execute_command("EMQ.VERSION")
    assert uq.enqueue("j", b"p") == 1
    _, _, token = uq.claim()
    assert uq.complete("j", token) == 1
    assert admin.hget(q.completed, "count") == b"1"
    refused(user, "NOPERM", "HSET", q.meta, "paused", 1, observer=admin)  # a plain command: not in @emq


def test_a_user_denied_the_emq_category_is_refused_every_verb(admin, make_user):
    q = NativeQueue(admin, fresh_name("a"))
    q.enqueue("j", b"p")
    user = make_user(f"~{q.base.decode()}*", "+@all", "-@emq")
    uq = NativeQueue(user, q.name)
    for line in uq.lines().values():
        refused(user, "NOPERM", *line, observer=admin)
    refused(user, "NOPERM", "EMQ.VERSION", observer=admin)
    assert user.hget(q.row("j"), "state") == b"pending"  # the keys are still its to read
