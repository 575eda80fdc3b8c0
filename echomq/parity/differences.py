"""SPEC §5's named differences, as data, and the classifier that names a step's difference.

A step whose replies and normalised datasets are equal is *equal*. Otherwise each
named difference that may apply to the step's verb is tried in order. Each one
states exactly what the native node must have done on this pre-state:

* a **refusal** (§5.1, §5.5, §5.6): the native reply is the named
  error code, the native dataset is byte-for-byte unchanged, and the pre-state
  justifies the refusal (the row really is not active, the key really is
  wrong-typed, the argument really is outside SPEC §3's grammar, ...);
* a **model** (§5.4, the restart exemption): the native
  reply and dataset must equal what the native rule computes from the pre-state,
  and every key where the two nodes differ must belong to the ids the rule is
  about (their rows, their set memberships, the queue's metrics).

The first that holds names the step. If none holds, the step is UNEXPECTED.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .._protocol.keys import MAX_TRACEBACK_BYTES
from .._protocol.verbs import BY_NAME
from .compare import MISSING, Diff, Whole, diff, reply_same
from .dump import Dump, Entry
from .normalise import I64_MAX, Err, Offset, plain, row_key, same, string2ll
from .observation import Observation, Verdict


@dataclass(frozen=True)
class Named:
    id: str  #: "5.4"
    title: str
    verbs: frozenset[str]
    rule: str  #: what the native verb does where the script does something else
    example: str  #: a catalogue case that shows it


def _v(*names: str) -> frozenset[str]:
    return frozenset(names)


ALL_VERBS = frozenset(v for v in BY_NAME)

NAMED: dict[str, Named] = {n.id: n for n in (
    Named("5.1", "CLAIM checks before it pops", _v("claim", "bclaim", "claims"),
          "native CLAIM refuses a wrong-typed meta (WRONGTYPE; the scripted client reads it as paused) and "
          "type-checks the head's row, its attempts and active before popping; the script pops first and fails after",
          "claim.edge.row-wrongtype"),
    Named("5.4", "ghosts", _v("promote", "stalled_check"),
          "an id in a set with no row is removed from its set and no row is created; the script creates a partial row",
          "promote.edge.ghost"),
    Named("5.5", "lanes and flows", _v("complete", "completes", "fail", "delay", "requeue", "reschedule",
                                       "stalled_check", "publish", "publishes", "failures_incr"),
          "a row with a group field (and, for COMPLETE, FAIL, PUBLISH and FAILURES.INCR, a parent field) is refused "
          "EMQSTATE; the script acts",
          "complete.edge.lane"),
    Named("5.6", "types and arguments first", ALL_VERBS,
          "every argument and key type is checked before the first write (EMQSHAPE, EMQLAYOUT, EMQARG, WRONGTYPE, "
          "EMQ); the script may fail halfway and keep what it wrote, or act on a bad argument",
          "claim.edge.lease-not-a-number"),
    Named("5.exempt", "the restart exemption", _v("stalled_check"),
          "an expired lease whose lease_epoch is missing or not the current run_id is recovered without counting "
          "a stall; the script counts every expiry", "stalled.edge.restart-exempt"),
)}


@dataclass(frozen=True)
class Match:
    why: str
    names: tuple[str, ...]
    ids: frozenset[bytes] | None = None  #: the ids every difference must belong to; None: a refusal


Matcher = Callable[[Observation], "Match | None"]


# -- reading a pre-state ----------------------------------------------------------------
def key_of(obs: Observation, suffix: str) -> bytes | None:
    try:
        return obs.keys[BY_NAME[obs.verb].keys.index(suffix)]
    except (ValueError, IndexError):
        return None


def zset(dump: Dump, key: bytes | None) -> dict:
    entry = dump.get(key) if key is not None else None
    return entry.value if entry is not None and entry.kind == "zset" else {}


def row(obs: Observation, job: bytes, dump: Dump | None = None) -> Entry | None:
    return (obs.native_pre if dump is None else dump).get(row_key(obs.base, job))


def fields(entry: Entry | None) -> dict:
    return entry.value if entry is not None and entry.kind == "hash" else {}


def refused(obs: Observation, *codes: str) -> bool:
    """The native node answered one of ``codes`` and wrote nothing at all."""
    reply = obs.native_reply
    return (isinstance(reply, Err) and (not codes or reply.code in codes)
            and obs.native_pre == obs.native_post)



# -- refusals -----------------------------------------------------------------------------
def claim_checks(obs: Observation) -> Match | None:
    if not refused(obs, "WRONGTYPE", "EMQ"):
        return None
    code = obs.native_reply.code
    meta = obs.native_pre.get(obs.base + b"meta")
    if meta is not None and meta.kind != "hash":
        if code == "WRONGTYPE":
            return Match(f"meta is a {meta.kind}: native refuses WRONGTYPE; the scripted client reads that "
                         "error as paused", ("5.1",))
        return None
    pending = zset(obs.native_pre, key_of(obs, "pending"))
    order = [m for m, _ in sorted(pending.items(), key=lambda kv: (kv[1], kv[0]))]
    # CLAIM reaches the head; CLAIMS every member up to its count-th row (ghosts passed over)
    reach = int(obs.argv[1]) if obs.verb == "claims" and DIGITS.fullmatch(obs.argv[1]) else 1
    for head in order:
        entry = row(obs, head)
        if entry is None:
            if obs.verb == "claims":
                continue
            return None
        if entry.kind != "hash":
            return _if(code == "WRONGTYPE", f"{head.decode()}'s row is a {entry.kind}: refused before the pop; "
                                           "the script popped it first", "5.1")
        attempts = string2ll(entry.value.get(b"attempts"))
        if attempts is None or attempts == I64_MAX:
            return _if(code == "EMQ", f"{head.decode()}'s attempts cannot take HINCRBY: refused before the pop; "
                                      "the script popped it first", "5.1")
        active = obs.native_pre.get(key_of(obs, "active"))
        if active is not None and active.kind != "zset":
            return _if(code == "WRONGTYPE", f"active is a {active.kind}: refused before the pop; the script popped "
                                            "and incremented first", "5.1")
        reach -= 1
        if reach == 0:
            return None
    return None


def _if(cond: bool, why: str, name: str) -> Match | None:
    return Match(why, (name,)) if cond else None




def lanes(obs: Observation) -> Match | None:
    if obs.verb in ("completes", "publishes"):
        return foreign_pairs(obs)
    if not refused(obs, "EMQSTATE"):
        return None
    if obs.verb == "stalled_check":
        window = obs.native_window
        for job, score in zset(obs.native_pre, key_of(obs, "active")).items():
            if isinstance(score, (int, float)) and window and score <= window.after and b"group" in fields(row(obs, job)):
                return Match(f"expired {job.decode()} is a lane row: native refuses the whole sweep", ("5.5",))
        return None
    job = obs.argv[0].encode() if obs.argv else b""
    row_fields = fields(row(obs, job))
    if b"group" in row_fields:
        return Match(f"{job.decode()} is a lane row (group): native refuses", ("5.5",))
    if obs.verb in ("complete", "fail", "publish", "failures_incr") and b"parent" in row_fields:
        return Match(f"{job.decode()} is a flow child (parent): native refuses", ("5.5",))
    return None


def foreign_pairs(obs: Observation) -> Match | None:
    """COMPLETES and PUBLISHES answer per job: each one the native node refused as a lane row or a
    flow child (EMQSTATE, §5.5), whatever the script answered, or, PUBLISHES, for a completed record
    that is not a hash (WRONGTYPE, §5.6), which the script completed; every other answer the same,
    every difference theirs."""
    native, script = obs.native_reply, obs.script_reply
    if not isinstance(native, tuple) or not isinstance(script, tuple) or len(native) != len(script):
        return None
    lead, width = BY_NAME[obs.verb].repeated
    foreign, names = set(), set()
    for i, (n, s) in enumerate(zip(native, script)):
        if same(n, s):
            continue
        job = obs.argv[lead + width * i].encode()
        row_fields = fields(row(obs, job))
        record = obs.native_pre.get(obs.base + b"done:" + job)
        if not isinstance(n, Err):
            return None
        if n.code == "EMQSTATE" and (b"group" in row_fields or b"parent" in row_fields):
            names.add("5.5")  # as the verb alone: the script's answer is its own (0 when not held)
        elif (n.code == "WRONGTYPE" and s == 1 and obs.verb == "publishes" and record is not None
              and record.kind != "hash"):
            names.add("5.6")
        else:
            return None
        foreign.add(job)
    if not foreign:
        return None
    return Match(f"{_ids(sorted(foreign))}: lane rows, flow children or records not a hash, refused natively one "
                 "by one; the script completes them", tuple(sorted(names)), frozenset(foreign))


def types_and_arguments(obs: Observation) -> Match | None:
    if not refused(obs, "EMQSHAPE", "EMQLAYOUT", "EMQARG", "WRONGTYPE", "EMQ"):
        return None
    code = obs.native_reply.code
    reason = {
        "EMQSHAPE": shape_fault, "EMQLAYOUT": layout_fault, "EMQARG": argument_fault,
        "WRONGTYPE": type_fault, "EMQ": counter_fault,
    }[code](obs)
    if reason is None:
        return None
    return Match(f"{reason}: native refuses {code} before any write", ("5.6",))


# -- grammar (SPEC §3) -------------------------------------------------------------------
DIGITS = re.compile(r"[0-9]+")
PRIORITY_MAX = 2**31 - 1

GRAMMAR: dict[str, tuple[str, ...]] = {
    "enqueue": ("id", "any", "priority"),
    "claim": ("lease_ms",),
    "bclaim": ("lease_ms", "timeout_ms"),
    "claims": ("lease_ms", "count", "rated"),
    "extend": ("id", "any", "lease_ms"),
    "complete": ("id", "any"),
    "schedule": ("id", "any", "delay_ms", "priority"),
    "promote": ("limit",),
    "reschedule": ("id", "delay_ms"),
    "delay": ("id", "any", "delay_ms"),
    "fail": ("id", "any", "any", "max_attempts", "backoff_ms", "traceback"),
    "reprocess": ("id",),
    "requeue": ("id", "any"),
    "stalled_check": ("max_stalled", "limit"),
    "append": ("id", "any", "progress"),
    "failures_incr": ("id", "any", "any", "max_attempts", "backoff_ms", "traceback"),
    "publish": ("id", "any", "any", "retention_ms"),
    "remove": ("id",),
    "cancel": ("id",),
    "purge": ("age_ms", "limit"),
    "drain": ("limit",),
    "enqueue_unique": ("id", "any", "priority", "unique_ms", "replace", "delay_ms"),
    "counts": (),
    "state": ("id",),
}
BOUNDS = {"lease_ms": (1, I64_MAX), "timeout_ms": (0, I64_MAX), "delay_ms": (0, I64_MAX), "backoff_ms": (0, I64_MAX),
          "age_ms": (0, I64_MAX), "retention_ms": (0, I64_MAX),
          "limit": (1, 10_000), "max_attempts": (1, I64_MAX), "max_stalled": (1, I64_MAX),
          "priority": (0, PRIORITY_MAX), "unique_ms": (0, I64_MAX), "replace": (0, 1),
          "count": (1, 1000), "rated": (1, 1)}


def argv_names(verb: str, argc: int) -> tuple[str, ...] | None:
    if verb == "extends":
        if argc < 3 or argc % 2 == 0 or argc > 2001:
            return None
        return ("lease_ms",) + ("id", "any") * ((argc - 1) // 2)
    if verb == "completes":
        if argc < 2 or argc % 2 or argc > 2000:
            return None
        return ("id", "any") * (argc // 2)
    if verb == "publishes":
        if argc < 4 or argc % 3 != 1 or argc > 3001:
            return None
        return ("retention_ms",) + ("id", "any", "any") * (argc // 3)
    if verb == "enqueues":
        if argc < 3 or argc % 3 or argc > 3000:
            return None
        return ("id", "any", "priority") * (argc // 3)
    names = GRAMMAR[verb]
    late = len(BY_NAME[verb].late)  # the trailing arguments a call may leave out (SPEC §9.4)
    return names[:argc] if len(names) - late <= argc <= len(names) else None


def shape_fault(obs: Observation) -> str | None:
    verb = BY_NAME[obs.verb]
    if len(obs.keys) != len(verb.keys):
        return f"{len(obs.keys)} keys where {verb.name} takes {len(verb.keys)}"
    if argv_names(obs.verb, len(obs.argv)) is None:
        return f"{len(obs.argv)} arguments is not {verb.name}'s shape"
    return None


def layout_fault(obs: Observation) -> str | None:
    verb = BY_NAME[obs.verb]
    keys = obs.keys
    if not keys:
        return None
    base = keys[-1]
    m = re.fullmatch(rb"emq:\{([^{}]+)\}:", base)
    if m is None:
        return f"base {base!r} is not emq:{{q}}:"
    for key, suffix in zip(keys, verb.keys):
        if key != base + suffix.encode():
            return f"{key.decode()} is not {base.decode()}{suffix}"
    return None


def argument_fault(obs: Observation) -> str | None:
    names = argv_names(obs.verb, len(obs.argv))
    if names is None:
        return None
    for name, value in zip(names, obs.argv):
        if name == "id" and not 1 <= len(value.encode()) <= 512:
            return f"id of {len(value.encode())} bytes"
        if name == "traceback" and len(value.encode()) > MAX_TRACEBACK_BYTES:
            return f"traceback of {len(value.encode())} bytes"
        if name == "progress" and len(value.encode()) > 65536:
            return f"progress of {len(value.encode())} bytes"
        if name in BOUNDS:
            low, high = BOUNDS[name]
            if not DIGITS.fullmatch(value) or not low <= int(value) <= high:
                return f"{name} {value!r} is outside {low}..{high}"
    return None


def touched_keys(obs: Observation) -> tuple[list[bytes], list[bytes]]:
    """(zset keys, hash keys) the verb may read or write: its sets, the rows of its ids and members, meta, metrics."""
    pre = obs.native_pre
    sets = [k for k, suffix in zip(obs.keys, BY_NAME[obs.verb].keys) if suffix]
    jobs = set()
    names = argv_names(obs.verb, len(obs.argv)) or ()
    jobs |= {v.encode() for n, v in zip(names, obs.argv) if n == "id"}
    for key in sets:
        jobs |= set(zset(pre, key))
    hashes = [row_key(obs.base, j) for j in sorted(jobs)]
    hashes += [obs.base + b"meta", obs.base + b"metrics:completed", obs.base + b"metrics:failed"]
    hashes += [obs.base + b"done"] + [obs.base + b"done:" + j for j in sorted(jobs)]
    return [k for k in sets if not k.endswith(b":meta")], hashes + [k for k in sets if k.endswith(b":meta")]


def type_fault(obs: Observation) -> str | None:
    sets, hashes = touched_keys(obs)
    for key in sets:
        entry = obs.native_pre.get(key)
        if entry is not None and entry.kind != "zset":
            return f"{key.decode()} is a {entry.kind}"
    for key in hashes:
        entry = obs.native_pre.get(key)
        if entry is not None and entry.kind != "hash":
            return f"{key.decode()} is a {entry.kind}"
    events = obs.native_pre.get(obs.base + b"events")
    if events is not None and events.kind != "stream" and events_on(obs):
        return f"{(obs.base + b'events').decode()} is a {events.kind}"
    return None


def events_on(obs: Observation) -> bool:
    """The queue's event switch (``meta events``) is set, whatever its value."""
    return b"events" in fields(obs.native_pre.get(obs.base + b"meta"))


