"""The worker's waiters: a blocked read on a connection of its own while a queue has nothing to claim.

A waiter is a daemon thread with one dedicated socket to one node. The worker's control
thread asks it for one block at a time (:meth:`Waiter.request`); the waiter sends the
blocking command, and reports what came back through the worker's inbox:

* **wire 4**: ``BZPOPMIN`` over the wake markers (SPEC §9.3) of the idle queues it was
  given -- :class:`Woken` when a marker popped (the control thread then claims with its
  normal batched path), :class:`TimedOut` when the timeout passed;
* **wire 6**: a waiter of each kind. BZPOPMIN on the wake markers, which on wire 6 only the lane
  scripts write (a lane job is no native row, so BCLAIM never wakes for it); and ``EMQ.BCLAIM`` for one queue -- :class:`Claimed` with the leased job (the
  control thread holds and renews it like any other), :class:`Recheck` when it answered
  empty (its timeout, or the schedule's head moved earlier: re-read it), or :class:`RateWait`
  when the queue's rate limit held it (the control thread claims again when the window frees).

:meth:`Waiter.interrupt` ends a block early with ``CLIENT UNBLOCK <id> TIMEOUT`` sent on the
control connection (the blocked command answers as on a timeout: nothing claimed). A link
error is reported as :class:`Woken` for every queue after a back-off (a wake may have been
missed while the link was down, so the control thread claims once).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Callable, Sequence

import valkey
from valkey.exceptions import MovedError, ResponseError

from .._client.connection import TRANSPORT_ERRORS, Connection
from .._core.core import due_in_ms
from ..errors import ConnectionFailed
from .policy import BLOCK_MAX_MS
from .._client.queue import Job, Queue
from .._protocol.verbs import Throttled

log = logging.getLogger("echomq.worker")

#: a cluster whose map cannot be read counts as a link failure, as does a queue whose node cannot be found
LINK_ERRORS = (*TRANSPORT_ERRORS, ConnectionFailed)
RETRY_MS = (100, 5000)
READ_MARGIN_S = 10.0
#: MOVED replies one block follows before it counts as a link failure (a slot moving back and forth).
REDIRECTS = 5
#: The client name of a wire-6 worker's wait on the wake markers (its lanes' wake), so CLIENT LIST
#: tells it from the claiming waits.
LANES_WAKE = "emq-lanes-wake"


@dataclass(frozen=True)
class Woken:
    """Wire 4: a wake marker popped (or the link came back): claim these queues now."""

    queues: tuple[str, ...]


@dataclass(frozen=True)
class TimedOut:
    """Wire 4: the block's timeout passed with no marker, or the control thread ended it."""

    queues: tuple[str, ...]
    interrupted: bool = False  #: ended by CLIENT UNBLOCK (as far as the waiter saw): not a real timeout


@dataclass(frozen=True)
class Claimed:
    """Wire 6: BCLAIM leased ``job``; ``at_ms`` is the local time its reply arrived."""

    queue: str
    job: Job
    at_ms: float


@dataclass(frozen=True)
class Recheck:
    """Wire 6: BCLAIM answered empty (timeout, interrupt, or the schedule's head moved earlier)."""

    queue: str


@dataclass(frozen=True)
class RateWait:
    """Wire 6: the queue's rate limit held the BCLAIM: no start may happen for ``wait_ms``."""

    queue: str
    wait_ms: int


@dataclass(frozen=True)
class HeadRead:
    """Wire 6: right before its BCLAIM, on the same socket, the schedule's head was read: it falls
    due in ``due_in_ms`` (server clock). A SCHEDULE that moved it earlier between the control
    thread's last read and the block would signal no one: this read sees it."""

    queue: str
    due_in_ms: int


Report = Woken | TimedOut | Claimed | Recheck | RateWait | HeadRead


