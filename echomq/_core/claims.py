"""Claims (no I/O): CLAIM, CLAIMS, BCLAIM and LANE_CLAIM, and the worker's exchange that settles
and claims in one round trip. Each answers :class:`Claims`: the jobs, and what the round learned
(paused, the rate limit's wait, no lanes), returned to its caller rather than left on the queue,
so two callers of one queue each read their own."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from .. import errors
from .base import Job, Op, QueueBase, raise_first
from .batching import batched_settles, settle_answers
from .._protocol.verbs import BY_NAME, CLAIMS_MAX, LIMIT_MAX, NO_LANES, Call, Plain, Throttled, check_int

CLAIMS = BY_NAME["claims"]  #: its answer is a list of CLAIM answers (``_claims`` flattens it)


class Claims(list):
    """The jobs a round of claims took (a list of :class:`Job`, as ever) and what the round learned
    besides, in the way ``os.stat_result`` is a tuple with more to say:

    * ``paused``: wire 4's pause read, which rides with the flat claims, found the queue paused (they
      take nothing then, but for a claim made as the queue was resumed in between);
    * ``wait_ms``: the queue's rate limit held at least one claim; the ms (server clock) until its
      window frees a start (docs/scheduling.md "Rate limits"); None when none was held;
    * ``no_lanes``: a lane claim found that the queue never had a lane job;
    * ``due_ms`` (flow claims): with no flow job claimed, the ms until one may be (a retry's backoff
      ends, or the rate limit's window frees), 0 while flows are under way without one (a parent
      waits, a flow lease is held), None when the queue has no flow work.

    A list compares as a list: ``Claims([], wait_ms=5) == []``."""

    __slots__ = ("paused", "wait_ms", "no_lanes", "due_ms")

    def __init__(self, jobs: Iterable[Job] = (), *, paused: bool = False, wait_ms: int | None = None,
                 no_lanes: bool = False, due_ms: int | None = None) -> None:
        super().__init__(jobs)
        self.paused = paused
        self.wait_ms = wait_ms
        self.no_lanes = no_lanes
        self.due_ms = due_ms

    def __repr__(self) -> str:
        learned = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__
                            if getattr(self, name) not in (False, None))
        return f"Claims({list.__repr__(self)}{', ' if learned else ''}{learned})"


class ClaimOps(QueueBase):
    """Claiming: flat claims (one at a time, in batches, blocking), lane claims, and the exchange."""

    def _claim_calls(self, count: int, lease_ms: int) -> list[Call]:
        """``count`` flat claims: CLAIMS calls of up to CLAIMS_MAX jobs each where the connection
        carries the verb (one command for the batch), else ``count`` CLAIMs."""
        if count > 1 and self.codec.supports("claims"):
            return [self.build("claims", lease_ms, min(CLAIMS_MAX, count - start), *self._rated())
                    for start in range(0, count, CLAIMS_MAX)]
        return [self.build("claim", lease_ms, *self._rated())] * count

    def _lane_claim_calls(self, count: int, lease_ms: int) -> list[Call]:
        return [self.build("lane_claim", lease_ms, self._stamp)] * count

    def bclaim_call(self, lease_ms: int, timeout_ms: int) -> Call:
        return self.build("bclaim", lease_ms, timeout_ms, *self._rated())

    def claimed(self, reply: Sequence[Any] | int) -> Job | Throttled | None:
        """The job in a CLAIM or BCLAIM reply (a waiter reads BCLAIM's on a socket of its own), or
        the rate limit's wait."""
        answer = BY_NAME["claim"].decode(reply)
        return answer if isinstance(answer, Throttled) else self._job(answer)

    def _claims(self, calls: Sequence[Call], replies: Sequence[Any], paused: bool = False) -> Claims:
        """The jobs claimed, with the rate limit's wait and whether the queue never had a lane job."""
        raise_first(replies)
        answers: list[Any] = []
        for call, reply in zip(calls, replies):
            answer = call.verb.answer(call, reply)
            if call.verb is CLAIMS:  # CLAIMS answers a list of CLAIM answers
                answers += answer
            else:
                answers.append(answer)
        waits = [answer.wait_ms for answer in answers if isinstance(answer, Throttled)]
        jobs = (self._job(answer) for answer in answers)
        return Claims([job for job in jobs if job is not None], paused=paused, wait_ms=min(waits) if waits else None,
                      no_lanes=any(answer is NO_LANES for answer in answers))  # identity: `in` would call __eq__

    def _pause_read(self) -> Plain:
        return Plain(("HGET", self.keys.meta, "paused"))

    @staticmethod
    def _paused_claims(paused: bool, replies: Sequence[Any]) -> list[Any]:
        """Wire 4's claim replies read beside their pause read, sent in the same round trip (SPEC §4):
        ``paused`` when it answered anything but nil, an error reply included. A paused queue's scripts read the
        pause themselves and claim nothing; a refusal of a meta the pause read could not read either
        is that read's, not raised. A claim made as the queue was resumed in between stands."""
        if not paused:
            return list(replies)
        return [[] if isinstance(reply, Exception) else reply for reply in replies]

    def op_claim(self, lease_ms: int) -> Op[Job | None]:
        jobs = yield from self.op_claim_many(1, lease_ms)
        return jobs[0] if jobs else None

    def op_bclaim(self, lease_ms: int, timeout_ms: int) -> Op[Job | None]:
        if self.wire == 4:
            raise errors.UnsupportedOnWire("bclaim needs wire 6 (trafikey): on wire 4 wait on the wake marker "
                                           f"{self.keys.wake} (BZPOPMIN), then claim")
        call = self.bclaim_call(lease_ms, timeout_ms)
        claims = self._claims([call], (yield [call]))
        return claims[0] if claims else None

    def op_claim_many(self, count: int, lease_ms: int) -> Op[Claims]:
        check_int("count", count, 1, LIMIT_MAX)
        calls = self._claim_calls(count, lease_ms)
        if self.wire == 4:
            pause, *replies = yield [self._pause_read(), *calls]
            paused = pause is not None
            return self._claims(calls, self._paused_claims(paused, replies), paused)
        return self._claims(calls, (yield calls))

    def op_lane_claim_many(self, count: int, lease_ms: int) -> Op[Claims]:
        """Up to ``count`` LANE_CLAIMs in one round trip: each the next job of the group whose turn it is."""
        check_int("count", count, 1, LIMIT_MAX)
        calls = self._lane_claim_calls(count, lease_ms)
        return self._claims(calls, (yield calls))

    def op_settle_and_claim(self, calls: Sequence[Call], count: int, lease_ms: int,
                            lanes: int = 0) -> Op[tuple[list[Any], Claims]]:
        """Settle ``calls`` (their batches as :meth:`op_settle_many` sends them), then ``count`` flat
        claims and ``lanes`` lane claims, in one round trip (on wire 4 the flat claims ride with their
        pause read: :meth:`_paused_claims`; a lane claim reads the pause itself)."""
        check_int("count", count, 0, LIMIT_MAX)
        check_int("lanes", lanes, 0, LIMIT_MAX)
        check_int("lease_ms", lease_ms, 1)
        claims = self._claim_calls(count, lease_ms)
        lane_claims = self._lane_claim_calls(lanes, lease_ms)
        settles, routes = batched_settles(calls, self.codec.supports)
        ahead = [*settles, *lane_claims]  # what goes before the flat claims
        paused = False
        if self.wire == 6 or not count:
            replies = (yield [*ahead, *claims]) if ahead or claims else []
            sent, claimed = replies[: len(ahead)], replies[len(ahead):]
        else:
            replies = yield [*ahead, self._pause_read(), *claims]
            sent, paused = replies[: len(ahead)], replies[len(ahead)] is not None
            claimed = self._paused_claims(paused, replies[len(ahead) + 1:])
        answers = settle_answers(calls, routes, sent)
        return answers, self._claims([*lane_claims, *claims], [*sent[len(settles):], *claimed], paused)
