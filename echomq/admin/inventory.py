"""Read-only views of a node for people and scripts: which queues exist, a queue's numbers,
one job's story. The CLI's read commands and the dashboard both print these; nothing
here writes. Every read goes on the connection's send path (``round_trip``), so a link fault
is :class:`~echomq.ConnectionFailed` and a refusal the typed :class:`~echomq.CommandRefused`.

Names of the numbers, as shown everywhere: ``completed`` and ``dead`` are running
totals from the queue's metrics hashes (``emq:{q}:metrics:completed`` and
``emq:{q}:metrics:failed`` -- the latter counts jobs that went **dead**, not every
failed attempt; a failure that is retried is not counted anywhere on the server).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

from valkey.cluster import ValkeyCluster

from .._protocol import envelope
from .._protocol.events import decode_progress
from .._client.connection import Connection, Plain
from .._core.core import Op, pairs, raise_first, scored
from .._core.workers import serving
from ..errors import CommandRefused
from .._protocol.keys import PARTITION_NAME, QUEUE_NAME, STATE_SETS, Keyspace, State, parent_queue
from .._client.partitioned import PartitionedQueue, open_queues, sum_counts
from .._client.queue import Counts, Queue
from .._protocol.results import NotKept, newer_record, not_kept_of
from .._protocol.shown import clip, id_form
from .._protocol.verbs import GROUPED_COUNTS, text
from .workers import list_workers

#: a row's times (ms, server clock): admitted, last claimed, last failed (docs/spec.md §11.5)
TIME_FIELDS = ("created", "started", "failed")
#: a completed record's own time (ms, server clock): when PUBLISH completed it (docs/spec.md §12)
RECORD_TIME_FIELDS = ("finished",)
#: the row's and the record's fields that hold integers (counters, a priority, a lane's order, a
#: parent's children left, ms times): ``--json`` gives them as numbers
INTEGER_FIELDS = frozenset({"attempts", "failures", "stalled", "priority", "seq", "children", *TIME_FIELDS,
                            *RECORD_TIME_FIELDS})
#: the keys whose presence means a queue exists (a queue whose jobs all completed keeps its metrics)
#: a queue exists when one of these does (``lanes:seq``: it ever had a lane job)
PRESENCE_SUFFIXES = ("pending", "active", "schedule", "dead", "meta", "metrics:completed", "metrics:failed",
                     Keyspace.LANES_SEQ)


def typed_fields(fields: dict[str, str]) -> dict[str, Any]:
    """A row's (or a completed record's) fields as ``--json`` gives them (pure): the
    :data:`INTEGER_FIELDS` as numbers and ``progress`` as the JSON value reported; a field that does
    not read as its kind (a row written by hand) keeps its text."""
    typed: dict[str, Any] = dict(fields)
    for name, value in fields.items():
        if name in INTEGER_FIELDS and INTEGER.fullmatch(value):
            typed[name] = int(value)
        elif name == "progress":
            typed[name] = decode_progress(value)
    return typed


INTEGER = re.compile(r"-?[0-9]+")


def text_of(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class QueueScan:
    """What one SCAN of a node found: its queues, and the keys it skipped."""

    names: list[str]  #: every queue, a partitioned one once by its own name (``emails``, not ``emails~3``)
    #: keys under ``emq:{…}:`` whose queue name EchoMQ refuses (a raw command wrote them): no page or
    #: command reads them, so one such key breaks nothing else; counted and named (a few) instead
    unreadable: int = 0
    examples: tuple[str, ...] = ()  #: the first few of them, in :func:`echomq._protocol.shown.id_form`

    EXAMPLES = 3


def scan_queues(connection: Connection) -> QueueScan:
    """Every queue with a key on the node (one SCAN of the keyspace; job rows and completed records,
    ``done:<id>`` and the hash ``done`` alike, are skipped by name), and the keys whose queue name is
    not one (see :class:`QueueScan`)."""
    names: set[str] = set()
    unreadable: list[str] = []
    count = 0
    for key in connection.scan("emq:{*}:*"):
        whole = text(key)
        name, _, rest = whole[len("emq:{"):].partition("}:")
        if not (QUEUE_NAME.fullmatch(name) or PARTITION_NAME.fullmatch(name)):
            count += 1
            if len(unreadable) < QueueScan.EXAMPLES:
                unreadable.append(id_form(whole))
        elif rest and rest != "done" and not rest.startswith(("job:", "done:", Keyspace.LANE)):
            names.add(parent_queue(name))
    return QueueScan(sorted(names), count, tuple(unreadable))


def discover_queues(connection: Connection) -> list[str]:
    """The names :func:`scan_queues` finds."""
    return scan_queues(connection).names


def queue_scan(connection: Connection, names: Sequence[str]) -> QueueScan:
    """The queues named, or (none named) every queue a SCAN finds."""
    return QueueScan(list(names)) if names else scan_queues(connection)


def queues_holding(connection: Connection, job_id: str) -> set[str]:
    """The queues that hold a row or a completed record for ``job_id``, in either layout: one SCAN
    of the node for the rows, the ``done:<id>`` keys and the hashes ``done``, then an HEXISTS of
    the id in each hash (one round trip)."""
    held = {name for kind in ("job", "done") for name, found in scanned_ids(connection, kind, glob_escaped(job_id))
            if found == job_id}
    hashes = sorted(done_hashes(connection))
    found = connection.round_trip([Plain(("HEXISTS", Keyspace(name).done_hash, job_id)) for name in hashes]) \
        if hashes else []
    raise_first(found)
    return held | {name for name, exists in zip(hashes, found) if exists}


def glob_escaped(text: str) -> str:
    """``text`` matched as itself by a SCAN pattern (pure)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def scanned_ids(connection: Connection, kind: str, pattern: str) -> Iterator[tuple[str, str]]:
    """(queue or partition name, id) of every job row (``kind`` ``job``) or completed record
    (``done``) whose id matches the SCAN ``pattern``, one SCAN of the node."""
    for key in connection.scan(f"emq:{{*}}:{kind}:{pattern}"):
        name, _, rest = text_of(key)[len("emq:{"):].partition("}:")
        if rest.startswith(f"{kind}:"):
            yield name, rest[len(kind) + 1:]


