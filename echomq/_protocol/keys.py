"""The keyspace of SPEC §1: every key of queue ``q`` lives under ``emq:{q}:``.

The braces are a cluster hashtag, so one queue's keys share a slot. Rows, meta and
metrics are derived from the base, as the scripts and the native verbs derive them.
"""

from __future__ import annotations

import binascii
import enum
import re
import zlib
from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigurationError

VERSION_KEY = "{emq}:version"
QUEUE_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: A partitioned queue's record (docs/cluster.md "Partitioned queues"): a hash of queue name -> its
#: layout, for the queues declared with more than one partition; a queue it does not name has one.
PARTITIONS_KEY = "{emq}:partitions"
PARTITIONS_MAX = 1024
#: Partition ``i`` of queue ``q`` is the queue ``q~i.s``: ``s`` (the salt) places its slot (see
#: :func:`partition_layout`); records written before salts name ``q~i``. ``~`` is not in a queue
#: name, so no plain queue can collide with a partition, and each has its own hashtag (its own slot).
PARTITION_NAME = re.compile(r"([A-Za-z0-9._:-]{1,128})~((?:0|[1-9][0-9]{0,3})(?:\.(?:0|[1-9][0-9]{0,3}))?)")
SLOTS = 16384  #: a cluster's hash slots
SALTS = 1024  #: the salts tried per partition: the nearest of 1024 slots is a few slots from its target
MAX_ID_BYTES = 512
MAX_TRACEBACK_BYTES = 8192  #: FAIL's optional traceback (docs/spec.md §11.6); a client keeps a longer one's tail


class State(str, enum.Enum):
    """Where a job is; always the set it sits in."""

    PENDING = "pending"  #: ready to claim, in ``pending``
    ACTIVE = "active"  #: claimed under a lease, in ``active``
    SCHEDULED = "scheduled"  #: due later, in ``schedule``
    DEAD = "dead"  #: out of budget, in ``dead``

    @property
    def set_suffix(self) -> str:
        return STATE_SETS[self]


STATE_SETS = {State.PENDING: "pending", State.ACTIVE: "active", State.SCHEDULED: "schedule", State.DEAD: "dead"}


def check_queue_name(name: str) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise ConfigurationError(
            f"bad queue name {name!r}: use 1 to 128 characters from A-Z a-z 0-9 . _ : - "
            "(braces would break the cluster hashtag)"
        )
    return name


def check_partitions(name: str, partitions: object) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= PARTITIONS_MAX:
        raise ConfigurationError(
            f"bad partitions {partitions!r} for queue {name!r}: an integer from 1 to {PARTITIONS_MAX}")
    return partitions


def slot_of(queue: str) -> int:
    """The cluster slot of a queue's keys: CRC16 (XMODEM, as Valkey's) of its hashtag, the name."""
    return binascii.crc_hqx(queue.encode(), 0) % SLOTS


def partition_layout(name: str, partitions: int) -> list[str]:
    """The sub-queues a declaration of ``name`` with ``partitions`` places: the queue itself for one
    (today's layout), else ``name~i.s`` for each ``i``, its salt ``s`` the one (of :data:`SALTS`, the
    lowest on a tie) whose slot is nearest the i-th of ``partitions`` evenly spaced slots. So the
    partitions spread evenly over the slot space, and over any primaries that own equal runs of
    slots: 8 on 3 primaries split 3/3/2 (``name~i`` alone hash in one pattern for every name, as
    CRC16 is linear: 2/2/4 for most). Deterministic, but recorded all the same (:func:`layout_record`)."""
    if partitions == 1:
        return [name]
    layout = []
    for i in range(partitions):
        target = (2 * i + 1) * SLOTS // (2 * partitions)
        stem = binascii.crc_hqx(f"{name}~{i}.".encode(), 0)  # the CRC goes on over each salt from there
        distances = [abs(binascii.crc_hqx(salt, stem) % SLOTS - target) for salt in _SALTS]
        layout.append(f"{name}~{i}.{distances.index(min(distances))}")
    return layout


_SALTS = [str(salt).encode() for salt in range(SALTS)]


