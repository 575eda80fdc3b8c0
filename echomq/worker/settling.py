"""Settling: what each finished job's outcome becomes on the server, and what its answer means.

The decision is :func:`echomq.worker.policy.decide_outcome`'s (COMPLETE, FAIL with a backoff, DELAY,
or nothing when the lease was lost); here each becomes its call -- a flat job's completion no call
of its own, its id and token joining its queue's COMPLETES or PUBLISHES -- and each answer is
recorded: counted in the tally, told to the hooks, a job scheduled again expected on its queue's
timers, a settle the server refused logged as lost.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from itertools import repeat
from traceback import format_exception
from typing import Any, Callable, Mapping, Sequence

from .. import hooks
from . import policy
from .._client.connection import Call
from .._client.queue import Queue
from ..errors import LeaseLost
from .._protocol.keys import State, parent_queue
from .._protocol.results import MAX_RESULT_BYTES, keepable_result
from .._protocol.shown import one_line, quoted
from .held import Held
from .jobstats import JobStats, TaskStats
from .pacing import Pacing
from .tallies import Events, Tally
from .timers import Timers

log = logging.getLogger("echomq.worker")
#: by queue: the jobs settled, in the order of their answers, and the calls that settle them
Batches = dict[str, tuple[list[tuple[Held, policy.Settle]], list[Call]]]


def indented_traceback(error: BaseException) -> str:
    """A handler's traceback for the log: every line indented and escaped (echomq._protocol.shown), so its
    message, which a job's data may fill, cannot pass for a log line of its own."""
    shown = "".join(format_exception(error)).rstrip("\n").split("\n")
    return "\n".join("    " + one_line(line) for line in shown)


