"""The verb table: the one place the Python side lists the job core's verbs.

Each row owns everything about its verb: which keys (as suffixes of the queue's
base) and which ARGV it takes, the SPEC §3 limits those arguments are checked
against before anything is sent (:meth:`Verb.build`), and the decoder that turns
its reply into a typed value (:meth:`Verb.answer`). It also says whether a Lua
script serves it on wire 4, which ``EMQ.*`` command serves it on wire 6, and the
capability tokens that command advertises. Nothing here does I/O: the sync and the
asyncio connection both send what these rows build. The scripts and trafikey's
registration table and grammar are checked against this file by tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from .. import errors
from ..scripts import SCRIPTS_DIR, loaded_source, script_libraries
from .keys import MAX_ID_BYTES, MAX_TRACEBACK_BYTES, Keyspace, State, check_group, check_job_id

FAMILIES = ("lanes", "flow")  #: the family libraries: a script loaded after one runs on both wires
BASE = ""  # the key suffix that names the base itself, ``emq:{q}:``
# the lanes' and the flows' keys a script declares (named once, by the Keyspace)
LANES_READY, LANES_ACTIVE = Keyspace.LANES_READY, Keyspace.LANES_ACTIVE
FLOW_PENDING, FLOW_ACTIVE, FLOW_SCHEDULE = Keyspace.FLOW_PENDING, Keyspace.FLOW_ACTIVE, Keyspace.FLOW_SCHEDULE

# SPEC §3's argument limits, defined once (tests/test_verbs_table.py reads trafikey's grammar.rs
# and compares its constants with these).
I64_MAX = 2**63 - 1
LEASE_MIN = 1
DELAY_MIN = 0
LIMIT_MIN = 1
LIMIT_MAX = 10_000
BUDGET_MIN = 1
PRIORITY_MAX = 2**31 - 1
#: a lane job's priority: its lane's score keeps the other 43 bits of a double's exact range for the
#: enqueue order (docs/spec.md §16.1)
LANE_PRIORITY_MAX = 1023
ID_MAX_LEN = MAX_ID_BYTES
EXTENDS_MAX_PAIRS = 1_000
CLAIMS_MAX = 1_000  #: CLAIMS' count: jobs claimed by one command
TIMEOUT_MAX = 2**31 - 1  #: BCLAIM's wait; 0 waits until served
PROGRESS_MAX_LEN = 64 * 1024  #: APPEND's progress, bytes
TRACEBACK_MAX_LEN = MAX_TRACEBACK_BYTES  #: FAIL's traceback, bytes (docs/spec.md §11.6)
ERROR_MAX_LEN = 4096  #: FAIL's error (the row's last_error), bytes: the server refuses more, the client cuts
#: An event's values (error, progress, state) keep their first this many bytes: with EVENTS_MAX, a
#: queue's stream is bounded in bytes as well as entries (docs/spec.md §12)
EVENT_VALUE_MAX_LEN = 1024
EVENTS_MAX = 100_000  #: the most entries a queue's event stream keeps (``enable_events``' maxlen)
#: The most groups with a pause (``lanes:paused``), and with a k of their own (``lanes:limit``): kept
#: while a group has no jobs, so bounded by count (docs/spec.md §16.1)
GROUP_SETTINGS_MAX = LIMIT_MAX

#: The numeric ARGV names and their inclusive bounds.
BOUNDS: dict[str, tuple[int, int]] = {
    "priority": (0, PRIORITY_MAX),
    "lane_priority": (0, LANE_PRIORITY_MAX),
    "lease_ms": (LEASE_MIN, I64_MAX),
    "delay_ms": (DELAY_MIN, I64_MAX),
    "backoff_ms": (DELAY_MIN, I64_MAX),
    "age_ms": (DELAY_MIN, I64_MAX),
    "limit": (LIMIT_MIN, LIMIT_MAX),
    "max_attempts": (BUDGET_MIN, I64_MAX),
    "max_stalled": (BUDGET_MIN, I64_MAX),
    "timeout_ms": (0, TIMEOUT_MAX),
    "retention_ms": (0, I64_MAX),
    "count": (1, CLAIMS_MAX),  #: CLAIMS' jobs
    "rated": (1, 1),  #: CLAIM's and BCLAIM's late flag: read the rate limit's wait (docs/spec.md §13)
    "unique_ms": (0, I64_MAX),
    "replace": (0, 1),
    "stamp": (0, 1),  #: lane scripts: 1 writes the server's run_id as lease_epoch (wire 6)
    "k": (0, LIMIT_MAX),  #: lane_limit's k: jobs of a group at once (0 removes the setting)
}


def check_int(name: str, value: Any, low: int, high: int = I64_MAX) -> int:
    """A SPEC §3 number: an int in [low, high] (bools are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.ConfigurationError(f"bad {name} {value!r}: expected an integer from {low} to {high}")
    return value


def check_traceback(traceback: Any) -> str:
    """FAIL's traceback: text of at most MAX_TRACEBACK_BYTES in UTF-8 (the worker keeps a longer one's
    tail: ``describe_traceback`` in echomq/worker/policy.py)."""
    try:
        size = len(traceback.encode())
    except (AttributeError, UnicodeEncodeError) as exc:
        raise errors.ConfigurationError(f"bad traceback: UTF-8 text, got {type(traceback).__name__} ({exc})") from exc
    if size > MAX_TRACEBACK_BYTES:
        raise errors.ConfigurationError(f"bad traceback of {size} bytes: at most {MAX_TRACEBACK_BYTES} in UTF-8 "
                                        "(keep its tail, as the worker does: docs/workers.md, Errors you can debug)")
    return traceback


def bound_error(error: str) -> str:
    """FAIL's error within ERROR_MAX_LEN bytes of UTF-8: whole when it fits, else its head (to a
    character boundary) and ``...``. The server refuses a longer one (``EMQARG error``), so a worker
    whose exception has a long message still records its failure. A character UTF-8 cannot carry (a
    lone surrogate) is sent escaped."""
    data = str(error).encode(errors="backslashreplace")
    if len(data) <= ERROR_MAX_LEN:
        return data.decode()
    return data[: ERROR_MAX_LEN - 3].decode(errors="ignore") + "..."


def check_progress(progress: bytes) -> bytes:
    """APPEND's progress (already encoded): at most PROGRESS_MAX_LEN bytes."""
    if len(progress) > PROGRESS_MAX_LEN:
        raise errors.PayloadError(f"the progress is {len(progress)} bytes, over the limit of {PROGRESS_MAX_LEN}: "
                                  "report a summary, keep the data elsewhere")
    return progress


def check_arg(name: str, value: Any) -> Any:
    """One ARGV value checked by its name: a number within its bounds, an id, or passed as is."""
    if name in BOUNDS:
        return check_int(name, value, *BOUNDS[name])
    if name == "id":
        return check_job_id(value)
    if name == "token":
        return str(value)
    if name == "traceback":
        return check_traceback(value)
    if name == "group":
        return check_group(value)
    if name == "scope":  # lane_limit's group, or '' for the queue's default
        return "" if value in (None, "") else check_group(value)
    if name == "progress":
        return check_progress(value)
    if name == "error":
        return bound_error(value)
    return value  # payload (already serialized) travels as given


@dataclass(frozen=True)
class Call:
    """One verb call, built once and sendable on either wire."""

    verb: "Verb"
    keys: tuple[str, ...]
    argv: tuple[Any, ...]


@dataclass(frozen=True)
class Plain:
    """A plain command on one of the queue's keys (the pause flag, the reads that are not verbs)."""

    args: tuple[Any, ...]


def blocks(item: Call | Plain) -> bool:
    """Whether the server may hold ``item``'s reply while it waits (EMQ.BCLAIM, XREAD BLOCK):
    every command behind it on its socket waits as long, so it must not share a pipeline."""
    if isinstance(item, Plain):
        return item.args[0] == "XREAD" and "BLOCK" in item.args
    return item.verb.name == "bclaim"


# -- typed replies ------------------------------------------------------------------


class Claimed(NamedTuple):
    """CLAIM's reply before the payload is deserialized: a named tuple, one a job claimed, which
    costs a third of what a frozen dataclass's field-by-field init did."""

    id: str
    raw_payload: bytes | None
    attempt: int
    group: str | None = None  #: a lane job's group (LANE_CLAIM's reply)


class Admission(str, Enum):
    """Why an enqueue answered as it did (ENQUEUE.UNIQUE's reply; a plain ENQUEUE's 1 or 0)."""

    CREATED = "created"  #: the job was made
    EXISTS = "exists"  #: the id has a row (any state): nothing written
    REPLACED = "replaced"  #: debounce: the waiting job's payload (and due time) are the new ones
    UNIQUE = "unique"  #: no row, but the id completed within its unique window: nothing written


@dataclass(frozen=True)
class Throttled:
    """A ``rated`` CLAIM or BCLAIM, or a LANE_CLAIM, held by the queue's rate limit: no start may
    happen for ``wait_ms`` (server clock); no job moved (docs/spec.md §13). FLOW_CLAIM answers one
    when it claimed nothing: when to look again (the next retry due, or the rate limit's wait)."""

    wait_ms: int


@dataclass(frozen=True)
class Counts:
    """Jobs in each set now. The flat four (and ``total``, their sum) count flat jobs only; lane
    and flow jobs live in their own sets (docs/lanes-and-flows.md) and are counted beside them."""

    pending: int
    active: int
    scheduled: int
    dead: int
    paused: bool
    lane_pending: int = 0  #: lane jobs waiting in their groups' lanes (over every group)
    lane_active: int = 0  #: lane jobs leased (``lanes:active``)
    flow_waiting: int = 0  #: flow parents waiting for their children
    flow_pending: int = 0
    flow_active: int = 0
    flow_scheduled: int = 0  #: flow jobs waiting out a retry's backoff

    @property
    def total(self) -> int:
        return self.pending + self.active + self.scheduled + self.dead

    @property
    def lanes(self) -> str:
        """The lane jobs as ``pending/active``."""
        return f"{self.lane_pending}/{self.lane_active}"

    @property
    def flows(self) -> str:
        """The flow jobs as ``waiting/pending/active/scheduled``."""
        return f"{self.flow_waiting}/{self.flow_pending}/{self.flow_active}/{self.flow_scheduled}"

    @property
    def grouped(self) -> bool:
        """Whether any lane or flow job is waiting or running."""
        return any(getattr(self, name) for name in GROUPED_COUNTS)

    @property
    def flow_waiting_total(self) -> int:
        """Flow jobs not started: parents waiting for children, ready ones, retries waiting out a backoff."""
        return self.flow_waiting + self.flow_pending + self.flow_scheduled


#: The counts of lane and flow jobs, by their :class:`Counts` names (beside the flat four; a dead one
#: is counted in ``dead``): what ``/metrics`` exports as states of their own, named so
GROUPED_COUNTS = ("lane_pending", "lane_active", "flow_waiting", "flow_pending", "flow_active", "flow_scheduled")


@dataclass(frozen=True)
class Sweep:
    """What one STALLED.CHECK moved."""

    recovered: list[str]
    exempt: list[str]  #: restart-caused expiries (wire 6 only): recovered without counting a stall
    dead: list[str]

    def __len__(self) -> int:
        return len(self.recovered) + len(self.exempt) + len(self.dead)


#: how the clients encode text they send (valkey-py's ``encoding_errors``): the surrogate escapes
#: :func:`text` reads bytes that are not UTF-8 as go back out as those bytes
ID_ENCODING = "surrogateescape"


def text(value: bytes | str) -> str:
    """A reply's bytes as text; bytes that are not UTF-8 (an id another client wrote) as surrogate
    escapes (PEP 383), which the clients encode back to the same bytes (:data:`ID_ENCODING`)."""
    return value.decode("utf-8", ID_ENCODING) if isinstance(value, bytes) else value


def _one(reply: Any) -> bool:
    return reply == 1


def _claimed(reply: Sequence[Any] | int) -> Claimed | Throttled | None:
    if isinstance(reply, int):
        return Throttled(reply)  # a rated claim held by the rate limit
    if not reply:
        return None  # empty pending, paused, a ghost head popped, or held by the rate limit (unrated)
    job_id, raw, attempts = reply
    return Claimed(text(job_id), raw, int(attempts))


def _claims(reply: Sequence[Any]) -> list[Claimed | Throttled | None]:
    """CLAIMS' reply as the CLAIM answers it holds: one per job claimed, then the wait when the
    rate limit stopped it (docs/spec.md §3)."""
    return [_claimed(one) for one in reply]


def _sweep(reply: Sequence[Sequence[Any]]) -> Sweep:
    recovered, exempt, dead = reply
    return Sweep([text(i) for i in recovered], [text(i) for i in exempt], [text(i) for i in dead])


def _counts(reply: Sequence[Any]) -> Counts:
    pending, active, scheduled, dead, paused, *lanes_and_flows = reply
    return Counts(pending, active, scheduled, dead, paused == 1, *lanes_and_flows)


def _state(reply: Any) -> State | None:
    return None if reply is None else State(text(reply))


@dataclass(frozen=True)
class Verb:
    name: str  #: the Python method, the script file and the Rust file: ``stalled_check``
    keys: tuple[str, ...]  #: KEYS in order, as suffixes of the base
    argv: tuple[str, ...]  #: ARGV names in order (EXTENDS repeats its trailing pair)
    command: str | None = None  #: the native command on wire 6; None for a declared read
    tokens: tuple[str, ...] = ()  #: capability tokens its native row advertises
    scripted: bool = True  #: served by ``scripts/<name>.lua`` on wire 4
    move: str = ""  #: the lifecycle arrow it performs, as docs/lifecycle.md lists it
    decode: Callable[[Any], Any] = lambda reply: reply  #: the reply, typed
    fenced: bool = False  #: takes (id, token) first; 0 or EMQSTATE means the lease is lost
    #: (argument, token): optional trailing ARGV added after the verb landed (SPEC §9.4), in
    #: order; the script reads each when given, and a wire-6 client sends one only when
    #: EMQ.VERSION lists its token
    late: tuple[tuple[str, str], ...] = ()
    #: the verb each (id, token) pair of its ARGV (with what follows it: PUBLISHES' triples) answers
    #: as, one reply per pair, an error element for a refused pair (COMPLETES: COMPLETE's)
    per_pair: str | None = None

    @property
    def script_path(self) -> Path:
        return SCRIPTS_DIR / f"{self.name}.lua"

    @property
    def libraries(self) -> tuple[str, ...]:
        """The libraries its script is loaded after, in load order (``scripts/lib/<name>.lua`` each,
        then its own file), as the script's header names them (:func:`script_libraries`). Each holds
        rules scripts share (the event switch, the holder's fence, ...); a lane or flow script has its
        family's among them (``lanes``, ``flow``: SPEC §9.6, a script on both wires, never an EMQ
        command)."""
        return script_libraries(self.script_path) if self.scripted else ()

    @property
    def label(self) -> str:
        """The name its refusals give it, one rule for every verb: ``EMQ.`` and its name in capitals,
        ``_`` as ``.`` -- its native command's name where it has one (so a refusal reads the same on
        both wires), and a lane or flow script's by the same rule (``EMQ.LANE.FAIL``). The loader hands
        it to the script as ``VERB``."""
        return "EMQ." + self.name.upper().replace("_", ".")

    @property
    def script_only(self) -> bool:
        """Served by its script on both wires (a lane or flow script): no EMQ command, yet it writes."""
        return any(family in self.libraries for family in FAMILIES)

    @property
    def flow(self) -> bool:
        """A flow script (loaded after the flow library)."""
        return "flow" in self.libraries

    @property
    def read_only(self) -> bool:
        return self.command is None and not self.script_only

    def source(self) -> bytes:
        """The script's text as it is loaded: of its libraries, in order, the definitions it uses
        (itself or through another it uses), then its own file. Every run of a script makes a
        closure of each ``local function`` in its text, so one it never calls is left out."""
        return loaded_source(self.script_path, self.label)

    def build(self, keyspace: Keyspace, *argv: Any) -> Call:
        """A call with every argument checked against SPEC §3 (EXTENDS: the lease, then pairs;
        COMPLETES: pairs)."""
        names = self.argv
        if self.name in ("extends", "flow_extends", "lane_extends", "completes", "publishes", "enqueues"):
            lead, width = self.repeated  # the arguments before the repeated groups, and a group's
            groups = (len(argv) - lead) // width
            if not 1 <= groups <= EXTENDS_MAX_PAIRS or (len(argv) - lead) % width:
                raise errors.ConfigurationError(
                    f"bad {self.name.upper()}: 1 to {EXTENDS_MAX_PAIRS} {self.argv[lead:]} after {list(self.argv[:lead])}, "
                    f"got {len(argv) - lead} values")
            names = self.argv[:lead] + self.argv[lead:] * groups
        elif len(argv) == len(names):
            pass  # exactly the required ARGV: the common case
        elif len(names) < len(argv) <= len(names) + len(self.late):
            names = names + tuple(name for name, _ in self.late)[: len(argv) - len(names)]
        else:
            late = [name for name, _ in self.late]
            raise errors.ConfigurationError(
                f"{self.name} takes {list(names)}" + (f" and optionally {late}" if late else "")
                + f", got {len(argv)} values")
        return Call(self, keyspace.keys_of(self.keys), tuple(map(check_arg, names, argv)))

    def build_checked_already(self, keyspace: Keyspace, *argv: Any) -> Call:
        """A call of values each already within SPEC §3's limits (an id and token from a claim
        reply, a result :func:`echomq._protocol.results.keepable_result` made): :meth:`build` without the
        re-check, for the worker's per-job settles."""
        return Call(self, keyspace.keys_of(self.keys), argv)

    def answer(self, call: Call, reply: Any) -> Any:
        """The typed answer to ``call``; an error reply stays an exception object (the caller
        raises it, or returns it in a batch). A fenced verb's 0 (no row, or the token does
        not match) and its EMQSTATE refusal (wire 6: the row is no longer active) are both
        :class:`~echomq.LeaseLost`, so a lost lease reads the same on both wires. A verb that
        answers per pair (COMPLETES) answers a list: each pair's answer as its ``per_pair`` verb's."""
        if self.per_pair is not None and not isinstance(reply, Exception):
            (lead, width), each, argv = self.repeated, BY_NAME[self.per_pair], call.argv
            return [each.answer_to(argv[i:i + 2], one) for i, one in zip(range(lead, len(argv), width), reply)]
        return self.answer_to(call.argv, reply)

    @property
    def repeated(self) -> tuple[int, int]:
        """A verb of many jobs (EXTENDS, COMPLETES, PUBLISHES): how many ARGV lead, and how many
        each job's group has (its ARGV from its id on)."""
        lead = self.argv.index("id")
        return lead, len(self.argv) - lead

    def answer_to(self, argv: Sequence[Any], reply: Any) -> Any:
        """:meth:`answer` of a call whose ARGV is ``argv`` (a fenced verb's: its id and token first)."""
        if self.fenced and (reply == 0 and not isinstance(reply, Exception) or isinstance(reply, errors.StateError)):
            refusal = reply if isinstance(reply, errors.StateError) else None
            lost = errors.LeaseLost(self.name, text(argv[0]), text(argv[1]), refusal)
            lost.__cause__ = refusal
            return lost
        if isinstance(reply, Exception):
            return reply
        return self.decode(reply)


def _verb(name, keys, argv, move, decode=lambda reply: reply, tokens=None, scripted=True, fenced=False, late=(),
          per_pair=None):
    command = "EMQ." + name.upper().replace("_", ".")
    return Verb(name, tuple(keys), tuple(argv), command, tuple(tokens or (name,)), scripted, move, decode, fenced,
                tuple(late), per_pair=per_pair)


# Rows in the order of SPEC §3 and of trafikey's registration table.
VERBS: tuple[Verb, ...] = (
    _verb("enqueue", ("pending", BASE), ("id", "payload", "priority"), "(new) → pending", decode=_one),
    _verb("claim", ("pending", "active", BASE), ("lease_ms",), "pending → active", decode=_claimed,
          tokens=("claim", "claim.pause"), late=(("rated", "claim.rate"),)),
    _verb("extend", ("active", BASE), ("id", "token", "lease_ms"), "active → active", decode=int, fenced=True),
    _verb("extends", ("active", BASE), ("lease_ms", "id", "token"), "active → active",
          decode=lambda reply: [int(a) for a in reply]),
    _verb("complete", ("active", BASE), ("id", "token"), "active → (deleted)", decode=_one, tokens=("complete.flat",),
          fenced=True),
    _verb("schedule", ("schedule", BASE), ("id", "payload", "delay_ms", "priority"), "(new) → scheduled", decode=_one),
    _verb("promote", ("schedule", "pending", BASE), ("limit",), "scheduled → pending", decode=int),
    _verb("reschedule", ("schedule", BASE), ("id", "delay_ms"), "scheduled → scheduled",
          decode=lambda reply: int(reply) or None),
    _verb("delay", ("active", "schedule", BASE), ("id", "token", "delay_ms"), "active → scheduled", decode=int,
          fenced=True),
    _verb("fail", ("active", "pending", "schedule", "dead", BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms"), "active → pending | scheduled | dead",
          decode=lambda reply: State(text(reply)), tokens=("fail.flat",), fenced=True,
          late=(("traceback", "fail.traceback"),)),
    _verb("reprocess", ("dead", "pending", BASE), ("id",), "dead → pending", decode=_one),
    _verb("requeue", ("active", "pending", BASE), ("id", "token"), "active → pending", decode=_one, fenced=True),
    _verb("stalled_check", ("active", "pending", "dead", BASE), ("max_stalled", "limit"),
          "active → pending | dead", decode=_sweep, tokens=("stalled.check",)),
)

# The bus verbs (SPEC §6, §9.5; docs/spec.md §12): right after the job core, optional on
# wire 6 like every verb after it. Each is a job-core move (or a fenced write) plus what it
# tells: a result, an event, an outcome. FAILURES.INCR takes FAIL's arguments, the traceback
# included (born with the verb, so its token is the verb's own).
BUS: tuple[Verb, ...] = (
    _verb("append", ("active", BASE), ("id", "token", "progress"), "active → active", decode=_one, fenced=True),
    _verb("failures_incr", ("active", "pending", "schedule", "dead", BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms"), "active → pending | scheduled | dead",
          decode=lambda reply: State(text(reply)), tokens=("failures.incr",), fenced=True,
          late=(("traceback", "failures.incr"),)),
    _verb("publish", ("active", BASE), ("id", "token", "result", "retention_ms"), "active → (completed record)",
          decode=_one, fenced=True),
)

# Optional verbs (SPEC §9.3/§9.4): registered after the job core, in the order they landed: the
# bus, the blocking claim (native only), then the control verbs (a script each). A wire-6
# connection requires none of them and uses one only when EMQ.VERSION lists its tokens.
OPTIONAL: tuple[Verb, ...] = BUS + (
    _verb("bclaim", ("pending", "active", BASE), ("lease_ms", "timeout_ms"),
          "pending → active (blocks while empty or paused)", decode=_claimed, tokens=("claim.block",),
          scripted=False, late=(("rated", "claim.rate"),)),
    _verb("remove", ("pending", "schedule", "dead", BASE), ("id",), "pending | scheduled | dead → (deleted)",
          decode=lambda reply: None if reply == 0 else State(text(reply))),
    _verb("cancel", ("active", "dead", BASE), ("id",), "active → dead", decode=_one),
    _verb("purge", ("dead", BASE), ("age_ms", "limit"), "dead → (deleted)", decode=int),
    _verb("drain", ("pending", BASE), ("limit",), "pending → (deleted)", decode=int),
    _verb("enqueue_unique", ("pending", "schedule", BASE), ("id", "payload", "priority", "unique_ms", "replace"),
          "(new) → pending | scheduled; pending | scheduled → scheduled (replace)",
          decode=lambda reply: Admission(text(reply)), tokens=("enqueue.unique",),
          late=(("delay_ms", "enqueue.unique"),)),
    # landed after the argument tokens: EMQ.VERSION lists its token after them
    _verb("claims", ("pending", "active", BASE), ("lease_ms", "count"), "pending → active (up to count jobs)",
          decode=_claims, late=(("rated", "claim.rate"),)),
    _verb("completes", ("active", BASE), ("id", "token"), "active → (deleted) (each pair)", per_pair="complete"),
    _verb("publishes", ("active", BASE), ("retention_ms", "id", "token", "result"),
          "active → (completed record) (each triple)",
          per_pair="publish"),
    _verb("enqueues", ("pending", BASE), ("id", "payload", "priority"), "(new) → pending (each triple)",
          per_pair="enqueue"),
)

#: LANE_CLAIM's answer on a queue that never had a lane job (a worker probes its lanes less often).
NO_LANES = "no lanes"


def _lane_claimed(reply: Sequence[Any] | int) -> Claimed | Throttled | str | None:
    if reply == 0:
        return NO_LANES
    if isinstance(reply, int):
        return Throttled(reply)  # the queue's rate limit holds the start: the ms until one may happen
    if not reply:
        return None  # no group may start a job, the queue is paused, or only ghosts were found
    job_id, raw, attempts, group = reply
    return Claimed(text(job_id), raw, int(attempts), text(group))


def _lane(name, keys, argv, move, decode=lambda reply: reply, fenced=False):
    return Verb(name, tuple(keys), tuple(argv), move=move, decode=decode, fenced=fenced)


# Lanes (SPEC §9.6, docs/lanes-and-flows.md): scripts on both wires, beside the EMQ verbs. A lane
# row (one with ``group``) waits in its group's lane and is leased in ``lanes:active``, where the
# native STALLED.CHECK never looks; the reaper (``lane_reap``) recovers its expired leases.
LANES: tuple[Verb, ...] = (
    _lane("lane_enqueue", (BASE,), ("id", "payload", "group", "lane_priority"), "(new) → lane", decode=_one),
    _lane("lane_enqueue_unique", (BASE,), ("id", "payload", "group", "lane_priority", "unique_ms", "replace"),
          "(new) → lane; lane → lane (replace)", decode=lambda reply: Admission(text(reply))),
    _lane("lane_claim", (LANES_READY, LANES_ACTIVE, BASE), ("lease_ms", "stamp"), "lane → lane-active",
          decode=_lane_claimed),
    _lane("lane_extends", (LANES_ACTIVE, BASE), ("lease_ms", "stamp", "id", "token"), "lane-active → lane-active",
          decode=lambda reply: [int(a) for a in reply]),
    _lane("lane_complete", (LANES_ACTIVE, BASE), ("id", "token", "result", "retention_ms"),
          "lane-active → (deleted)", decode=_one, fenced=True),
    _lane("lane_fail", (LANES_ACTIVE, "dead", BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms", "traceback"), "lane-active → lane | dead",
          decode=lambda reply: State(text(reply)), fenced=True),
    _lane("lane_release", (LANES_ACTIVE, BASE), ("id", "token", "delay_ms"), "lane-active → lane", decode=_one,
          fenced=True),
    _lane("lane_reap", (LANES_ACTIVE, "dead", BASE), ("max_stalled", "limit", "stamp"), "lane-active → lane | dead",
          decode=lambda reply: (_sweep(reply[:3]), None if reply[3] < 0 else int(reply[3]))),
    _lane("lane_reprocess", ("dead", BASE), ("id",), "dead → lane", decode=_one),
    _lane("lane_pause", (LANES_READY, BASE), ("group",), "lane → lane (held)", decode=_one),
    _lane("lane_resume", (BASE,), ("group",), "lane → lane", decode=_one),
    _lane("lane_limit", (BASE,), ("k", "scope"), "lane → lane"),
    _lane("lane_append", (BASE,), ("id", "token", "progress"), "lane-active → lane-active",
          decode=_one, fenced=True),
    _lane("lane_cancel", (LANES_ACTIVE, "dead", BASE), ("id",), "lane-active → dead", decode=_one),
    _lane("lane_remove", ("dead", BASE), ("id",), "lane | dead → (deleted)",
          decode=lambda reply: None if reply == 0 else State(text(reply))),
)


def _flow_jobs(reply: Sequence[Sequence[Any]] | int) -> list[tuple[Claimed, bool]] | Throttled:
    """FLOW_CLAIM's jobs, each with whether it is a parent (whose children have finished); or, when
    none was claimed, the wait until the next flow retry falls due."""
    if isinstance(reply, int):
        return Throttled(reply)
    return [(Claimed(text(job_id), raw, int(attempts)), parent == 1) for job_id, raw, attempts, parent in reply]


def _flow(name, keys, argv, move, decode=lambda reply: reply, fenced=False):
    return Verb(name, tuple(keys), tuple(argv), move=move, decode=decode, fenced=fenced)


# The flow scripts (SPEC §9.6, docs/lanes-and-flows.md "Flows"): scripts on both wires, never an
# EMQ command, so no native verb moves a flow job (the native COMPLETE and FAIL refuse a row with a
# `parent`). FLOW_ENQUEUE's KEYS are the bases of the flow's queues, as many as it uses; the dead
# set a flow job dies into is derived from the base (scripts/lib/flow.lua), as its row is.
FLOWS: tuple[Verb, ...] = (
    _flow("flow_enqueue", (), ("queue", "id", "payload", "priority", "parent", "children", "on_child_failure"),
          "(new) → flow:waiting | flow:pending", decode=_one),
    _flow("flow_claim", (FLOW_PENDING, FLOW_ACTIVE, FLOW_SCHEDULE, BASE), ("lease_ms", "limit"),
          "flow:pending → flow:active", decode=_flow_jobs),
    _flow("flow_extends", (FLOW_ACTIVE, BASE), ("lease_ms", "id", "token"), "flow:active → flow:active",
          decode=lambda reply: [int(a) for a in reply]),
    _flow("flow_complete", (FLOW_ACTIVE, BASE), ("id", "token", "result", "retention_ms"),
          "flow:active → (completed record); the parent's last child: flow:waiting → flow:pending",
          decode=_one, fenced=True),
    _flow("flow_fail", (FLOW_ACTIVE, FLOW_PENDING, FLOW_SCHEDULE, BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms", "traceback"),
          "flow:active → flow:pending | flow:schedule | dead", decode=lambda reply: State(text(reply)), fenced=True),
    _flow("flow_release", (FLOW_ACTIVE, FLOW_PENDING, BASE), ("id", "token"), "flow:active → flow:pending",
          decode=_one, fenced=True),
    _flow("flow_reap", (FLOW_ACTIVE, FLOW_PENDING, BASE), ("max_stalled", "limit"),
          "flow:active → flow:pending | dead", decode=_sweep),
    _flow("flow_append", (FLOW_ACTIVE, BASE), ("id", "token", "progress"), "flow:active → flow:active",
          decode=_one, fenced=True),
    _flow("flow_delay", (FLOW_ACTIVE, FLOW_SCHEDULE, BASE), ("id", "token", "delay_ms"),
          "flow:active → flow:schedule", decode=int, fenced=True),
    _flow("flow_cancel", (BASE,), ("id",), "flow:active | flow:pending | flow:schedule | flow:waiting → dead",
          decode=_one),
    # an admin's, once, after an upgrade from before parents kept their children's record (emq adopt-flows)
    _flow("flow_adopt", (BASE,), ("id", "child"), "flow:waiting → flow:waiting (its record of its children)",
          decode=int),
)

# The two declared reads: scripts on both wires, never an EMQ command.
READS: tuple[Verb, ...] = (
    Verb("counts", ("pending", "active", "schedule", "dead", "meta", BASE), (), decode=_counts),
    Verb("state", (BASE,), ("id",), decode=_state),
)

BY_NAME: dict[str, Verb] = {verb.name: verb for verb in VERBS + OPTIONAL + FLOWS + LANES + READS}

#: What EMQ.VERSION must list for a wire-6 connection, in registration order.
JOB_CORE_TOKENS: tuple[str, ...] = tuple(token for verb in VERBS for token in verb.tokens)

#: The tokens of the late arguments added to a verb after it landed, in the order they landed,
#: each once (CLAIM's and BCLAIM's ``rated`` share ``claim.rate``), listed after every row's
#: (trafikey's ARGUMENT_TOKENS); a late argument born with its verb carries the verb's own token.
#: tests/test_verbs_table.py checks this list against the rows' late arguments.
ARGUMENT_TOKENS: tuple[str, ...] = ("fail.traceback", "claim.rate")

#: The last optional verb registered before the argument tokens landed (trafikey's
#: ARGUMENT_TOKENS_AFTER): EMQ.VERSION lists the argument tokens after its tokens.
ARGUMENT_TOKENS_AFTER = "enqueue_unique"
_SPLIT = [verb.name for verb in OPTIONAL].index(ARGUMENT_TOKENS_AFTER) + 1

#: The optional tokens, in EMQ.VERSION's order (the order they landed): the optional verbs' up to
#: ARGUMENT_TOKENS_AFTER (the bus's first, after the job core's), the late arguments', then the
#: later verbs'.
OPTIONAL_TOKENS: tuple[str, ...] = (tuple(token for verb in OPTIONAL[:_SPLIT] for token in verb.tokens)
                                    + ARGUMENT_TOKENS
                                    + tuple(token for verb in OPTIONAL[_SPLIT:] for token in verb.tokens))

#: Every verb with a script (the thirteen job-core verbs, the bus and control verbs, the flow
#: scripts, the lanes, and the two reads).
SCRIPTED: tuple[Verb, ...] = tuple(verb for verb in VERBS + OPTIONAL + FLOWS + LANES + READS if verb.scripted)


def build_call(verb_name: str, keyspace: Keyspace, argv: Sequence[Any]) -> Call:
    """A call exactly as given, unchecked (tests use it to send what the checks would refuse)."""
    verb = BY_NAME[verb_name]
    return Call(verb, tuple(keyspace.key(suffix) for suffix in verb.keys), tuple(argv))
