"""Normalisation: the only transformations between a dump and a comparison.

Three, each checked rather than masked:

* **Time.** A score in ``active``, ``schedule`` or ``dead`` written by a verb is a
  server time plus a delay (the dead score is the time the job died); so is a row's
  time field (``created``, ``started``, ``failed``) a verb wrote. It becomes an :class:`Offset`: the score minus the server
  time of the call that wrote it, where that time is only known to lie in the
  ``[before, after]`` window of TIME read just before and after the call on that
  node. Two offsets are the same when their intervals meet. A score written by a
  plain command (a case's setup) is absolute and stays as it is.
* **The native extra.** ``lease_epoch`` must equal the native node's run_id at
  the call that wrote it and may only be written by a CLAIM, EXTEND or EXTENDS
  that took the lease. :func:`extras_violations` checks it on the native node;
  only then is the field dropped from its rows. On the script node it is never
  dropped: a script that wrote one shows up. (``failures`` is no extra since the
  scripts keep the same budget, SPEC §9.1: it is compared like any field.)
* **The brand.** ``{emq}:version`` must be the node's own brand; then it reads as
  ``<brand>`` on both.
* **The wake marker** (SPEC §9.3), a named wire-4-only key. ``emq:{q}:wake`` must
  be the one-member zset ``{w: 0}``, written by a script exactly when its call made a
  job claimable or brought the schedule's head earlier (:func:`should_wake`), and
  never otherwise. :func:`wake_violations` checks that on each script node; then the
  runner consumes the marker (DEL, as a waiter's BZPOPMIN would), so it never enters a
  comparison and each step must write its own. A native node never has it.
* **The rate limit** (docs/spec.md §13). The rate log's scores are start times and its
  expiry (the pseudo-member ``<expires>``) a time plus the window: offsets against the call
  that wrote them, like the lease scores. A rated claim's wait reply is compared as
  ``<wait>`` (a positive integer; its value is the log's, which the dumps compare).
* **The bus** (docs/spec.md §12). A stream entry's id is the server time it was
  written: entries are compared in order, fields exact, ids dropped. A completed
  record's ``finished`` and its expiry (``<expires>``) are offsets against the call
  that wrote them; its ``created`` and ``started`` are copies of the row's, compared
  as ``<time>`` (each node copies its own row's, which the row's own offsets checked).
  A unique window's marker (docs/spec.md §14) is read the same way: ``finished`` and
  its expiry are offsets against the completing call. A record kept as a field of the
  queue's ``done`` is read as its five parts (attempts, finished, created, started, result)
  and its own expiry, normalised as ``done:<id>``'s fields are (a value that is not a packed
  record stays as it is).

Nothing else is masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from .._protocol.keys import VERSION_KEY
from .dump import EXPIRES, FIELD_RECORDS, Dump, Entry

TIME_SET = re.compile(rb"^emq:\{[^{}]+\}:(active|schedule|dead|rate)$")
ROW = re.compile(rb"^emq:\{([^{}]+)\}:job:(.*)$", re.S)
#: a completed record, or a completed job's unique window (docs/spec.md §14): both written by
#: the call that completed, with ``finished`` and an expiry
DONE = re.compile(rb"^emq:\{([^{}]+)\}:(?:done|unique):(.*)$", re.S)
DONE_TIME_FIELDS = (b"finished", EXPIRES)  #: their times, written by the call that completed
DONE_COPIES = (b"created", b"started")  #: copied from the row
#: a completed record as a field's value: attempts, finished, created, started, then the result
PACKED = re.compile(rb"([0-9]*),([0-9]*),([0-9]*),([0-9]*),(.*)", re.S)
EXTRAS = (b"lease_epoch",)
TIME_FIELDS = (b"created", b"started", b"failed")  #: row fields that hold the server time of a verb
WAKE = re.compile(rb"^emq:\{[^{}]+\}:wake$")
MARKER = {b"w": 0}  #: the wake marker's one member, as a dump reads it
TIME_VERBS = frozenset({"extend", "extends", "delay", "reschedule"})  #: verbs whose nonzero reply is a time
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class Window:
    """The server clock (ms) read just before and just after one call on one node."""

    before: int
    after: int


@dataclass(frozen=True)
class Offset:
    """A time value as ``value - t`` for the call's server time ``t`` in its window: ``[lo, hi]``."""

    lo: int
    hi: int

    @classmethod
    def of(cls, value: int | float, window: Window) -> "Offset":
        return cls(int(value) - window.after, int(value) - window.before)

    def meets(self, other: "Offset") -> bool:
        return max(self.lo, other.lo) <= min(self.hi, other.hi)

    def __repr__(self) -> str:
        return f"now+{self.lo}" if self.lo == self.hi else f"now+[{self.lo}..{self.hi}]"


