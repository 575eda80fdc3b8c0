"""Which of a queue's jobs an operator means: a filter of a state's jobs by error text, age and task
(decided on a row's fields and payload, pure), a page of the jobs that match (read a window at a time, a bounded
number of rows a request), their count, and a walk of the dead jobs they name in batches, for the
bulk actions (:mod:`echomq.admin.actions`) the dashboard and ``emq reprocess --all`` share.

Every read is short: a window is one ZRANGE by rank (O(log n) and its length) and one HMGET of a
few small fields per row, so a filter over 100,000 jobs is many small commands, never one long one.
A job's *age* is the time since it was admitted (its row's ``created``, server clock: docs/spec.md
§11.5); a row without one (written before it existed) matches no age filter. A job's *task* is the
one its payload's envelope names (``read_headers``: ``task.delay()`` and its kin write it); a job
enqueued without one (``Queue.enqueue``) matches no task filter. Only a task filter reads the
payloads, each row's in the same HMGET as its other fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .._client.connection import Plain
from .._client.partitioned import AnyQueue
from .._client.queue import Queue
from .._core.core import raise_first, scored
from .._protocol.envelope import TASK_NAME_MAX, read_headers
from .._protocol.keys import State
from .._protocol.shown import one_line
from .inventory import LISTED_FIELDS, JobView, listed_ids, listed_set, listed_view, partitions_of, text_of
from .steps import parse_duration_ms

#: the most characters of error text a filter looks for (a longer one is refused, named)
ERROR_FILTER_CHARS = 200
#: rows read in one round trip while a filter scans a state (one ZRANGE and this many HMGETs)
WINDOW = 500
#: rows one filtered page request reads at most before it answers with what it found and where to go on
SCAN_BUDGET = 2000
#: dead jobs a bulk action reads, then acts on, in one round trip each
BULK_BATCH = 500


@dataclass(frozen=True)
class JobFilter:
    """What an operator asked for of a state's jobs: their last error contains ``error`` (any case),
    their age is at least ``min_age`` and at most ``max_age`` (durations as people type them:
    ``30s``, ``15m``, ``12h``, ``7d``), and their headers name the task ``task`` (exactly). Empty
    fields ask nothing. Refused (ValueError, naming what was wrong) when a duration does not read or
    the error text or the task name is too long."""

    error: str = ""
    min_age: str = ""
    max_age: str = ""
    task: str = ""
    min_age_ms: int | None = field(default=None, init=False, compare=False, repr=False)
    max_age_ms: int | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "error", self.error.strip())
        if len(self.error) > ERROR_FILTER_CHARS:
            raise ValueError(f"error text of {len(self.error)} characters: look for at most {ERROR_FILTER_CHARS}")
        object.__setattr__(self, "task", self.task.strip())
        if len(self.task) > TASK_NAME_MAX:
            raise ValueError(f"a task name of {len(self.task)} characters: a task's has at most {TASK_NAME_MAX}")
        for name in ("min_age", "max_age"):
            text = getattr(self, name).strip()
            object.__setattr__(self, name, text)
            try:
                object.__setattr__(self, f"{name}_ms", parse_duration_ms(text) if text else None)
            except ValueError as exc:
                raise ValueError(f"bad {name.replace('_', ' ')}: {exc}") from None

    @property
    def empty(self) -> bool:
        return not (self.error or self.min_age or self.max_age or self.task)

    @property
    def fields(self) -> tuple[str, ...]:
        """The row's fields it reads: a list's (LISTED_FIELDS), and the payload last for a task filter."""
        return (*LISTED_FIELDS, "payload") if self.task else LISTED_FIELDS

    def matches_row(self, values: Sequence[Any], now_ms: int) -> bool:
        """Whether a row, its :attr:`fields` as HMGET answers them, is one the filter asks for (pure)."""
        fields = {name: text_of(v) for name, v in zip(LISTED_FIELDS, values) if v is not None}
        return bool(fields) and self.matches(fields, now_ms, values[-1] if self.task else None)

    def matches(self, fields: Mapping[str, str], now_ms: int, stored: bytes | None = None) -> bool:
        """Whether a row (its fields as text, ``stored``: its payload as stored, read for a task filter)
        is one the filter asks for, at server time ``now_ms`` (pure)."""
        if self.task and (stored is None or read_headers(stored)[0].task != self.task):
            return False
        if self.error and self.error.casefold() not in fields.get("last_error", "").casefold():
            return False
        least, most = self.min_age_ms, self.max_age_ms
        if least is not None or most is not None:
            created = fields.get("created", "")
            if not created.isdigit():
                return False
            age_ms = now_ms - int(created)
            if (least is not None and age_ms < least) or (most is not None and age_ms > most):
                return False
        return True

    def query(self) -> dict[str, str]:
        """The filter as a link's query (the fields it sets), read back by ``JobFilter(**query)``."""
        return {name: value for name, value in (("task", self.task), ("error", self.error), ("min_age", self.min_age),
                                                ("max_age", self.max_age)) if value}

    def described(self) -> str:
        """The filter for people and the audit log, on one line (the error text quoted, escaped)."""
        said = ([f"task {one_line(repr(self.task))}"] if self.task else []) + \
            ([f"error containing {one_line(repr(self.error))}"] if self.error else []) + \
            ([f"at least {self.min_age} old"] if self.min_age else []) + \
            ([f"at most {self.max_age} old"] if self.max_age else [])
        return ", ".join(said) or "every job"