def done_hashes(connection: Connection) -> Iterator[str]:
    """The queues (or partitions) that keep completed records as fields: their hash ``done``, by a
    SCAN of the node."""
    for key in connection.scan("emq:{*}:done"):
        name, _, rest = text_of(key)[len("emq:{"):].partition("}:")
        if rest == "done":
            yield name


def record_fields(connection: Connection, name: str, pattern: str) -> Iterator[str]:
    """The ids of the records kept as fields of ``name``'s hash ``done`` that match the HSCAN
    ``pattern`` (each step a round trip; only matching fields come back, with their values)."""
    cursor = 0
    while True:
        (reply,) = connection.round_trip([Plain(("HSCAN", Keyspace(name).done_hash, cursor, "MATCH", pattern,
                                                 "COUNT", 1000))])
        raise_first([reply])
        cursor, fields = reply
        yield from (text_of(field) for field in pairs(fields))
        if not int(cursor):
            return


def record_ids(connection: Connection, pattern: str) -> Iterator[tuple[str, str]]:
    """(queue or partition name, id) of every completed record whose id matches ``pattern``: the
    ``done:<id>`` keys (one SCAN), then the fields of each hash ``done`` (one more SCAN, an HSCAN
    each)."""
    yield from scanned_ids(connection, "done", pattern)
    for name in done_hashes(connection):
        yield from ((name, job_id) for job_id in record_fields(connection, name, pattern))


@dataclass(frozen=True)
class Hit:
    """A job a search found: its queue (a partitioned queue's own name), its id and its state
    (``completed`` for a completed record within its retention; None for a row without one)."""

    queue: str
    id: str
    state: str | None


