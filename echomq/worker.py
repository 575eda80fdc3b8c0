"""The worker: claim -> run -> renew -> settle, on one connection, until told to stop.

One control thread does every server call, one small step at a time
(:meth:`Worker.step`); handlers run elsewhere -- sync ones on a pool of daemon
threads, ``async def`` ones on an asyncio loop in a thread of its own -- and hand
their outcome back through a queue. What each step sends is decided by the pure
functions of :mod:`echomq.policy`; this module only performs the calls.

A step, in order:

1. **settle and claim**, per queue in one round trip (two on wire 4, whose claim
   follows its pause read): what finished is settled -- return -> PUBLISH with the result
   (COMPLETE when the task keeps none or the node has no bus), raise -> FAILURES.INCR with the
   traceback (FAIL without the bus; backoff with jitter, the task's ``max_attempts``), :class:`~echomq.Retry` ->
   FAIL with its delay, :class:`~echomq.Delay` -> DELAY -- and the slots it frees are
   filled: a pipelined batch of claims while the queue is busy, single claims spaced
   by an adaptive back-off while it is empty. A job whose lease was lost is dropped,
   never settled; a settle the server fences off (token gone) is logged.
2. **renew** on the tick: one EXTENDS per queue for every held job that is due; a 0
   marks that job lost (its async handler is cancelled, ``ctx.lease_lost`` turns true).
3. **give up** jobs no renewal reached the server for in a whole lease (the link was
   down): they are marked lost the same way.
4. **timers**: PROMOTE and STALLED.CHECK on their intervals (:mod:`echomq.timers`).

Shutdown (SIGTERM/SIGINT, or :meth:`Worker.stop`): stop claiming, let running jobs
finish for up to ``grace_s`` while still renewing and settling them, then REQUEUE
what is still held (both wires: no budget spent). A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any, Callable, Sequence

import valkey

from . import policy
from .connection import Call, Connection
from .errors import CommandRefused, ConfigurationError, EchoMQError, JobTimeout, LeaseLost, PayloadError, StateError
from .policy import IdlePolicy, LeasePolicy
from .queue import LIMIT_MAX, Job, Queue
from .results import MAX_RESULT_BYTES, encode_result
from .serializers import RAW
from .tasks import App, Delay, JobContext, Retry, Task, check_timeout
from .timers import TimerConfig, Timers

log = logging.getLogger("echomq.worker")

#: The server link failed: the step is abandoned and retried after a pause.
LINK_ERRORS = (valkey.ConnectionError, valkey.TimeoutError)
LINK_RETRY_MS = (100, 5000)
PROMOTE_SLACK_MS = 5


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 10  #: jobs held (and handlers running) at once in this process
    claim_batch: int = 10  #: the most claims pipelined in one round trip
    grace_s: float = 10.0  #: how long running jobs may finish after a stop signal
    lease: LeasePolicy = field(default_factory=LeasePolicy)
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    timers: TimerConfig = field(default_factory=TimerConfig)
    timeout_s: float | None = None  #: overrides every task's ``timeout`` (``emq worker --timeout``)

    def __post_init__(self) -> None:
        check_timeout(self.timeout_s, "the worker")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"bad concurrency {self.concurrency!r}: an integer >= 1")
        if not isinstance(self.claim_batch, int) or not 1 <= self.claim_batch <= LIMIT_MAX:
            raise ConfigurationError(f"bad claim_batch {self.claim_batch!r}: from 1 to {LIMIT_MAX}")
        if not self.grace_s >= 0:
            raise ConfigurationError(f"bad grace_s {self.grace_s!r}: seconds >= 0")


@dataclass
class Tally:
    """What this worker did, by outcome."""

    claimed: int = 0
    completed: int = 0
    retried: int = 0  #: FAIL answered pending or scheduled
    dead: int = 0  #: FAIL answered dead
    delayed: int = 0
    lost: int = 0  #: lease lost: dropped, or a settle the server fenced off
    requeued: int = 0  #: released at shutdown
    abandoned: int = 0  #: left to lease expiry at shutdown (REQUEUE failed or was refused)

    def __str__(self) -> str:
        return ", ".join(f"{name} {value}" for name, value in vars(self).items() if value) or "nothing"


@dataclass(eq=False)
class Held:
    """A job this worker holds: the claim, its handler's future and its lease bookkeeping."""

    queue: Queue
    task: Task
    job: Job
    ctx: JobContext
    renewed_at: float  #: local ms when the claim or the last renewal that reached the server was sent
    deadline: float | None = None  #: local ms when the handler's timeout runs out (None: no timeout)
    future: Future | None = None
    #: an outcome the worker decided itself (a timeout, an undecodable payload): it wins over the
    #: handler's, which is dropped whenever it comes
    verdict: policy.Outcome | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.job.queue, self.job.id