def layout_record(name: str, layout: list[str]) -> str:
    """The record of a partitioned queue's layout: its partitions' suffixes, ``0.417 1.22 …``."""
    return " ".join(sub[len(name) + 1:] for sub in layout)


def recorded_layout(name: str, record: str | None) -> list[str]:
    """The sub-queues a record names: the queue itself when there is none, ``name~0`` …
    ``name~N-1`` for a record written before salts (a bare N), else the suffixes it lists."""
    if record is None:
        return [name]
    layout = [f"{name}~{i}" for i in range(int(record))] if record.isdigit() else \
        [f"{name}~{suffix}" for suffix in record.split()]
    if not 2 <= len(layout) <= PARTITIONS_MAX or \
            any(PARTITION_NAME.fullmatch(sub) is None for sub in layout):
        raise ConfigurationError(f"queue {name!r} has an unreadable partitions record {record[:80]!r} in {PARTITIONS_KEY}")
    return layout


def partition_of(key: str, partitions: int) -> int:
    """The partition a key (or an explicit job id) maps to: CRC-32 of its UTF-8, the same in every process."""
    return zlib.crc32(key.encode()) % partitions


def parent_queue(name: str) -> str:
    """The queue a sub-queue belongs to (``emails~3`` -> ``emails``); a plain name is its own."""
    match = PARTITION_NAME.fullmatch(name)
    return match.group(1) if match else name


def check_group(group: str) -> str:
    """A lane's group name: the characters of a queue name (it is part of a key)."""
    if not isinstance(group, str) or not QUEUE_NAME.fullmatch(group):
        raise ConfigurationError(f"bad group {group!r}: use 1 to 128 characters from A-Z a-z 0-9 . _ : -")
    return group


def check_job_id(job_id: str) -> str:
    """A job id: 1 to MAX_ID_BYTES bytes of UTF-8. An id read from the server that is not UTF-8
    (another client wrote it) holds surrogate escapes for those bytes (:func:`echomq._protocol.verbs.text`),
    and is taken back as the same bytes; any other lone surrogate is refused."""
    if not isinstance(job_id, str):
        raise ConfigurationError(f"bad job id {job_id!r}: a job id is a str")
    try:
        size = len(job_id.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"bad job id {job_id[:40]!r}: it holds a lone surrogate "
                                 f"({job_id[exc.start]!r}), which no text encodes; a job id is text") from None
    if not 1 <= size <= MAX_ID_BYTES:
        raise ConfigurationError(f"bad job id {job_id[:40]!r}: a job id is 1 to {MAX_ID_BYTES} bytes of UTF-8, got {size}")
    return job_id