def counter_fault(obs: Observation) -> str | None:
    _, hashes = touched_keys(obs)
    for key in hashes:
        for name in (b"attempts", b"stalled", b"failures", b"count", b"events"):
            value = fields(obs.native_pre.get(key)).get(name)
            if value is not None and (string2ll(value) is None or string2ll(value) == I64_MAX):
                return f"{key.decode()} {name.decode()}={value.decode(errors='replace')!r} cannot be incremented"
    return None


# -- models -------------------------------------------------------------------------------
class Edit:
    """A copy of a normalised dump the model writes into, command by command."""

    def __init__(self, source: Dump) -> None:
        self.d = {k: Entry(e.kind, dict(e.value) if isinstance(e.value, dict) else e.value) for k, e in source.items()}

    def zadd(self, key: bytes, member: bytes, score: Any) -> None:
        self.d.setdefault(key, Entry("zset", {})).value[member] = score

    def zrem(self, key: bytes, member: bytes) -> None:
        entry = self.d.get(key)
        if entry is not None and entry.kind == "zset":
            entry.value.pop(member, None)
            if not entry.value:
                del self.d[key]

    def hset(self, key: bytes, **values: bytes) -> None:
        self.d.setdefault(key, Entry("hash", {})).value.update({k.encode(): v for k, v in values.items()})

    def xadd(self, key: bytes, bound: int, **values: bytes) -> None:
        """An event appended (normalised: its fields, in order), the stream trimmed to ``bound``."""
        entry = self.d.get(key)
        entries = entry.value if entry is not None and entry.kind == "stream" else ()
        self.d[key] = Entry("stream", (entries + ({k.encode(): v for k, v in values.items()},))[-bound:])

    def hincrby(self, key: bytes, name: bytes, by: int) -> None:
        entry = self.d.setdefault(key, Entry("hash", {}))
        entry.value[name] = str((string2ll(entry.value.get(name)) or 0) + by).encode()


