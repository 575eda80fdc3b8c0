"""What the worker decides, apart from what it does: pure functions, no I/O, no clock.

Each function takes the facts (times are plain numbers, randomness is passed in: a number, or
a source drawn only when it is needed)
and returns a decision, so every rule here is table-tested without a server:

* :func:`backoff_ms` -- the retry schedule: exponential, capped, with jitter;
* :func:`decide_outcome` -- what a handler's result turns into (a :data:`Settle`), with
  :func:`describe_error` and :func:`describe_traceback` (bounded: :func:`keep_tail`);
* :func:`wait_groups`, :func:`to_wait`, :func:`interrupt_waiter`, :func:`block_timeout_ms` --
  how an idle worker waits on the server instead of polling;
* :func:`promote_at_ms` -- when to promote next, from the schedule's head (exact timers);
* :func:`idle_interval_ms` -- how long an idle queue waits before it polls again (a wire-6
  node without the ``claim.block`` token);
* :func:`claim_batch` -- how many claims to pipeline in one round trip;
* :func:`settle_at_ms` -- when to settle the outcomes already in, waiting briefly for the rest of a batch;
* :func:`select_renewals` / :func:`select_expired` -- which leases to renew, and
  which to give up on because no renewal reached the server in time;
* :func:`select_cancel_checks` / :func:`why_gone` -- which running jobs to look at for a cancel,
  and what a job no longer held was taken by.
"""

from __future__ import annotations

import traceback as _traceback
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Hashable, Iterable, Mapping, Sequence, TypeVar, Union

from ..errors import ConfigurationError
from .._protocol.keys import MAX_TRACEBACK_BYTES

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
    """The handler returned: COMPLETE, or PUBLISH with its result where the node serves the bus
    and the task keeps results (the worker encodes the returned value: the decision carries none)."""


#: the decision for every returned outcome (one record, not one a job)
COMPLETE = Complete()


@dataclass(frozen=True)
class Fail:
    """The handler raised (or asked for a retry): FAIL, which retries or goes dead by the budget."""

    error: str
    max_attempts: int
    backoff_ms: int
    traceback: str = ""  #: the raised exception's, bounded; "" when there is none (a Retry, a timeout)


@dataclass(frozen=True)
class Postpone:
    """The handler asked to run again later without failing: DELAY."""

    delay_ms: int


@dataclass(frozen=True)
class Drop:
    """The lease was lost while the handler ran: settle nothing, someone else holds the job."""

    reason: str


Settle = Union[Complete, Fail, Postpone, Drop]


@dataclass(frozen=True)
class Returned:
    value: object = None


#: what a handler that returns nothing (most) hands back: one record, not one a job
RETURNED_NOTHING = Returned()


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


#: How far past the cut :func:`keep_tail` looks for a line start, so the tail begins with a whole line.
LINE_SEARCH_BYTES = 512


