"""Every result waiter of an asyncio connection on one subscribed socket (one per node on a cluster).

:meth:`echomq.aio.Queue.result` listens on its job's outcome channel. With a socket of its own
for each, a web service awaiting many results at once took a pooled socket per waiter, and the
waiters, which also need a socket for their reads, could hold the whole pool and wait on each
other until its timeout. Here each node's channels are SSUBSCRIBEd on one socket, read by one
task, which hands each message to the waiters of its channel. A channel is unsubscribed when its
last waiter leaves, and the socket closed when the node's last one does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable

from .. import errors
from .._client.connection import TRANSPORT_ERRORS, link_failed, slot_moved

Wait = Callable[[float | None], Awaitable[bytes | None]]

# How long one read of the socket waits before it waits again. A read with a limit of its own
# returns nothing when the limit passes; without one, valkey-py's socket timeout (5 s by default
# on asyncio, meant for a reply a command awaits) read a quiet minute as a dead link and broke
# every waiter's subscription.
READ_SLICE_S = 60.0


class OutcomeHub:
    """The outcome channels of one node, subscribed on one pub/sub socket (``pubsub``; ``owner``,
    when given, is a client opened for it alone and closed with it)."""

    def __init__(self, pubsub: Any, owner: Any = None) -> None:
        self.pubsub, self.owner = pubsub, owner
        self.waiters: dict[bytes, list[asyncio.Queue[bytes | BaseException]]] = {}
        # one future per SSUBSCRIBE sent, by channel, in order: the server confirms them in that order
        self.confirms: dict[bytes, deque[asyncio.Future[None]]] = {}
        self.ready: dict[bytes, asyncio.Future[None]] = {}  # by channel: the confirmation of its subscription
        self.leaving: dict[bytes, int] = {}  # by channel: our SUNSUBSCRIBEs not confirmed yet
        self.broken: BaseException | None = None
        self.reader: asyncio.Task[None] | None = None
        # one send at a time (_send), and none once closed: the socket is taken on the first send
        # (two at once would take two), and a send behind close() would find it gone
        self.sending = asyncio.Lock()
        self.closed = False

    @property
    def idle(self) -> bool:
        return not self.waiters

    async def join(self, channel: str, confirm_s: float) -> tuple[asyncio.Queue[bytes | BaseException], Wait]:
        """Listen on ``channel``: subscribed (and confirmed) unless a waiter already listens there.
        Returns the waiter's inbox (for :meth:`leave`) and ``await wait(timeout_s)``: the next
        message, or None when the time runs out."""
        name = channel.encode()
        inbox: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        first = name not in self.waiters
        self.waiters.setdefault(name, []).append(inbox)
        try:
            if first:
                self.ready[name] = confirmed = asyncio.get_running_loop().create_future()
                self.confirms.setdefault(name, deque()).append(confirmed)
                try:
                    sent = await self._send("SSUBSCRIBE", channel)
                except TRANSPORT_ERRORS as exc:
                    raise link_failed(exc, f"SSUBSCRIBE {channel}") from exc
                if not sent:
                    raise self.broken or errors.ConnectionFailed(f"the connection closed before SSUBSCRIBE {channel}")
                if self.reader is None:
                    self.reader = asyncio.create_task(self._read(), name="echomq outcome hub")
            try:
                # every joiner waits for the channel's confirmation: a read before it could miss the word
                await asyncio.wait_for(asyncio.shield(self.ready[name]), confirm_s)
            except asyncio.TimeoutError:
                raise errors.ConnectionFailed(
                    f"no confirmation of SSUBSCRIBE {channel} within {confirm_s:g} s") from None
            if self.broken is not None:
                raise self.broken
        except BaseException:
            await self.leave(name, inbox)
            raise

        async def wait(timeout_s: float | None) -> bytes | None:
            try:
                got = await asyncio.wait_for(inbox.get(), timeout_s)
            except asyncio.TimeoutError:
                return None
            if isinstance(got, BaseException):
                raise got
            return got

        return inbox, wait

    async def leave(self, name: bytes, inbox: asyncio.Queue[bytes | BaseException]) -> None:
        """The waiter of ``inbox`` stops listening; the channel is unsubscribed when it was its last."""
        left = self.waiters.get(name, [])
        if inbox in left:
            left.remove(inbox)
        if left or name not in self.waiters:
            return
        del self.waiters[name]
        del self.ready[name]
        if self.idle:
            return  # closed whole, with its socket, by the caller
        self.leaving[name] = self.leaving.get(name, 0) + 1
        try:
            await self._send("SUNSUBSCRIBE", name)
        except TRANSPORT_ERRORS:
            pass  # the reader finds the link gone and tells the waiters left

    async def _send(self, *command: Any) -> bool:
        """Send ``command`` on the socket, one send at a time; False (nothing sent) once the hub is
        closed or broken. A cancel of the caller does not break off the write: half a command on
        the socket would break it for every waiter."""
        sending = asyncio.ensure_future(self._send_now(command))
        sending.add_done_callback(lambda done: done.cancelled() or done.exception())  # retrieved, if nobody awaits
        return await asyncio.shield(sending)

    async def _send_now(self, command: tuple[Any, ...]) -> bool:
        async with self.sending:
            if self.closed or self.broken is not None:
                return False
            await self.pubsub.execute_command(*command)
            return True

    async def _read(self) -> None:
        """Hand each message to its channel's waiters and each confirmation to its SSUBSCRIBE; on a
        link fault, raise it in every waiter."""
        try:
            while True:
                reply = await self.pubsub.parse_response(block=False, timeout=READ_SLICE_S)
                if reply is None:
                    continue  # the channels were quiet: wait on
                kind, channel = reply[0], reply[1]
                if kind == b"smessage":
                    for inbox in self.waiters.get(channel, ()):
                        inbox.put_nowait(reply[2])
                elif kind == b"ssubscribe":
                    pending = self.confirms.get(channel)
                    if pending:
                        confirmed = pending.popleft()
                        if not confirmed.done():
                            confirmed.set_result(None)
                    if not pending:
                        self.confirms.pop(channel, None)
                elif kind == b"sunsubscribe":
                    self._unsubscribed(channel)
        except Exception as exc:
            self.broken = link_failed(exc, "a wait on an outcome channel") if isinstance(exc, TRANSPORT_ERRORS) \
                else exc
            for pending in self.confirms.values():
                for confirmed in pending:
                    if not confirmed.done():
                        confirmed.set_result(None)  # the joiner then raises `broken`
            for inboxes in self.waiters.values():
                for inbox in inboxes:
                    inbox.put_nowait(self.broken)

    def _unsubscribed(self, channel: bytes) -> None:
        """A SUNSUBSCRIBE confirmed: ours, or the server's own when the channel's slot left the node
        (a failover, a migration). Then its waiters are told (they subscribe again where the slot
        went) and the channel is forgotten here, so a waiter that joins later subscribes anew."""
        if self.leaving.get(channel):
            self.leaving[channel] -= 1
            if not self.leaving[channel]:
                del self.leaving[channel]
            return
        moved = slot_moved(channel)
        for inbox in self.waiters.pop(channel, ()):
            inbox.put_nowait(moved)
        self.ready.pop(channel, None)

    async def close(self) -> None:
        """Stop reading and close the socket; a waiter still listening (the connection closed
        under it) is told so."""
        if self.closed:
            return
        self.closed = True
        closed = errors.ConnectionFailed("the connection was closed while waiting on an outcome channel")
        for inboxes in self.waiters.values():
            for inbox in inboxes:
                inbox.put_nowait(closed)
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)  # a cancel of close() itself still goes through
        async with self.sending:
            await self.pubsub.aclose()
        if self.owner is not None:
            await self.owner.aclose()