def flow_poll_triggers(report: Report) -> tuple[str, ...]:
    """The queues whose flow sets to poll now, after a report: a block that ended -- a wake marker
    (wire 4: the flow scripts write it when a flow job becomes claimable), a timeout, BCLAIM
    answering empty (wire 6) -- or a job it took (the queue is busy again)."""
    if isinstance(report, (Woken, TimedOut)):
        return () if isinstance(report, TimedOut) and report.interrupted else report.queues
    if isinstance(report, (Recheck, Claimed)):
        return (report.queue,)
    return ()


class Waiter(threading.Thread):
    """One blocking connection to the node of ``queues`` (all on one node; one slot on a cluster).
    On a cluster it follows the slot: a MOVED re-reads the slot map, and after a link failure (a
    failover) the next block finds the slot's primary again."""

    def __init__(self, connection: Connection, queues: Sequence[Queue], *, lease_ms: int,
                 report: Callable[[Report], None], clock_ms: Callable[[], float], markers: bool | None = None) -> None:
        super().__init__(name=f"emq-waiter-{queues[0].name}", daemon=True)
        self.connection = connection
        #: blocks on wake markers (BZPOPMIN): always on wire 4; on wire 6 the lanes' waiter
        self.markers = connection.wire == 4 if markers is None else markers
        self.queues = {queue.name: queue for queue in queues}
        self.by_wake_key = {queue.keys.wake.encode(): queue.name for queue in queues}
        self.lease_ms = lease_ms
        self._report = report
        self._clock_ms = clock_ms
        self.control: valkey.Valkey | None = None  #: the control thread's client of the node: CLIENT UNBLOCK
        self._link: valkey.Connection | None = None  #: the waiter's own socket to that node
        self._attach()
        self._inbox: SimpleQueue[tuple[tuple[str, ...], int] | None] = SimpleQueue()
        self._client_id: int | None = None
        self._closed = threading.Event()
        self._failures = 0
        self.busy = False  #: a block was requested and its outcome not reported yet
        #: blocks requested, and blocks whose outcome was reported (or dropped while closing): equal
        #: once every job a block took is in the worker's reports (busy clears just before the report)
        self.requested = self.answered = 0
        self.interrupting = False  #: the control thread wants this block ended and has not managed yet
        self.unblocked = False  #: CLIENT UNBLOCK ended this block: its report is on the way
        self.blocked_on: tuple[str, ...] = ()

    # -- the control thread's side ----------------------------------------------------
    def request(self, queues: Sequence[str], timeout_ms: int) -> None:
        """Block on ``queues`` (one on wire 6) for up to ``timeout_ms``; the outcome is reported."""
        self.busy = True
        self.requested += 1
        self.interrupting = self.unblocked = False
        self.blocked_on = tuple(queues)
        self._inbox.put((self.blocked_on, timeout_ms))

    def interrupt(self) -> bool:
        """End the current block now (as a timeout); False when the server had no block of ours to end
        (the waiter is between blocks, or its link is down): try again later."""
        client_id, control = self._client_id, self.control
        if client_id is None or control is None:
            return False
        try:
            self.unblocked = control.execute_command("CLIENT", "UNBLOCK", client_id, "TIMEOUT") == 1
        except (*LINK_ERRORS, ResponseError):
            return False
        return self.unblocked

    def close(self) -> None:
        self._closed.set()
        self._inbox.put(None)

    # -- the waiter thread --------------------------------------------------------------
    def run(self) -> None:
        try:
            while (item := self._inbox.get()) is not None:
                queues, timeout_ms = item
                try:
                    report = self._block(queues, timeout_ms)
                    self._failures = 0
                except (*LINK_ERRORS, ResponseError) as exc:
                    report = self._recover(queues, exc)
                if self._closed.is_set() and not isinstance(report, Claimed):
                    report = None  # closing: only a job it took still needs the control thread (to requeue it)
                self.busy = False
                if report is not None:
                    self._report(report)
                self.answered += 1
        finally:
            self._detach()

    # -- which node: the one that holds the queues, followed through MOVED and failovers ---------------
    def _attach(self) -> valkey.Connection:
        """Point the waiter at the node that holds its queues now: the control thread's client of
        that node, and a socket of the waiter's own (returned)."""
        control = self.connection.node_client(next(iter(self.queues.values())).keys)
        pool = control.connection_pool
        # a read outlives the longest block: the server answers by then, or the link is dead
        named = {"client_name": LANES_WAKE} if self.markers and self.connection.wire == 6 else {}
        link = pool.connection_class(**{**pool.connection_kwargs, **named,
                                        "socket_timeout": BLOCK_MAX_MS / 1000 + READ_MARGIN_S})
        self._link, self.control = link, control
        return link

    def _detach(self) -> None:
        self._client_id = None
        self.control = None
        if self._link is not None:
            self._link.disconnect()
            self._link = None

    def _block(self, queues: tuple[str, ...], timeout_ms: int) -> Report:
        """One block; a MOVED (the slot changed hands: a migration, a failover; also what the server
        answers a block it held when its slot moved away) re-reads the slot map and blocks again on
        the new node, up to ``REDIRECTS`` times. An ASK or TRYAGAIN (a slot mid-migration) is a
        refusal: backed off like a link failure, the queues claimed once after it."""
        for _ in range(REDIRECTS):
            try:
                return self._block_once(queues, timeout_ms)
            except MovedError:
                self._detach()  # the next try reads the map again
        raise ConnectionFailed(f"{REDIRECTS} MOVED in a row for {', '.join(queues)}")

    def _block_once(self, queues: tuple[str, ...], timeout_ms: int) -> Report:
        link = self._link
        if link is None:  # after a MOVED or a failure: the map may have changed, so read it again
            self.connection.refresh_slots()
            link = self._attach()
        if self._client_id is None:  # after a (re)connect: CLIENT UNBLOCK needs this socket's id
            link.send_command("CLIENT", "ID")
            self._client_id = int(link.read_response())
        timeout_ms = min(timeout_ms, BLOCK_MAX_MS)
        if self.markers:
            keys = [self.queues[name].keys.wake for name in queues]
            link.send_command("BZPOPMIN", *keys, f"{timeout_ms / 1000:.3f}")
            reply = link.read_response()
            if not reply:
                return TimedOut(queues, interrupted=self.unblocked)
            return Woken((self.by_wake_key[reply[0]],))
        (name,) = queues
        queue = self.queues[name]
        # one packet: the server runs the head read and the BCLAIM back to back, so no SCHEDULE
        # falls between what this read saw and the block that a later one would wake
        bclaim = self.connection.command_args(queue.bclaim_call(self.lease_ms, timeout_ms))
        link.send_packed_command(link.pack_commands(
            [("ZRANGE", queue.keys.schedule, 0, 0, "WITHSCORES"), ("TIME",), bclaim]))
        head, now = link.read_response(), link.read_response()
        if head:
            self._report(HeadRead(name, due_in_ms(head, now)))
        answer = queue.claimed(link.read_response())
        if isinstance(answer, Throttled):
            return RateWait(name, answer.wait_ms)
        return Recheck(name) if answer is None else Claimed(name, answer, self._clock_ms())

    def _recover(self, queues: tuple[str, ...], exc: Exception) -> Report | None:
        """The link failed (a server restart, a failover, a node that no longer serves the slot): drop
        the socket, back off, and have the queues claimed once when it is back, since a wake may have
        come and gone meanwhile. The next block finds the queues' node again."""
        self._detach()
        self._failures += 1
        pause = min(RETRY_MS[1], RETRY_MS[0] * 2 ** min(self._failures - 1, 10))
        log.warning("waiter %s: blocked read failed (%s: %s); again in %d ms", self.name, type(exc).__name__, exc,
                    pause)
        if self._closed.wait(pause / 1000):
            return None
        return Woken(queues)