@dataclass(frozen=True)
class Err:
    """An error reply. Two errors are the same when their codes (first word) are."""

    code: str
    text: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Err) and other.code == self.code

    def __hash__(self) -> int:
        return hash(self.code)

    def __repr__(self) -> str:
        return f"error {self.text[:90]!r}"


def err(text: str) -> Err:
    return Err(text.split(" ", 1)[0], text)


def same(a: Any, b: Any) -> bool:
    """Equality, where offsets meet when their windows allow one common value."""
    if isinstance(a, Offset) and isinstance(b, Offset):
        return a.meets(b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


# -- time -----------------------------------------------------------------------
class Origins:
    """Which call last wrote each time-set member's score and each row's time field, per node.

    ``None`` for a value written by a plain command (absolute); the call's
    :class:`Window` for one written by a verb. A member (a field) keeps its origin
    while its value is unchanged, so an unchanged lease keeps the offset of the
    call that set it.
    """

    def __init__(self) -> None:
        self.of: dict[tuple[bytes, bytes], Window | None] = {}

    def update(self, before: Dump, after: Dump, window: Window | None) -> None:
        for key in {k for k in before.keys() | after.keys() if TIME_SET.match(k)}:
            old = _zset(before.get(key))
            new = _zset(after.get(key))
            for member in old.keys() - new.keys():
                self.of.pop((key, member), None)
            for member, value in new.items():
                if old.get(member) != value or (key, member) not in self.of:
                    self.of[(key, member)] = window
        for key in {k for k in before.keys() | after.keys() if FIELD_RECORDS.match(k)}:
            # a field's value and its expiry, written together by the call that completed
            old, new = _hash(before.get(key)), _hash(after.get(key))
            for field in old.keys() - new.keys():
                self.of.pop((key, field), None)
            for field, value in new.items():
                if field != EXPIRES and (old.get(field) != value or (key, field) not in self.of):
                    self.of[(key, field)] = window
        for key in {k for k in before.keys() | after.keys() if ROW.match(k) or DONE.match(k)}:
            old, new = _hash(before.get(key)), _hash(after.get(key))
            for name in TIME_FIELDS if ROW.match(key) else DONE_TIME_FIELDS:
                if name not in new:
                    self.of.pop((key, name), None)
                elif old.get(name) != new[name] or (key, name) not in self.of:
                    self.of[(key, name)] = window

    def copy_key(self, key: bytes, source: "Origins") -> None:
        """Take ``key``'s origins from another node's tracker (after a resync copied the key)."""
        for k in [k for k in self.of if k[0] == key]:
            del self.of[k]
        for k, origin in source.of.items():
            if k[0] == key:
                self.of[k] = origin

    def clear(self) -> None:
        self.of.clear()


def _zset(entry: Entry | None) -> dict:
    return entry.value if entry is not None and entry.kind == "zset" else {}


def _hash(entry: Entry | None) -> dict:
    return entry.value if entry is not None and entry.kind == "hash" else {}


def _time_field(value: bytes, window: Window | None) -> Any:
    """A row's time field as an offset against the call that wrote it (raw when a plain
    command wrote it, or when it is not a number)."""
    if window is None or not re.fullmatch(rb"-?[0-9]{1,19}", value):
        return value
    return Offset.of(int(value), window)


def _copied_time(value: bytes) -> bytes:
    """A record's copy of its row's time, compared as ``<time>`` (the row's offsets checked it)."""
    return b"<time>" if re.fullmatch(rb"[0-9]{1,19}", value) else value


def _field_record(value: Any, window: Window | None) -> Any:
    """A completed record kept as a field, ``(packed, expiry)``: its five parts, ``finished`` and
    the expiry as offsets against the call that wrote them (raw when a plain command did)."""
    if not isinstance(value, tuple):
        return value  # the key's own expiry (EXPIRES), as any hash's
    packed, expires = value
    parts = PACKED.fullmatch(packed)
    if parts is None:
        return value
    attempts, finished, created, started, result = parts.groups()
    if expires is not None and window is not None:
        expires = Offset.of(expires, window)
    return (attempts, _time_field(finished, window), _copied_time(created), _copied_time(started), result,
            expires)


def normalise(dump: Dump, origins: Origins, *, brand: bytes, native_extras: bool) -> Dump:
    """The dump as compared: offsets for verb-written time scores, the brand checked,
    and (on the native node, after :func:`extras_violations`) its extra field dropped."""
    out: Dump = {}
    for key, entry in dump.items():
        if key == VERSION_KEY.encode() and entry.kind == "string" and entry.value == brand:
            out[key] = Entry("string", "<brand>")
        elif entry.kind == "zset" and TIME_SET.match(key):
            value = {}
            for member, s in entry.value.items():
                window = origins.of.get((key, member))
                value[member] = Offset.of(s, window) if window is not None else s
            out[key] = Entry("zset", value)
        elif entry.kind == "hash":
            value = {f: v for f, v in entry.value.items() if not (native_extras and f in EXTRAS)}
            if ROW.match(key):
                for name in TIME_FIELDS:
                    if name in value:
                        value[name] = _time_field(value[name], origins.of.get((key, name)))
            elif DONE.match(key):
                for name in DONE_TIME_FIELDS:
                    if name in value:
                        value[name] = _time_field(value[name], origins.of.get((key, name)))
                for name in DONE_COPIES:
                    if name in value:
                        value[name] = _copied_time(value[name])
            elif FIELD_RECORDS.match(key):
                value = {f: _field_record(v, origins.of.get((key, f))) for f, v in value.items()}
            out[key] = Entry("hash", value)
        elif entry.kind == "stream":
            out[key] = Entry("stream", tuple(fields for _, fields in entry.value))
        else:
            out[key] = entry
    return out


def normalise_reply(verb: str | None, reply: Any, window: Window) -> Any:
    """Bytes as text, arrays as tuples, error replies by code, and a time reply as an offset."""
    if isinstance(reply, Err):
        return reply
    if verb in ("claim", "bclaim") and isinstance(reply, int) and not isinstance(reply, bool) and reply > 0:
        return "<wait>"
    if verb == "claims" and isinstance(reply, list):  # CLAIM's replies, the last maybe a wait
        return tuple(normalise_reply("claim", one, window) for one in reply)
    if verb in TIME_VERBS:
        if isinstance(reply, int) and not isinstance(reply, bool) and reply != 0:
            return Offset.of(reply, window)
        if isinstance(reply, list):
            return tuple(Offset.of(r, window) if isinstance(r, int) and r != 0 else plain(r) for r in reply)
    return plain(reply)


def plain(reply: Any) -> Any:
    if isinstance(reply, bytes):
        return reply.decode(errors="backslashreplace")
    if isinstance(reply, (list, tuple)):
        return tuple(plain(r) for r in reply)
    return reply


# -- the native extras ------------------------------------------------------------
def string2ll(raw: bytes | None) -> int | None:
    """Valkey's integer rule for a stored counter: the int HINCRBY accepts, else None."""
    if raw is None:
        return 0
    if not re.fullmatch(rb"-?(0|[1-9][0-9]*)", raw) or raw == b"-0":
        return None
    value = int(raw)
    return value if I64_MIN <= value <= I64_MAX else None


def row_key(base: bytes, job_id: bytes) -> bytes:
    return base + b"job:" + job_id


def extras_violations(pre: Dump, post: Dump, *, stamped: Iterable[bytes], run_id: bytes) -> list[str]:
    """Where the native node's ``lease_epoch`` breaks its rule in one call.

    ``stamped``: the row keys this call took or renewed a lease on (it must stamp
    each with ``run_id``). Every other row keeps the field as it was.
    """
    stamped = set(stamped)
    found = []
    for key, entry in post.items():
        if entry.kind != "hash":
            continue
        before = pre.get(key)
        old = before.value if before is not None and before.kind == "hash" else {}
        new = entry.value
        name = key.decode(errors="backslashreplace")
        epoch_old, epoch_new = old.get(b"lease_epoch"), new.get(b"lease_epoch")
        if key in stamped:
            if epoch_new != run_id:
                found.append(f"{name} lease_epoch={_show(epoch_new)}, expected this run_id {run_id.decode()}")
        elif epoch_new != epoch_old:
            found.append(f"{name} lease_epoch {_show(epoch_old)}→{_show(epoch_new)} by a call that took no lease")
    return found


def _show(value: bytes | None) -> str:
    return "absent" if value is None else repr(value.decode(errors="backslashreplace"))


# -- the wake marker (wire 4 only) --------------------------------------------------------
def should_wake(verb: str | None, reply: Any, base: bytes, pre: Dump, post: Dump) -> bool:
    """Whether a script's call must have written its queue's wake marker (SPEC §9.3): it made a
    job claimable (a new job, or several, a promotion, a reprocess, a requeue, a retry to pending, a recovered
    lease; FAIL's moves by FAILURES.INCR too), or it put a job in schedule due before the schedule's
    head (a waiter's timeout is too long)."""
    if verb is None or isinstance(reply, (Err, Exception)) or reply is None:
        return False
    if verb in ("enqueue", "reprocess", "requeue"):
        return reply == 1
    if verb == "enqueues":  # a new job among the triples
        return isinstance(reply, (list, tuple)) and 1 in reply
    if verb == "promote":
        return isinstance(reply, int) and reply > 0
    if verb == "stalled_check":
        return isinstance(reply, (list, tuple)) and len(reply) == 3 and bool(reply[0])
    if verb in ("fail", "failures_incr") and reply == b"pending":
        return True
    if verb == "enqueue_unique" and reply in (b"created", b"replaced"):  # a new job in pending, or due sooner
        return _entered(base + b"pending", pre, post) or _due_before_head(base, pre, post)
    if (verb in ("schedule", "delay", "reschedule") and reply not in (0, None)) or (
            verb in ("fail", "failures_incr") and reply == b"scheduled"):
        return _due_before_head(base, pre, post)
    return False


def _entered(key: bytes, pre: Dump, post: Dump) -> bool:
    """A member entered the zset ``key`` in this call."""
    return bool(_zset(post.get(key)).keys() - _zset(pre.get(key)).keys())


def _due_before_head(base: bytes, pre: Dump, post: Dump) -> bool:
    """The call's job entered schedule before every member the schedule had (or it was empty)."""
    key = base + b"schedule"
    old, new = _zset(pre.get(key)), _zset(post.get(key))
    moved = [score for member, score in new.items() if old.get(member) != score]
    if not moved:
        return False
    return not old or min(moved) < min(old.values())


def wake_violations(pre: Dump, post: Dump, *, woke: bytes | None) -> list[str]:
    """Where a script node's wake markers break their rule in one call. ``woke``: the base
    whose marker the call must have written (None: the call must write none). ``pre`` has
    no marker (the runner consumes them after every step)."""
    found = []
    for key, entry in post.items():
        if not WAKE.match(key):
            continue
        name = key.decode(errors="backslashreplace")
        if entry.kind != "zset" or entry.value != MARKER:
            found.append(f"{name} is not the one-member wake marker {{w: 0}}: {entry.kind} {entry.value!r}")
        elif key != (woke or b"") + b"wake" and pre.get(key) != entry:
            found.append(f"{name} written by a call that made nothing claimable and no due time earlier")
    if woke is not None and woke + b"wake" not in post:
        found.append(f"{(woke + b'wake').decode(errors='backslashreplace')} not written by a call that "
                     "made a job claimable (or a due time earlier)")
    return found
