"""Lanes (no I/O): a group's switches and counts, and the lane jobs drained from their lanes
(docs/lanes-and-flows.md). A lane job's claim, renewal and settles ride with the flat ones
(``claims``, ``settles``): its :attr:`Job.group` picks the lane scripts."""

from __future__ import annotations

from dataclasses import dataclass

from .. import errors
from .base import Op, QueueBase, raise_first
from .._protocol.keys import Keyspace, State
from .._protocol.verbs import LIMIT_MAX, Plain, check_int, text


@dataclass(frozen=True)
class GroupCounts:
    """One lane group as :meth:`Queue.groups` reads it."""

    waiting: int  #: in its lane, not started (a retry waiting out its backoff included)
    running: int  #: started and not settled
    paused: bool
    limit: int  #: k: how many may run at once (its own, else the queue's, else 1)


class LaneOps(QueueBase):
    """A queue's lane groups."""

    def op_pause_group(self, group: str) -> Op[None]:
        yield from self._one(self.build("lane_pause", group))

    def op_resume_group(self, group: str) -> Op[bool]:
        return (yield from self._one(self.build("lane_resume", group)))

    def op_set_lane_limit(self, k: int | None, group: str | None = None) -> Op[None]:
        """At most ``k`` jobs of ``group`` (None: of every group without its own) at once; k None
        removes the setting (back to the queue's, or to 1)."""
        if k is not None:
            check_int("k", k, 1, LIMIT_MAX)
        yield from self._one(self.build("lane_limit", k or 0, group))

    def op_lanes_waiting(self) -> Op[int]:
        """Groups that may start a job now or once a backoff passes (a paused one does not count)."""
        ready, held = yield [Plain(("ZCARD", self.keys.key(Keyspace.LANES_READY))),
                             Plain(("ZCARD", self.keys.key(Keyspace.LANES_HELD)))]
        raise_first([ready, held])
        return ready + held

    def op_groups(self) -> Op[dict[str, GroupCounts]]:
        """Every group with jobs waiting or running, or paused: its counts (two round trips)."""
        names, paused = yield [Plain(("SMEMBERS", self.keys.key(Keyspace.LANES_GROUPS))),
                               Plain(("SMEMBERS", self.keys.key(Keyspace.LANES_PAUSED)))]
        raise_first([names, paused])
        return (yield from self._group_counts(sorted({text(g) for g in names} | {text(g) for g in paused})))

    def op_group_page(self, most: int) -> Op[tuple[int, dict[str, GroupCounts]]]:
        """How many groups have jobs waiting or running, and the first ``most`` of them by name with
        their counts: a read bounded by ``most`` however many groups there are (the dashboard's)."""
        check_int("most", most, 1, LIMIT_MAX)
        groups = self.keys.key(Keyspace.LANES_GROUPS)
        total, names = yield [Plain(("SCARD", groups)), Plain(("SORT_RO", groups, "ALPHA", "LIMIT", 0, most))]
        raise_first([total, names])
        return total, (yield from self._group_counts([text(g) for g in names]))

    def _group_counts(self, groups: list[str]) -> Op[dict[str, GroupCounts]]:
        """``groups``' counts, in their order, in one round trip."""
        running, limits, paused = (self.keys.key(name) for name in (Keyspace.LANES_RUNNING, Keyspace.LANES_LIMIT,
                                                                    Keyspace.LANES_PAUSED))
        default, *replies = yield [Plain(("HGET", self.keys.meta, "lane_limit"))] + [
            Plain(cmd) for g in groups for cmd in (("ZCARD", self.keys.lane(g)), ("HGET", running, g),
                                                   ("SISMEMBER", paused, g), ("HGET", limits, g))]
        raise_first([default, *replies])
        return {g: GroupCounts(waiting, int(run or 0), bool(is_paused), int(k or default or 1))
                for g, (waiting, run, is_paused, k) in zip(groups, zip(*[iter(replies)] * 4))}

    def op_drain_lanes(self, limit: int) -> Op[int]:
        """Delete up to ``limit`` lane jobs waiting in their groups' lanes, each by LANE_REMOVE (so a
        lane left empty leaves the round, as a removal does): the groups, their lanes' heads, then the
        removals, three round trips. Returns how many were deleted; a job started meanwhile (LANE_REMOVE
        refuses an active row) is left to run."""
        check_int("limit", limit, 1, LIMIT_MAX)
        groups = yield from self._plain("SMEMBERS", self.keys.key(Keyspace.LANES_GROUPS))
        heads = (yield [Plain(("ZRANGE", self.keys.lane(text(g)), 0, limit - 1)) for g in sorted(groups)]) if groups else []
        raise_first(heads)
        calls = [self.build("lane_remove", text(job_id)) for head in heads for job_id in head][:limit]
        replies = (yield calls) if calls else []
        answers = [call.verb.answer(call, reply) for call, reply in zip(calls, replies)]
        raise_first([a for a in answers if isinstance(a, Exception) and not isinstance(a, errors.StateError)])
        return sum(1 for a in answers if isinstance(a, State))
