"""Planted defects: deliberately wrong variants of one verb, to prove the instrument.

* **Script plants** are modified copies of a shipped script, made here from the
  real file by one textual edit and loaded only into the instrument's own script
  node. The shipped scripts are never touched.
* **Native plants** live in trafikey behind the cargo feature ``planted`` (not a
  default feature: a release build has none of them), in ``trafikey/src/plant.rs``: each
  alters the write plan of the verbs it names where every plan is carried out
  (``Host::apply``), so no verb body knows of them. A planted build reads
  ``TRAFIKEY_PLANT`` once and switches on that one defect.

Each plant names its verb family. A test runs the catalogue once per plant and
fails if the instrument reports no UNEXPECTED difference.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .._protocol.verbs import BY_NAME

FAMILIES = ("admission", "claim", "lease", "settle", "schedule", "recovery", "operator", "bus")


@dataclass(frozen=True)
class ScriptPlant:
    name: str
    family: str
    verb: str
    old: str  #: the exact text replaced in the shipped script
    new: str
    what: str

    def source(self) -> bytes:
        text = BY_NAME[self.verb].source().decode()  # with its library, as the client loads it
        if text.count(self.old) != 1:
            raise ValueError(f"plant {self.name}: {self.verb}.lua no longer contains {self.old!r} exactly once")
        return text.replace(self.old, self.new).encode()


@dataclass(frozen=True)
class NativePlant:
    name: str  #: the value of TRAFIKEY_PLANT
    family: str
    verb: str
    what: str


SCRIPT_PLANTS: tuple[ScriptPlant, ...] = (
    ScriptPlant("script:enqueue_unique.no_window", "admission", "enqueue_unique",
                "if mtype == 'hash' then return 'unique' end", "",
                "enqueue_unique admits an id within its unique window"),
    ScriptPlant("script:complete.no_window", "settle", "complete",
                "redis.call('PEXPIREAT', marker, finished + tonumber(window))", "",
                "complete keeps a unique window's marker forever"),
    ScriptPlant("script:enqueue.attempts_one", "admission", "enqueue",
                "'attempts', '0', 'created', created)\nend", "'attempts', '1', 'created', created)\nend",
                "enqueue without priority writes attempts 1"),
    ScriptPlant("script:enqueue.no_wake", "admission", "enqueue",
                "if seen % 2 == 0 then wake(KEYS[2]) end\n", "",
                "enqueue forgets the wake marker (SPEC §9.3): a blocked wire-4 worker never hears of the job"),
    ScriptPlant("script:claim.rate_unlogged", "claim", "claim",
                "  redis.call('ZADD', log, now, id .. ':' .. attempts)\n", "",
                "claim checks the rate limit but never logs a start: the limit holds nothing"),
    ScriptPlant("script:claims.ghost_counted", "claim", "claims",
                "      claimed = claimed + 1\n      if limit then recent = recent + 1 end\n    end\n",
                "      if limit then recent = recent + 1 end\n    end\n    claimed = claimed + 1\n",
                "claims counts a ghost it passes over as a job claimed"),
    ScriptPlant("script:promote.always_wake", "schedule", "promote",
                "if #due > 0 then wake(", "if true then wake(",
                "promote writes the wake marker even when it moved nothing"),
    ScriptPlant("script:schedule.drop_priority", "admission", "schedule",
                "'created', now, 'priority', ARGV[4])", "'created', now)",
                "schedule forgets the priority field"),
    ScriptPlant("script:claim.double_lease", "claim", "claim",
                "now + tonumber(lease[2])", "now + 2 * tonumber(lease[2])",
                "claim leases for twice lease_ms"),
    ScriptPlant("script:extend.ignore_token", "lease", "extend",
                "if held[1] ~= token then return nil, 0 end", "",
                "extend renews whatever the token"),
    ScriptPlant("script:complete.no_metric", "settle", "complete",
                "redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)\n", "",
                "complete does not count the job"),
    ScriptPlant("script:completes.count_one", "settle", "completes",
                "redis.call('HINCRBY', base .. 'metrics:completed', 'count', #kept)",
                "redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)",
                "completes counts a batch as one job"),
    ScriptPlant("script:publishes.count_one", "bus", "publishes",
                "redis.call('HINCRBY', base .. 'metrics:completed', 'count', #kept)",
                "redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)",
                "publishes counts a batch as one job"),
    ScriptPlant("script:fail.keep_error", "settle", "fail",
                "local failure = {'state', state, 'last_error', error, 'failed', now}",
                "local failure = {'state', state, 'failed', now}",
                "fail forgets last_error"),
    ScriptPlant("script:fail.drop_traceback", "settle", "fail",
                "if ARGV[6] then failure[7], failure[8] = 'traceback', ARGV[6] end\n", "",
                "fail forgets the traceback it was given"),
    ScriptPlant("script:promote.ignore_priority", "schedule", "promote",
                "redis.call('ZADD', KEYS[2], pending_score(seen[1]), id)",
                "redis.call('ZADD', KEYS[2], 0, id)",
                "promote puts every job at priority 0"),
    ScriptPlant("script:delay.keep_active", "schedule", "delay",
                "redis.call('ZREM', KEYS[1], ARGV[1])\n", "",
                "delay leaves the job in active too"),
    ScriptPlant("script:stalled_check.double_count", "recovery", "stalled_check",
                "redis.call('HINCRBY', row, 'stalled', 1)", "redis.call('HINCRBY', row, 'stalled', 2)",
                "the sweep counts two stalls per expiry"),
    ScriptPlant("script:reprocess.reset_attempts", "recovery", "reprocess",
                "'failures', '0', 'stalled', '0')", "'failures', '0', 'stalled', '0', 'attempts', '0')",
                "reprocess resets the attempts counter"),
    ScriptPlant("script:append.wrong_progress", "bus", "append",
                "'progress', id, token, 'progress', progress)", "'progress', id, token, 'progress', 'x')",
                "append's progress event carries the wrong value"),
    ScriptPlant("script:drain.keep_rows", "operator", "drain",
                "for _, row in ipairs(rows) do redis.call('DEL', row) end", "",
                "drain leaves the rows behind"),
)

#: The native plants compiled into trafikey with ``--features planted`` (see docs/parity.md).
NATIVE_PLANTS: tuple[NativePlant, ...] = (
    NativePlant("enqueue.forget_priority", "admission", "enqueue",
                "enqueue writes no priority field (pending still gets the score)"),
    NativePlant("claim.blank_epoch", "claim", "claim", "claim stamps the lease with an empty lease_epoch"),
    NativePlant("claim.rate_unlogged", "claim", "claim",
                "claim checks the rate limit but logs no start (docs/spec.md §13): the limit holds nothing"),
    NativePlant("complete.no_metric", "settle", "complete", "complete does not count the job"),
    NativePlant("epoch.stale", "lease", "extend",
                "a renewal (extend, extends) stamps the lease with an epoch that is not the server's run_id"),
    NativePlant("reschedule.ignore_delay", "schedule", "reschedule", "reschedule's due time ignores delay_ms"),
    NativePlant("reprocess.keep_dead", "recovery", "reprocess", "reprocess leaves the job in dead as well"),
    NativePlant("cancel.no_metric", "operator", "cancel", "cancel does not count the job in metrics:failed"),
    NativePlant("publish.keep_forever", "bus", "publish", "publish keeps the completed record with no expiry"),
    NativePlant("enqueue_unique.forget_window", "admission", "enqueue_unique",
                "enqueue_unique does not keep the unique window on the row"),
)

PLANTED_DIR = Path(__file__).resolve().parents[2] / "trafikey" / "target" / "planted" / "release"
PLANTED_ENV = "ECHOMQ_PLANTED_MODULE"


def planted_module_path() -> str | None:
    """The trafikey build with ``--features planted``: ``ECHOMQ_PLANTED_MODULE``, else the crate's
    ``target/planted`` (``cargo build --release --features planted --target-dir trafikey/target/planted``)."""
    override = os.environ.get(PLANTED_ENV)
    if override:
        return override if os.path.isfile(override) else None
    built = PLANTED_DIR / "libtrafikey.so"
    return str(built) if built.is_file() else None

SCRIPT_PLANT = {plant.name: plant for plant in SCRIPT_PLANTS}
