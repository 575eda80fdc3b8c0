"""The worker's loop: one control thread does every server call, one small step at a time.

A step, in order (:meth:`Loop.step`):

1. **reports**: what the waiters' blocks ended with (:mod:`echomq.worker.waiting`);
2. **exchange**: per queue in one round trip (two on wire 4, whose claim follows its pause read),
   what finished is settled (:mod:`echomq.worker.settling`) and the slots it frees are filled with a
   pipelined batch of claims (how many: :mod:`echomq.worker.pacing`), then the flow sets are polled;
   the jobs claimed go to the executor (:mod:`echomq.worker.executor`);
3. **leases**: handlers past their timeout are failed, held jobs renewed on the tick, looked at for
   a cancel, and given up when no renewal reached the server in a whole lease
   (:mod:`echomq.worker.leases`);
4. **timers**: PROMOTE, STALLED.CHECK and the reaper when due (:mod:`echomq.worker.timers`), the
   periodic jobs (:mod:`echomq.worker.cron`), the heartbeat; then the waiters are armed on the
   queues that went idle.

Between steps the thread sleeps until the next thing is due or something wakes it (an outcome to
settle, a waiter's report, a stop). While handlers run, the handler thread that ends the last of them
runs the next exchange itself (the **relay**), so quick jobs run with no hand-off between threads;
the control thread then only looks in. A step whose link fails is retried after a back-off, the
held leases running on meanwhile.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

from . import policy
from .._client.queue import Queue
from ..errors import CommandRefused, ConnectionFailed
from .config import WorkerConfig
from .cron import CronTimer
from .executor import Executor
from .heartbeat import Heartbeat
from .held import Held
from .leases import Leases
from .pacing import Pacing
from .settling import Settler
from .tallies import Events, Tally
from .tasks import Task
from .timers import Timers
from .waiting import INTERRUPT_RETRY_MS, Waiting

log = logging.getLogger("echomq.worker")

#: The server link failed (the send path maps every link fault to this): the step is abandoned
#: and retried after a pause.
LINK_ERRORS = (ConnectionFailed,)
LINK_RETRY_MS = (100, 5000)


class Loop:
    """Steps a worker's parts: the exchanges, the leases, the timers, the waiters."""

    def __init__(self, *, config: WorkerConfig, queues: Mapping[str, Queue], tasks: Mapping[str, Task],
                 held: dict[tuple[str, str], Held], tally: Tally, events: Events, pacing: Pacing, executor: Executor,
                 settler: Settler, leases: Leases, waiting: Waiting, timers: Timers, cron: CronTimer,
                 heartbeat: Heartbeat, wake: threading.Event, clock_ms: Callable[[], float]) -> None:
        self.config = config
        self.queues = queues
        self.tasks = tasks
        self.held = held
        self.tally = tally
        self.events = events
        self.pacing = pacing
        self.executor = executor
        self.settler = settler
        self.leases = leases
        self.waiting = waiting
        self.timers = timers
        self.cron = cron
        self.heartbeat = heartbeat
        self.wake = wake  #: set to end the control thread's wait: an outcome to settle, a report, a stop
        self._clock_ms = clock_ms
        self._turn = 0  #: which queue goes first in the next exchange
        self._link_down_until = 0.0
        self._link_failures = 0
        #: the loop's state is changed by one thread at a time, the one holding this: the control
        #: thread for a step, or a handler thread for a relay
        self._baton = threading.Lock()
        #: the control thread waits for the baton: relays leave the next exchange to it (a lock is not
        #: fair, and relays in a row would otherwise keep it from its step: its renewals, say)
        self._baton_wanted = False
        #: run() is on (and settle_wait_ms > 0): the handler thread that ends the last running handler
        #: settles what finished and claims the next batch itself, the control thread sleeping on
        self.relaying = False
        self.relays = 0  #: relays so far: while they go on, the control thread looks in (wait)
        self.looking = False  #: the control thread's wait ends by settle_wait_ms: a relay need not wake it
        self.relay_error: BaseException | None = None  #: a relay's unexpected error: run() raises it
        #: the last next_due was a settle's (this local time), the next other due time _timer_due
        self._settle_wake, self._timer_due = -1.0, float("inf")
        self.paused_pending: dict[str, int] = {}  #: paused queues with jobs pending, at the last look (burst)

    # -- a step -------------------------------------------------------------------------
    def step(self) -> float:
        """One pass of the loop; returns the local time (ms) at which the next one is due."""
        self.wake.clear()
        stopping = self.pacing.stopping
        now = self._clock_ms()
        self.waiting.read(now)
        if now < self._link_down_until:
            return self._link_down_until
        try:
            self.exchange(now)
            self.claim_flows(self._clock_ms())
            self._retire_when_done()
            now = self._clock_ms()  # one read for the scans and the renewal: no round trip between them
            scan = now >= self.leases.scan_at
            if scan:
                for held in self.leases.timed_out(now):
                    self.executor.time_out(held)
            self.leases.renew(now)
            if now >= self.leases.cancel_check_at:
                self.leases.check_cancels(now)
            if scan:
                self.leases.give_up_expired(self._clock_ms())
                self.leases.rescan()
            if not self.pacing.stopping:
                self._run_timers()
            self.heartbeat.run_due(self._clock_ms(), held=len(self.held), completed=self.tally.completed,
                                   failed=self.tally.retried + self.tally.dead)
            self.waiting.arm(self.capacity())
            self._link_failures = 0
        except (*LINK_ERRORS, CommandRefused) as exc:
            # the link or the server failed this step: pause and retry; held leases run on meanwhile
            self._link_failures += 1
            pause = min(LINK_RETRY_MS[1], LINK_RETRY_MS[0] * 2 ** min(self._link_failures - 1, 10))
            log.warning("worker %d: step failed (%s: %s); retrying in %d ms", os.getpid(), type(exc).__name__,
                        exc, pause)
            self._link_down_until = self._clock_ms() + pause
            return self._link_down_until
        if self.pacing.stopping == stopping:
            # what set the wake during this step (an outcome, a waiter's report) is in the state next_due
            # reads: a handler that ended while its batch was still being started must not end the next
            # wait at once, before the rest of that batch could end (a stop asked meanwhile does)
            self.wake.clear()
        return self.next_due(self._clock_ms())

    def _run_timers(self) -> None:
        """The timers due (what they put in pending is claimed at once) and the periodic jobs."""
        for run in self.timers.run_due(self._clock_ms(), self.pacing.idle, self.pacing.no_lanes):
            found = run.recovered
            if run.promoted or found.recovered or found.exempt:
                self.pacing.claim_afresh(run.queue)  # it put jobs in pending itself: claim, no wake needed
            self.events.sweep(run.queue, found)
            if run.reaped:
                self.pacing.poll_flows([run.queue])  # the reaper may have put flow jobs back
        self.cron.run_due(self._clock_ms())

    def capacity(self, settling: int = 0) -> int:
        """How many jobs may be claimed now: free slots (``settling`` jobs are being settled in the
        same exchange: theirs too), within what is left of ``max_jobs``."""
        free = self.config.concurrency - len(self.held) + settling
        if self.config.max_jobs is None:
            return free
        return min(free, self.config.max_jobs - self.tally.claimed)

    def _retire_when_done(self) -> None:
        """With ``max_jobs`` claimed: no more claims, and the jobs held run to their end (no grace:
        a signal still brings one)."""
        if self.config.max_jobs is not None and self.tally.claimed >= self.config.max_jobs \
                and not self.pacing.stopping:
            self.pacing.stop_claiming(math.inf)
            log.info("worker %d: %d job(s) claimed, its --max-jobs: no more claims; %d held run to their end",
                     os.getpid(), self.tally.claimed, len(self.held))

    # -- settle and claim: one exchange per queue ------------------------------------------
    def exchange(self, now: float) -> int:
        """Settle what finished and claim into the free slots, per queue in one round trip
        (two on wire 4, whose claim follows its pause read): ``Queue.settle_and_claim``.
        Queues take turns going first, and the first may claim into the slots the others'
        settles free, so a busy queue cannot starve the rest. Returns how many jobs were claimed."""
        batches = self.settler.decide(self.executor.take_finished())
        settling = sum(len(batch) for batch, _ in batches.values())  # held, settled in this exchange
        names = list(self.queues)
        self._turn = (self._turn + 1) % len(names)
        order = names[self._turn:] + names[:self._turn]
        claimed = 0
        for at, name in enumerate(order):
            batch, calls = batches.get(name, ((), ()))
            # the jobs settled in this exchange free their slots for its claims
            flat, lanes = self.pacing.plan(name, now, self.capacity(settling), self.waiting.watched)
            if not batch and not (flat or lanes):
                continue
            sent = self._clock_ms()
            try:
                answers, jobs = self.queues[name].settle_and_claim(calls, flat, self.config.lease.lease_ms, lanes)
            except (*LINK_ERRORS, CommandRefused):
                # unknown whether the settles applied: send them again next step (a repeat is fenced by the token)
                self.settler.again([held for later in order[at:] for held, _ in batches.get(later, ((), ()))[0]])
                raise
            self.settler.settled(name, batch, answers)
            settling -= len(batch)
            passing = bool(flat or lanes) and self.pacing.claimed(name, now, flat, lanes, jobs)
            if jobs.wait_ms is not None:
                self.pacing.rate_wait(name, self._clock_ms(), jobs.wait_ms)
            self.executor.start(self.tasks[name], self.queues[name], jobs, sent)
            if passing:  # a marker woke this worker and more jobs may wait: the next idle worker looks too
                self.queues[name].wake()
            claimed += len(jobs)
        return claimed

    def claim_flows(self, now: float) -> int:
        """Claim flow jobs into the free slots (FLOW_CLAIM, one round trip per queue that is due);
        returns how many were claimed."""
        claimed = 0
        for name, queue in self.queues.items():
            if self.pacing.stopping or self.capacity() <= 0:
                break
            if not self.pacing.flows_due(name, now):
                continue
            sent = self._clock_ms()
            jobs = queue.flow_claim(min(self.capacity(), self.config.claim_batch), self.config.lease.lease_ms)
            self.pacing.flows_claimed(name, now, found=bool(jobs), due_ms=jobs.due_ms, slack_ms=policy.PROMOTE_SLACK_MS)
            parents = [job for job in jobs if job.has_children]
            # a parent's handler reads what its children left it: read once, before it starts
            ids = [job.id for job in parents]
            left = dict(zip(ids, queue.children_many(ids, decoded=False)))
            self.executor.start(self.tasks[name], queue, jobs, sent, left)
            claimed += len(jobs)
        return claimed

    # -- when the next step is due ---------------------------------------------------------
    def _settle_check(self, now: float) -> tuple[float, bool]:
        """When the outcomes in settle (setting the executor's ``settle_due``), and whether a step is
        due at once: settles to send again, a waiter's report, or a settle due with outcomes in."""
        executor = self.executor
        settle_at = executor.settle_at(now)
        executor.settle_due = settle_at <= now
        return settle_at, bool(self.settler.unsettled or not self.waiting.reports.empty()
                               or (executor.settle_due and executor.finished))

    def next_due(self, now: float) -> float:
        """The local time the next step is due."""
        settle_at, at_once = self._settle_check(now)
        if at_once:
            return now
        timer = self._next_timer(now, settle_at)
        if settle_at < timer and not self.executor.settle_due:
            # while young handlers run, an outcome does not wake the loop (Executor.done): it settles by then
            self._settle_wake, self._timer_due = settle_at, timer  # a wake for a settle only (wait)
            return settle_at
        return timer

    def _next_timer(self, now: float, settle_at: float) -> float:
        """The next due time but a settle's: the tick, a scan, claims, polls, the timers, the stop."""
        times = [self.leases.next_due_ms()]
        if self.pacing.stopping:
            times.append(self.pacing.stop_at)
        else:
            if self.capacity() > 0:
                # a claim into slots left free (a lane probe that found none, say) rides with the
                # young batch's settle: at most settle_wait_ms later, one step instead of two
                times.append(self.pacing.next_claim_ms(settle_at if settle_at > now else 0.0))
            if self.waiting.interrupting():
                times.append(now + INTERRUPT_RETRY_MS)
            times.append(self.timers.next_due_ms(now, self.pacing.idle))
            times.append(self.cron.next_due_ms())
        times.append(self.heartbeat.next_due_ms())
        return min(times)

    # -- between steps: the wait, and the relays ----------------------------------------------
    @contextmanager
    def taking_baton(self) -> Iterator[None]:
        """The control thread's hold on the baton: relays stop and let it have it."""
        self._baton_wanted = True
        with self._baton:
            self._baton_wanted = False
            yield

    def relay_from_handlers(self, on: bool) -> None:
        """Relays on (the handler thread that ends the last running handler runs the next exchange) or off
        (outcomes from here on wake the control thread)."""
        self.relaying = on
        self.executor.relay = self.relay if on else None

    def wait(self, next_ms: float) -> None:
        """Sleep until local ``next_ms``, or a wake. While relays may run (jobs held), a wait that
        ends is a look before it is a step: the step comes only once an outcome's settle is due (a
        relayed batch's slow handler left quick ones unsettled) or a due time besides the settles
        (``_next_timer``); a look wakes threads for jobs held up behind a slow handler. It looks in
        every ``policy.relay_look_ms`` while relays go on or jobs wait in the pool, and a settle's
        wake comes that long after its batch started (``policy.relay_look_at_ms``)."""
        settle_wait_ms = self.config.settle_wait_ms
        look_ms, seen = policy.relay_look_ms(settle_wait_ms), -1
        timer_due = self._timer_due if next_ms == self._settle_wake else next_ms  # never later than this
        if next_ms == self._settle_wake and self.relaying and self.held:
            next_ms = policy.relay_look_at_ms(next_ms, False, timer_due, settle_wait_ms)
        while True:
            wait_ms = next_ms - self._clock_ms()
            relayed = self.relaying and bool(self.held)
            looking = relayed and (wait_ms <= look_ms or self.relays != seen or self.executor.queued)
            seen, self.looking = self.relays, looking
            if self.wake.wait(max(0.0, min(wait_ms, look_ms) if looking else wait_ms) / 1000) or not relayed:
                return
            if self.executor.pool is not None:
                self.executor.pool.spread()
            if not self._baton.acquire(blocking=False):
                next_ms = self._clock_ms() + look_ms  # a relay holds it: look again then
                continue
            try:
                now = self._clock_ms()
                settle_at, at_once = self._settle_check(now)
                if at_once:
                    return
                timer_due = min(timer_due, self._next_timer(now, settle_at))
            finally:
                self._baton.release()
            if timer_due <= now:
                return
            next_ms = policy.relay_look_at_ms(settle_at, self.executor.settle_due, timer_due, settle_wait_ms)

    def relay(self) -> None:
        """On the handler thread that ended the last running handler, once free: settle what finished
        and claim the next batch here (one ``exchange``, as a step would), so that quick jobs run
        with no hand-off between threads. What a step does besides goes to the control thread (woken
        for it): a stop, a waiter's report, a queue that went idle (its waiter is armed), a claim
        that found nothing, a broken link (the step retries with its back-off), and relays starting
        while it does not look in."""
        if self._baton_wanted or not self._baton.acquire(blocking=False):
            self.wake.set()  # the control thread is stepping, or about to: it settles this outcome too
            return
        try:
            if not self.relaying or self.pacing.stopping or not self.waiting.reports.empty():
                self.wake.set()
                return
            idle = set(self.pacing.idle)
            try:
                claimed = self.exchange(self._clock_ms())
            except (*LINK_ERRORS, CommandRefused):
                claimed = 0  # what it settled is unsettled again (exchange): the step sends it
            except BaseException as exc:  # a bug: the control thread raises it, as its own step would
                self.relay_error, claimed = exc, 0
            self.relays += 1
            if not claimed or not self.pacing.idle <= idle or not self.looking:
                self.wake.set()  # (not looking: it sleeps on, maybe for seconds; it looks in from its next wait)
        finally:
            self._baton.release()

    # -- a burst's end -------------------------------------------------------------------------
    def drained(self) -> bool:
        """Nothing held or left to settle, and every queue empty: nothing pending (a paused queue
        counts as empty) and nothing scheduled -- a retry's backoff or a delay is waited for, the
        timers promote it when due. Jobs other workers hold are theirs; a job one of this worker's
        waiters claimed is not, even before its report is read (a promoted job a BCLAIM took at
        once, say: counts show it nowhere but active)."""
        # read first: when every claiming block has answered, any job one took is in the reports below
        claims_in_flight = self.waiting.claims_in_flight()
        if not self.waiting.reports.empty():
            return False  # the next step reads them (a report wakes it); an ended block's answer is no news
        if not self._looks_drained():
            self.waiting.confirming_empty = False
            return False
        if claims_in_flight:
            # wire 6: a BCLAIM may have taken a job the counts already show as active, its answer still on
            # the way. End the claiming blocks (re-arming none: Waiting.arm) and look again once answered.
            if not self.waiting.confirming_empty:
                self.waiting.confirming_empty = True
                self.wake.set()
            return False
        return True

    def _looks_drained(self) -> bool:
        if self.held or self.executor.finished or self.settler.unsettled:
            return False
        if not all(self.pacing.came_back_empty(name) for name in self.queues):
            return False  # a queue gave jobs on its last claim (or has not been claimed from): not empty yet
        if not self.pacing.flows_came_back_empty():
            return False  # likewise its flow sets (a flow parent waiting on its children is not claimable)
        paused: dict[str, int] = {}
        try:
            for name, queue in self.queues.items():
                counts = queue.counts()
                if (counts.pending and not counts.paused) or counts.scheduled or queue.lanes_waiting():
                    return False
                if counts.pending:
                    paused[name] = counts.pending
        except LINK_ERRORS:
            return False
        self.paused_pending = paused  # what the burst's last words name
        return True
