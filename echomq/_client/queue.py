"""The job-core API of one queue: one method per verb, the same on wire 4 and wire 6.

:class:`Queue` only sends: every method drives one operation of
:class:`~echomq._core.core.QueueCore` (which builds the calls, checks the limits and reads
the replies) over its :class:`~echomq.Connection`. :class:`echomq.aio.Queue` drives
the same operations with ``await``.
"""

from __future__ import annotations

import time
from contextlib import suppress
from typing import AbstractSet, Any, Iterable, Iterator, Sequence

from .connection import TRANSPORT_ERRORS, Connection, run_op
from .. import errors
from .._core import reaper
from .._core.core import (MAX_PAYLOAD_BYTES, Children, Claims, Done, Enqueued, GroupCounts, Job, JobRef, Op, QueueCore,
                          T, check_connection, check_wait, time_left)
from .._protocol.events import DEFAULT_MAXLEN, Event
from .._core.flows import Flow, op_enqueue_flow, plan
from .._protocol.rates import RateLimit
from .._protocol.results import TOLD_GRACE_S, ResultLayout, Status, relink_pause_s, wait_slice_s
from .._protocol.keys import State, check_job_id
from .._protocol.serializers import JSON, Serializer
from .._protocol.verbs import EXTENDS_MAX_PAIRS, I64_MAX, LIMIT_MAX, PRIORITY_MAX, Call, Counts, Sweep, check_int

__all__ = ["Claims", "Counts", "Enqueued", "EXTENDS_MAX_PAIRS", "I64_MAX", "Job", "JobRef", "LIMIT_MAX",
           "MAX_PAYLOAD_BYTES", "PRIORITY_MAX", "Queue", "Sweep", "check_int"]


