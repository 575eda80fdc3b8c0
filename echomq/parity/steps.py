"""The case model: a case is a named sequence of steps on one or more queues.

Steps are data, run identically on both nodes:

* :class:`Do` — one job-core verb (or declared read) with its ARGV exactly as
  sent; ``keys`` overrides the verb's KEYS for shape and layout cases.
* :class:`Raw` — a plain command (a case's setup: a ghost, a lane field, a
  wrong-typed key; and pause/resume, which SPEC §3 defines as plain commands).
* :class:`Wait` — wait on each node's own server clock until a member's score
  (or every score of a set) is in the past. Never a fixed sleep.
* :class:`Tick` — let a few ms pass on each node's server clock.
* :class:`Restart` — restart both servers (AOF on both): the native node gets a
  new run_id.

Ids are explicit, so both nodes hold the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._protocol.keys import Keyspace
from .._protocol.verbs import BY_NAME


@dataclass(frozen=True)
class Do:
    verb: str
    queue: str
    argv: tuple[str, ...]
    keys: tuple[str, ...] | None = None  #: override the verb's KEYS (shape and layout cases)

    def call_keys(self) -> tuple[str, ...]:
        if self.keys is not None:
            return self.keys
        space = Keyspace(self.queue)
        return tuple(space.key(suffix) for suffix in BY_NAME[self.verb].keys)

    @property
    def base(self) -> bytes:
        """The row root the call derives rows from: its last key (every verb's base is last)."""
        keys = self.call_keys()
        return (keys[-1] if keys else Keyspace(self.queue).base).encode()

    def __str__(self) -> str:
        args = " ".join(_short(a) for a in self.argv)
        keys = "" if self.keys is None else f" keys={list(self.keys)}"
        return f"{self.verb}({self.queue}{', ' if args else ''}{args}){keys}"


@dataclass(frozen=True)
class Raw:
    args: tuple[str, ...]
    label: str = ""

    def __str__(self) -> str:
        return self.label or " ".join(_short(a) for a in self.args)


@dataclass(frozen=True)
class Wait:
    queue: str
    set: str = "active"  #: active or schedule
    member: str | None = None  #: wait past this member's score; None: past every score of the set

    def __str__(self) -> str:
        return f"wait on the server clock past {self.set}{'[' + self.member + ']' if self.member else ''} of {self.queue}"


@dataclass(frozen=True)
class Tick:
    ms: int = 2  #: let this much time pass on each node's server clock

    def __str__(self) -> str:
        return f"wait {self.ms} ms on the server clock"


@dataclass(frozen=True)
class Restart:
    def __str__(self) -> str:
        return "restart both servers (AOF)"


Step = Do | Raw | Wait | Tick | Restart


@dataclass(frozen=True)
class Case:
    name: str
    family: str  #: admission, claim, lease, settle, schedule, recovery, reads, restart
    steps: tuple[Step, ...]
    expect: frozenset[str] = field(default_factory=frozenset)  #: the §5 names the case must show
    note: str = ""


def _short(arg: str) -> str:
    return arg if len(arg) <= 24 else arg[:20] + f"…({len(arg)})"


# -- builders: ARGV exactly as the Python client sends it (decimal text) -----------------
def enqueue(q: str, job: str, payload: str = "p", priority: int | str = 0) -> Do:
    return Do("enqueue", q, (job, payload, str(priority)))


def enqueues(q: str, *triples: tuple[str, str, int | str]) -> Do:
    """EMQ.ENQUEUES: ENQUEUE for each (id, payload, priority) triple in one step (docs/spec.md §20)."""
    return Do("enqueues", q, tuple(part for job, payload, priority in triples for part in (job, payload, str(priority))))


def schedule(q: str, job: str, delay_ms: int | str, payload: str = "p", priority: int | str = 0) -> Do:
    return Do("schedule", q, (job, payload, str(delay_ms), str(priority)))


def enqueue_unique(q: str, job: str, payload: str = "p", priority: int | str = 0, unique_ms: int | str = 0,
                   replace: int | str = 0, delay_ms: int | str | None = None) -> Do:
    """EMQ.ENQUEUE.UNIQUE (docs/spec.md §14): with ``delay_ms`` a schedule, without it an enqueue."""
    late = () if delay_ms is None else (str(delay_ms),)
    return Do("enqueue_unique", q, (job, payload, str(priority), str(unique_ms), str(replace), *late))


def claim(q: str, lease_ms: int | str = 60_000, rated: bool = False) -> Do:
    """CLAIM; ``rated``: with its late ``rated`` (docs/spec.md §13), so a held claim answers its wait."""
    return Do("claim", q, (str(lease_ms), *(("1",) if rated else ())))


def claims(q: str, count: int | str, lease_ms: int | str = 60_000, rated: bool = False) -> Do:
    """EMQ.CLAIMS: up to ``count`` CLAIMs in one step (docs/spec.md §3); ``rated`` as CLAIM's."""
    return Do("claims", q, (str(lease_ms), str(count), *(("1",) if rated else ())))


def bclaim(q: str, lease_ms: int | str = 60_000, timeout_ms: int | str = 1, rated: bool = False) -> Do:
    """EMQ.BCLAIM on the native node; the script node, which cannot block, runs its claim (SPEC §9.3)."""
    return Do("bclaim", q, (str(lease_ms), str(timeout_ms), *(("1",) if rated else ())))


def extend(q: str, job: str, token: int | str, lease_ms: int | str = 60_000) -> Do:
    return Do("extend", q, (job, str(token), str(lease_ms)))


def extends(q: str, lease_ms: int | str, *pairs: tuple[str, int | str]) -> Do:
    return Do("extends", q, (str(lease_ms), *[part for job, token in pairs for part in (job, str(token))]))


def complete(q: str, job: str, token: int | str) -> Do:
    return Do("complete", q, (job, str(token)))


def completes(q: str, *pairs: tuple[str, int | str]) -> Do:
    """EMQ.COMPLETES: COMPLETE for each (id, token) pair in one step (docs/spec.md §18)."""
    return Do("completes", q, tuple(part for job, token in pairs for part in (job, str(token))))


def fail(q: str, job: str, token: int | str, error: str = "boom", max_attempts: int | str = 3,
         backoff_ms: int | str = 0, traceback: str | None = None) -> Do:
    late = () if traceback is None else (traceback,)
    return Do("fail", q, (job, str(token), error, str(max_attempts), str(backoff_ms), *late))


def delay(q: str, job: str, token: int | str, delay_ms: int | str = 60_000) -> Do:
    return Do("delay", q, (job, str(token), str(delay_ms)))


def requeue(q: str, job: str, token: int | str) -> Do:
    return Do("requeue", q, (job, str(token)))


def promote(q: str, limit: int | str = 1000) -> Do:
    return Do("promote", q, (str(limit),))


def reschedule(q: str, job: str, delay_ms: int | str = 60_000) -> Do:
    return Do("reschedule", q, (job, str(delay_ms)))


def reprocess(q: str, job: str) -> Do:
    return Do("reprocess", q, (job,))


def stalled_check(q: str, max_stalled: int | str = 3, limit: int | str = 1000) -> Do:
    return Do("stalled_check", q, (str(max_stalled), str(limit)))


def append(q: str, job: str, token: int | str, progress: str = '{"pct":50}') -> Do:
    return Do("append", q, (job, str(token), progress))


def failures_incr(q: str, job: str, token: int | str, error: str = "boom", max_attempts: int | str = 3,
                  backoff_ms: int | str = 0, traceback: str | None = "Traceback ...") -> Do:
    """FAIL's arguments (docs/spec.md §12): the traceback optional as FAIL's."""
    late = () if traceback is None else (traceback,)
    return Do("failures_incr", q, (job, str(token), error, str(max_attempts), str(backoff_ms), *late))


def publish(q: str, job: str, token: int | str, result: str = "r", retention_ms: int | str = 60_000) -> Do:
    return Do("publish", q, (job, str(token), result, str(retention_ms)))


def publishes(q: str, retention_ms: int | str, *triples: tuple[str, int | str, str]) -> Do:
    """EMQ.PUBLISHES: PUBLISH for each (id, token, result) triple in one step, one retention for
    all (docs/spec.md §19)."""
    return Do("publishes", q, (str(retention_ms), *(str(part) for triple in triples for part in triple)))


def events_on(q: str, maxlen: int | str = 100) -> Raw:
    """Turn the queue's event stream on (docs/spec.md §12): a plain HSET of meta."""
    return Raw(("HSET", Keyspace(q).meta, "events", str(maxlen)), f"events on({q}, {maxlen})")


def rate_limit(q: str, limit: int | str, window_ms: int | str) -> Raw:
    """The queue's rate limit (docs/spec.md §13): a plain HSET of meta, as ``Queue.set_rate_limit``."""
    return Raw(("HSET", Keyspace(q).meta, "rate_limit", str(limit), "rate_window", str(window_ms)),
               f"rate limit({q}, {limit} per {window_ms} ms)")


def remove(q: str, job: str) -> Do:
    return Do("remove", q, (job,))


def cancel(q: str, job: str) -> Do:
    return Do("cancel", q, (job,))


def purge(q: str, age_ms: int | str = 0, limit: int | str = 1000) -> Do:
    return Do("purge", q, (str(age_ms), str(limit)))


def drain(q: str, limit: int | str = 1000) -> Do:
    return Do("drain", q, (str(limit),))


def counts(q: str) -> Do:
    return Do("counts", q, ())


def state(q: str, job: str) -> Do:
    return Do("state", q, (job,))


def pause(q: str, value: str = "1") -> Raw:
    return Raw(("HSET", Keyspace(q).meta, "paused", value), f"pause({q}{'' if value == '1' else ', ' + repr(value)})")


def resume(q: str) -> Raw:
    return Raw(("HDEL", Keyspace(q).meta, "paused"), f"resume({q})")


def raw(*args: str, label: str = "") -> Raw:
    return Raw(tuple(str(a) for a in args), label)


def key(q: str, suffix: str) -> str:
    return Keyspace(q).key(suffix)


def wait(q: str, set: str = "active", member: str | None = None) -> Wait:
    return Wait(q, set, member)


def tick(ms: int = 2) -> Tick:
    return Tick(ms)


def restart() -> Restart:
    return Restart()