def find_exact(queues: Sequence[Queue | PartitionedQueue], job_id: str) -> list[Hit]:
    """The job ``job_id`` in each of ``queues`` that holds it, as a row or a completed record: one
    round trip however many queues (an HGET of its row's state, an EXISTS of its ``done:<id>`` and
    an HEXISTS of its field of ``done`` in each partition)."""
    located = [(queue, part) for queue in queues for part in partitions_of(queue)]
    if not located:
        return []
    replies = located[0][1].connection.round_trip(
        [call for _, part in located for call in (Plain(("HGET", part.keys.job(job_id), "state")),
                                                  Plain(("EXISTS", part.keys.done(job_id))),
                                                  Plain(("HEXISTS", part.keys.done_hash, job_id)))])
    raise_first(replies)
    hits: dict[str, Hit] = {}
    for (queue, _), state, record, field in zip(located, replies[::3], replies[1::3], replies[2::3]):
        if state is not None or record or field:
            hits.setdefault(queue.name, Hit(queue.name, job_id, text_of(state) if state is not None else "completed"))
    return list(hits.values())


def find_prefixed(connection: Connection, prefix: str, shown: Callable[[str], bool], limit: int
                  ) -> tuple[list[Hit], bool]:
    """Up to ``limit`` jobs whose id starts with ``prefix``, rows then completed records, in the
    queues ``shown`` accepts (by name): a SCAN of the node's keyspace (each step a short command),
    ended early once ``limit`` are found. Returns (the hits, whether the SCAN went through)."""
    found: dict[tuple[str, str], tuple[str, str]] = {}  # (queue, id) -> (the partition holding it, kind)
    pattern = glob_escaped(prefix) + "*"
    for kind, ids in (("job", scanned_ids(connection, "job", pattern)), ("done", record_ids(connection, pattern))):
        for name, job_id in ids:
            if shown(parent_queue(name)):
                found.setdefault((parent_queue(name), job_id), (name, kind))
                if len(found) == limit:
                    return _states(connection, found), False
    return _states(connection, found), True


def _states(connection: Connection, found: dict[tuple[str, str], tuple[str, str]]) -> list[Hit]:
    """Each found row's state (one round trip, each read where its partition is); a record's ``completed``."""
    rows = [(part, job_id) for (_, job_id), (part, kind) in found.items() if kind == "job"]
    replies = connection.round_trip([Plain(("HGET", Keyspace(part).job(job_id), "state")) for part, job_id in rows]) \
        if rows else []
    states = {row: text_of(state) if isinstance(state, bytes) else None for row, state in zip(rows, replies)}
    return sorted((Hit(queue, job_id, "completed" if kind == "done" else states[part, job_id])
                   for (queue, job_id), (part, kind) in found.items()), key=lambda hit: (hit.queue, hit.id))


def node_where(connection: Connection) -> str:
    """Where ``connection`` reads, for people: the node's address (or a cluster's size) and the wire."""
    client = connection.client
    if isinstance(client, ValkeyCluster):
        return f"a cluster of {len(client.get_primaries())} primaries (via {client.get_default_node().name}), " \
               f"wire {connection.wire}"
    kwargs = client.get_connection_kwargs()
    place = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return f"{place}, wire {connection.wire}"


def partitions_of(queue: Queue | PartitionedQueue) -> list[Queue]:
    """The queues that hold a queue's jobs: a partitioned queue's partitions, else the queue itself."""
    return queue.partitions if isinstance(queue, PartitionedQueue) else [queue]


def queue_exists(queue: Queue | PartitionedQueue) -> bool:
    """True when any set, the meta hash or a metrics hash of the queue (any partition) exists
    (one EXISTS per partition: on a cluster their keys sit in different slots)."""
    parts = partitions_of(queue)
    found = parts[0].connection.round_trip([Plain(("EXISTS", *(q.keys.key(s) for s in PRESENCE_SUFFIXES)))
                                            for q in parts])
    raise_first(found)
    return any(found)


