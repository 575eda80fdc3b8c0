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

    @property
    def script_path(self) -> Path:
        return SCRIPTS_DIR / f"{self.name}.lua"

    @property
    def read_only(self) -> bool:
        return self.command is None


def _verb(name, keys, argv, move, tokens=None, scripted=True):
    command = "EMQ." + name.upper().replace("_", ".")
    return Verb(name, tuple(keys), tuple(argv), command, tuple(tokens or (name,)), scripted, move)


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
          tokens=("fail.flat",)),
    _verb("reprocess", ("dead", "pending", BASE), ("id",), "dead → pending"),
    _verb("requeue", ("active", "pending", BASE), ("id", "token"), "active → pending"),
    _verb("stalled_check", ("active", "pending", "dead", BASE), ("max_stalled", "limit"),
          "active → pending | dead", tokens=("stalled.check",)),
)

# The bus verbs (SPEC §6, §9.5; docs/spec.md §9.6): right after the job core, optional on
# wire 6 like every verb after it. Each is a job-core move (or a fenced write) plus what it
# tells: a result, an event, an outcome.
BUS: tuple[Verb, ...] = (
    _verb("append", ("active", BASE), ("id", "token", "progress"), "active → active"),
    _verb("failures_incr", ("active", "pending", "schedule", "dead", BASE),
          ("id", "token", "error", "max_attempts", "backoff_ms", "traceback"),
          "active → pending | scheduled | dead", tokens=("failures.incr",)),
    _verb("publish", ("active", BASE), ("id", "token", "result", "retention_ms"), "active → (completed record)"),
)

# The control verbs (SPEC §9.4): registered after the job core, in the order added. A wire-6
# connection does not require them; it sends one only when EMQ.VERSION lists its token.
CONTROL: tuple[Verb, ...] = (
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

BY_NAME: dict[str, Verb] = {verb.name: verb for verb in VERBS + BUS + CONTROL + READS}

#: What EMQ.VERSION must list for a wire-6 connection, in registration order.
JOB_CORE_TOKENS: tuple[str, ...] = tuple(token for verb in VERBS for token in verb.tokens)

#: Every verb with a script (the job-core verbs, the bus and control verbs, and the two reads).
SCRIPTED: tuple[Verb, ...] = tuple(verb for verb in VERBS + BUS + CONTROL + READS if verb.scripted)