def priority(entry_fields: dict) -> int:
    return string2ll(entry_fields.get(b"priority")) or 0


def selected(obs: Observation, set_key: bytes | None, limit_arg: str) -> list[bytes] | None:
    """The members the native verb took from a time-ordered set, checked against its clock window:
    a prefix of (score, member) order, every one due by the window's end, and nothing left that
    was surely due at its start (unless the limit stopped it)."""
    before = zset(obs.native_pre, set_key)
    after = zset(obs.native_post, set_key)
    order = [m for m, _ in sorted(before.items(), key=lambda kv: (kv[1], kv[0]))]
    taken = [m for m in order if m not in after]
    window = obs.native_window
    if window is None or taken != order[: len(taken)]:
        return None
    if any(before[m] > window.after for m in taken):
        return None
    limit = int(limit_arg) if DIGITS.fullmatch(limit_arg) else 0
    rest = order[len(taken):]
    if rest and len(taken) < limit and before[rest[0]] <= window.before:
        return None
    return taken


def model_promote(obs: Observation) -> Match | None:
    schedule_key, pending_key = key_of(obs, "schedule"), key_of(obs, "pending")
    taken = selected(obs, schedule_key, obs.argv[0] if obs.argv else "0")
    if not taken:
        return None
    edit = Edit(obs.native_pre_n)
    bound = string2ll(fields(obs.native_pre.get(obs.base + b"meta")).get(b"events", b"0"))
    if bound is None:
        return None
    ghosts, moved = [], 0
    for job in taken:
        entry = row(obs, job)
        edit.zrem(schedule_key, job)
        if entry is None:
            ghosts.append(job)
            continue
        if entry.kind != "hash":
            return None
        edit.zadd(pending_key, job, priority(entry.value))
        edit.hset(row_key(obs.base, job), state=b"pending")
        if bound > 0:  # each moved job's event, in selection order (docs/spec.md §12)
            edit.xadd(obs.base + b"events", bound, type=b"promoted", id=job,
                      attempt=entry.value.get(b"attempts", b"0"), state=b"pending")
        moved += 1
    if not ghosts or obs.native_reply != moved or diff(edit.d, obs.native_post_n):
        return None
    if not isinstance(obs.script_reply, int) or obs.script_reply - moved != len(ghosts):
        return None
    return Match(f"ghosts {_ids(ghosts)} leave schedule and get no row", ("5.4",), frozenset(ghosts))