class _DaemonPool:
    """A fixed pool of daemon threads: a handler stuck past shutdown cannot keep the process alive
    (the standard ThreadPoolExecutor joins its threads at exit)."""

    def __init__(self, size: int) -> None:
        self._work: SimpleQueue = SimpleQueue()
        self._threads = [threading.Thread(target=self._run, name=f"emq-handler-{i}", daemon=True) for i in range(size)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._work.put((future, fn, args))
        return future

    def replace_one(self) -> None:
        """One more thread, in place of one running an abandoned (timed out) handler: Python
        cannot stop a thread, so that one runs on until its handler returns."""
        thread = threading.Thread(target=self._run, name=f"emq-handler-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # the handler's outcome, whatever it is
                future.set_exception(exc)

    def shutdown(self) -> None:
        for _ in self._threads:
            self._work.put(None)


class _AsyncRunner:
    """An asyncio loop on a daemon thread for ``async def`` handlers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="emq-asyncio", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def outcome_of(future: Future) -> policy.Outcome:
    """Read a finished handler's future as an outcome (a returned Retry/Delay counts as raised)."""
    try:
        value = future.result(timeout=0)
    except CancelledError as exc:
        return policy.Raised(exc)
    except Retry as exc:
        return policy.RetryAsked(exc.reason, exc.delay_ms)
    except Delay as exc:
        return policy.DelayAsked(exc.delay_ms)
    except BaseException as exc:
        return policy.Raised(exc)
    if isinstance(value, (Retry, Delay)):
        future = Future()
        future.set_exception(value)
        return outcome_of(future)
    return policy.Returned(value)


class Worker:
    """Runs ``app``'s handlers for jobs of its queues (all of them unless ``queues`` is given)."""

    def __init__(self, app: App, connection: Connection, *, queues: Sequence[str] | None = None,
                 config: WorkerConfig | None = None, rand: Callable[[], float] = random.random,
                 clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000) -> None:
        names = list(queues) if queues else list(app.tasks)
        unknown = [name for name in names if name not in app.tasks]
        if unknown or not names:
            raise ConfigurationError(
                f"no handler for queue(s) {unknown}; the app has {sorted(app.tasks)}" if unknown
                else "the app has no tasks: register a handler with @app.task"
            )
        self.app = app
        self.connection = connection
        self.config = config or WorkerConfig()
        self.tasks = {name: app.tasks[name] for name in names}
        # claims read raw bytes: the task's serializer decodes per job, so a bad payload fails one job
        self.queues = {name: Queue(connection, name, serializer=RAW) for name in names}
        self.timers = Timers(list(self.queues.values()), self.config.timers)
        #: the node serves the bus: completions keep results and failures their tracebacks
        self.bus = connection.serves("publish") and connection.serves("failures_incr")
        self.tally = Tally()
        self.held: dict[tuple[str, str], Held] = {}
        self._rand = rand
        self._clock_ms = clock_ms
        self._finished: SimpleQueue[Held] = SimpleQueue()
        self._unsettled: list[Held] = []
        self._wake = threading.Event()
        self._empty_polls = {name: 0 for name in names}
        self._next_poll = {name: 0.0 for name in names}
        self._next_tick: float | None = None
        self._turn = 0
        self._link_down_until = 0.0
        self._link_failures = 0
        self._stop_at: float | None = None
        self._signals = 0
        self._pool: _DaemonPool | None = None
        self._async: _AsyncRunner | None = None

    # -- running ----------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._stop_at is not None

    def run(self, *, install_signals: bool | None = None) -> Tally:
        """Work until stopped (signal or :meth:`stop`), then shut down; returns the tally.

        SIGTERM/SIGINT handlers are installed when this runs on the main thread (or when
        ``install_signals`` says so); from another thread, stop it with :meth:`stop`.
        """
        if install_signals is None:
            install_signals = threading.current_thread() is threading.main_thread()
        if install_signals:
            self._install_signals()
        log.info("worker %d: queues %s on wire %d, concurrency %d, lease %d ms",
                 os.getpid(), ", ".join(self.queues), self.connection.wire, self.config.concurrency,
                 self.config.lease.lease_ms)
        try:
            while True:
                next_ms = self.step()
                if self.stopping and (not self.held or self._clock_ms() >= self._stop_at):
                    break
                self._wake.wait(max(0.0, next_ms - self._clock_ms()) / 1000)
        finally:
            self.shutdown()
        return self.tally

    def stop(self, reason: str = "stop requested") -> None:
        """Stop claiming; running jobs get ``grace_s`` to finish. Safe from any thread."""
        if self._stop_at is None:
            self._stop_at = self._clock_ms() + self.config.grace_s * 1000
            log.info("worker %d: %s: no more claims; %d job(s) held, waiting up to %.1fs for them",
                     os.getpid(), reason, len(self.held), self.config.grace_s)
        self._wake.set()

    def _install_signals(self) -> None:
        def on_signal(signum: int, frame: Any) -> None:
            self._signals += 1
            name = signal.Signals(signum).name
            if self._signals > 1:
                # a second signal means now: no grace, no requeue; the leases expire on their own
                os.write(2, f"echomq worker {os.getpid()}: second {name}, exiting at once; "
                            f"{len(self.held)} held job(s) left to lease expiry\n".encode())
                os._exit(128 + signum)
            self.stop(name)

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, on_signal)

    def step(self) -> float:
        """One pass of the loop; returns the local time (ms) at which the next one is due."""
        self._wake.clear()
        now = self._clock_ms()
        if now < self._link_down_until:
            return self._link_down_until
        try:
            self.exchange(now)
            self.time_out(self._clock_ms())
            self.renew(self._clock_ms())
            self.give_up_expired(self._clock_ms())
            if not self.stopping:
                self.timers.run_due(self._clock_ms())
            self._link_failures = 0
        except (*LINK_ERRORS, CommandRefused) as exc:
            # the link or the server failed this step: pause and retry; held leases run on meanwhile
            self._link_failures += 1
            pause = min(LINK_RETRY_MS[1], LINK_RETRY_MS[0] * 2 ** min(self._link_failures - 1, 10))
            log.warning("worker %d: step failed (%s: %s); retrying in %d ms", os.getpid(), type(exc).__name__,
                        exc, pause)
            self._link_down_until = self._clock_ms() + pause
            return self._link_down_until
        return self._next_due(self._clock_ms())

    def _next_due(self, now: float) -> float:
        if not self._finished.empty() or self._unsettled:
            return now
        times = [self._next_tick or float("inf")]
        live = [h for h in self.held.values() if not h.ctx.lease_lost]
        if live:
            times.append(min(h.renewed_at for h in live) + self.config.lease.lease_ms)
            times += [h.deadline for h in live if h.deadline is not None]
        if self.stopping:
            times.append(self._stop_at)
        else:
            if self._capacity() > 0:
                times += self._next_poll.values()
            times.append(self.timers.next_due_ms(now))
        return min(times)

    def _capacity(self) -> int:
        return self.config.concurrency - len(self.held)

    # -- 1. settle and 4. claim: one exchange per queue -------------------------------
    def exchange(self, now: float) -> int:
        """Settle what finished and claim into the free slots, per queue in one round trip
        (two on wire 4, whose claim follows its pause read): ``Queue.settle_and_claim``.
        Queues take turns going first, so a busy queue cannot starve the rest. Returns how
        many jobs were claimed."""
        batches = self._decide_settles()
        names = list(self.queues)
        self._turn = (self._turn + 1) % len(names)
        order = names[self._turn:] + names[:self._turn]
        claimed = 0
        for at, name in enumerate(order):
            batch = batches.get(name, [])
            count = 0
            if not self.stopping and now >= self._next_poll[name]:
                # the jobs settled in this round trip free their slots for its claims
                count = policy.claim_batch(self._capacity() + len(batch), self._empty_polls[name],
                                           self.config.claim_batch)
            if not batch and not count:
                continue
            sent = self._clock_ms()
            try:
                answers, jobs = self.queues[name].settle_and_claim([call for _, _, call in batch], count,
                                                                   self.config.lease.lease_ms)
            except (*LINK_ERRORS, CommandRefused):
                # unknown whether the settles applied: send them again next step (a repeat is fenced by the token)
                self._unsettled += [held for later in order[at:] for held, _, _ in batches.get(later, [])]
                raise
            self._settled(name, batch, answers)
            if count:
                self._polled(name, now, found=bool(jobs))
            for job in jobs:
                self._start(self.tasks[name], self.queues[name], job, sent)
            claimed += len(jobs)
        return claimed

    def _decide_settles(self) -> dict[str, list[tuple[Held, policy.Settle, Call]]]:
        """What to send for every finished handler, by queue; lost ones are dropped here."""
        done = self._unsettled
        self._unsettled = []
        while not self._finished.empty():
            done.append(self._finished.get())
        by_queue: dict[str, list[tuple[Held, policy.Settle, Call]]] = {}
        for held in done:
            outcome = self._encoded(held.task, held.verdict or outcome_of(held.future))
            if isinstance(outcome, policy.Raised) and not held.ctx.lease_lost:
                log.warning("job %s/%s attempt %d raised:", held.job.queue, held.job.id, held.job.attempt,
                            exc_info=outcome.error)
            decision = policy.decide_outcome(
                outcome, lost=held.ctx.lease_lost and held.verdict is None, attempt=held.job.attempt,
                max_attempts=held.task.max_attempts, backoff=held.task.backoff, rand=self._rand(),
            )
            if isinstance(decision, policy.Drop):
                self._release(held)
                self.tally.lost += 1
                log.warning("job %s/%s attempt %d: %s; its outcome is not settled",
                            held.job.queue, held.job.id, held.job.attempt, decision.reason)
                continue
            by_queue.setdefault(held.job.queue, []).append((held, decision, self._settle_call(held, decision)))
        return by_queue

    def _encoded(self, task: Task, outcome: policy.Outcome) -> policy.Outcome:
        """A return value as the bytes PUBLISH keeps (when it will be kept); a value the task's
        serializer refuses, or one over MAX_RESULT_BYTES, fails the attempt instead."""
        if not isinstance(outcome, policy.Returned) or not (self.bus and task.result_ttl_ms):
            return outcome
        try:
            return policy.Returned(encode_result(task.serializer, outcome.value, MAX_RESULT_BYTES))
        except PayloadError as exc:
            return policy.Raised(exc)

    def _settled(self, name: str, batch: list[tuple[Held, policy.Settle, Call]], answers: list[Any]) -> None:
        settled_at = self._clock_ms()
        for (held, decision, _), reply in zip(batch, answers):
            self._record(held, decision, reply)
            self._release(held)
            if isinstance(decision, policy.Delay) or reply == b"scheduled":
                # promote when it falls due, not a whole interval later (plus slack for the two clocks)
                wait = decision.delay_ms if isinstance(decision, policy.Delay) else decision.backoff_ms
                self.timers.expect_due(name, settled_at + wait + PROMOTE_SLACK_MS)

    def _polled(self, name: str, now: float, *, found: bool) -> None:
        """After a claim: poll again at once while the queue gives jobs, else back off."""
        if found:
            self._empty_polls[name] = 0
            self._next_poll[name] = now
        else:
            self._empty_polls[name] += 1
            self._next_poll[name] = now + policy.idle_interval_ms(self.config.idle, self._empty_polls[name])

    def _settle_call(self, held: Held, decision: policy.Settle) -> Call:
        queue, job = held.queue, held.job
        if isinstance(decision, policy.Complete):
            if self.bus and held.task.result_ttl_ms:
                return queue.publish_call(job, decision.value, retention_ms=held.task.result_ttl_ms)
            return queue.complete_call(job)
        if isinstance(decision, policy.Fail):
            if self.bus:
                return queue.failures_incr_call(job, decision.error, max_attempts=decision.max_attempts,
                                                backoff_ms=decision.backoff_ms, traceback=decision.traceback)
            return queue.fail_call(job, decision.error, max_attempts=decision.max_attempts,
                                   backoff_ms=decision.backoff_ms)
        return queue.delay_call(job, decision.delay_ms)

    def _record(self, held: Held, decision: policy.Settle, reply: Any) -> None:
        job = held.job
        where = f"job {job.queue}/{job.id} attempt {job.attempt}"
        if isinstance(reply, (LeaseLost, StateError)):
            # the fence: someone else holds the job now (or the sweep moved it); this attempt's outcome is void
            self.tally.lost += 1
            log.warning("%s: settle refused, the lease is gone (%s); not settled by this worker", where, reply)
        elif isinstance(reply, Exception):
            # any other refusal writes nothing either: the job stays active until its lease runs out
            self.tally.lost += 1
            log.error("%s: settle refused by the server (%s); the sweep recovers it after its lease", where, reply)
        elif isinstance(decision, policy.Complete):
            self.tally.completed += 1
        elif isinstance(decision, policy.Delay):
            self.tally.delayed += 1
        else:
            state = reply.decode() if isinstance(reply, bytes) else str(reply)
            if state == "dead":
                self.tally.dead += 1
                log.error("%s failed (%s) and is dead: its budget of %d attempts is spent", where,
                          decision.error, decision.max_attempts)
            else:
                self.tally.retried += 1
                log.info("%s failed (%s); retry in %d ms", where, decision.error, decision.backoff_ms)

    def _release(self, held: Held) -> None:
        self.held.pop(held.key, None)

    # -- 2. and 3. leases -----------------------------------------------------------
    def renew(self, now: float) -> None:
        """On the tick, renew every held job that is due, in one EXTENDS per queue."""
        if self._next_tick is None:
            self._next_tick = now + self.config.lease.renew_every_ms
        if now < self._next_tick:
            return
        self._next_tick = now + self.config.lease.renew_every_ms
        live = {key: held for key, held in self.held.items() if not held.ctx.lease_lost}
        due = policy.select_renewals({key: held.renewed_at for key, held in live.items()}, now, self.config.lease)
        by_queue: dict[str, list[Held]] = {}
        for key in due:
            by_queue.setdefault(key[0], []).append(live[key])
        for name, batch in by_queue.items():
            sent = self._clock_ms()
            answers = self.queues[name].extend_many([h.job for h in batch], self.config.lease.lease_ms)
            lost = set(policy.lost_from_extends([h.key for h in batch], answers))
            for held in batch:
                if held.key in lost:
                    self._lose(held, "EXTENDS answered 0: the job is no longer held with this token")
                else:
                    held.renewed_at = sent

    def time_out(self, now: float) -> None:
        """Fail every handler past its timeout with JobTimeout (settled by the next exchange): an
        async one is cancelled; a sync one is abandoned to its thread, and a fresh thread takes
        its place in the pool. Either way the lease is no longer renewed and the handler's own
        outcome is dropped."""
        running = {key: held.deadline for key, held in self.held.items()
                   if held.deadline is not None and held.verdict is None and not held.ctx.lease_lost}
        for key in policy.select_timed_out(running, now):
            held = self.held[key]
            timeout_s = self._timeout_s(held.task)
            held.verdict = policy.Raised(JobTimeout(timeout_s))
            held.ctx.lost.set()
            if held.task.is_async:
                held.future.cancel()
            elif self._pool is not None:
                self._pool.replace_one()
            log.error("job %s/%s attempt %d: the handler ran past its timeout of %g s: failed with JobTimeout%s",
                      held.job.queue, held.job.id, held.job.attempt, timeout_s,
                      "" if held.task.is_async else "; its thread is abandoned and runs on until it returns")
            self._finished.put(held)

    def _timeout_s(self, task: Task) -> float | None:
        return self.config.timeout_s if self.config.timeout_s is not None else task.timeout

    def give_up_expired(self, now: float) -> None:
        live = {key: held.renewed_at for key, held in self.held.items() if not held.ctx.lease_lost}
        for key in policy.select_expired(live, now, self.config.lease):
            self._lose(self.held[key], "no renewal reached the server within the lease")

    def _lose(self, held: Held, reason: str | None) -> None:
        """Tell the handler its lease is gone; its outcome will be dropped when it finishes.
        (A sync handler that never looks at ``ctx.lease_lost`` keeps its slot until it returns.)"""
        held.ctx.lost.set()
        if held.future is not None and held.task.is_async:
            held.future.cancel()
        if reason:
            log.warning("job %s/%s attempt %d: lease lost (%s)", held.job.queue, held.job.id, held.job.attempt,
                        reason)

    # -- running handlers ------------------------------------------------------------
    def _start(self, task: Task, queue: Queue, job: Job, sent: float) -> None:
        self.tally.claimed += 1
        ctx = JobContext(job.id, job.queue, job.attempt)
        if self.connection.serves("append"):
            # progress is sent from the handler's own thread, on the connection's pool: one APPEND
            ctx.report = lambda value, queue=queue, job=job: queue.progress(job, value)
        timeout_s = self._timeout_s(task)
        held = Held(queue, task, job, ctx, renewed_at=sent,
                    deadline=None if timeout_s is None else sent + timeout_s * 1000)
        self.held[held.key] = held
        try:
            payload = None if job.raw_payload is None else task.serializer.loads(job.raw_payload)
        except Exception as exc:  # a payload this task cannot read fails this job (dead at once), not the worker
            held.verdict = policy.Undecodable(PayloadError(
                f"the payload cannot be decoded by the task's serializer ({type(task.serializer).__name__}): "
                f"{type(exc).__name__}: {exc}"))
            log.error("job %s/%s: %s", job.queue, job.id, held.verdict.error)
            self._finished.put(held)
            return
        held.future = self._submit(task, task.arguments(payload, ctx))
        held.future.add_done_callback(lambda _f, held=held: self._done(held))

    def _submit(self, task: Task, args: tuple[Any, ...]) -> Future:
        if not task.is_async:
            if self._pool is None:
                self._pool = _DaemonPool(self.config.concurrency)
            return self._pool.submit(task.fn, *args)
        if self._async is None:
            self._async = _AsyncRunner()
        try:
            coro = task.fn(*args)
        except Exception as exc:  # raised before its first await (a bad signature, say): this job's outcome
            failed: Future = Future()
            failed.set_exception(exc)
            return failed
        return self._async.submit(coro)

    def _done(self, held: Held) -> None:
        if held.verdict is not None:  # timed out: already failed; this late outcome is dropped
            log.info("job %s/%s attempt %d: the timed-out handler finished after all; its outcome is dropped",
                     held.job.queue, held.job.id, held.job.attempt)
            return
        self._finished.put(held)
        self._wake.set()

    # -- shutdown ----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Settle what finished, then release what is still held (REQUEUE, on both wires)."""
        if self._stop_at is None:
            self._stop_at = self._clock_ms()  # no claims from here on, whatever brought us here
        try:
            self.exchange(self._clock_ms())
        except (EchoMQError, *LINK_ERRORS) as exc:
            log.warning("worker %d: could not settle finished jobs at shutdown: %s", os.getpid(), exc)
        still = [held for held in self.held.values() if not held.ctx.lease_lost]
        for held in still:
            self._lose(held, None)  # first: its outcome must never be settled now (logged below, all at once)
        if still:
            self._requeue(still)
        else:
            log.info("worker %d: stopped with nothing held", os.getpid())
        self.held.clear()
        if self._pool:
            self._pool.shutdown()
        if self._async:
            self._async.shutdown()
        log.info("worker %d: done: %s", os.getpid(), self.tally)

    def _requeue(self, still: list[Held]) -> None:
        by_queue: dict[str, list[Held]] = {}
        for held in still:
            by_queue.setdefault(held.job.queue, []).append(held)
        for name, batch in by_queue.items():
            try:
                replies = self.queues[name].settle_many([self.queues[name].requeue_call(h.job) for h in batch])
            except LINK_ERRORS as exc:
                self.tally.abandoned += len(batch)
                log.warning("worker %d: REQUEUE failed (%s): %d job(s) left to lease expiry", os.getpid(), exc,
                            len(batch))
                continue
            ok = [h.job.id for h, reply in zip(batch, replies) if reply == 1]
            self.tally.requeued += len(ok)
            self.tally.abandoned += len(batch) - len(ok)
            log.warning("worker %d: requeued %d job(s) still held at the end of the grace period: %s",
                        os.getpid(), len(ok), ", ".join(ok))
