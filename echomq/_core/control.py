"""Moves no holder makes (no I/O): the timers' -- PROMOTE, STALLED.CHECK, each with the next time it
has work -- and the operator's: reprocess, remove, cancel, purge, drain, pause and resume, the rate
limit."""

from __future__ import annotations

from typing import Any, Sequence

from .. import errors
from .base import Op, QueueBase, raise_first, unless_error
from .._protocol.keys import State
from .._protocol.rates import RateLimit, parse_rate_limit
from .._protocol.verbs import BY_NAME, Call, Plain, Sweep, check_int

NOT_A_FLOW_JOB = f"EMQSTATE {BY_NAME['flow_cancel'].label} row is not a flow job"  #: flow_cancel's refusal of a flat row


def due_in_ms(head: Sequence[Any], now: Sequence[Any]) -> int:
    """Ms from ``now`` (a TIME reply) until the schedule's head (ZRANGE 0 0 WITHSCORES) is due."""
    score = head[0][1] if isinstance(head[0], (list, tuple)) else head[1]  # RESP3 pairs or a flat RESP2 list
    seconds, micros = now
    return int(float(score)) - (int(seconds) * 1000 + int(micros) // 1000)


class ControlOps(QueueBase):
    """The timers' verbs and the operator's."""

    # -- the timers ------------------------------------------------------------------
    def op_promote(self, limit: int) -> Op[int]:
        return (yield from self._one(self.build("promote", limit)))

    def _and_head(self, call: Call, set_key: str) -> Op[tuple[Any, int | None]]:
        """``call``, then the head of ``set_key`` and the server clock in the same round trip:
        (its answer, ms from now until the head's score, None when the set is empty)."""
        reply, head, now = yield [call, Plain(("ZRANGE", set_key, 0, 0, "WITHSCORES")), Plain(("TIME",))]
        raise_first([head, now])
        return unless_error(call.verb.answer(call, reply)), None if not head else due_in_ms(head, now)

    def op_promote_and_next_due(self, limit: int) -> Op[tuple[int, int | None]]:
        return (yield from self._and_head(self.build("promote", limit), self.keys.schedule))

    def op_stalled_check_and_next_expiry(self, max_stalled: int, limit: int) -> Op[tuple[Sweep, int | None]]:
        return (yield from self._and_head(self.build("stalled_check", max_stalled, limit), self.keys.active))

    def op_reschedule(self, job_id: str, delay_ms: int) -> Op[int | None]:
        return (yield from self._one(self.build("reschedule", job_id, delay_ms)))

    def op_stalled_check(self, max_stalled: int, limit: int) -> Op[Sweep]:
        return (yield from self._one(self.build("stalled_check", max_stalled, limit)))

    # -- the operator's -------------------------------------------------------------
    def op_reprocess(self, job_id: str) -> Op[bool]:
        """A dead job back to work, its budgets refilled: a flat row by REPROCESS; a lane row, which
        REPROCESS refuses on both wires, by lane_reprocess at its lane's tail (a second round trip
        only for lane rows)."""
        try:
            return (yield from self._one(self.build("reprocess", job_id)))
        except errors.StateError as refused:
            if refused.reply != errors.LANE_ROW:
                raise
        return (yield from self._one(self.build("lane_reprocess", job_id)))

    def op_remove(self, job_id: str) -> Op[State | None]:
        """A waiting or dead job deleted: a flat row by REMOVE; a lane row, which REMOVE refuses on
        both wires, by lane_remove (a second round trip only for lane rows). A flow job is not
        removed (its parent would wait for it forever): cancel it."""
        try:
            return (yield from self._one(self.build("remove", job_id)))
        except errors.StateError as refused:
            if refused.reply == errors.FLOW_CHILD:
                raise errors.StateError(f"{errors.FLOW_CHILD}: a flow job is not removed (its parent waits for "
                                        "it); cancel it (Queue.cancel): it dies and its parent is told") from None
            if refused.reply != errors.LANE_ROW:
                raise
        return (yield from self._one(self.build("lane_remove", job_id)))

    def op_cancel(self, job_id: str) -> Op[bool]:
        """A job stopped from outside, dead with ``cancelled``: an active flat row by CANCEL; a lane
        row, which CANCEL refuses on both wires, by lane_cancel; a flow job by flow_cancel, in any
        state but dead (its parent told). The second round trip is only for refused rows: a flat
        row's own refusal is the one raised."""
        try:
            return (yield from self._one(self.build("cancel", job_id)))
        except errors.StateError as refused:
            if refused.reply == errors.LANE_ROW:
                return (yield from self._one(self.build("lane_cancel", job_id)))
            try:
                return (yield from self._one(self.build("flow_cancel", job_id)))
            except errors.StateError as not_flow:
                if not_flow.reply == NOT_A_FLOW_JOB:
                    raise refused from None
                raise

    def op_purge(self, older_than_ms: int, limit: int) -> Op[int]:
        check_int("older_than_ms", older_than_ms, 0)  # the verb's age_ms, named for the caller
        return (yield from self._one(self.build("purge", older_than_ms, limit)))

    def op_drain(self, limit: int) -> Op[int]:
        return (yield from self._one(self.build("drain", limit)))

    def op_pause(self) -> Op[None]:
        yield from self._plain("HSET", self.keys.meta, "paused", 1)

    def op_set_rate_limit(self, rate: str | RateLimit | None) -> Op[None]:
        """The queue's rate limit (every claim on either wire checks it, docs/spec.md §13), or
        None to lift it."""
        parsed = None if rate is None else parse_rate_limit(rate)
        if not self.codec.carries("claim", "rated"):
            raise errors.UnsupportedOnWire("a rate limit needs a node whose EMQ.VERSION lists claim.rate: "
                                           "upgrade the trafikey module (an older one would ignore it)")
        if parsed is None:
            yield from self._plain("HDEL", self.keys.meta, "rate_limit", "rate_window")
        else:
            yield from self._plain("HSET", self.keys.meta, "rate_limit", parsed.limit, "rate_window", parsed.window_ms)

    def op_rate_limit(self) -> Op[RateLimit | None]:
        """The queue's rate limit as its meta holds it (None: none)."""
        limit, window = yield from self._plain("HMGET", self.keys.meta, "rate_limit", "rate_window")
        if limit is None or int(limit) <= 0:
            return None
        return RateLimit(int(limit), int(window))

    def op_resume(self) -> Op[None]:
        yield from self._plain("HDEL", self.keys.meta, "paused")  # a refusal (a wrong-typed meta) stops here
        if self.wire == 4:
            # a worker blocked on the wake marker claims at once; wire 6's blocked claimers hear the HDEL
            yield from self.op_wake()

    def op_wake(self) -> Op[None]:
        """Write the queue's wake marker (docs/spec.md §10): one worker blocked on it claims at once."""
        yield from self._plain("ZADD", self.keys.wake, 0, "w")