@dataclass(frozen=True)
class Keyspace:
    """The keys of one queue.

    The lanes' and the flows' keys (docs/lanes-and-flows.md) are named here once, as suffixes of the
    base (the verb table names a script's KEYS by suffix), and built by the properties below; the
    Lua scripts spell the same suffixes (tests/test_verbs_table.py compares them)."""

    queue: str

    LANES_READY: ClassVar[str] = "lanes:ready"  #: groups that may start a job now (zset)
    LANES_HELD: ClassVar[str] = "lanes:held"  #: groups waiting out a backoff (zset)
    LANES_ACTIVE: ClassVar[str] = "lanes:active"  #: leased lane jobs (zset, by deadline)
    LANES_GROUPS: ClassVar[str] = "lanes:groups"  #: groups with jobs waiting or running (set)
    LANES_PAUSED: ClassVar[str] = "lanes:paused"  #: paused groups (set)
    LANES_RUNNING: ClassVar[str] = "lanes:running"  #: a group's running jobs (hash: group -> n)
    LANES_LIMIT: ClassVar[str] = "lanes:limit"  #: a group's own k (hash: group -> k)
    LANES_SEQ: ClassVar[str] = "lanes:seq"  #: the lanes' enqueue order; present once a lane job was
    LANE: ClassVar[str] = "lane:"  #: + group: a group's lane (zset of its waiting ids)
    FLOW_PENDING: ClassVar[str] = "flow:pending"
    FLOW_ACTIVE: ClassVar[str] = "flow:active"
    FLOW_SCHEDULE: ClassVar[str] = "flow:schedule"
    FLOW_WAITING: ClassVar[str] = "flow:waiting"  #: parents waiting for their children
    FLOW_RESULTS: ClassVar[str] = "flow:results:"  #: + parent id
    FLOW_FAILURES: ClassVar[str] = "flow:failures:"  #: + parent id
    FLOW_CHILDREN: ClassVar[str] = "flow:children:"  #: + parent id

    def __post_init__(self) -> None:
        if not (isinstance(self.queue, str) and PARTITION_NAME.fullmatch(self.queue)):  # a partition's: emq:{q~i}:
            check_queue_name(self.queue)
        object.__setattr__(self, "_keys_of", {})  # a verb's KEYS, built once (every call sends them)

    def keys_of(self, suffixes: tuple[str, ...]) -> tuple[str, ...]:
        """The keys of ``suffixes`` (a verb's KEYS) on this queue."""
        keys = self._keys_of.get(suffixes)
        if keys is None:
            keys = self._keys_of[suffixes] = tuple(self.key(s) for s in suffixes)
        return keys

    @property
    def base(self) -> str:
        return f"emq:{{{self.queue}}}:"

    def key(self, suffix: str) -> str:
        """``base + suffix``; the empty suffix is the base itself (the scripts' row root)."""
        return self.base + suffix

    @property
    def pending(self) -> str:
        return self.key("pending")

    @property
    def active(self) -> str:
        return self.key("active")

    @property
    def schedule(self) -> str:
        return self.key("schedule")

    @property
    def dead(self) -> str:
        return self.key("dead")

    @property
    def meta(self) -> str:
        return self.key("meta")

    @property
    def wake(self) -> str:
        """Wire 4's wake marker (SPEC §9.3): a zset of one member the scripts that make a job
        claimable (or bring the next due time earlier) ZADD, and a waiting worker BZPOPMINs."""
        return self.key("wake")

    def lane(self, group: str) -> str:
        """A group's lane (docs/lanes-and-flows.md): a zset of its waiting ids, scored by enqueue order."""
        return self.key(self.LANE + group)

    def job(self, job_id: str) -> str:
        return self.key("job:" + job_id)

    @property
    def rate(self) -> str:
        """The rate log (docs/spec.md §13): a zset of the starts within the rate window."""
        return self.key("rate")

    @property
    def events(self) -> str:
        return self.key("events")

    def done(self, job_id: str) -> str:
        """A completed job's record (its result), kept for its retention: a hash of its own, where
        the queue keeps records as keys (docs/spec.md §12: its switch, or a node without HSETEX)."""
        return self.key("done:" + job_id)

    @property
    def done_hash(self) -> str:
        """The queue's completed records as fields (docs/spec.md §12): a hash of job id -> the
        packed record, each field expiring at its retention."""
        return self.key("done")

    def unique(self, job_id: str) -> str:
        """A completed job's unique window (docs/spec.md §14): a hash (``finished``) that
        expires when the id may be admitted again."""
        return self.key("unique:" + job_id)

    def outcome(self, job_id: str) -> str:
        """The job's outcome channel (a channel, not a key): PUBLISH and a killing FAILURES.INCR tell it."""
        return self.key("outcome:" + job_id)

    def flow_results(self, parent_id: str) -> str:
        """A waiting flow parent's children's results (a hash: child id -> result bytes), kept
        until the parent completes or dies (docs/lanes-and-flows.md "Flows")."""
        return self.key(self.FLOW_RESULTS + parent_id)

    def flow_failures(self, parent_id: str) -> str:
        """... and, under ``on_child_failure="continue"``, its dead children's errors."""
        return self.key(self.FLOW_FAILURES + parent_id)

    def flow_children(self, parent_id: str) -> str:
        """A waiting flow parent's record of the children that have not told it yet (a set of their
        row keys): a child's `parent` link counts only when it is listed (docs/spec.md §15 "Links")."""
        return self.key(self.FLOW_CHILDREN + parent_id)

    def metrics(self, name: str) -> str:
        return self.key("metrics:" + name)

    def pattern(self) -> str:
        """A SCAN pattern for every key of the queue (braces escaped for glob)."""
        return f"emq:\\{{{self.queue}\\}}:*"
