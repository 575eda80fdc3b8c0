"""What the worker decides, apart from what it does: pure functions, no I/O, no clock.

Each function takes the facts (times are plain numbers, randomness is passed in)
and returns a decision, so every rule here is table-tested without a server:

* :func:`backoff_ms` -- the retry schedule: exponential, capped, with jitter;
* :func:`decide_outcome` -- what a handler's result turns into (a :data:`Settle`);
* :func:`idle_interval_ms` -- how long an idle queue waits before it polls again;
* :func:`claim_batch` -- how many claims to pipeline in one round trip;
* :func:`select_renewals` / :func:`select_expired` -- which leases to renew, and
  which to give up on because no renewal reached the server in time.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Mapping, TypeVar, Union

from .errors import ConfigurationError

K = TypeVar("K", bound=Hashable)  #: whatever names a held job (the worker uses (queue, id))

#: The longest wait a handler may ask for (ten years): the server adds it to its clock in i64 ms.
MAX_DELAY_MS = 10 * 365 * 24 * 3600 * 1000

# -- the retry schedule ----------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter: ``base_ms * factor**(attempt-1)``, capped at ``max_ms``,
    then spread by up to ``jitter`` of itself in either direction (0 = no jitter).

    With the defaults a job retries after about 1 s, 2 s, 4 s ... and never waits more
    than 5 minutes. Jitter spreads a burst of failures so they do not all come back at once.
    """

    base_ms: int = 1000
    factor: float = 2.0
    max_ms: int = 300_000
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (isinstance(self.base_ms, int) and self.base_ms >= 0):
            raise ConfigurationError(f"bad backoff base_ms {self.base_ms!r}: an integer >= 0")
        if not self.factor >= 1:
            raise ConfigurationError(f"bad backoff factor {self.factor!r}: a number >= 1")
        if not (isinstance(self.max_ms, int) and self.base_ms <= self.max_ms <= MAX_DELAY_MS):
            raise ConfigurationError(f"bad backoff max_ms {self.max_ms!r}: an integer from base_ms to {MAX_DELAY_MS}")
        if not 0 <= self.jitter <= 1:
            raise ConfigurationError(f"bad backoff jitter {self.jitter!r}: a fraction from 0 to 1")


def backoff_ms(policy: Backoff, attempt: int, rand: float) -> int:
    """The delay before retry number ``attempt`` (1 = after the first failure).

    ``rand`` is a uniform sample in [0, 1): 0.5 gives the exact exponential value.
    """
    attempt = max(1, attempt)
    # cap the exponent before computing: factor**attempt overflows a float long before attempts run out
    raw = policy.base_ms * policy.factor ** min(attempt - 1, 64)
    capped = min(float(policy.max_ms), raw)
    spread = capped * policy.jitter * (2 * rand - 1)
    return max(0, min(policy.max_ms, int(round(capped + spread))))


# -- outcomes -------------------------------------------------------------------


@dataclass(frozen=True)
class Complete:
    """The handler returned: COMPLETE, or PUBLISH with ``value`` (the result, encoded) where the
    node serves the bus and the task keeps results."""

    value: object = None


@dataclass(frozen=True)
class Fail:
    """The handler raised (or asked for a retry): FAIL, which retries or goes dead by the budget."""

    error: str
    max_attempts: int
    backoff_ms: int
    #: what FAILURES.INCR stores beside ``last_error`` (presentation, not part of the decision)
    traceback: str = field(default="", compare=False)


@dataclass(frozen=True)
class Delay:
    """The handler asked to run again later without failing: DELAY."""

    delay_ms: int


@dataclass(frozen=True)
class Drop:
    """The lease was lost while the handler ran: settle nothing, someone else holds the job."""

    reason: str


Settle = Union[Complete, Fail, Delay, Drop]


@dataclass(frozen=True)
class Returned:
    value: object = None


@dataclass(frozen=True)
class Raised:
    error: BaseException


@dataclass(frozen=True)
class RetryAsked:
    """The handler raised :class:`echomq.Retry`: a failure, with its own delay when given."""

    reason: str
    delay_ms: int | None


@dataclass(frozen=True)
class DelayAsked:
    delay_ms: int


@dataclass(frozen=True)
class Undecodable:
    """The payload could not be decoded: no handler ran, and no retry can do better."""

    error: BaseException


Outcome = Union[Returned, Raised, RetryAsked, DelayAsked, Undecodable]