class Settler:
    """Settles the finished jobs of one worker's queues (``held``: the worker's, by (queue, id))."""

    def __init__(self, queues: Mapping[str, Queue], held: dict[tuple[str, str], Held], *, bus: bool,
                 rand: Callable[[], float], tally: Tally, stats: JobStats, events: Events, timers: Timers,
                 pacing: Pacing, clock_ms: Callable[[], float]) -> None:
        self.queues = queues
        self.held = held
        self.bus = bus  #: the node serves the bus: completions keep results and failures their tracebacks
        self._rand = rand
        self.tally = tally
        self.stats = stats
        self.events = events
        self.timers = timers
        self.pacing = pacing
        self._clock_ms = clock_ms
        #: settles sent when the link failed (unknown whether they applied): sent again by the next exchange
        self.unsettled: list[Held] = []
        #: each task's result when its handler returns nothing, as its serializer encoded it
        self._nothing_encoded: dict[str, bytes] = {}

    def again(self, helds: Sequence[Held]) -> None:
        """Send these settles again next time (a repeat is fenced by the token)."""
        self.unsettled += helds

    def decide(self, finished: list[Held]) -> Batches:
        """What to send for the ``finished`` handlers and those to send again, by queue: the jobs settled,
        in the order of their answers, and the calls that settle them. A flat job's completion builds no
        call of its own: its id, token (and kept result) join its queue's COMPLETES or PUBLISHES
        (``Queue.completion_calls``). Lost ones are dropped here."""
        done, self.unsettled = self.unsettled + finished, []
        # by (queue, retention_ms or None): the completed flat jobs and their ARGV one after another
        completed: defaultdict[tuple[str, int | None], tuple[list[Held], list[Any]]] = defaultdict(lambda: ([], []))
        settled: defaultdict[str, list[tuple[Held, policy.Settle, Call]]] = defaultdict(list)  # no list made a job
        # (read once a call: the loop below runs a job)
        bus, nothing_encoded = self.bus, self._nothing_encoded
        complete, nothing = policy.COMPLETE, policy.RETURNED_NOTHING
        for held in done:
            job, task, lost = held.job, held.task, held.lease_lost
            outcome = held.verdict or held.outcome
            result = None
            kept = bus and task.result_ttl_ms  # then a completion keeps its result (PUBLISH)
            returned = type(outcome) is policy.Returned  # the common case: decided here, no call made for it
            if returned and (kept or job.flow):
                # the bytes PUBLISH keeps; for a value the task's serializer refuses, or one over
                # MAX_RESULT_BYTES, a marker saying so: the job completes all the same (its work is
                # done; another run could not keep it either). Nothing returned is encoded once a task
                result = nothing_encoded.get(task.queue) if outcome is nothing else None
                if result is None:
                    result, held.not_kept = keepable_result(task.serializer, outcome.value, MAX_RESULT_BYTES)
                    if outcome is nothing and held.not_kept is None:
                        nothing_encoded[task.queue] = result
            if returned and not lost:
                decision: policy.Settle = complete  # what decide_outcome answers it
            else:
                if not lost and isinstance(outcome, policy.Raised) and log.isEnabledFor(logging.WARNING):
                    log.warning("job %s/%s attempt %d raised:\n%s", job.queue, quoted(job.id), job.attempt,
                                indented_traceback(outcome.error))
                own = held.overrides
                decision = policy.decide_outcome(outcome, lost and held.verdict is None, job.attempt,
                                                 own.max_attempts or task.max_attempts, own.backoff or task.backoff,
                                                 self._rand)
                if type(decision) is policy.Drop:
                    self.held.pop(held.key, None)
                    reason = "cancelled while the handler ran" if held.cancelled else decision.reason
                    self.events.emit("job.lost", job, task, reason=f"{reason}; its outcome is not settled")
                    continue
            if decision is complete and not job.flow and job.group is None:
                jobs, parts = completed[job.queue, kept or None]  # (kept: result holds its encoded bytes)
                jobs.append(held)
                parts += (job.id, job.token, result) if kept else (job.id, job.token)
            else:
                settled[job.queue].append((held, decision, self._settle_call(held, decision, result)))
        by_queue: Batches = {}
        for (name, retention_ms), (jobs, parts) in completed.items():
            batch, calls = by_queue.setdefault(name, ([], []))
            batch += zip(jobs, repeat(policy.COMPLETE))
            calls += self.queues[name].completion_calls(parts, retention_ms)
        for name, rest in settled.items():
            batch, calls = by_queue.setdefault(name, ([], []))
            batch += [(held, decision) for held, decision, _ in rest]
            calls += [call for _, _, call in rest]
        return by_queue

    def settled(self, name: str, batch: Sequence[tuple[Held, policy.Settle]], answers: list[Any]) -> None:
        """Record the server's ``answers`` to ``name``'s settles (``batch``, as :meth:`decide` sent them)."""
        completed_heard = "job.completed" in hooks.heard  # read once a batch
        # each task's run times of the settles the server took, observed together; its settles that were
        # not completions (counted as their events), so that the rest are its completions
        runs: dict[TaskStats, list[float]] = {}
        others: dict[TaskStats, int] = {}
        # a batch is mostly one task's: its list is looked up only when the task changes (keyed by the
        # Task, a frozen dataclass that hashes every field, it cost 7k instructions a job)
        last: TaskStats | None = None
        task_runs: list[float] = []
        complete, forget = policy.COMPLETE, self.held.pop  # (read once a batch)
        completions = 0  #: (added to the tally once a batch)
        for (held, decision), reply in zip(batch, answers):
            if isinstance(reply, Exception):
                self._refused(held, reply)
            else:
                duration_s = held.ended_s - held.started_s
                if held.stats is not last:
                    last = held.stats
                    task_runs = runs.setdefault(last, [])
                task_runs.append(duration_s)
                if decision is complete:
                    # the common case, here rather than in _record (a call a job): counted, told only if heard
                    completions += 1
                    if held.not_kept is not None:
                        log.warning("job %s/%s attempt %d completed, but its result was not kept: %s (a %s "
                                    "returned); Queue.result raises ResultNotKept", held.job.queue,
                                    quoted(held.job.id), held.job.attempt, one_line(held.not_kept.reason),
                                    held.not_kept.type)
                    if completed_heard:
                        self.events.tell("job.completed", held.job, duration_s=duration_s)
                else:
                    self._record(name, held, decision, reply, duration_s)
                    others[held.stats] = others.get(held.stats, 0) + 1
            forget(held.key, None)
            if held.job.flow:  # a parent (in any queue served) may be ready now: poll the flow sets
                self.pacing.poll_flows()
        self.tally.completed += completions
        for stats, values in runs.items():
            stats.run.observe_many(values)
            stats.counts["completed"] += len(values) - others.get(stats, 0)

    def _settle_call(self, held: Held, decision: policy.Settle, result: bytes | None) -> Call:
        """The call that settles ``held`` as decided; ``result``: a returned value, encoded when kept."""
        queue, job = held.queue, held.job
        if job.flow:
            return self._flow_settle_call(held, decision, result)
        if isinstance(decision, policy.Complete):
            # this worker's own claim, a result keepable_result made and the task's checked retention
            if self.bus and held.task.result_ttl_ms:
                return queue.publish_call(job, result, retention_ms=held.task.result_ttl_ms, checked_already=True)
            return queue.complete_call(job, checked_already=True)
        if isinstance(decision, policy.Fail):
            if self.bus:
                return queue.failures_incr_call(job, decision.error, max_attempts=decision.max_attempts,
                                                backoff_ms=decision.backoff_ms, traceback=decision.traceback)
            return queue.fail_call(job, decision.error, max_attempts=decision.max_attempts,
                                   backoff_ms=decision.backoff_ms, traceback=decision.traceback)
        return queue.delay_call(job, decision.delay_ms)

    def _flow_settle_call(self, held: Held, decision: policy.Settle, result: bytes | None) -> Call:
        """A flow job settles through the flow scripts, which tell its parent (the native COMPLETE
        and FAIL refuse a flow child). Its result always goes (its parent may read it)."""
        queue, job = held.queue, held.job
        if isinstance(decision, policy.Complete):
            return queue.flow_complete_call(job, result, retention_ms=held.task.result_ttl_ms or 0)
        if isinstance(decision, policy.Postpone):
            return queue.flow_delay_call(job, decision.delay_ms)
        return queue.flow_fail_call(job, decision.error, max_attempts=decision.max_attempts,
                                    backoff_ms=decision.backoff_ms, traceback=decision.traceback)

    def _refused(self, held: Held, reply: Exception) -> None:
        """A settle the server refused. The fence (a 0, or wire 6's EMQSTATE for a row no longer active):
        someone else holds the job now, or the sweep moved it; this attempt's outcome is void. Any other
        refusal writes nothing either: the job stays active until its lease runs out."""
        reason = (f"settle refused, the lease is gone ({reply}); not settled by this worker"
                  if isinstance(reply, LeaseLost) else
                  f"settle refused by the server ({reply}); the sweep recovers it after its lease")
        self.events.emit("job.lost", held.job, held.task, reason=reason)

    def _record(self, name: str, held: Held, decision: policy.Fail | policy.Postpone, reply: Any,
                duration_s: float) -> None:
        """A retry's, a death's or a delay's settle the server took: a job scheduled again is expected due
        on ``name``'s timers; the event counted and told (``duration_s``: the attempt's run time)."""
        if isinstance(decision, policy.Postpone) or reply == State.SCHEDULED:
            # promote when it falls due, not a whole interval later (plus slack for the two clocks)
            wait = decision.delay_ms if isinstance(decision, policy.Postpone) else decision.backoff_ms
            self.timers.expect_due(name, self._clock_ms() + wait + policy.PROMOTE_SLACK_MS)
        job, task = held.job, held.task
        if isinstance(decision, policy.Postpone):
            self.events.emit("job.delayed", job, task, delay_ms=decision.delay_ms, duration_s=duration_s)
            return
        self.stats.failed(parent_queue(name), task.name, held.verdict or held.outcome, job.id, decision.error)
        if reply == State.DEAD:
            self.events.emit("job.dead", job, task, error=decision.error, max_attempts=decision.max_attempts,
                             duration_s=duration_s)
        else:
            self.events.emit("job.retried", job, task, error=decision.error, backoff_ms=decision.backoff_ms,
                             duration_s=duration_s)