def keep_tail(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` bytes of UTF-8: whole when it fits, else its tail (from a
    character boundary, at a line start when one is near) after a marker saying how much was cut."""
    data = text.encode(errors="backslashreplace")  # lone surrogates become text the wire can carry
    if len(data) <= limit:
        return data.decode()
    marker = "[... the first {} bytes were cut ...]\n"
    start = len(data) - (limit - len(marker.format(len(data)).encode()))
    while start < len(data) and data[start] & 0xC0 == 0x80:  # inside a character: to its end
        start += 1
    line = data.find(b"\n", start, start + LINE_SEARCH_BYTES)
    if line != -1 and line + 1 < len(data):
        start = line + 1
    return marker.format(start) + data[start:].decode()


def describe_traceback(error: BaseException, limit: int = MAX_TRACEBACK_BYTES) -> str:
    """The text FAIL stores as ``traceback``: the exception formatted as ``traceback.format_exc()``
    prints it (its chained causes included), its tail kept within ``limit`` bytes (the frames
    nearest the raise and the message); "" for an exception that was never raised."""
    if error.__traceback__ is None:
        return ""
    try:
        text = "".join(_traceback.format_exception(error))
    except Exception:  # an exception whose __str__ fails must not take the worker down with it
        return ""
    return keep_tail(text, limit)


def decide_outcome(outcome: Outcome, lost: bool, attempt: int, max_attempts: int, backoff: Backoff,
                   rand: Callable[[], float]) -> Settle:
    """What to send for a finished handler. A lost lease wins over everything: nothing is settled.
    ``rand`` (a random source, ``random.random``'s range) is drawn only for a backoff's jitter: a
    completion, the common case, draws nothing."""
    if lost:
        return Drop("lease lost while the handler ran")
    if isinstance(outcome, Returned):
        return COMPLETE
    if isinstance(outcome, DelayAsked):
        return Postpone(outcome.delay_ms)
    if isinstance(outcome, RetryAsked):
        wait = backoff_ms(backoff, attempt, rand()) if outcome.delay_ms is None else outcome.delay_ms
        return Fail(outcome.reason, max_attempts, wait)
    if isinstance(outcome, Raised):
        return Fail(describe_error(outcome.error), max_attempts, backoff_ms(backoff, attempt, rand()),
                    describe_traceback(outcome.error))
    if isinstance(outcome, Undecodable):
        # a budget of one: FAIL caps on failures, so this failure is the last (dead at once)
        return Fail(describe_error(outcome.error), 1, 0)
    raise TypeError(f"not an outcome: {outcome!r}")


# -- waiting when idle ----------------------------------------------------------------

#: The longest block: with nothing happening, a waiter re-arms this often (its only idle traffic).
BLOCK_MAX_MS = 30_000
#: A paused queue on wire 4 is looked at this often: a plain ``HDEL meta paused`` writes no wake marker.
PAUSED_RECHECK_MS = 1_000


def wait_groups(queues: Sequence[str], *, one_per_queue: bool,
                slots: Mapping[str, int] | None = None) -> list[tuple[str, ...]]:
    """Which queues share a waiter (one blocking connection). On one node's wire 4, one waiter
    for all: a single BZPOPMIN over every idle queue's wake marker. On a cluster (``slots``: each
    queue's hash slot) a BZPOPMIN's keys must share a slot, so wire 4 has one waiter per slot:
    queues whose hashtags hash to one slot share it. One per queue where the blocking command
    names one queue (wire 6's BCLAIM)."""
    if one_per_queue:
        return [(name,) for name in queues]
    if slots is None:
        return [tuple(queues)] if queues else []
    by_slot: dict[int, list[str]] = {}
    for name in queues:
        by_slot.setdefault(slots[name], []).append(name)
    return [tuple(group) for group in by_slot.values()]


def to_wait(group: Sequence[str], idle: AbstractSet[str], *, capacity: int, stopping: bool) -> tuple[str, ...]:
    """The queues of ``group`` its waiter should block on: those whose last claim came back
    empty, while the worker has a free slot and is not stopping."""
    if stopping or capacity <= 0:
        return ()
    return tuple(name for name in group if name in idle)


def interrupt_waiter(blocked_on: Sequence[str], wanted: Sequence[str], *, claims: bool) -> bool:
    """Whether to end a waiter's block early: a queue went idle that it is not blocked on, or it
    should wait on nothing now and its block would claim (wire 6: no job the worker cannot take)."""
    if not wanted:
        return claims
    return not set(wanted) <= set(blocked_on)


def block_timeout_ms(paused: bool) -> int:
    """How long one block may last: long while nothing is due (a waiter's only idle traffic is
    re-arming), but a second while a wire-4 queue is paused, so a plain resume is seen within it.
    Timers do not bound it: the control thread wakes for them on its own."""
    return PAUSED_RECHECK_MS if paused else BLOCK_MAX_MS


#: A job due at a server time (a retry's backoff, a delay, the schedule's head as read) is expected
#: due this long after it on the local clock: the two clocks, and the round trip that read it.
PROMOTE_SLACK_MS = 5


def promote_at_ms(now_ms: float, due_in_ms: int | None, slack_ms: int = 1) -> float | None:
    """When to promote next (local clock), given how long until the schedule's head is due on the
    server clock (None: the schedule is empty). ``slack_ms`` covers the round trip that read it;
    a promote that comes a little early moves nothing and reads the head again."""
    if due_in_ms is None:
        return None
    return now_ms + max(0, due_in_ms) + slack_ms


# -- polling when idle (a wire-6 node without claim.block) ------------------------------


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


def next_flow_poll_ms(now_ms: float, *, found: bool, due_ms: int | None, idle_blocking: bool, empty_polls: int,
                      backoff: IdlePolicy, slack_ms: int) -> float:
    """When to poll a queue's flow sets next, after a FLOW_CLAIM that ``found`` jobs or not and
    answered ``due_ms`` (None: the queue has no flow work at all; 0: flows are under way; n: a
    retry's backoff ends in n ms). With no flow work an idle blocking worker waits for its waiter
    (a flow script writes the wake marker) and a busy one looks again after ``backoff.max_ms``:
    never a back-off from a few ms, which would poll a flow-less queue through every busy spell."""
    if not found and due_ms is None:
        at = float("inf") if idle_blocking else now_ms + backoff.max_ms
    else:  # flows under way: a parent may be released by another process
        at = now_ms + idle_interval_ms(backoff, empty_polls)
    if due_ms:  # a retry's backoff ends then, whatever the rest says
        at = min(at, now_ms + due_ms + slack_ms)
    return at


#: A queue that never had a lane job has its lanes probed one claim round in this many (and after
#: every wake), so an idle or flat-only queue costs almost nothing more than before lanes existed.
NO_LANES_PROBE_EVERY = 8


def split_claims(count: int, capacity: int, flat_found: bool, lanes_found: bool, turn: int,
                 no_lanes: bool = False) -> tuple[int, int]:
    """How many of a round's ``count`` claims are flat and how many lane claims: a worker serves
    both kinds of a queue alike. Half each while both gave jobs (or neither did); a kind that
    came back empty keeps one probe while the other gets the rest. A single claim probes both
    when the worker has room for two; else the kinds take turns (``turn``: the queue's round),
    or, while only one of them gives jobs, that one, the other probed one round in four.
    ``no_lanes``: the queue never had a lane job (as its last lane claim said): all flat, but for
    a probe one round in :data:`NO_LANES_PROBE_EVERY`."""
    if count <= 0:
        return 0, 0
    if no_lanes and turn % NO_LANES_PROBE_EVERY:
        return count, 0
    if count == 1:
        if capacity >= 2:
            return 1, 1
        if flat_found != lanes_found:
            probe = turn % 4 == 0
            return (1, 0) if flat_found != probe else (0, 1)
        return (1, 0) if turn % 2 else (0, 1)
    if flat_found == lanes_found:
        return count - count // 2, count // 2
    return (count - 1, 1) if flat_found else (1, count - 1)


#: what each kind of claim in the round after a wake marker popped asks for: a second job found
#: says more came than the one a wake is usually for (pass_wake_on)
WOKEN_CLAIMS = 2


def woken_claims(flat: int, lanes: int, capacity: int) -> tuple[int, int]:
    """The round after a wake marker popped, as :func:`split_claims` made it (``flat``, ``lanes``):
    each kind it claims asks for :data:`WOKEN_CLAIMS`, where the ``capacity`` free slots hold them
    all (else the round as it was)."""
    woken = (WOKEN_CLAIMS if flat else 0, WOKEN_CLAIMS if lanes else 0)
    return woken if sum(woken) <= capacity else (flat, lanes)


def pass_wake_on(flat: int, lanes: int, jobs: Sequence[Any], capacity: int) -> bool:
    """Whether a worker that a wake marker woke writes the marker again for the next idle worker,
    from the round of claims after the wake (``flat`` and ``lanes`` claims with ``capacity`` slots
    free; ``jobs`` what they took). One marker wakes one waiter however many jobs came
    (docs/spec.md §10): a kind's claims that all came back, two or more, or a round that filled the
    worker, say more may wait than this worker takes at once, so the next idle worker looks too and
    passes it on in turn; a short round ends the chain, as BCLAIM's wakes stop once pending is empty."""
    lane_jobs = _lane_jobs(jobs)
    full = (flat >= WOKEN_CLAIMS and len(jobs) - lane_jobs >= flat) or (lanes >= WOKEN_CLAIMS and lane_jobs >= lanes)
    return full or 0 < capacity <= len(jobs)


def claims_found(before: tuple[bool, bool], flat: int, lanes: int, jobs: Sequence[Any]) -> tuple[bool, bool]:
    """After a round: whether each kind gave jobs (a kind not claimed keeps what it said last)."""
    lane_jobs = _lane_jobs(jobs)
    return (len(jobs) > lane_jobs if flat else before[0], lane_jobs > 0 if lanes else before[1])


def _lane_jobs(jobs: Sequence[Any]) -> int:
    """How many of a round's jobs are lane jobs (a flat job has no group)."""
    return sum(1 for job in jobs if job.group is not None)


def claim_batch(capacity: int, empty_polls: int, max_batch: int) -> int:
    """How many claims to pipeline: one while the queue looks empty (an idle poll costs one
    claim), up to ``max_batch`` while it is busy, never more than the free slots."""
    if capacity <= 0:
        return 0
    return 1 if empty_polls > 0 else min(capacity, max_batch)


# -- settling in fuller batches -------------------------------------------------------


def settle_at_ms(now_ms: float, running: int, youngest_start_ms: float | None, wait_ms: float) -> float:
    """When to settle the outcomes already in (local clock): ``now_ms`` when no handler is still
    running, else once the youngest running one has run ``wait_ms``. Quick handlers of one claim
    batch so settle together, in one round trip and one step of the worker's loop, instead of the
    first outcome waking the loop for itself; a settle waits at most ``wait_ms``, and not at all
    behind handlers that have all run longer than that (slow ones: waiting would only delay it)."""
    if running <= 0 or youngest_start_ms is None:
        return now_ms
    return max(now_ms, youngest_start_ms + wait_ms)


#: While relays go on (docs/workers.md "The relay"), the control thread looks in no more often than
#: this (ms): a look is a thread woken and the GIL taken from the relay's thread (~30 µs of CPU), and
#: looking every ``settle_wait_ms`` (1 ms) cost quick jobs ~5 % of their jobs/s (bench/NOTES.md, issue 44).
RELAY_LOOK_MS = 5.0


def relay_look_ms(settle_wait_ms: float) -> float:
    """How often the control thread looks in while relays go on: every ``settle_wait_ms``, but no more
    often than :data:`RELAY_LOOK_MS`. A relayed batch one slow handler holds up settles its quick jobs
    that long after it started, and jobs queued behind the slow one get threads within two looks."""
    return max(settle_wait_ms, RELAY_LOOK_MS)


def relay_look_at_ms(settle_at_ms: float, settle_due: bool, timer_due_ms: float, settle_wait_ms: float) -> float:
    """While relays go on: when the control thread looks in next (local clock). A batch that ends is
    settled by its relay, so the wake for a settle due at ``settle_at_ms`` (settle_wait_ms after the
    youngest handler started) is a look for a batch held up by a slow handler: it comes
    :func:`relay_look_ms` after that start, not sooner. ``settle_due``: the outcomes in are due
    already (an outcome wakes the loop then); ``timer_due_ms``: every other due time (Loop._next_timer)."""
    if settle_due:
        return timer_due_ms
    return min(timer_due_ms, settle_at_ms + relay_look_ms(settle_wait_ms) - settle_wait_ms)


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


#: How long a held job runs before the worker starts looking, every as long, whether it is still
#: held: a cancel (or a sweep) reaches its handler within about this, not at the next renewal
#: (a quarter lease). A quicker job ends before a look could matter, so it costs no read.
CANCEL_CHECK_MS = 500


def select_cancel_checks(claimed_at: Mapping[K, float], now_ms: float,
                         every_ms: float = CANCEL_CHECK_MS) -> tuple[list[K], float]:
    """The held jobs to look for a cancel at ``now_ms`` (local clock): those claimed ``every_ms`` ago
    or more; and when to look next: ``every_ms`` from now while any is that old, else when the first
    of the others comes of age (inf: none held). ``claimed_at`` maps a running job to when it was
    claimed. So a job cancelled at c is seen by c + ``every_ms``, whatever its age then."""
    old = [job for job, at in claimed_at.items() if now_ms - at >= every_ms]
    coming = [at + every_ms for at in claimed_at.values() if now_ms - at < every_ms]
    return old, min(coming + ([now_ms + every_ms] if old else []), default=float("inf"))


@dataclass(frozen=True)
class Gone:
    """Why a held job is no longer held, from its row as read (``state``, ``last_error``)."""

    cancelled: bool  #: someone cancelled it (Queue.cancel, emq cancel, the dashboard)
    reason: str


def why_gone(state: str | None, last_error: str | None) -> Gone:
    """Why a job this worker held left its lease set (or its renewal answered 0), from its row now."""
    if state == "dead" and last_error == "cancelled":
        return Gone(True, "cancelled (Queue.cancel, emq cancel or the dashboard) while it ran")
    if state is None:
        return Gone(False, "lease lost: its row is gone (removed, or settled by another holder)")
    if state == "dead":
        return Gone(False, f"lease lost: it is dead now ({last_error})")
    return Gone(False, f"lease lost: it is {state} again (its lease ran out, and the sweep took it back)")


# -- the timers ------------------------------------------------------------------------


def next_timer_ms(last_ms: float | None, now_ms: float, interval_ms: int, saturated: bool) -> float:
    """When a timer runs next: at once when its last run hit its limit (there is more to
    move), else one interval after the last run (at once when it never ran)."""
    if last_ms is None or saturated:
        return now_ms
    return last_ms + interval_ms