@dataclass(frozen=True)
class QueueNumbers:
    """One queue's counts per state and its running totals."""

    name: str
    counts: Counts
    completed: int  #: jobs completed, all time
    dead: int  #: jobs that went dead, all time (the ``metrics:failed`` hash)
    partitions: int = 1  #: summed over this many partitions
    #: how long the oldest waiting job has waited, ms (server clock; read by ``numbers_of(oldest=True)``):
    #: the oldest admission among the heads of pending's priorities (:func:`op_oldest_pending`); None
    #: when nothing is pending or it was not read
    oldest_waiting_ms: int | None = None

    @property
    def label(self) -> str:
        return self.name if self.partitions == 1 else f"{self.name} ({self.partitions} partitions)"

    def as_dict(self) -> dict[str, Any]:
        c = self.counts
        return {"queue": self.name, "partitions": self.partitions, "pending": c.pending, "active": c.active,
                "scheduled": c.scheduled,
                "dead": c.dead, "paused": c.paused, "completed_total": self.completed, "dead_total": self.dead,
                "lane_pending": c.lane_pending, "lane_active": c.lane_active, "flow_waiting": c.flow_waiting,
                "flow_pending": c.flow_pending, "flow_active": c.flow_active, "flow_scheduled": c.flow_scheduled}


def waiting_unserved(numbers: QueueNumbers, workers: int) -> int:
    """How many jobs wait in a queue no live worker serves (``workers``: how many serve it): its
    pending flat, lane and flow jobs; 0 while a worker serves it (pure)."""
    counts = numbers.counts
    return 0 if workers else counts.pending + counts.lane_pending + counts.flow_pending


def jobs_held(counts: Counts) -> int:
    """Every job a queue's counts hold, in every set: flat, lanes, flows (pure)."""
    return counts.total + sum(getattr(counts, name) for name in GROUPED_COUNTS)


def jobs_on(connection: Connection) -> tuple[int, int]:
    """(the jobs on the node, in every set: flat, lanes, flows; the queues holding them)."""
    numbers = [n for n in numbers_of(open_queues(connection, discover_queues(connection)))
               if isinstance(n, QueueNumbers)]
    return sum(jobs_held(n.counts) for n in numbers), sum(1 for n in numbers if jobs_held(n.counts))


def with_partitions(queues: Sequence[Queue | PartitionedQueue], detail: bool) -> list[Queue | PartitionedQueue]:
    """The rows of a table of ``queues`` (pure): each queue, and with ``detail`` a partitioned
    queue's partitions below it."""
    return [q for queue in queues
            for q in [queue, *(partitions_of(queue) if detail and len(partitions_of(queue)) > 1 else [])]]


def sample(connection: Connection, rows: Sequence[Queue | PartitionedQueue]
           ) -> tuple[dict[str, QueueNumbers | Exception], Counter[str]]:
    """Every row's numbers, and how many live workers serve each queue."""
    return {q.name: found for q, found in zip(rows, numbers_of(rows))}, serving(list_workers(connection))


def rates(now: dict[str, QueueNumbers], before: dict[str, QueueNumbers] | None, elapsed_s: float) -> dict[str, dict]:
    """Completions and deaths per second between two samples, per queue (pure)."""
    if before is None or elapsed_s <= 0:
        return {}
    shown = {}
    for name, numbers in now.items():
        then = before.get(name, numbers)
        shown[name] = {"completed_per_s": (numbers.completed - then.completed) / elapsed_s,
                       "dead_per_s": (numbers.dead - then.dead) / elapsed_s}
    return shown


def numbers_or_error(queue: Queue | PartitionedQueue, *, oldest: bool = False) -> QueueNumbers | CommandRefused:
    """A damaged queue (a wrong-typed key) must not hide the others: its refusal is returned."""
    return numbers_of([queue], oldest=oldest)[0]


