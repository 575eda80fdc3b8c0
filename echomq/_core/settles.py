"""Settles and leases (no I/O): what a holder sends for a job it holds -- COMPLETE, PUBLISH (a
result kept), FAIL and FAILURES.INCR, DELAY, REQUEUE, each fenced by the job's token and built in
one place (``*_call``) to go alone or with others in one round trip (:meth:`SettleOps.op_settle_many`,
the completions in batches: :mod:`echomq._core.batching`) -- and its lease: EXTEND, EXTENDS, the look
for jobs no longer held.

Token-fenced verbs that answer ``0`` (or, on wire 6, refuse a row that is no longer active) raise
:class:`LeaseLost`: a caller that thought it held the job must not carry on as if it did.
``extend_many``, ``complete_many`` and ``settle_many`` report per job instead, because a batch is
partly lost by nature.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

from .. import errors
from .base import Job, JobRef, Op, QueueBase, id_and_token, lane_of, raise_first
from .batching import BATCHES, batched_settles, chunked, settle_answers
from .._protocol.keys import Keyspace
from .._protocol.results import MAX_RESULT_BYTES, encode_result
from .._protocol.verbs import BY_NAME, EXTENDS_MAX_PAIRS, Call, Plain, check_int, check_traceback, text


class SettleOps(QueueBase):
    """A held job's settles and lease."""

    # -- building the settles (pure) ---------------------------------------------
    def complete_call(self, job: JobRef, *, token: str | int | None = None, checked_already: bool = False) -> Call:
        """COMPLETE. ``checked_already``: ``job`` is a Job this process claimed, so its id and token are
        not checked again (the worker's settles)."""
        build = self._build_checked_already if checked_already else self.build
        if lane_of(job):  # a lane job's completion: no record kept
            return build("lane_complete", *id_and_token(job, token), b"", 0)
        return build("complete", *id_and_token(job, token))

    def fail_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                  token: str | int | None = None, traceback: str | None = None) -> Call:
        return self._failure("fail", job, error, max_attempts, backoff_ms, token, traceback)

    def failures_incr_call(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                           token: str | int | None = None, traceback: str | None = None) -> Call:
        """FAIL with the bus (FAIL's arguments): a death is told on the job's outcome channel."""
        return self._failure("failures_incr", job, error, max_attempts, backoff_ms, token, traceback)

    def _failure(self, verb: str, job: JobRef, error: str, max_attempts: int, backoff_ms: int,
                 token: str | int | None, traceback: str | None) -> Call:
        argv = [*id_and_token(job, token), error, max_attempts, backoff_ms]
        if lane_of(job):  # a lane job's failure: the lane script (no outcome is published)
            return self.build("lane_fail", *argv, traceback or "")  # always sent: '' for none
        # a wire-6 module that predates fail.traceback gets five ARGV: last_error is still written
        if traceback is not None and self.codec.carries(verb, "traceback"):
            argv.append(traceback)
        elif traceback is not None:
            check_traceback(traceback)  # refused the same whether or not it is sent
        return self.build(verb, *argv)

    def publish_call(self, job: JobRef, result: bytes, *, retention_ms: int, token: str | int | None = None,
                     checked_already: bool = False) -> Call:
        """COMPLETE with the outcome told (the bus): ``result`` (already encoded) kept as the job's
        completed record for ``retention_ms`` (0: no record). A lane job's is LANE_COMPLETE, which
        keeps the record and tells the outcome the same way. ``checked_already``: ``job`` is a Job this
        process claimed, ``result`` came from ``keepable_result`` (echomq/_protocol/results.py) and
        ``retention_ms`` from a Task, so none is checked again (the worker's settles)."""
        if checked_already:  # a Job claimed here (the worker's every completion): its id and token as claimed
            claimed: Job = job  # type: ignore[assignment]
            return BY_NAME["lane_complete" if claimed.group else "publish"].build_checked_already(
                self.keys, claimed.id, claimed.token, result, retention_ms)
        return self.build("lane_complete" if lane_of(job) else "publish", *id_and_token(job, token), result,
                          retention_ms)

    def delay_call(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> Call:
        if lane_of(job):  # back to its place in its lane; the group waits delay_ms
            return self.build("lane_release", *id_and_token(job, token), delay_ms)
        return self.build("delay", *id_and_token(job, token), delay_ms)

    def requeue_call(self, job: JobRef, *, token: str | int | None = None) -> Call:
        if lane_of(job):
            return self.build("lane_release", *id_and_token(job, token), 0)
        return self.build("requeue", *id_and_token(job, token))

    # -- sending them --------------------------------------------------------------
    def op_fenced(self, call: Call) -> Op[Any]:
        return (yield from self._one(call))

    def op_complete_many(self, jobs: Sequence[JobRef]) -> Op[list[bool]]:
        """COMPLETE each job; the flat ones as COMPLETES, one command per EXTENDS_MAX_PAIRS
        (docs/spec.md §18). Each job's answer as its COMPLETE's, in the order of ``jobs``."""
        batched = self._batched(jobs)
        if batched is None:
            answers = yield from self.op_settle_many([self.complete_call(job) for job in jobs])
        else:
            answers = yield from self._complete_batched(jobs, batched)
        raise_first([a for a in answers if not isinstance(a, errors.LeaseLost)])
        return [answer is True for answer in answers]

    def _batched(self, jobs: Sequence[JobRef]) -> list[bool] | None:
        """Which of ``jobs`` travel in COMPLETES: the flat ones, when there are several and the
        connection carries the verb (wire 4 always; wire 6 when EMQ.VERSION lists ``completes``);
        None when none does. A lane or flow job keeps its own verb (``complete_call``)."""
        if len(jobs) < 2 or not self.codec.supports("completes"):
            return None
        flat = [not lane_of(job) and not (isinstance(job, Job) and job.flow) for job in jobs]
        return flat if flat.count(True) > 1 else None

    def _complete_batched(self, jobs: Sequence[JobRef], batched: list[bool]) -> Op[list[Any]]:
        """The answers to ``jobs``, the ``batched`` ones sent as COMPLETES (:func:`chunked`, each pair
        checked as its COMPLETE's would be), the others each as its own verb, in one round trip. A
        per-job call is not built for a batched job: settle_many's grouping of calls would cost each
        a Call more (+22 % of the bare batched loop's client, counted)."""
        pairs = [part for job, batch in zip(jobs, batched) if batch for part in id_and_token(job, None)]
        batches = chunked(partial(self.build, "completes"), (), pairs, 2)
        answers = yield from self.op_settle_many(
            batches + [self.complete_call(job) for job, batch in zip(jobs, batched) if not batch])
        each, alone = iter(answers[:len(pairs) // 2]), iter(answers[len(pairs) // 2:])
        return [next(each) if batch else next(alone) for batch in batched]

    def completion_calls(self, parts: Sequence[Any], retention_ms: int | None) -> list[Call]:
        """The calls that complete flat jobs this process claimed (the worker's settles), from their
        ARGV one after another: (id, token) pairs, or with ``retention_ms`` (id, token, result)
        triples whose results ``keepable_result`` (echomq/_protocol/results.py) made. Several jobs travel as
        COMPLETES or PUBLISHES, one call per EXTENDS_MAX_PAIRS; one job, or a node without the
        batch verb, as single COMPLETEs or PUBLISHes. None is checked again, and no Call is built
        a job (a Call a job, grouped by :func:`batched_settles`, cost the worker 10 % more
        instructions a job: 132.3k against 120.2k, counted side by side); their answers come back
        one a job (:func:`settle_answers`)."""
        single, lead = ("complete", ()) if retention_ms is None else ("publish", (retention_ms,))
        batch, width = BATCHES[single]
        if len(parts) > width and self.codec.supports(batch):
            return chunked(partial(BY_NAME[batch].build_checked_already, self.keys), lead, parts, width)
        one = BY_NAME[single].build_checked_already
        return [one(self.keys, *parts[at:at + width], *lead) for at in range(0, len(parts), width)]

    def op_settle_many(self, calls: Sequence[Call]) -> Op[list[Any]]:
        """Each job's answer, in one round trip; the calls that batch (:func:`batched_settles`)
        sent as their batch verb, and a batch call's jobs answered one by one (:func:`settle_answers`)."""
        sent, routes = batched_settles(calls, self.codec.supports)
        replies = (yield sent) if sent else []
        return settle_answers(calls, routes, replies)

    def op_publish(self, job: JobRef, result: Any, retention_ms: int, token: str | int | None) -> Op[None]:
        data = encode_result(self.serializer, result, MAX_RESULT_BYTES)
        yield from self._one(self.publish_call(job, data, retention_ms=retention_ms, token=token))

    # -- the lease ------------------------------------------------------------------
    def op_extend(self, job: JobRef, lease_ms: int, token: str | int | None) -> Op[int]:
        if not lane_of(job):
            return (yield from self._one(self.build("extend", *id_and_token(job, token), lease_ms)))
        job_id, held = id_and_token(job, token)
        (deadline,) = yield from self._one(self.build("lane_extends", lease_ms, self._stamp, job_id, held))
        if not deadline:
            raise errors.LeaseLost("lane_extends", job_id, held, None)
        return deadline

    def op_extend_many(self, jobs: Sequence[JobRef | tuple[str, str]], lease_ms: int) -> Op[list[int]]:
        """EXTENDS for the flat jobs and LANE_EXTENDS for the lane jobs, in one round trip; the
        answers in the order of ``jobs``."""
        check_int("lease_ms", lease_ms, 1)
        lanes = [not isinstance(job, tuple) and bool(lane_of(job)) for job in jobs]
        pairs = [job if isinstance(job, tuple) else id_and_token(job, None) for job in jobs]
        calls: list[Call] = []
        for verb, lead, lane in (("extends", (lease_ms,), False), ("lane_extends", (lease_ms, self._stamp), True)):
            mine = [pair for pair, is_lane in zip(pairs, lanes) if is_lane is lane]
            calls += [self.call(verb, *lead, *[part for pair in mine[start:start + EXTENDS_MAX_PAIRS] for part in pair])
                      for start in range(0, len(mine), EXTENDS_MAX_PAIRS)]
        replies = (yield calls) if calls else []  # at most 1000 pairs a command: one per chunk
        raise_first(replies)
        answers = [answer for call, reply in zip(calls, replies) for answer in call.verb.answer(call, reply)]
        flat, lane = iter(answers[:lanes.count(False)]), iter(answers[lanes.count(False):])
        return [next(lane) if is_lane else next(flat) for is_lane in lanes]

    def op_not_held(self, jobs: Sequence[Job]) -> Op[dict[str, tuple[str | None, str | None]]]:
        """Which of ``jobs`` (claimed by the caller) are no longer in their lease set (``active``,
        ``lanes:active``, ``flow:active``): a cancel or the sweep took them. One ZMSCORE per set in
        one round trip, and only when some are gone, their rows (:meth:`op_rows_now`) in a second."""
        held: dict[str, list[str]] = {}
        for job in jobs:
            where = self.keys.key(Keyspace.FLOW_ACTIVE) if job.flow else \
                self.keys.key(Keyspace.LANES_ACTIVE) if job.group is not None else self.keys.active
            held.setdefault(where, []).append(job.id)
        replies = (yield [Plain(("ZMSCORE", where, *ids)) for where, ids in held.items()]) if held else []
        raise_first(replies)
        gone = [job_id for ids, scores in zip(held.values(), replies) for job_id, score in zip(ids, scores)
                if score is None]
        return (yield from self.op_rows_now(gone)) if gone else {}

    def op_rows_now(self, job_ids: Sequence[str]) -> Op[dict[str, tuple[str | None, str | None]]]:
        """Each job's row as it is now: its ``state`` and ``last_error`` (None: not there), one round trip."""
        rows = (yield [Plain(("HMGET", self.keys.job(job_id), "state", "last_error")) for job_id in job_ids]) \
            if job_ids else []
        raise_first(rows)
        return {job_id: (None if state is None else text(state), None if error is None else text(error))
                for job_id, (state, error) in zip(job_ids, rows)}
