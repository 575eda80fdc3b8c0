"""The reaper: recovery of the leases STALLED.CHECK refuses (SPEC §9.6, docs/lanes-and-flows.md).

Lane rows (and flow children) are not native: the native STALLED.CHECK refuses a whole sweep
that meets one. So they are leased in sets of their own, and each family has a recovery script
that gives their expired leases STALLED.CHECK's verdicts with the same budget: recovered
(a stall counted), exempt (wire 6: the lease was stamped by another server run, a restart, not a
stall) or dead at ``max_stalled``. The worker's timers run :func:`op_reap` beside the sweep, on
the sweep's intervals.

Each family is one script named in :data:`RECOVERIES`, with ARGV ``max_stalled, limit`` and,
if its row takes it, ``stamp`` (1 on wire 6: the restart exemption applies). It replies as
STALLED.CHECK does, ``[[recovered], [exempt], [dead]]``, optionally followed by when it has work
next (``lane_reap``: ms from now, server clock, -1 none), which its verb row decodes as a
``(Sweep, next_ms)`` pair. :func:`op_reap` sends every family's script in one round trip.
"""

from __future__ import annotations

from typing import AbstractSet

from .base import Op, QueueBase, raise_first
from .._protocol.verbs import BY_NAME, Sweep


#: The recovery scripts, one per family of rows STALLED.CHECK refuses.
RECOVERIES: tuple[str, ...] = (
    "lane_reap",  # expired lane leases; a group held by a retry's backoff or a delay takes its turn again
    "flow_reap",  # expired flow leases; a dead child's parent told (echomq._core.flows)
)


def merged(sweeps: list[Sweep]) -> Sweep:
    return Sweep([i for s in sweeps for i in s.recovered], [i for s in sweeps for i in s.exempt],
                 [i for s in sweeps for i in s.dead])


def op_reap(core: QueueBase, max_stalled: int, limit: int,
            without: AbstractSet[str] = frozenset()) -> Op[tuple[Sweep, int | None]]:
    """Every recovery of one queue (but those named in ``without``) in one round trip: what they
    moved, and in how many ms (server clock) the first of them has work again (None: none says)."""
    stamp = 1 if core.wire == 6 else 0
    calls = [core.build(verb, max_stalled, limit, *([stamp] if "stamp" in BY_NAME[verb].argv else []))
             for verb in RECOVERIES if verb not in without]
    replies = (yield calls) if calls else []
    raise_first(replies)
    answers = [call.verb.answer(call, reply) for call, reply in zip(calls, replies)]
    found = [answer if isinstance(answer, tuple) else (answer, None) for answer in answers]
    due = [next_ms for _, next_ms in found if next_ms is not None]
    return merged([sweep for sweep, _ in found]), min(due, default=None)
