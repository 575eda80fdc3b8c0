"""The verb table: the one place the Python side lists the job core's verbs.

Each row says which keys (as suffixes of the queue's base) and which ARGV a verb
takes, whether a Lua script serves it on wire 4, which ``EMQ.*`` command serves it
on wire 6, and the capability tokens that command advertises. The connection
dispatches from this table; the scripts and trafikey's registration table are
checked against it by tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCRIPTS_DIR = Path(__file__).parent / "scripts"
BASE = ""  # the key suffix that names the base itself, ``emq:{q}:``


@dataclass(frozen=True)
class Verb:
    name: str  #: the Python method, the script file and the Rust file: ``stalled_check``
    keys: tuple[str, ...]  #: KEYS in order, as suffixes of the base
    argv: tuple[str, ...]  #: ARGV names in order (EXTENDS repeats its trailing pair)
    command: str | None = None  #: the native command on wire 6; None for a declared read
    tokens: tuple[str, ...] = ()  #: capability tokens its native row advertises
    scripted: bool = True  #: served by ``scripts/<name>.lua`` on wire 4
    move: str = ""  #: the lifecycle arrow it performs, as docs/lifecycle.md lists it
    #: (argument, token): optional trailing ARGV added after the verb landed (SPEC §9.4), in
    #: order; the script reads each when given, and a wire-6 client sends one only when
    #: EMQ.VERSION lists its token
    late: tuple[tuple[str, str], ...] = ()

    @property
    def script_path(self) -> Path:
        return SCRIPTS_DIR / f"{self.name}.lua"

    @property
    def read_only(self) -> bool:
        return self.command is None


def _verb(name, keys, argv, move, tokens=None, scripted=True, late=()):
    command = "EMQ." + name.upper().replace("_", ".")
    return Verb(name, tuple(keys), tuple(argv), command, tuple(tokens or (name,)), scripted, move, tuple(late))


# Rows in the order of SPEC §3 and of trafikey's registration table.
VERBS: tuple[Verb, ...] = (
    _verb("enqueue", ("pending", BASE), ("id", "payload", "priority"), "(new) → pending"),
    _verb("claim", ("pending", "active", BASE), ("lease_ms",), "pending → active",
          tokens=("claim", "claim.pause")),
    _verb("extend", ("active", BASE), ("id", "token", "lease_ms"), "active → active"),
    _verb("extends", ("active", BASE), ("lease_ms", "id", "token"), "active → active"),
    _verb("complete", ("active", BASE), ("id", "token"), "active → (deleted)", tokens=("complete.flat",)),
    _verb("schedule", ("schedule", BASE), ("id", "payload", "delay_ms", "priority"), "(new) → scheduled"),
    _verb("promote", ("schedule", "pending", BASE), ("limit",), "scheduled → pending"),
    _verb("reschedule", ("schedule", BASE), ("id", "delay_ms"), "scheduled → scheduled"),
    _verb("delay", ("active", "schedule", BASE), ("id", "token", "delay_ms"), "active → scheduled"),
    _verb("fail", ("active", "pending", "schedule", "dead", BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms"), "active → pending | scheduled | dead",
          tokens=("fail.flat",), late=(("traceback", "fail.traceback"),)),
    _verb("reprocess", ("dead", "pending", BASE), ("id",), "dead → pending"),
    _verb("requeue", ("active", "pending", BASE), ("id", "token"), "active → pending"),
    _verb("stalled_check", ("active", "pending", "dead", BASE), ("max_stalled", "limit"),
          "active → pending | dead", tokens=("stalled.check",)),
)

# Optional verbs (SPEC §9.3/§9.4): registered after the job core (and the bus rows), in the
# order they landed: the blocking claim (native only), then the control verbs (a script each).
# A wire-6 connection requires none of them and uses one only when EMQ.VERSION lists its tokens.
OPTIONAL: tuple[Verb, ...] = (
    _verb("bclaim", ("pending", "active", BASE), ("lease_ms", "timeout_ms"),
          "pending → active (blocks while empty or paused)", tokens=("claim.block",), scripted=False),
    _verb("remove", ("pending", "schedule", "dead", BASE), ("id",), "pending | scheduled | dead → (deleted)"),
    _verb("cancel", ("active", "dead", BASE), ("id",), "active → dead"),
    _verb("purge", ("dead", BASE), ("age_ms", "limit"), "dead → (deleted)"),
    _verb("drain", ("pending", BASE), ("limit",), "pending → (deleted)"),
)

# The two declared reads: scripts on both wires, never an EMQ command.
READS: tuple[Verb, ...] = (
    Verb("counts", ("pending", "active", "schedule", "dead", "meta"), ()),
    Verb("state", (BASE,), ("id",)),
)

BY_NAME: dict[str, Verb] = {verb.name: verb for verb in VERBS + OPTIONAL + READS}

#: What EMQ.VERSION must list for a wire-6 connection, in registration order.
JOB_CORE_TOKENS: tuple[str, ...] = tuple(token for verb in VERBS for token in verb.tokens)

#: The tokens of the late arguments, listed after every row's (trafikey's ARGUMENT_TOKENS).
ARGUMENT_TOKENS: tuple[str, ...] = tuple(token for verb in VERBS + OPTIONAL for _, token in verb.late)

#: The optional tokens, in EMQ.VERSION's order: the optional verbs' (after the job core's and
#: the bus's), then the late arguments'.
OPTIONAL_TOKENS: tuple[str, ...] = tuple(token for verb in OPTIONAL for token in verb.tokens) + ARGUMENT_TOKENS

#: Every verb with a script (the thirteen job-core verbs, the control verbs and the two reads).
SCRIPTED: tuple[Verb, ...] = tuple(verb for verb in VERBS + OPTIONAL + READS if verb.scripted)