def numbers_of(queues: Sequence[Queue | PartitionedQueue], *, oldest: bool = False
               ) -> list[QueueNumbers | CommandRefused]:
    """Every queue's numbers in one round trip, however many queues (a dashboard or ``emq stats``
    on a node of thousands): each partition's COUNTS and metrics reads travel in one pipeline. A
    damaged queue's refusal takes its place and does not hide the others. With ``oldest``, the
    oldest waiting job's age too (:func:`op_oldest_pending`: a second round trip, more only for a
    queue of several priorities, and the server clock)."""
    parts = [partitions_of(queue) for queue in queues]
    flat = [part for each in parts for part in each]
    if not flat:
        return []
    reads = [(part.op_counts(), part.op_metrics(), *([op_oldest_pending(part)] if oldest else [])) for part in flat]
    per = len(reads[0])
    read = drive_together(flat[0].connection, [op for ops in reads for op in ops])
    admitted = read[2::per] if oldest else []
    now_ms = flat[0].server_ms() if any(isinstance(time, int) for time in admitted) else 0
    found: list[QueueNumbers | CommandRefused] = []
    at = 0
    for queue, each in zip(queues, parts):
        mine, at = read[at : at + per * len(each)], at + per * len(each)
        refused = [r for r in mine if isinstance(r, CommandRefused)]
        if refused:
            found.append(refused[0])
            continue
        metrics = mine[1::per]
        heads = [t for t in mine[2::per] if isinstance(t, int)] if oldest else []
        found.append(QueueNumbers(queue.name, sum_counts(mine[::per]), sum(m["completed"] for m in metrics),
                                  sum(m["failed"] for m in metrics), len(each),
                                  max(0, now_ms - min(heads)) if heads else None))
    return found


#: the most priorities of a queue's pending jobs :func:`op_oldest_pending` looks at (a round trip each)
PRIORITIES_READ = 16


def op_oldest_pending(queue: Queue) -> Op[int | None]:
    """When the oldest of a queue's pending jobs was admitted (its row's ``created``, ms, server
    clock); None when none is pending. Pending serves by priority, then by id, and default ids are
    time-ordered, so the oldest job of each priority is its first: the head of pending, then of each
    next priority (a round trip each, at most :data:`PRIORITIES_READ`), and their rows' ``created``.
    Custom ids that are not time-ordered make it the age of each priority's next job."""
    key = queue.keys.pending
    head, last = yield [Plain(("ZRANGE", key, 0, 0, "WITHSCORES")), Plain(("ZRANGE", key, -1, -1, "WITHSCORES"))]
    raise_first([head, last])
    if not head:
        return None
    heads = scored(head)
    top = scored(last)[0][1]
    while heads[-1][1] < top and len(heads) < PRIORITIES_READ:
        (step,) = yield [Plain(("ZRANGE", key, f"({heads[-1][1]:.17g}", "+inf", "BYSCORE", "LIMIT", 0, 1,
                                "WITHSCORES"))]
        raise_first([step])
        if not step:
            break
        heads += scored(step)
    admitted = yield [Plain(("HGET", queue.keys.job(job_id), "created")) for job_id, _ in heads]
    raise_first(admitted)
    times = [int(t) for t in admitted if t is not None and INTEGER.fullmatch(text_of(t))]
    return min(times) if times else None


def drive_together(connection: Connection, ops: Sequence[Op[Any]]) -> list[Any]:
    """Drive several operations at once: each round trip carries the next request of every one
    still running, in one pipeline. One that raises a refusal ends with it in its place; the
    others go on. For reads whose every command has a key (each is routed by it on a cluster)."""
    results: list[Any] = [None] * len(ops)
    running: dict[int, Sequence[Any]] = {}

    def advance(index: int, replies: list[Any] | None) -> None:
        try:
            running[index] = ops[index].send(replies)  # send(None) starts it
        except StopIteration as done:
            results[index] = done.value
        except CommandRefused as exc:
            results[index] = exc

    for index in range(len(ops)):
        advance(index, None)
    while running:
        batch = list(running.items())
        running.clear()
        replies = connection.round_trip([call for _, request in batch for call in request])
        at = 0
        for index, request in batch:
            advance(index, replies[at : at + len(request)])
            at += len(request)
    return results


