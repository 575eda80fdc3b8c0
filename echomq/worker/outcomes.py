"""A handler's call as an outcome (:func:`outcome_of`), and the process a handler forks kept out of
the worker: a fork made while a worker runs must never come back into the worker's code (its
sockets are the parent's), so :func:`outcome_of` ends it where its handler returns, and the
worker's signal handlers go back to the defaults in it."""

from __future__ import annotations

import os
import signal
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from . import policy
from .tasks import Delay, Retry

#: Worker.run()s going on in this process: a process forked meanwhile is a handler's (or a library's) fork
_running = 0
#: this process is such a fork: it must never go back into the worker's code (its sockets are the parent's)
_forked_from_worker = False
#: the SIGTERM/SIGINT handlers workers installed (a fork puts back the defaults of these only)
_signal_handlers: "weakref.WeakSet[Callable[..., Any]]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a process forked while a worker ran: the worker's SIGTERM/SIGINT handlers only set the
    stop flag of a loop this process does not run, so they go back to the defaults (SIGTERM ends
    it); and :func:`outcome_of` ends it where its handler returns, before it could settle through
    the parent's connection or take more jobs. No orphan copy of the worker is left behind."""
    global _forked_from_worker
    if not _running:
        return
    _forked_from_worker = True
    for signum, default in ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler)):
        if signal.getsignal(signum) in _signal_handlers:
            signal.signal(signum, default)


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextmanager
def running_worker() -> Iterator[None]:
    """A ``Worker.run()`` going on in this process: a process forked meanwhile is a handler's."""
    global _running, _forked_from_worker
    _running, _forked_from_worker = _running + 1, False  # a fork that runs a worker of its own is one
    try:
        yield
    finally:
        _running -= 1


def restore_at_fork(handler: Callable[..., Any]) -> None:
    """``handler``, a worker's SIGTERM/SIGINT handler, goes back to the default in a process forked
    while a worker runs (it would only set the stop flag of a loop that process does not run)."""
    _signal_handlers.add(handler)


def _leave_fork(status: int) -> None:
    os.write(2, f"echomq worker: process {os.getpid()}, forked by a handler, came back to the worker: it exits "
                f"here ({status}); a forked child must exit or exec itself\n".encode())
    os._exit(status)


def outcome_of(call: Callable[..., Any], *args: Any) -> policy.Outcome:
    """``call(*args)`` -- a sync handler, or a finished async one's ``future.result`` -- as an
    outcome (a returned Retry/Delay counts as raised; a cancelled future's error is raised). In a
    process a handler forked, the handler's return ends that process (:func:`_after_fork_in_child`)."""
    try:
        value = call(*args)
    except BaseException as exc:  # the handler's outcome, whatever it is
        if _forked_from_worker:
            _leave_fork(1)
        return raised(exc)
    if _forked_from_worker:
        _leave_fork(0)
    if value is None:
        return policy.RETURNED_NOTHING
    return raised(value) if isinstance(value, (Retry, Delay)) else policy.Returned(value)


def raised(error: BaseException) -> policy.Outcome:
    """What a handler's exception asks for."""
    if isinstance(error, Retry):
        return policy.RetryAsked(error.reason, error.delay_ms)
    if isinstance(error, Delay):
        return policy.DelayAsked(error.delay_ms)
    return policy.Raised(error)
