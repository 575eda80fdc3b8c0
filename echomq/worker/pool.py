"""Where handlers run: a pool of daemon threads for sync ones (:class:`DaemonPool`), an asyncio loop
on a thread of its own for ``async def`` ones (:class:`AsyncRunner`)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future
from itertools import repeat
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from .. import aio

log = logging.getLogger("echomq.worker")

#: A relaying worker's pool runs handlers quicker than this one after another on the thread already
#: awake (a wake and a GIL hand-off cost tens of µs); slower ones, mostly waiting on I/O, get a
#: thread each at once. Judged by a moving average of their times, timed by the run (the handlers a
#: thread takes one after another: two clock reads, not one a handler), each run's mean counted at
#: most twice this, so that one quick handler the OS preempted does not spread the next batch.
QUICK_HANDLER_S = 100e-6


class DaemonPool:
    """A fixed pool of daemon threads: a handler stuck past shutdown cannot keep the process alive
    (the standard ThreadPoolExecutor joins its threads at exit). No Future per call: the callable
    given reports its own outcome (a Future is a condition and two locks for every job). A callable
    may return another, run once its thread counts as free: what that one submits is left to this
    thread (the worker's relay) instead of waking another.

    Threads are woken one at a time: a submit wakes a sleeping thread only when no awake one is
    free to take the job, and a thread that takes a job wakes the next while work is still
    queued. With ``spread_after_s`` that chain runs only while handlers take
    ``QUICK_HANDLER_S`` or more; quick ones run on the thread already awake instead of others
    waking (a context switch and a GIL hand-off each) for a short job, and the owner calls
    :meth:`spread` now and then, which wakes threads for queued work that has not moved for
    ``spread_after_s`` (its thread is held up by a handler slower than the ones before it)."""

    def __init__(self, size: int, spread_after_s: float | None = None) -> None:
        self._spread_after_s = spread_after_s
        self._moved_at = 0.0  #: (spread_after_s) when queued work began to queue, or was last seen moving (spread)
        self._taken = 0  #: callables taken so far: spread() tells by it whether queued work moved since its last look
        self._taken_seen = 0  #: _taken at spread()'s last look
        self._took_s = 0.0  #: (spread_after_s) how long handlers lately ran: each capped, averaged
        self._mutex = threading.Lock()
        self._work: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._sleeping: list[threading.Lock] = []  #: each sleeping thread's own lock: released, it wakes
        self._free = 0  #: threads awake and not running a handler (they take queued work before sleeping)
        self._closed = False
        self._threads: list[threading.Thread] = []
        for _ in range(size):
            self._add()

    def submit_all(self, fn: Callable[..., None], calls: Sequence[tuple[Any, ...]]) -> None:
        """``fn(*args)`` for each ``args`` of ``calls``, queued at once (one lock for a claim batch)."""
        with self._mutex:
            if not self._work:
                self._moved_at = time.monotonic()
            self._work.extend(zip(repeat(fn), calls))
            if not self._free:
                self._wake_one()  # it, or spread(), wakes the next while work is queued

    def replace_one(self) -> None:
        """One more thread, in place of one running an abandoned (timed out) handler: Python
        cannot stop a thread, so that one runs on until its handler returns."""
        self._add()

    def _add(self) -> None:
        thread = threading.Thread(target=self._run, name=f"emq-handler-{len(self._threads)}", daemon=True)
        self._threads.append(thread)
        with self._mutex:
            self._free += 1  # it takes work, or sleeps, as soon as it runs
        thread.start()

    def _wake_one(self) -> None:
        """Under the mutex: a sleeping thread, if any, wakes (counted free from now)."""
        if self._sleeping:
            self._free += 1
            self._sleeping.pop().release()  # the last to sleep: the likeliest still in the CPU's caches

    def _run(self) -> None:
        me = threading.Lock()
        me.acquire()
        counted_free = True  # by _add or _wake_one; not while it runs a handler
        # handlers are timed only where their times decide (spread_after_s: quick ones stay on this thread),
        # by the run: the callables a thread takes one after another, timed together by two clock reads
        # (when it took the first, when the last ended) and averaged in as that many of their mean
        timed = self._spread_after_s is not None
        started: float | None = None  #: (timed) when the run going on started
        ran = 0  #: (timed) the callables of the run going on
        work = self._work
        while True:
            with self._mutex:
                if counted_free:
                    self._free -= 1  # it takes work, sleeps or ends now
                if self._closed:
                    return
                item = None
                if work:
                    try:
                        item = work.popleft()
                    except IndexError:  # a quick run on another thread took the last since the look
                        pass
                if item is not None:
                    self._taken += 1
                    if timed:
                        if started is None:
                            started = time.monotonic()
                        ran += 1
                    if work and not self._free and not (timed and self._took_s < QUICK_HANDLER_S):
                        self._wake_one()  # the next queued job needs a thread of its own (they are not quick)
                else:
                    if started is not None:  # the run ends: it sleeps
                        self._took(time.monotonic() - started, ran)
                        started, ran = None, 0
                    self._sleeping.append(me)
            if item is None:
                me.acquire()  # until a submit or the shutdown releases it (_wake_one counts it free)
                counted_free = True
                continue
            counted_free = False
            fn, args = item
            try:
                then = fn(*args)
                # quick handlers: the rest of the queue is taken on, one after another, without the mutex
                # (a lock and the bookkeeping above a job); the next take under it ends the run
                while then is None and started is not None and self._took_s < QUICK_HANDLER_S and not self._closed:
                    try:
                        fn, args = work.popleft()
                    except IndexError:
                        break
                    self._taken += 1
                    ran += 1
                    then = fn(*args)
                if then is not None:
                    took = None if started is None else time.monotonic() - started
                    with self._mutex:
                        if took is not None:  # the run ends here, not after what it hands this thread
                            self._took(took, ran)
                        self._free += 1
                    started, ran = None, 0
                    counted_free = True
                    then()
            except BaseException:  # the callables report their own outcome: this is a bug, and the thread lives on
                log.exception("worker %d: a handler thread's task failed", os.getpid())

    def _took(self, took_s: float, calls: int) -> None:
        """Under the mutex: a run of ``calls`` callables took ``took_s``, averaged in as that many of their
        mean, capped at twice QUICK_HANDLER_S (a run the OS preempted counts little)."""
        mean = took_s / calls
        capped = mean if mean < 2 * QUICK_HANDLER_S else 2 * QUICK_HANDLER_S
        self._took_s = capped + (self._took_s - capped) * 0.75 ** calls  # as if averaged in one by one, by 1/4

    @property
    def queued(self) -> bool:
        return bool(self._work)

    def spread(self) -> None:
        """Wake a thread for each queued job when no queued work has moved for ``spread_after_s``: since
        the look (a call of this) that last saw it move, or since it began to queue. The owner looks in
        regularly while work is queued (the worker's loop every ``policy.relay_look_ms``), so held-up work
        is spread within two of its looks of its last move."""
        after_s = self._spread_after_s
        if after_s is None or not self._work:
            return
        now = time.monotonic()
        if self._taken != self._taken_seen:  # it moved since the last look: held up from now at most
            self._taken_seen, self._moved_at = self._taken, now
        if now - self._moved_at >= after_s:
            with self._mutex:
                while self._sleeping and len(self._work) > self._free:
                    self._wake_one()

    def shutdown(self) -> None:
        """Sleeping threads end now, running ones after their handler; queued work is not started."""
        with self._mutex:
            self._closed = True
            while self._sleeping:
                self._wake_one()


class AsyncRunner:
    """An asyncio loop on a daemon thread for ``async def`` handlers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="emq-asyncio", daemon=True)
        self._thread.start()

    def submit(self, coro: Any) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self, connection: aio.Connection, timeout_s: float = 2.0) -> None:
        """Close the async handlers' connection on its own loop (a stuck handler cannot hold this up)."""
        try:
            self.submit(connection.aclose()).result(timeout_s)
        except Exception as exc:
            log.warning("worker %d: closing the async handlers' connection: %s", os.getpid(), exc)

    def shutdown(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