def model_stalled(obs: Observation) -> Match | None:
    active_key, pending_key, dead_key = key_of(obs, "active"), key_of(obs, "pending"), key_of(obs, "dead")
    if len(obs.argv) != 2 or not DIGITS.fullmatch(obs.argv[0]):
        return None
    max_stalled = int(obs.argv[0])
    taken = selected(obs, active_key, obs.argv[1])
    if not taken:
        return None
    edit = Edit(obs.native_pre_n)
    recovered, exempt, dead, ghosts = [], [], [], []
    for job in taken:
        entry = row(obs, job)
        edit.zrem(active_key, job)
        if entry is None:
            ghosts.append(job)
            continue
        if entry.kind != "hash" or b"group" in entry.value:
            return None
        key = row_key(obs.base, job)
        if entry.value.get(b"lease_epoch") != obs.run_id:
            edit.zadd(pending_key, job, priority(entry.value))
            edit.hset(key, state=b"pending")
            exempt.append(job)
            continue
        count = string2ll(entry.value.get(b"stalled"))
        if count is None or count == I64_MAX:
            return None
        count += 1
        if count >= max_stalled:
            edit.hset(key, stalled=str(count).encode(), state=b"dead", last_error=b"stalled", failed=Offset(0, 0))
            edit.zadd(dead_key, job, Offset(0, 0))  # scored the time it died: this call's
            edit.hincrby(obs.base + b"metrics:failed", b"count", 1)
            dead.append(job)
        else:
            edit.hset(key, stalled=str(count).encode(), state=b"pending")
            edit.zadd(pending_key, job, priority(entry.value))
            recovered.append(job)
    names = tuple(n for n, hit in (("5.4", ghosts), ("5.exempt", exempt)) if hit)
    if not names:
        return None
    bound = string2ll(fields(obs.native_pre.get(obs.base + b"meta")).get(b"events", b"0"))
    if bound is None:
        return None
    if bound > 0:  # each member's events, in selection order (docs/spec.md §12)
        told = {**{j: ((b"recovered", b"pending"),) for j in exempt},
                **{j: ((b"stalled", None), (b"recovered", b"pending")) for j in recovered},
                **{j: ((b"stalled", None), (b"dead", b"dead")) for j in dead}}
        for job in taken:
            attempt = fields(row(obs, job)).get(b"attempts", b"0")
            for kind, state in told.get(job, ()):
                extra = {} if state is None else {"state": state}
                if kind == b"dead":
                    extra = {"error": b"stalled", **extra}
                edit.xadd(obs.base + b"events", bound, type=kind, id=job, attempt=attempt, **extra)
    expected = plain([recovered, exempt, dead])
    if not same(expected, obs.native_reply) or diff(edit.d, obs.native_post_n):
        return None
    ids = frozenset(ghosts + exempt)
    if not isinstance(obs.script_reply, tuple) or len(obs.script_reply) != 3:
        return None
    drop = {j.decode() for j in ids}
    strip = lambda reply: tuple(tuple(i for i in part if i not in drop) for part in reply)  # noqa: E731
    if not same(strip(obs.script_reply), strip(obs.native_reply)):
        return None
    parts = [f"ghosts {_ids(ghosts)} leave active with no row" if ghosts else "",
             f"{_ids(exempt)} leased under another run_id are recovered uncounted" if exempt else ""]
    return Match("; ".join(p for p in parts if p), names, ids)