class Queue(QueueCore):
    """One queue on one connection: ``Queue(conn, "emails")``. Payloads over ``max_payload_bytes``
    (1 MiB by default; None lifts it) are refused before sending (:class:`~echomq.PayloadError`)."""

    def __init__(self, connection: Connection, name: str, *, serializer: Serializer = JSON,
                 max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        check_connection(connection, Connection, "echomq.Queue", "echomq.connect(url)")
        super().__init__(name, connection, serializer, max_payload_bytes)
        self.connection = connection

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, wire={self.wire})"

    def _run(self, op: Op[T]) -> T:
        """Drive an operation: each round trip it yields is sent, blocking, and its replies sent back
        (to the queue's own node: a round trip may carry TIME, which has no key to route by)."""
        return run_op(self.connection, op, self.keys)

    # -- admission ------------------------------------------------------------
    def enqueue(self, payload: Any, *, id: str | None = None, priority: int = 0, unique_for: float | None = None,
                replace: bool = False, group: str | None = None) -> Enqueued:
        """Add a job to pending. Lower priority numbers are served first; equal ones FIFO.

        An id that has a row is not enqueued twice. With ``unique_for`` (seconds) it is also not
        admitted for that long after its job completed; with ``replace`` a pending or scheduled
        job of that id takes the new payload (debounce). Both need ``id`` (EMQ.ENQUEUE.UNIQUE);
        :attr:`Enqueued.reason` says what happened.

        With ``group`` the job is a lane job (docs/lanes-and-flows.md): the jobs of one group
        run in their enqueue order, at most k at a time (:meth:`set_lane_limit`; 1 by default),
        and the groups take turns."""
        return self._run(self.op_enqueue(payload, id, priority, unique_for, replace, group))

    def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0, group: str | None = None) -> list[Enqueued]:
        """Enqueue many jobs: every payload encoded first (one that cannot be sends nothing), then
        500 a command (ENQUEUES), every command in one streamed round trip (each job is its own
        atomic enqueue; docs/spec.md §20). The answers are in the payloads' order."""
        return self._run(self.op_enqueue_many(payloads, priority, group))

    def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, priority: int = 0,
                 unique_for: float | None = None, replace: bool = False) -> Enqueued:
        """Add a job that becomes ready ``delay_ms`` from now (server clock), via PROMOTE.
        ``unique_for`` and ``replace`` as :meth:`enqueue`; a replaced job is due ``delay_ms``
        from now."""
        return self._run(self.op_schedule(payload, delay_ms, id, priority, unique_for, replace))

    # -- the lease --------------------------------------------------------------
    def claim(self, lease_ms: int) -> Job | None:
        """Take the head of pending under a lease of ``lease_ms``; None when there is nothing to take."""
        return self._run(self.op_claim(lease_ms))

    def bclaim(self, lease_ms: int, timeout_ms: int) -> Job | None:
        """CLAIM, but while the queue is empty or paused wait up to ``timeout_ms`` for a job
        (EMQ.BCLAIM, wire 6 with the ``claim.block`` token); None when none came. It also answers
        None early when the schedule's head moved earlier (a waiter recomputes its timers).
        Wire 4 cannot block inside a script: a wire-4 worker waits on the wake marker instead."""
        return self._run(self.op_bclaim(lease_ms, timeout_ms))

    def claim_many(self, count: int, lease_ms: int) -> Claims:
        """Claim up to ``count`` jobs in one pipelined round trip, each its own atomic CLAIM.
        Fewer come back when pending runs short (or a head is a ghost); none while paused. The
        list is a :class:`~echomq.Claims`: its ``paused`` and ``wait_ms`` (the rate limit held a
        claim: the ms until its window frees a start) say why it is short."""
        return self._run(self.op_claim_many(count, lease_ms))

    def claim_lanes(self, count: int, lease_ms: int) -> Claims:
        """Up to ``count`` lane jobs in one round trip, each the next of the group whose turn it is
        (LANE_CLAIM); a job's :attr:`Job.group` sends its settles to the lane scripts. A
        :class:`~echomq.Claims`, as :meth:`claim_many`'s (``no_lanes``: the queue never had a lane job)."""
        return self._run(self.op_lane_claim_many(count, lease_ms))

    def extend(self, job: JobRef, lease_ms: int, *, token: str | int | None = None) -> int:
        """Renew the lease to now + ``lease_ms``; returns the new deadline (ms, server clock)."""
        return self._run(self.op_extend(job, lease_ms, token))

    def extend_many(self, jobs: Sequence[JobRef | tuple[str, str]], lease_ms: int) -> list[int]:
        """Renew many leases (one EXTENDS per 1000, pipelined); each answer is the new deadline, or 0 if lost."""
        return self._run(self.op_extend_many(jobs, lease_ms))

    def not_held(self, jobs: Sequence[Job]) -> dict[str, tuple[str | None, str | None]]:
        """Which of ``jobs`` (claimed here) left their lease set, each with its row's ``state`` and
        ``last_error`` now (None: no row): the worker's look for cancels."""
        return self._run(self.op_not_held(jobs))

    def rows_now(self, job_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
        """Each job's row's ``state`` and ``last_error`` now (None: not there), in one round trip."""
        return self._run(self.op_rows_now(job_ids))

    # -- settling ---------------------------------------------------------------
    # Each fenced settle is built in one place (``*_call``, pure), then sent alone by the
    # method of the same name, or with others in one round trip by ``settle_many``.
    def complete(self, job: JobRef, *, token: str | int | None = None) -> None:
        """Done: the row is deleted and counted. Raises LeaseLost if the token no longer holds."""
        self._run(self.op_fenced(self.complete_call(job, token=token)))

    def complete_many(self, jobs: Sequence[JobRef]) -> list[bool]:
        """Complete many jobs in one round trip (the flat ones as one COMPLETES per 1000 where the
        connection carries it: docs/spec.md §18); False where the lease was lost."""
        return self._run(self.op_complete_many(jobs))

    def fail(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
             token: str | int | None = None, traceback: str | None = None) -> State:
        """Record a failure: back to pending (no backoff), to schedule (backoff) or dead (out of budget).

        ``error`` becomes the row's ``last_error``; ``traceback`` (at most 8 KiB of UTF-8, ``""``
        for none) its ``traceback`` field, written in the same step. A wire-6 module whose
        EMQ.VERSION lacks ``fail.traceback`` is sent the failure without it."""
        call = self.fail_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token,
                              traceback=traceback)
        return self._run(self.op_fenced(call))

    def failures_incr(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                      token: str | int | None = None, traceback: str | None = None) -> State:
        """:meth:`fail` with the bus (EMQ.FAILURES.INCR): the same move and arguments, and a death
        is told on the job's outcome channel (a :meth:`result` waiter wakes)."""
        call = self.failures_incr_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token,
                                       traceback=traceback)
        return self._run(self.op_fenced(call))

    def delay(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> int:
        """Put a held job back to wait ``delay_ms``; returns its due time (ms, server clock)."""
        return self._run(self.op_fenced(self.delay_call(job, delay_ms, token=token)))

    def publish(self, job: JobRef, result: Any = None, *, retention_ms: int, token: str | int | None = None) -> None:
        """Complete and keep ``result`` (encoded by this queue's serializer, at most 1 MiB) for
        ``retention_ms``; a :meth:`result` waiter is woken. Raises LeaseLost if the token no longer
        holds, PayloadError (nothing sent) if the result cannot be encoded."""
        self._run(self.op_publish(job, result, retention_ms, token))

    def progress(self, job: JobRef, value: Any, *, token: str | int | None = None) -> None:
        """Report a held job's progress (JSON, at most 64 KiB): kept in its row as ``progress`` and,
        when events are on, appended as a ``progress`` event. Raises LeaseLost for a holder whose
        lease is gone: it cannot write."""
        self._run(self.op_fenced(self.append_call(job, value, token=token)))

    def progress_of(self, job_id: str) -> Any:
        """The last progress the job's handler reported (``ctx.progress``), decoded; None when none
        was reported yet, or the job has no row (never enqueued, or completed: completion deletes
        the row, and its result says the rest)."""
        return self._run(self.op_progress_of(job_id))

    def requeue(self, job: JobRef, *, token: str | int | None = None) -> None:
        """Release a held job to pending without spending any budget."""
        self._run(self.op_fenced(self.requeue_call(job, token=token)))

    def settle_many(self, calls: Sequence[Call]) -> list[Any]:
        """Send fenced calls (from the ``*_call`` builders) in one pipelined round trip.

        Each answer is the verb's typed answer, a :class:`LeaseLost` where the lease was
        lost, or the server's refusal -- returned, not raised: a batch is partly lost by nature.
        A COMPLETES or PUBLISHES call (:meth:`completion_calls`) answers once for each of its jobs.
        """
        return self._run(self.op_settle_many(calls))

    def settle_and_claim(self, calls: Sequence[Call], count: int, lease_ms: int,
                         lanes: int = 0) -> tuple[list[Any], Claims]:
        """Settle ``calls`` (as :meth:`settle_many`) and claim up to ``count`` more jobs, in the
        fewest round trips the wire allows: one on wire 6 (the settles, then the claims, one
        pipeline); two on wire 4, whose claim must follow its own pause read (SPEC §4), so
        the pause read rides with the settles and the claims follow unless paused. ``count``
        0 only settles; ``lanes`` lane claims ride with the settles. Returns (settle answers,
        claimed jobs: the lane jobs first, a :class:`~echomq.Claims` as :meth:`claim_many`'s).
        """
        return self._run(self.op_settle_and_claim(calls, count, lease_ms, lanes))

    # -- time-driven and recovery -----------------------------------------------
    def promote(self, limit: int = 1000) -> int:
        """Move up to ``limit`` due scheduled jobs to pending; returns how many moved."""
        return self._run(self.op_promote(limit))

    def server_ms(self) -> int:
        """The server's clock in ms (TIME), the clock every verb reads."""
        return self._run(self.op_server_ms())

    def promote_and_next_due(self, limit: int = 1000) -> tuple[int, int | None]:
        """PROMOTE, then read when the schedule's head falls due, in one round trip: (moved,
        ms from now (server clock) until the head is due, None when the schedule is empty).
        The worker promotes again then: a delayed job runs at its due time, not an interval later."""
        return self._run(self.op_promote_and_next_due(limit))

    def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        """Move a scheduled job's due time to now + ``delay_ms``; None when no row."""
        return self._run(self.op_reschedule(job_id, delay_ms))

    def reprocess(self, job_id: str) -> bool:
        """Send a dead job back to pending with a full retry and stall budget again (``attempts``,
        the token, goes on; a lane job to its lane's tail); False when it is not in dead."""
        return self._run(self.op_reprocess(job_id))

    # -- control: remove, cancel, purge, drain (SPEC §9.4: optional tokens on wire 6) ------------
    def remove(self, job_id: str) -> State | None:
        """Delete a pending, scheduled or dead job (row and set membership in one step); returns
        the state it was removed from, None when there is no row. An active job is refused
        (:class:`StateError`): cancel it instead."""
        return self._run(self.op_remove(job_id))

    def cancel(self, job_id: str) -> bool:
        """Revoke an active job's lease: it goes dead with ``last_error`` ``cancelled``, its holder's
        settle is refused and its handler sees ``ctx.lost`` within about half a second (the worker's
        look for cancels: ``CANCEL_CHECK_MS`` in echomq/worker/policy.py). False when there
        is no row; a job that is not active is refused (:class:`StateError`)."""
        return self._run(self.op_cancel(job_id))

    def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        """Delete up to ``limit`` dead jobs that died at least ``older_than_ms`` ago (server clock),
        oldest first; returns how many left dead. Call again while it returns ``limit``."""
        return self._run(self.op_purge(older_than_ms, limit))

    def drain(self, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` jobs from the head of pending; returns how many left pending.
        Call again while it returns ``limit``."""
        return self._run(self.op_drain(limit))

    def drain_lanes(self, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` lane jobs waiting in their groups' lanes (running ones are left
        alone); returns how many were deleted. Call again while it returns ``limit``. Flow jobs are
        never drained: a parent waits for its children (cancel one instead)."""
        return self._run(self.op_drain_lanes(limit))

    def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """Recover up to ``limit`` expired leases; a job that stalls ``max_stalled`` times goes dead."""
        return self._run(self.op_stalled_check(max_stalled, limit))

    def stalled_check_and_next_expiry(self, max_stalled: int = 1, limit: int = 1000) -> tuple[Sweep, int | None]:
        """STALLED.CHECK, then read when the earliest lease runs out, in one round trip: (the sweep,
        ms from now (server clock) until that deadline, None when nothing is active). An idle
        worker sweeps again then instead of on an interval."""
        return self._run(self.op_stalled_check_and_next_expiry(max_stalled, limit))

    def reap(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """The reaper (echomq/_core/reaper.py): recover up to ``limit`` expired lane and flow leases,
        which STALLED.CHECK refuses, with its verdicts and budget."""
        return self.reap_and_next_due(max_stalled, limit)[0]

    def reap_and_next_due(self, max_stalled: int = 1, limit: int = 1000,
                          without: AbstractSet[str] = frozenset()) -> tuple[Sweep, int | None]:
        """:meth:`reap`, and in the same round trip when it has work next (ms, server clock; None:
        none); ``without``: recovery scripts to leave out (a queue known never to have had lanes)."""
        return self._run(reaper.op_reap(self, max_stalled, limit, without))

    # -- lanes: one group at a time -----------------------------------------------
    def pause_group(self, group: str) -> None:
        """The group starts no job until :meth:`resume_group` (its running jobs finish)."""
        self._run(self.op_pause_group(group))

    def resume_group(self, group: str) -> bool:
        """The group takes its turn again; False when it was not paused."""
        return self._run(self.op_resume_group(group))

    def set_lane_limit(self, k: int | None, group: str | None = None) -> None:
        """At most ``k`` jobs of ``group`` run at once (None: the queue's default for every group
        without its own); k None removes the setting."""
        self._run(self.op_set_lane_limit(k, group))

    def lanes_waiting(self) -> int:
        """How many groups may start a job now or after a backoff (paused ones do not count)."""
        return self._run(self.op_lanes_waiting())

    def groups(self) -> dict[str, GroupCounts]:
        """Every group with jobs waiting or running, or paused: its counts."""
        return self._run(self.op_groups())

    def group_page(self, most: int = 100) -> tuple[int, dict[str, GroupCounts]]:
        """How many groups have jobs waiting or running, and the first ``most`` by name with their
        counts: bounded however many groups there are."""
        return self._run(self.op_group_page(most))

    # -- flows (docs/lanes-and-flows.md "Flows") ---------------------------------
    def enqueue_flow(self, payload: Any, *, children: Sequence[Any], id: str | None = None, priority: int = 0,
                     on_child_failure: str = "fail") -> Enqueued:
        """Admit a parent job in this queue and its ``children`` (:class:`~echomq.Flow` nodes, or plain
        payloads for leaves in this queue) in one atomic step: the parent runs once, after its last
        child has finished. Payloads are encoded with this queue's serializer. On a cluster every
        queue of the flow must share this queue's slot (:class:`~echomq.CrossSlotFlow`)."""
        root = Flow(self.name, payload, children, id=id, priority=priority, on_child_failure=on_child_failure)
        return self._run(op_enqueue_flow(plan(root, self.encode, cluster=self.connection.cluster)))

    def flow_claim(self, count: int, lease_ms: int) -> Claims:
        """Up to ``count`` flow jobs under a lease (the worker does this; each :attr:`Job.flow`); with
        none, the :class:`~echomq.Claims`' ``due_ms`` says when flow work may be claimable."""
        return self._run(self.op_flow_claim(count, lease_ms))

    def flow_extend_many(self, jobs: Sequence[JobRef], lease_ms: int) -> list[int]:
        return self._run(self.op_flow_extend_many(jobs, lease_ms))

    def reap_flows(self, *, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        """Recover up to ``limit`` expired flow leases with STALLED.CHECK's verdicts (FLOW_REAP)."""
        return self._run(self.op_flow_reap(max_stalled, limit))

    def children(self, parent_id: str) -> Children:
        """A flow parent's children's results and (under ``continue``) errors, by child id: kept
        until the parent completes or dies."""
        return self._run(self.op_children([parent_id]))[0]

    def children_many(self, parent_ids: Sequence[str], *, decoded: bool = True) -> list[Children]:
        """:meth:`children` of several parents in one round trip; ``decoded`` False: each result as
        stored (bytes), for a reader that decodes it itself (the worker, with the parent task's serializer)."""
        return self._run(self.op_children(parent_ids, decoded))

    # -- pause ----------------------------------------------------------------
    def pause(self) -> None:
        """Hold claims (enqueue and schedule still admit jobs)."""
        self._run(self.op_pause())

    def resume(self) -> None:
        self._run(self.op_resume())

    def wake(self) -> None:
        """Write the wake marker: one worker blocked on it (wire 4's, and any worker's lane waiter)
        claims at once. A worker woken by the marker calls it to pass the wake on when more jobs wait
        (docs/spec.md §10)."""
        self._run(self.op_wake())

    # -- rate limit (docs/scheduling.md) ---------------------------------------------
    def set_rate_limit(self, rate: str | RateLimit | None) -> None:
        """At most ``rate`` job starts (``"50/s"``, ``"600/m"``, ``"1000/h"``) across every worker of
        the queue, enforced by the server with each claim on both wires; None lifts it."""
        self._run(self.op_set_rate_limit(rate))

    def rate_limit(self) -> RateLimit | None:
        return self._run(self.op_rate_limit())

    # -- where completed records are kept (docs/results.md) ------------------------------
    def set_result_layout(self, layout: str) -> None:
        """Where this queue's completed records go from now on: ``"fields"`` (the default: a field
        of the queue's hash ``done`` each, with its own expiry, where the node has it) or
        ``"record"`` (a key ``done:<id>`` each, the layout 0.2.0 reads: keep it while a 0.2.0
        process reads the queue). Records already kept stay where they are, read either way.
        Anything else is refused (ConfigurationError), nothing written."""
        self._run(self.op_set_result_layout(layout))

    def result_layout(self) -> ResultLayout:
        """Where this queue's next completed records go, and why (its switch, the node's ability)."""
        return self._run(self.op_result_layout())

    # -- following a job: status, result, events (the bus) ------------------------
    def status(self, job_id: str) -> Status:
        """pending, active, scheduled, dead, completed (within its retention) or unknown."""
        return self._run(self.op_status(job_id))

    def result(self, job_id: str, *, timeout: float | None = None) -> Any:
        """The job's result, waiting up to ``timeout`` seconds (None: no limit) for it to finish.

        Raises :class:`JobFailed` (``last_error``, ``traceback``) when it is dead,
        :class:`JobNotFound` when there is no such job (or its record expired), and
        :class:`TimeoutError` when the time runs out. The wait is woken by the job's outcome
        channel (subscribed before the first read, so no completion slips between), not by polling.
        A server restart or a failover within the timeout is ridden out: it subscribes and reads
        again; :class:`ConnectionFailed` only when the link is still down as the time runs out.
        """
        check_job_id(job_id)
        deadline = None if check_wait(timeout) is None else time.monotonic() + timeout
        failures = 0
        while True:
            try:
                return self._await_result(job_id, timeout, deadline)
            except errors.ConnectionFailed:
                failures += 1
                pause = relink_pause_s(failures, deadline, time.monotonic())
                if pause is None:
                    raise
                time.sleep(pause)
                with suppress(*TRANSPORT_ERRORS):
                    self.connection.refresh_slots()  # after a failover, the channel's slot may have moved

    def _await_result(self, job_id: str, timeout: float | None, deadline: float | None) -> Any:
        """:meth:`result` on one subscription; a link fault ends it (ConnectionFailed)."""
        with self.connection.outcome_listener(self.keys.outcome(job_id)) as wait:
            counted = self._run(self.op_count_waiter())  # after the subscription, before the first read
            try:
                told = None
                while True:
                    try:
                        read = self._run(self.op_result_read(job_id, told))
                    except errors.JobNotFound:
                        # a plain COMPLETE between the count and the first read left no row: its word is sent
                        if told is None and (told := wait(TOLD_GRACE_S)) is not None:
                            continue
                        raise
                    if isinstance(read, Done):
                        return read.value
                    left = time_left(deadline, time.monotonic())
                    if left is not None and left <= 0:
                        raise self._run(self.op_timed_out(job_id, read, timeout))
                    told = wait(wait_slice_s(counted, left))
                    if told is None:
                        counted = self._run(self.op_keep_waiter(counted))
            finally:
                with suppress(errors.ConnectionFailed):  # the link is down: its count expires on its own
                    self._run(self.op_uncount_waiter(counted))

    def enable_events(self, maxlen: int = DEFAULT_MAXLEN) -> None:
        """Turn this queue's event stream on, bounded to ``maxlen`` entries (1 to EVENTS_MAX, 100,000;
        the verbs read it): each entry's values keep their first 1 KiB, so the stream stays bounded in
        bytes too (docs/spec.md §12)."""
        self._run(self.op_enable_events(maxlen))

    def disable_events(self) -> None:
        """Turn the event stream off (what it holds stays until deleted)."""
        self._run(self.op_disable_events())

    def events(self, since: str | None = None, *, follow: bool = False, block_ms: int = 1000,
               count: int = 100) -> Iterator[Event]:
        """The queue's events after ``since`` (a stream id; None: from the oldest kept; ``"$"``:
        only new ones), oldest first. With ``follow`` it waits for new ones (XREAD BLOCK, ``block_ms``
        per wait) and never ends: break out of the loop."""
        last = "0-0" if since is None else self._run(self.op_last_event_id()) if since == "$" else since
        while True:
            page = self._run(self.op_events_page(last, count, block_ms if follow else None))
            for event in page:
                last = event.stream_id
                yield event
            if not follow and len(page) < count:
                return

    # -- reading ----------------------------------------------------------------
    def counts(self) -> Counts:
        return self._run(self.op_counts())

    def state(self, job_id: str) -> State | None:
        return self._run(self.op_state(job_id))

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job's row, fields as text and the payload deserialized; None when there is no row."""
        return self._run(self.op_job(job_id))

    def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        """A page of (id, score) from the set of ``state``, lowest score first."""
        return self._run(self.op_ids(state, offset, count))

    def metrics(self) -> dict[str, int]:
        return self._run(self.op_metrics())
