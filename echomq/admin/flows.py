"""Flows enqueued before a parent kept a record of its children (``flow:children:<id>``, 0.2.0):
``emq adopt-flows``, run once by an admin after the upgrade.

A child's link to its parent counts only when the parent's record lists it (docs/spec.md §15
"Links"), so a flow from an older release has links that count only where parent and child share
a queue (its writers could write the parent anyway). Across queues its children would finish and
tell nobody. Adoption gives each such parent the record its children prove: the children that
name it, live in their flow sets, admitted in the parent's own step (the same ``created``), as many
as it still waits for. A parent whose children do not add up is left as it is and named, with why.

Deciding is pure (:func:`plan_adoptions`, from the rows as read); the thin layer reads the queues'
flow jobs through the connection and writes each record with ``flow_adopt``, which checks all of it
again, in the server, before its one write.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from .._client.connection import Connection
from .._core.flows import FLOW_STATE_SETS
from .._protocol.keys import Keyspace, check_queue_name
from .._protocol.verbs import BY_NAME, Call, Plain
from .inventory import discover_queues

FLOW_ADOPT = BY_NAME["flow_adopt"]
#: The flow sets a live flow job sits in (a dead one has finished: it waits for nothing).
LIVE = {state: name for state, name in FLOW_STATE_SETS.items() if state != "dead"}
#: Commands per round trip while reading.
BATCH = 1000


@dataclass(frozen=True)
class FlowRow:
    """A flow job as read: its row key and the fields adoption reads (None: absent)."""

    row: str
    state: str | None
    parent: str | None
    created: str | None
    children: int | None = None  #: a parent: how many of its children have not finished
    has_record: bool = False  #: a parent: whether ``flow:children:<id>`` exists


@dataclass(frozen=True)
class Adoption:
    """A parent and the children its record will list (row keys)."""

    parent: str
    children: tuple[str, ...]

    @property
    def queue(self) -> str:
        return queue_of(self.parent)

    @property
    def id(self) -> str:
        return self.parent.split(":job:", 1)[1]


@dataclass(frozen=True)
class NotAdopted:
    parent: str
    why: str


@dataclass
class AdoptionReport:
    adopted: list[Adoption] = field(default_factory=list)
    refused: list[NotAdopted] = field(default_factory=list)


def queue_of(row: str) -> str:
    """``emq:{q}:job:<id>`` → ``q``."""
    return row[len("emq:{"):row.index("}:job:")]


def plan_adoptions(rows: Sequence[FlowRow]) -> AdoptionReport:
    """Which parents without a record to adopt, each with the children that prove it theirs; and
    which not, and why (pure)."""
    by_row = {row.row: row for row in rows}
    naming: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row.parent is not None and row.state in LIVE:
            naming[row.parent].append(row.row)
    report = AdoptionReport()
    for parent in sorted(rows, key=lambda row: row.row):
        if parent.state != "waiting" or parent.has_record or parent.children is None:
            continue
        claimed = sorted(naming.get(parent.row, []))
        admitted = tuple(child for child in claimed if by_row[child].created == parent.created)
        if len(admitted) == len(claimed) == parent.children:
            report.adopted.append(Adoption(parent.row, admitted))
            continue
        why = (f"it waits for {parent.children} children; {len(claimed)} live flow jobs name it, "
               f"{len(admitted)} of them admitted with it")
        if len(claimed) < parent.children:
            why += (": a child finished (across queues, unheard) before this adoption, or sits in a queue not "
                    "read; read every queue of the flow, or cancel the parent (emq cancel)")
        else:
            why += ": rows that were not admitted with it name it; look at them before adopting (emq inspect)"
        report.refused.append(NotAdopted(parent.row, why))
    return report


def adoption_lines(report: AdoptionReport, *, dry_run: bool) -> list[str]:
    """``emq adopt-flows``'s lines: one per parent (pure)."""
    verb = "would adopt" if dry_run else "adopted"
    lines = [f"{verb} {adoption.parent}: {len(adoption.children)} children "
             f"({', '.join(sorted({queue_of(child) for child in adoption.children}))})"
             for adoption in report.adopted]
    lines += [f"not adopted {refused.parent}: {refused.why}" for refused in report.refused]
    return lines or ["no flow parent without its record: nothing to adopt"]


# -- reading and writing: the thin layer -----------------------------------------------------------


def _exchange(connection: Connection, commands: Sequence[Plain]) -> list[Any]:
    replies: list[Any] = []
    for start in range(0, len(commands), BATCH):
        replies += connection.round_trip(commands[start:start + BATCH])
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="surrogateescape")


def read_flow_rows(connection: Connection, queues: Sequence[str]) -> list[FlowRow]:
    """Every live flow job of ``queues``: its parent link, state and admission time; for a waiting
    one also how many children it waits for and whether it has its record."""
    spaces = [Keyspace(check_queue_name(queue)) for queue in queues]
    sets = [(keys, name) for keys in spaces for name in LIVE.values()]
    members = _exchange(connection, [Plain(("ZRANGE", keys.key(name), 0, -1)) for keys, name in sets])
    jobs = [(keys, _text(member) or "") for (keys, _), found in zip(sets, members) for member in found]
    fields = _exchange(connection, [Plain(("HMGET", keys.job(job_id), "state", "parent", "created", "children"))
                                    for keys, job_id in jobs])
    waiting = [(index, keys.key(f"flow:children:{job_id}")) for index, ((keys, job_id), row)
               in enumerate(zip(jobs, fields)) if row[0] == b"waiting"]
    records = dict(zip((index for index, _ in waiting),
                       _exchange(connection, [Plain(("EXISTS", record)) for _, record in waiting])))
    return [FlowRow(keys.job(job_id), _text(row[0]), _text(row[1]), _text(row[2]),
                    None if row[3] is None else int(row[3]), bool(records.get(index, 0)))
            for index, ((keys, job_id), row) in enumerate(zip(jobs, fields))]


def adopt_flows(connection: Connection, queues: Sequence[str] = (), *, dry_run: bool = False) -> AdoptionReport:
    """Give every flow parent of ``queues`` (default: every queue of the node) that waits without
    its record the record its children prove; ``dry_run``: only say which. A parent the server
    refuses (it changed since the read) joins ``refused`` with the server's reason."""
    report = plan_adoptions(read_flow_rows(connection, list(queues) or discover_queues(connection)))
    if dry_run:
        return report
    done = AdoptionReport(refused=list(report.refused))
    for adoption in report.adopted:
        call = Call(FLOW_ADOPT, (Keyspace(adoption.queue).base,), (adoption.id, *adoption.children))
        (reply,) = connection.round_trip([call])
        if isinstance(reply, Exception):
            done.refused.append(NotAdopted(adoption.parent, str(reply)))
        else:
            done.adopted.append(adoption)
    return done