def ghosts(obs: Observation) -> Match | None:
    return {"promote": model_promote, "stalled_check": model_stalled}[obs.verb](obs)





# -- the order they are tried in -------------------------------------------------------------
MATCHERS: tuple[tuple[str, Matcher], ...] = (
    ("5.1", claim_checks),
    ("5.5", lanes),
    ("5.4", ghosts),
    ("5.exempt", ghosts),
    ("5.6", types_and_arguments),
)


def local(obs: Observation, ids: frozenset[bytes]) -> bool:
    """Every difference between the nodes belongs to ``ids`` (their rows, completed records, as keys
    or as fields of ``done``, or set memberships) or the metrics."""
    rows = {row_key(obs.base, j) for j in ids} | {obs.base + b"done:" + j for j in ids}
    members = {f"member {j.decode(errors='backslashreplace')}" for j in ids}
    records = {f"field {j.decode(errors='backslashreplace')}" for j in ids}
    metrics = {obs.base + b"metrics:failed", obs.base + b"metrics:completed", obs.base + b"events"}
    return all(d.key in rows or d.key in metrics or d.part in members or _whole_set_of(d, ids)
               or (d.key == obs.base + b"done" and (d.part in records or _whole_records_of(d, ids)))
               for d in obs.diffs)


def _whole_records_of(d: Diff, ids: frozenset[bytes]) -> bool:
    """The completed records' hash present on one side only, holding only the records of ``ids``."""
    if d.part is not None:
        return False
    fields: set[bytes] = set()
    for side in (d.left, d.right):
        if isinstance(side, Whole) and side.kind == "hash":
            fields |= side.value.keys()
        elif side is not MISSING:
            return False
    return fields <= ids


