"""The reaper: recovery of the leases STALLED.CHECK refuses (SPEC §9.6, docs/lanes-and-flows.md).

Lane rows (and flow children) are not native: the native STALLED.CHECK refuses a whole sweep
that meets one. So they are leased in sets of their own, and each family has a recovery script
that gives their expired leases STALLED.CHECK's verdicts with the same budget: recovered
(a stall counted), exempt (wire 6: the lease was stamped by another server run, a restart, not a
stall) or dead at ``max_stalled``. The worker's timers run :func:`op_reap` beside the sweep, on
the sweep's intervals.

Each family is one row of :data:`RECOVERIES`: its script takes KEYS ``(its lease set, dead,
base)`` (or its own) and ARGV ``max_stalled, limit, stamp``, and replies as STALLED.CHECK does,
``[[recovered], [exempt], [dead]]``. Its ``due`` sets are read in the same round trip: their
heads say when the reaper has work next (an earliest lease deadline, a held group's time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .core import Op, due_in_ms, raise_first
from .verbs import Plain, Sweep

if TYPE_CHECKING:
    from .core import QueueCore


@dataclass(frozen=True)
class Recovery:
    """One family of rows the reaper recovers."""

    verb: str  #: the recovery script (ARGV max_stalled, limit, stamp; STALLED.CHECK's reply)
    due: tuple[str, ...]  #: key suffixes of zsets scored by when the reaper has work (ms, server clock)


RECOVERIES: tuple[Recovery, ...] = (
    # expired lane leases; a group held by a retry's backoff or a delay takes its turn again
    Recovery("lane_reap", ("lanes:active", "lanes:held")),
)


def merged(sweeps: list[Sweep]) -> Sweep:
    return Sweep([i for s in sweeps for i in s.recovered], [i for s in sweeps for i in s.exempt],
                 [i for s in sweeps for i in s.dead])


def op_reap(core: QueueCore, max_stalled: int, limit: int) -> Op[tuple[Sweep, int | None]]:
    """Every recovery of one queue in one round trip: what they moved, and in how many ms (server
    clock) the earliest of their due sets' heads falls due (None: nothing waits)."""
    calls = [core.build(r.verb, max_stalled, limit, 1 if core.wire == 6 else 0) for r in RECOVERIES]
    heads = [Plain(("ZRANGE", core.keys.key(suffix), 0, 0, "WITHSCORES")) for r in RECOVERIES for suffix in r.due]
    replies = yield [*calls, *heads, Plain(("TIME",))]
    raise_first(replies)
    answers = [call.verb.answer(call, reply) for call, reply in zip(calls, replies)]
    now = replies[-1]
    due = [due_in_ms(head, now) for head in replies[len(calls):-1] if head]
    return merged(answers), min(due, default=None)