def describe_error(error: BaseException, limit: int = 2000) -> str:
    """The text FAIL stores as ``last_error``: the exception's type and message, bounded."""
    try:
        message = str(error)
    except Exception:  # an exception whose __str__ fails must not take the worker down with it
        message = "(its message could not be read)"
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_traceback(error: BaseException, limit: int = 8192) -> str:
    """The traceback FAILURES.INCR stores, bounded: its last ``limit`` characters (the frame
    that raised is at the end)."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:
        return ""
    return text if len(text) <= limit else "..." + text[-(limit - 3):]


def decide_outcome(outcome: Outcome, *, lost: bool, attempt: int, max_attempts: int, backoff: Backoff,
                   rand: float) -> Settle:
    """What to send for a finished handler. A lost lease wins over everything: nothing is settled."""
    if lost:
        return Drop("lease lost while the handler ran")
    if isinstance(outcome, Returned):
        return Complete(outcome.value)
    if isinstance(outcome, DelayAsked):
        return Delay(outcome.delay_ms)
    if isinstance(outcome, RetryAsked):
        wait = backoff_ms(backoff, attempt, rand) if outcome.delay_ms is None else outcome.delay_ms
        return Fail(outcome.reason, max_attempts, wait)
    if isinstance(outcome, Raised):
        return Fail(describe_error(outcome.error), max_attempts, backoff_ms(backoff, attempt, rand),
                    describe_traceback(outcome.error))
    if isinstance(outcome, Undecodable):
        # a budget of one: FAIL caps on failures, so this failure is the last (dead at once)
        return Fail(describe_error(outcome.error), 1, 0)
    raise TypeError(f"not an outcome: {outcome!r}")


# -- polling when idle ----------------------------------------------------------------


@dataclass(frozen=True)
class IdlePolicy:
    """Adaptive back-off for an empty queue: wait ``min_ms`` after the first empty claim,
    then ``factor`` times longer after each further one, never more than ``max_ms``."""

    min_ms: int = 10
    max_ms: int = 1000
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (0 < self.min_ms <= self.max_ms) or self.factor < 1:
            raise ConfigurationError(
                f"bad idle back-off {self!r}: need 0 < min_ms <= max_ms and factor >= 1"
            )


def idle_interval_ms(policy: IdlePolicy, empty_polls: int) -> int:
    """How long to wait before the next claim after ``empty_polls`` empty ones in a row (0 = poll now)."""
    if empty_polls <= 0:
        return 0
    return int(min(policy.max_ms, policy.min_ms * policy.factor ** min(empty_polls - 1, 64)))


def claim_batch(capacity: int, empty_polls: int, max_batch: int) -> int:
    """How many claims to pipeline: one while the queue looks empty (an idle poll costs one
    claim), up to ``max_batch`` while it is busy, never more than the free slots."""
    if capacity <= 0:
        return 0
    return 1 if empty_polls > 0 else min(capacity, max_batch)


# -- leases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LeasePolicy:
    """``lease_ms`` is what each claim and renewal asks for. Leases are renewed on a tick
    (default every quarter lease), all due ones in one EXTENDS: a job is due once half a
    tick has passed since it was claimed or last renewed, so every lease is renewed with
    well over half of it left, and a job claimed just before a tick waits for the next."""

    lease_ms: int = 30_000
    tick_ms: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lease_ms, bool) or not isinstance(self.lease_ms, int) or self.lease_ms < 100:
            raise ConfigurationError(f"bad lease_ms {self.lease_ms!r}: an integer >= 100")
        if self.tick_ms is not None and not 0 < self.tick_ms <= self.lease_ms // 2:
            raise ConfigurationError(f"bad renewal tick_ms {self.tick_ms!r}: above 0, at most half the lease")

    @property
    def renew_every_ms(self) -> int:
        return self.tick_ms or self.lease_ms // 4


def select_renewals(renewed_at: Mapping[K, float], now_ms: float, policy: LeasePolicy) -> list[K]:
    """The held jobs to renew on the tick at ``now_ms`` (local clock), oldest first.

    ``renewed_at`` maps a job to the local time its claim or last successful renewal was
    *sent*: the server's deadline is at least ``lease_ms`` after that.
    """
    due = [(at, job) for job, at in renewed_at.items() if now_ms - at >= policy.renew_every_ms / 2]
    return [job for _, job in sorted(due)]


def select_expired(renewed_at: Mapping[K, float], now_ms: float, policy: LeasePolicy) -> list[K]:
    """The held jobs whose lease may already have run out on the server: no renewal
    reached it within ``lease_ms`` (the link was down). The worker gives them up."""
    return [job for job, at in renewed_at.items() if now_ms - at >= policy.lease_ms]


def select_timed_out(deadlines: Mapping[K, float], now_ms: float) -> list[K]:
    """The running jobs whose handler is past its timeout at ``now_ms`` (local clock), earliest
    deadline first. ``deadlines`` maps a job to the local time its timeout runs out."""
    return [job for at, job in sorted((at, job) for job, at in deadlines.items() if now_ms >= at)]


def lost_from_extends(jobs: Iterable[K], answers: Iterable[int]) -> list[K]:
    """The jobs EXTENDS answered 0 for: their lease is gone (re-claimed, swept or settled)."""
    return [job for job, answer in zip(jobs, answers) if not answer]


# -- the timers ------------------------------------------------------------------------


def next_timer_ms(last_ms: float | None, now_ms: float, interval_ms: int, saturated: bool) -> float:
    """When a timer runs next: at once when its last run hit its limit (there is more to
    move), else one interval after the last run (at once when it never ran)."""
    if last_ms is None or saturated:
        return now_ms
    return last_ms + interval_ms