def _whole_set_of(d: Diff, ids: frozenset[bytes]) -> bool:
    """A set present on one side only (or of another kind) whose differing members are all ``ids``."""
    if d.part is not None:
        return False
    sides = []
    for side in (d.left, d.right):
        if side is MISSING:
            sides.append({})
        elif isinstance(side, Whole) and side.kind == "zset":
            sides.append(side.value)
        else:
            return False
    a, b = sides
    return all(m in ids for m in a.keys() | b.keys() if not same(a.get(m), b.get(m)))


def classify(obs: Observation) -> Verdict:
    replies_same = reply_same(obs.script_reply, obs.native_reply)
    replies = None if replies_same else (obs.script_reply, obs.native_reply)
    left = left_behind(obs)
    if obs.violations:
        return Verdict("unexpected", why="; ".join(obs.violations), diffs=obs.diffs, replies=replies,
                       left_behind=left, violations=obs.violations)
    if replies_same and not obs.diffs:
        return Verdict("equal")
    tried = set()
    if obs.verb is not None and obs.native_is_native:
        for name, matcher in MATCHERS:
            if obs.verb not in NAMED[name].verbs or matcher in tried:
                continue
            tried.add(matcher)
            match = matcher(obs)
            if match is None or (match.ids is not None and not local(obs, match.ids)):
                continue
            return Verdict("named", match.names, match.why, obs.diffs, replies, left)
    return Verdict("unexpected", why="no §5 difference accounts for this", diffs=obs.diffs, replies=replies,
                   left_behind=left)


def left_behind(obs: Observation) -> list[Diff]:
    """The script's own writes in a step where it failed or the native node refused."""
    if isinstance(obs.script_reply, Err) or isinstance(obs.native_reply, Err):
        return diff(obs.script_pre_n, obs.script_post_n)
    return []



def _ids(ids) -> str:
    return ",".join(j.decode(errors="replace") for j in ids)