@dataclass(frozen=True)
class JobView:
    """One job as stored: its row, where it sits, and what its set's score means."""

    queue: str
    id: str
    state: str | None
    fields: dict[str, str]  #: the row without the payload
    payload: bytes | None
    score: float | None  #: in the set its state names; None when it is not there
    now_ms: int  #: the server clock when read
    kept_ms: int | None = None  #: a completed record (state ``completed``): ms left of its retention
    trace: dict[str, str] | None = None  #: the trace context it was enqueued with (echomq._protocol.envelope)
    #: the task it names (``task.delay()``, ``task.enqueue()``: its envelope's header); None for a job
    #: enqueued without one (``Queue.enqueue``), which its queue's one task runs
    task: str | None = None
    where: str | None = None  #: the set its state names (a key under the queue's base), when read by :func:`job_view`
    listed: bool = False  #: read for a list (:func:`job_page`): only LISTED_FIELDS, an error clipped, no payload

    @property
    def completed(self) -> bool:
        return self.state == "completed"

    @property
    def flow(self) -> bool:
        """A flow job (a child, or a parent) not yet dead: cancelled in any live state, never removed."""
        return ("parent" in self.fields or "on_child_failure" in self.fields) and self.state != "dead"

    @property
    def in_its_set(self) -> bool:
        return self.score is not None

    @property
    def age_ms(self) -> int | None:
        """How long ago the job was admitted (its row's ``created``, server clock); None without one."""
        created = self.fields.get("created", "")
        return max(0, self.now_ms - int(created)) if created.isdigit() else None

    @property
    def due_in_ms(self) -> int | None:
        """For active: the lease runs out in this long; for scheduled: it falls due in this long."""
        if self.score is None or self.state not in ("active", "scheduled"):
            return None
        return int(self.score) - self.now_ms

    def times(self) -> list[tuple[str, str, str]]:
        """The row's (or a completed record's) times that are set: (field, how long ago, the UTC
        time), server clock."""
        found = []
        for name in (*TIME_FIELDS, *RECORD_TIME_FIELDS):
            if self.fields.get(name, "").isdigit():
                at = int(self.fields[name])
                utc = datetime.fromtimestamp(at / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
                found.append((name, f"{ago((self.now_ms - at) / 1000)} ago", f"{utc} UTC"))
        return found

    @property
    def not_kept(self) -> NotKept | None:
        """A completed record whose result could not be kept: why (docs/results.md)."""
        return not_kept_of(self.payload) if self.completed and self.payload is not None else None

    def payload_text(self) -> str:
        """The payload for people: JSON pretty-printed (its strings escaped by JSON itself), else
        the repr of its bytes (nested past what Python's JSON reads: the bytes too)."""
        if self.payload is None:
            return "(none)"
        if (not_kept := self.not_kept) is not None:
            return f"(not kept: {not_kept.reason}; a {not_kept.type} returned)"
        try:
            return json.dumps(json.loads(self.payload), indent=2)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return repr(self.payload)

    def payload_json(self) -> Any:
        """The payload as JSON when it is JSON, else its text (or repr of its bytes)."""
        if self.payload is None or self.not_kept is not None:
            return None
        try:
            return json.loads(self.payload)
        except (ValueError, RecursionError):
            return self.payload.decode(errors="replace")

    def as_dict(self) -> dict[str, Any]:
        if self.completed:
            not_kept = self.not_kept
            return {"queue": self.queue, "id": self.id, **typed_fields(self.fields), "kept_ms": self.kept_ms,
                    "result": self.payload_json(), **({} if not_kept is None else {"result_not_kept": vars(not_kept)})}
        found = {"queue": self.queue, "id": self.id, "state": self.state, **typed_fields(self.fields),
                 "set": self.where, "in_its_set": self.in_its_set, "due_in_ms": self.due_in_ms}
        return found if self.listed else {**found, "task": self.task, "payload": self.payload_json(),
                                          "trace": self.trace}


def decode_view(queue_name: str, job_id: str, row: dict[bytes, bytes], score: float | None,
                now_ms: int, where: str | None = None) -> JobView | None:
    """A job view from its raw row, its score (in ``where``) and the server clock (pure); None for no row."""
    fields = {text_of(k): v for k, v in row.items()}
    if not fields:
        return None
    headers, payload = envelope.read_headers(fields.pop("payload", None))
    text = {k: text_of(v) for k, v in fields.items()}
    return JobView(queue_name, job_id, text.get("state"), text, payload, score, now_ms, trace=headers.trace,
                   task=headers.task, where=where)


def set_of(row: dict[bytes, bytes]) -> str | None:
    """The set a row's state puts it in (pure): a flat state's, or a lane's or a flow's own; None
    for no state, or one no set belongs to."""
    state = text_of(row.get(b"state", b""))
    if b"parent" in row or b"on_child_failure" in row:  # a flow job: a child, or a parent
        if state in FLOW_SETS:
            return FLOW_SETS[state]
    elif b"group" in row and state in LANE_SETS:  # a lane row waits in its lane, is leased in lanes:active
        return LANE_SETS[state].format(group=text_of(row[b"group"]))
    try:
        return STATE_SETS[State(state)]
    except ValueError:
        return None


#: Where a lane row's state puts it (docs/lanes-and-flows.md); a dead one is in dead.
LANE_SETS = {"pending": Keyspace.LANE + "{group}", "active": Keyspace.LANES_ACTIVE}
#: Where a flow row's state puts it (docs/lanes-and-flows.md "Keys, states and moves"); a dead one is in dead.
FLOW_SETS = {"pending": Keyspace.FLOW_PENDING, "active": Keyspace.FLOW_ACTIVE, "scheduled": Keyspace.FLOW_SCHEDULE,
             "waiting": Keyspace.FLOW_WAITING}


def _ms(time_reply: Any) -> int:
    seconds, micros = time_reply
    return int(seconds) * 1000 + int(micros) // 1000


def job_view(queue: Queue | PartitionedQueue, job_id: str) -> JobView | None:
    """The job's row, the server clock and its score; None when it has no row (completed jobs leave none).
    A partitioned queue's job is read in the partition that holds it (the view names that partition)."""
    if isinstance(queue, PartitionedQueue):
        found = queue.find(job_id)
        return None if found is None else job_view(found, job_id)
    connection = queue.connection
    row = connection.send(Plain(("HGETALL", queue.keys.job(job_id))))
    if not row:
        return None
    suffix = set_of(row)
    *score, now = connection.round_trip([*([Plain(("ZSCORE", queue.keys.key(suffix), job_id))] if suffix else []),
                                         Plain(("TIME",))], on=queue.keys)
    raise_first([*score, now])
    return decode_view(queue.name, job_id, row, score[0] if score else None, _ms(now), suffix)


def record_view(queue: Queue | PartitionedQueue, job_id: str) -> JobView | None:
    """A completed job's record (PUBLISH's, within its retention) as a view: state ``completed``,
    the result in place of the payload, what is left of its retention; None when there is none.
    The record in either layout, the newer of the two where both are (docs/spec.md §12). A
    partitioned queue's record is looked for in each partition."""
    if isinstance(queue, PartitionedQueue):
        return next(filter(None, (record_view(part, job_id) for part in queue.partitions)), None)
    connection = queue.connection
    key = queue.keys.done(job_id)
    replies = connection.round_trip([Plain(("HGET", queue.keys.done_hash, job_id)), Plain(("HGETALL", key))])
    raise_first(replies)
    record = newer_record(replies[0], pairs(replies[1]))
    if record is None:
        return None
    ttl = Plain(("HPTTL", queue.keys.done_hash, "FIELDS", 1, job_id)) if record.in_field else Plain(("PTTL", key))
    replies = connection.round_trip([ttl, Plain(("TIME",))], on=queue.keys)
    raise_first(replies)
    kept_ms, now_ms = replies[0][0] if record.in_field else replies[0], _ms(replies[1])
    fields = {text_of(k): v for k, v in record.fields.items()}
    result = fields.pop("result", None)
    text = {"state": "completed", **{k: text_of(v) for k, v in fields.items()}}
    return JobView(queue.name, job_id, "completed", text, result, None, now_ms, kept_ms=kept_ms)


def job_story(queue: Queue | PartitionedQueue, job_id: str) -> JobView | None:
    """One job as ``emq inspect`` and its page show it: its row, or, completed within its
    retention, its record and result; None when it has neither."""
    return job_view(queue, job_id) or record_view(queue, job_id)


def dead_jobs(queue: Queue | PartitionedQueue, limit: int) -> tuple[int, list[JobView]]:
    """How many jobs are dead, and the first ``limit`` of them (``emq dead``)."""
    return queue.counts().dead, job_page(queue, State.DEAD, offset=0, count=limit)


def events_setting(queue: Queue) -> tuple[bytes | None, bool]:
    """The queue's event stream as set: its bound (``meta events``; None: never turned on) and
    whether a stream is kept."""
    bound, kept = queue.connection.round_trip([Plain(("HGET", queue.keys.meta, "events")),
                                               Plain(("EXISTS", queue.keys.events))])
    raise_first([bound, kept])
    return bound, bool(kept)


#: The sets of lane and flow jobs a page can list, by the count that counts them (``Counts``); a
#: lane's waiting jobs are one set a group, listed by group (``Queue.groups``)
GROUPED_SETS = {"lane_active": Keyspace.LANES_ACTIVE, "flow_waiting": Keyspace.FLOW_WAITING,
                "flow_pending": Keyspace.FLOW_PENDING, "flow_active": Keyspace.FLOW_ACTIVE,
                "flow_scheduled": Keyspace.FLOW_SCHEDULE}


def job_page(queue: Queue | PartitionedQueue, state: State | str, *, offset: int, count: int) -> list[JobView]:
    """A page of one state's jobs (or one of :data:`GROUPED_SETS`, a plain queue's), lowest score
    first: the ids with their scores (one ZRANGE per partition), every row in one pipeline, and the
    server clock (a cluster pipeline refuses TIME, so apart). An id whose row vanished meanwhile is
    skipped. Each view names the partition it is in."""
    listed = listed_ids(queue, state, offset=offset, count=count)
    if not listed:
        return []
    rows = queue.connection.round_trip([Plain(("HMGET", q.keys.job(job_id), *LISTED_FIELDS))
                                        for q, job_id, _ in listed])
    raise_first(rows)
    now_ms = partitions_of(queue)[0].server_ms()
    views = [listed_view(q.name, job_id, values, score, now_ms, listed_set(state))
             for (q, job_id, score), values in zip(listed, rows)]
    return [v for v in views if v is not None]


def listed_ids(queue: Queue | PartitionedQueue, state: State | str, *, offset: int,
               count: int) -> list[tuple[Queue, str, float]]:
    """(partition, id, score) of ``count`` jobs of one state (or of :data:`GROUPED_SETS`, a plain
    queue's) from rank ``offset``, lowest score first: one ZRANGE per partition."""
    if isinstance(queue, PartitionedQueue):
        return queue.located_ids(State(state), offset=offset, count=count)
    if state in GROUPED_SETS:
        members = queue.connection.send(Plain(("ZRANGE", queue.keys.key(GROUPED_SETS[state]), offset,
                                               offset + count - 1, "WITHSCORES")))
        return [(queue, job_id, score) for job_id, score in scored(members)]
    return [(queue, job_id, score) for job_id, score in queue.ids(state, offset=offset, count=count)]


def listed_set(state: State | str) -> str:
    """The set a page of ``state`` is read from (a key under the queue's base) (pure)."""
    return GROUPED_SETS.get(state) or STATE_SETS[State(state)]


#: What a list of jobs reads of each row (the dashboard's job list, ``emq dead``): every field the
#: verbs write but the payload, the traceback and the progress, which may be large; ``emq inspect``
#: and a job's page read the row whole
LISTED_FIELDS = ("state", "attempts", "failures", "stalled", "priority", "last_error", "group", "parent", "seq",
                 "children", "on_child_failure", "lease_epoch", *TIME_FIELDS)


def listed_view(queue_name: str, job_id: str, values: Sequence[bytes | None], score: float | None, now_ms: int,
                where: str) -> JobView | None:
    """A list's view of a row from its LISTED_FIELDS (HMGET's values, in order), its error clipped
    (pure); None when the row has none of them (it vanished since its id was listed)."""
    fields = {name: text_of(value) for name, value in zip(LISTED_FIELDS, values) if value is not None}
    if not fields:
        return None
    if "last_error" in fields:
        fields["last_error"] = clip(fields["last_error"])
    return JobView(queue_name, job_id, fields.get("state"), fields, None, score, now_ms, where=where, listed=True)


def ago(seconds: float) -> str:
    """A duration for people: 42s, 17m, 3.5h."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"