NO_FILTER = JobFilter()


@dataclass(frozen=True)
class Matching:
    """A filtered page: the jobs that matched, in the state's order, and where the scan stopped."""

    jobs: list[JobView]
    start: int  #: the rank the scan began at
    next_start: int | None  #: the rank to go on from; None when the scan reached the state's end
    scanned: int  #: rows read


def matching_page(queue: AnyQueue, state: State | str, job_filter: JobFilter, *, start: int, count: int,
                  budget: int = SCAN_BUDGET, window: int = WINDOW) -> Matching:
    """Up to ``count`` jobs of ``state`` the filter matches, from rank ``start`` on, reading at most
    ``budget`` rows (a window of ``window`` a round trip) and the server clock once."""
    now_ms = partitions_of(queue)[0].server_ms()
    where = listed_set(state)
    found: list[JobView] = []
    at = start
    while at - start < budget:
        listed = listed_ids(queue, state, offset=at, count=min(window, start + budget - at))
        if not listed:
            return Matching(found, start, None, at - start)
        rows = _rows(queue, [(q, job_id) for q, job_id, _ in listed], job_filter.fields)
        for (q, job_id, score), values in zip(listed, rows):
            at += 1
            if job_filter.matches_row(values, now_ms):
                view = listed_view(q.name, job_id, values, score, now_ms, where)
                if view is not None:
                    found.append(view)
                    if len(found) == count:
                        return Matching(found, start, at, at - start)
    return Matching(found, start, at, at - start)


def _rows(queue: AnyQueue, located: Sequence[tuple[Queue, str]], fields: Sequence[str]) -> list[list[Any]]:
    """The ``fields`` of each (partition, id)'s row, every row in one round trip."""
    if not located:
        return []
    rows = partitions_of(queue)[0].connection.round_trip([Plain(("HMGET", q.keys.job(job_id), *fields))
                                                          for q, job_id in located])
    raise_first(rows)
    return rows


#: what an act on a batch of dead ids answers: for each id, whether it has left dead (acted on, or gone)
Act = Callable[[Queue, list[str]], list[bool]]


@dataclass(frozen=True)
class Walked:
    """What a walk of the dead jobs did: how many the filter chose, and how many of them left dead."""

    chosen: int
    left: int
    commands: int  #: commands sent, reads and acts (each one short: no call holds the server)


def walk_dead(queue: AnyQueue, job_filter: JobFilter, as_of_ms: int, act: Act | None = None,
              batch: int = BULK_BATCH) -> Walked:
    """Walk the dead jobs that died at or before ``as_of_ms`` (server clock: the jobs there were when
    the operator looked; later deaths are left) and that the filter matches, ages taken at
    ``as_of_ms``, ``batch`` at a time, oldest first, each partition in turn; ``act`` on each batch
    chosen (None: only count them). A job the act moved out of dead shifts the ranks after it, so
    the next read starts that many ranks earlier."""
    chosen = left = commands = 0
    for part in partitions_of(queue):
        rank = 0
        while True:
            (members,) = part.connection.round_trip([Plain(("ZRANGE", part.keys.dead, rank, rank + batch - 1,
                                                            "WITHSCORES"))])
            commands += 1
            raise_first([members])
            listed = scored(members)
            due = [job_id for job_id, score in listed if score <= as_of_ms]
            picked = due
            if not job_filter.empty and due:
                rows = _rows(part, [(part, job_id) for job_id in due], job_filter.fields)
                commands += len(due)
                picked = [job_id for job_id, values in zip(due, rows) if job_filter.matches_row(values, as_of_ms)]
            gone = 0
            if act is not None and picked:
                answers = act(part, picked)
                commands += len(picked)
                gone = sum(answers)
            chosen, left = chosen + len(picked), left + gone
            if len(due) < batch:  # the set's end, or the first job that died after as_of_ms
                break
            rank += len(due) - gone
    return Walked(chosen, left, commands)


def count_dead(queue: AnyQueue, job_filter: JobFilter, as_of_ms: int) -> int:
    """How many dead jobs died at or before ``as_of_ms`` and match the filter: one ZCOUNT per
    partition without a filter, else a walk that reads their rows (:func:`walk_dead`)."""
    if not job_filter.empty:
        return walk_dead(queue, job_filter, as_of_ms).chosen
    parts = partitions_of(queue)
    counted = parts[0].connection.round_trip([Plain(("ZCOUNT", part.keys.dead, "-inf", as_of_ms)) for part in parts])
    raise_first(counted)
    return sum(counted)


def dead_as_of(queue: AnyQueue) -> int:
    """The server clock now (ms): the bound a bulk action's count and its act share."""
    return partitions_of(queue)[0].server_ms()
