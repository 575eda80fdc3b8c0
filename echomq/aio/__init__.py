"""EchoMQ for asyncio: the same queue API, as coroutines, on ``valkey.asyncio``.

    conn = await echomq.aio.connect("redis://127.0.0.1:6379", wire="auto")
    emails = echomq.aio.Queue(conn, "emails")
    await emails.enqueue({"to": "ada@example.com"})
    await conn.aclose()

:class:`Queue` drives the same operations as :class:`echomq.Queue` (those of
``QueueCore`` in echomq/_core/core.py): the same calls, argument checks, replies and
errors; only the sending awaits. The connection makes the same handshake checks as
:func:`echomq.connect` (the tokens on wire 6, the brand, the scripts), from the same
pure functions (echomq/_client/connection.py). Replies are parsed by libvalkey when it
is installed (valkey-py picks it up by itself); the batch forms pipeline, and the calls
that many tasks make in the same turn of the event loop go out together in one pipeline
(each still its own atomic call), so concurrency costs round trips only once per turn.
A pipeline is written at once on one pooled socket and its replies read in turn, as the
sync connection does (valkey-py's pipeline minus its layers per command; on a cluster,
valkey-py's cluster pipeline).

**The pool.** One connection object is meant to be shared by a whole web service:
each concurrent call borrows a socket from a :class:`valkey.asyncio.BlockingConnectionPool`
of at most ``max_connections`` (default 50), and a call that finds them all busy waits
up to ``pool_timeout`` seconds for one (then :class:`~echomq.ConnectionFailed`)
instead of opening sockets without bound. Size it near the number of requests you
serve at once; every worker process of the service has its own pool. On a cluster
(found by ``connect``, or ``cluster=True``) ``max_connections`` bounds the sockets to each node.
Result waiters (:meth:`Queue.result`) hold no pooled socket each: they share one subscribed
socket per node (echomq/aio/outcome_hub.py). A call the server may hold while it waits (an event
follower's XREAD BLOCK, :meth:`Queue.bclaim`) goes out alone, on a pooled socket it holds meanwhile:
batched, every call of its turn would wait as long.

The package is public (``__all__`` below); ``outcome_hub`` inside is its own. May import the layers
below it: ``echomq.errors``, ``echomq.hooks``, ``_protocol``, ``_core``, ``_client`` (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager, suppress
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Sequence

import valkey.asyncio as avalkey
from valkey.asyncio.cluster import ValkeyCluster as AsyncValkeyCluster
from valkey.exceptions import InvalidResponse, ResponseError
from valkey.utils import LIBVALKEY_AVAILABLE

if LIBVALKEY_AVAILABLE:
    from valkey.connection import LibvalkeyRespSerializer

from .. import errors
from .._core import reaper
from .._client.connection import (
    TRANSPORT_ERRORS, ReplyCallbacks, VerbSpan, WireCodec, as_sent, brand_unreadable, check_brand, check_tokens,
    cluster_mode, first_key_at, link_failed, missing_database, opening_refused, retried, streamed,
    tokens_unavailable, wire_of_brand,
)
from .._core.core import (MAX_PAYLOAD_BYTES, Children, Claims, Done, Enqueued, GroupCounts, Job, JobRef, Op, QueueCore,
                          T, check_connection, check_wait, time_left)
from .._protocol.events import DEFAULT_MAXLEN, Event
from .._core.flows import Flow, op_enqueue_flow, plan
from .._protocol.keys import VERSION_KEY, State, check_job_id
from .outcome_hub import OutcomeHub
from .._client.partitioned import POp, PartitionedCore, op_declare
from .._protocol.rates import RateLimit
from .._protocol.results import TOLD_GRACE_S, ResultLayout, Status, relink_pause_s, wait_slice_s
from .._protocol.serializers import JSON, Serializer
from .._protocol.shown import publish, redact_url
from .._protocol.verbs import ID_ENCODING, Call, Counts, Plain, Sweep, blocks

__all__ = ["Connection", "EchoAsyncCluster", "PartitionedQueue", "Queue", "connect"]

DEFAULT_MAX_CONNECTIONS = 50
DEFAULT_POOL_TIMEOUT_S = 5.0
DEFAULT_CONNECT_TIMEOUT_S = 5.0
#: What a sync client's connection options carry over to an asyncio one (the same names on both).
_PORTABLE = frozenset(
    "host port db username password path client_name socket_timeout socket_connect_timeout socket_keepalive "
    "ssl_keyfile ssl_certfile ssl_cert_reqs ssl_ca_certs ssl_ca_data ssl_check_hostname protocol "
    "encoding_errors".split()
)
_ASYNC_CONNECTION = {
    "Connection": avalkey.Connection,
    "SSLConnection": avalkey.SSLConnection,
    "UnixDomainSocketConnection": avalkey.UnixDomainSocketConnection,
}


class _LibvalkeyPacking:
    """Pack commands with libvalkey, as valkey-py's sync client does (its asyncio client packs
    them in Python, the larger part of a call's client-side cost)."""

    _packer = LibvalkeyRespSerializer() if LIBVALKEY_AVAILABLE else None

    def pack_command(self, *args: Any) -> list[bytes]:
        try:
            return self._packer.pack(*args)
        except UnicodeEncodeError:  # surrogate escapes: an id that is not UTF-8 (echomq._client.connection.as_sent)
            return self._packer.pack(*as_sent(args))


_PACKED: dict[type, type] = {}


def _pool(pool: avalkey.ConnectionPool) -> avalkey.ConnectionPool:
    """The pool, its connections packing with libvalkey when it is installed."""
    if LIBVALKEY_AVAILABLE:
        kind = pool.connection_class
        if kind not in _PACKED:
            _PACKED[kind] = type(f"Libvalkey{kind.__name__}", (_LibvalkeyPacking, kind), {})
        pool.connection_class = _PACKED[kind]
    return pool


class EchoAsyncCluster(AsyncValkeyCluster):
    """valkey-py's asyncio cluster client, routing EchoMQ's verbs by their first key (their
    queue's slot), as the sync client's does (``EchoCluster`` in echomq/_client/connection.py)."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        at = first_key_at((command, *args))
        if at is not None:
            return self.keyslot((command, *args)[at])
        return await super()._determine_slot(command, *args)


class Connection(WireCodec):
    """An asyncio client bound to one wire. Build it with :func:`connect`."""

    def __init__(self, client: avalkey.Valkey | AsyncValkeyCluster, wire: int) -> None:
        super().__init__(wire)
        self.client = client
        self.cluster = isinstance(client, AsyncValkeyCluster)  #: a cluster client (checked once, as the sync one)
        self._waiting: list[tuple[list[tuple[Any, ...]], asyncio.Future[list[Any]]]] = []
        self._in_flight: set[asyncio.Future[None]] = set()
        self._reply_callbacks = ReplyCallbacks(client)
        self._hubs: dict[str, OutcomeHub] = {}  # by node ("" for a single node): the result waiters' sockets

    @classmethod
    def sharing(cls, connection: Any, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                pool_timeout: float = DEFAULT_POOL_TIMEOUT_S) -> "Connection":
        """An asyncio connection to the node(s) of a checked sync ``connection``, on the same
        wire: no second handshake (that node passed it; a script the server lost is reloaded
        on its NOSCRIPT). No I/O here: the sockets open on first use, bound to the event loop
        that uses them (a worker's async handlers share one this way)."""
        sync = connection.client
        if connection.cluster:
            node = sync.get_default_node()
            options = {k: v for k, v in sync.get_connection_kwargs().items() if k in _PORTABLE}
            client: Any = EchoAsyncCluster(host=node.host, port=node.port, max_connections=max_connections,
                                           **options)
        else:
            pool = sync.connection_pool
            options = {k: v for k, v in pool.connection_kwargs.items() if k in _PORTABLE}
            # by the valkey-py class it is or extends (echomq._client.connection mixes its packing into it)
            kind = next(_ASYNC_CONNECTION[base.__name__] for base in pool.connection_class.__mro__
                        if base.__name__ in _ASYNC_CONNECTION)
            client = avalkey.Valkey.from_pool(_pool(avalkey.BlockingConnectionPool(
                connection_class=kind, max_connections=max_connections, timeout=pool_timeout, **options)))
        shared = cls(client, connection.wire)
        shared.tokens = connection.tokens  # the same nodes: what their EMQ.VERSION listed
        return shared

    # -- opening ------------------------------------------------------------
    async def handshake(self) -> None:
        """The checks of :class:`echomq.Connection`: the tokens (wire 6), the brand, the scripts."""
        try:
            if self.wire == 6:
                await self._require_tokens()
            check_brand(await read_brand(self.client), self.wire)
            await self.load_scripts()
        except TRANSPORT_ERRORS as exc:
            raise link_failed(exc, "the handshake") from exc

    async def _require_tokens(self) -> None:
        if not self.cluster:
            try:
                self.tokens = check_tokens({"node": await self.client.execute_command("EMQ.VERSION")})
            except ResponseError as exc:
                raise tokens_unavailable(exc) from exc
            return
        listed = {}
        for node in self.client.get_primaries():  # every primary must serve the verbs, not just one
            try:
                listed[node.name] = await self.client.execute_command("EMQ.VERSION", target_nodes=node)
            except ResponseError as exc:
                raise tokens_unavailable(exc, node.name) from exc
        self.tokens = check_tokens(listed)

    async def load_scripts(self) -> None:
        for script in self.scripts.values():
            await self.client.script_load(script.source)

    # -- sending: the one path --------------------------------------------------
    async def round_trip(self, request: Sequence[Call | Plain]) -> list[Any]:
        """As :meth:`echomq.Connection.round_trip`, awaited."""
        commands = [self.args_of(item) for item in request]
        alone = any(blocks(item) for item in request)
        span = VerbSpan(request, self.wire)
        try:
            replies = await self._exchange(commands, alone)
            retry = self.unanswered(replies)
            if retry:
                await self.load_scripts()  # SCRIPT FLUSH or a restart without the cache
                for i, reply in zip(retry, await self._exchange([commands[i] for i in retry], alone)):
                    replies[i] = reply
            self.raise_link_fault(replies)
        except TRANSPORT_ERRORS as exc:
            raise span.failed(exc) from exc
        span.stopped()
        return self.refusals(request, replies)

    def _exchange(self, commands: list[tuple[Any, ...]], alone: bool = False) -> asyncio.Future[list[Any]]:
        """Send ``commands`` with every other call made in the same turn of the event loop, in
        one round trip: 50 request handlers enqueueing at once cost one pipeline, not 50 round
        trips. Each command stays its own atomic call (no transaction); a link fault fails
        every caller of that round trip. A request that ``alone`` holds its socket while the
        server waits (:func:`~echomq._protocol.verbs.blocks`) goes out by itself: calls batched behind it
        waited as long (an event follower's XREAD BLOCK held every call of its turn)."""
        if alone:
            return asyncio.ensure_future(self._send_commands(commands))
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[list[Any]] = loop.create_future()
        self._waiting.append((commands, waiter))
        if len(self._waiting) == 1:
            loop.call_soon(self._flush)
        return waiter

    def _flush(self) -> None:
        batch, self._waiting = self._waiting, []
        task = asyncio.ensure_future(self._send_batch(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send_batch(self, batch: list[tuple[list[tuple[Any, ...]], asyncio.Future[list[Any]]]]) -> None:
        commands = [command for part, _ in batch for command in part]
        try:
            replies = await self._send_commands(commands)
        except BaseException as exc:
            for _, waiter in batch:
                if not waiter.done():
                    waiter.set_exception(exc)
            if isinstance(exc, Exception):
                return
            raise  # this task was cancelled (the loop closing): it ends cancelled
        at = 0
        for part, waiter in batch:
            if not waiter.done():  # a caller cancelled while waiting: its reply is dropped
                waiter.set_result(replies[at:at + len(part)])
            at += len(part)

    async def _send_commands(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        if len(commands) == 1:
            try:
                return [await self.client.execute_command(*commands[0])]
            except ResponseError as exc:
                return [exc]
        if not self.cluster:
            return await self._pipelined(commands)
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))

    async def _pipelined(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """As :meth:`echomq.Connection._pipelined`, awaited: what valkey-py's asyncio pipeline
        without a transaction does, minus its layers per command, streamed in the same parts. Whatever breaks off the reading
        (a link fault, a cancel of this task) drops the socket before it goes back to the pool:
        its unread replies would answer the next round trip's commands."""
        pool, callbacks = self.client.connection_pool, self._reply_callbacks
        link = await pool.get_connection("PIPELINE")
        parts = streamed(commands, self.stream_args)

        async def attempt() -> list[Any]:
            await link.send_packed_command(link.pack_commands(parts[0]))
            replies: list[Any] = []
            for k, part in enumerate(parts):
                if k + 1 < len(parts):  # the next part goes out before this one's replies are read
                    await link.send_packed_command(link.pack_commands(parts[k + 1]))
                for command in part:
                    try:
                        reply = await link.read_response()
                    except ResponseError as exc:
                        reply = exc
                    replies.append(callbacks.applied(command[0], reply))
            return replies

        async def failed(error: BaseException) -> None:
            await link.disconnect()
            if not retried(link, error):
                raise error

        try:
            return await link.retry.call_with_retry(attempt, failed)
        except BaseException:
            await link.disconnect(nowait=True)  # nowait: no await that a second cancel could break off
            raise
        finally:
            await pool.release(link)

    async def send(self, call: Call | Plain) -> Any:
        (reply,) = await self.round_trip([call])
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def send_many(self, calls: Sequence[Call | Plain]) -> list[Any]:
        return await self.round_trip(calls) if calls else []

    async def refresh_slots(self) -> None:
        """As :meth:`echomq.Connection.refresh_slots`: read the cluster's slot map again."""
        if self.cluster:
            await self.client.nodes_manager.initialize()

    # -- waiting on an outcome channel (the bus) ---------------------------------
    @asynccontextmanager
    async def outcome_listener(self, channel: str, *, confirm_s: float = 10.0
                               ) -> AsyncIterator[Callable[[float | None], Awaitable[bytes | None]]]:
        """As :meth:`echomq.Connection.outcome_listener`, awaited: SSUBSCRIBEd, confirmed, on the
        socket every waiter of this connection shares (echomq/aio/outcome_hub.py; on a cluster,
        one to the node that serves the channel's slot); yields ``await wait(timeout_s)``, which
        returns the next message or None when the time runs out."""
        node = self.client.get_node_from_key(channel) if self.cluster else None
        place = node.name if node is not None else ""
        hub = self._hubs.get(place)
        if hub is None or hub.broken is not None:
            if node is not None:
                options = {k: v for k, v in node.connection_kwargs.items() if k in _PORTABLE}  # its host and port too
                owner = avalkey.Valkey(**options)
                hub = self._hubs[place] = OutcomeHub(owner.pubsub(), owner)
            else:
                hub = self._hubs[place] = OutcomeHub(self.client.pubsub())
        joined = None
        try:
            joined = await hub.join(channel, confirm_s)
            yield joined[1]
        finally:
            if joined is not None:
                await hub.leave(channel.encode(), joined[0])
            if hub.idle:  # a broken hub another has replaced is closed by its last waiter too
                if self._hubs.get(place) is hub:
                    del self._hubs[place]
                await hub.close()

    async def aclose(self) -> None:
        hubs, self._hubs = list(self._hubs.values()), {}
        for hub in hubs:
            await hub.close()
        await self.client.aclose()

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def read_brand(client: avalkey.Valkey | AsyncValkeyCluster) -> bytes | None:
    try:
        return await client.get(VERSION_KEY)
    except ResponseError as exc:
        raise brand_unreadable(exc) from exc


async def _open_client(url: str, cluster: bool, max_connections: int, pool_timeout: float,
                       client_options: dict[str, Any]) -> avalkey.Valkey | AsyncValkeyCluster:
    client_options.setdefault("encoding_errors", ID_ENCODING)
    if "socket_timeout" not in client_options:
        # valkey-py's asyncio reads give up after 5 s by default, its sync ones (echomq.connect's)
        # never: a blocking verb (BCLAIM, an event follower's XREAD BLOCK) waits longer than that
        # by design, so the default is the sync one; a connect still gives up after 5 s
        client_options["socket_timeout"] = None
        client_options.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    try:
        if cluster:
            return EchoAsyncCluster.from_url(url, max_connections=max_connections, **client_options)
        pool = avalkey.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=pool_timeout, **client_options)
        return avalkey.Valkey.from_pool(_pool(pool))
    except ValueError as exc:
        raise errors.ConfigurationError(f"bad URL {redact_url(url)!r}: {exc}; use redis://host:port or "
                                        "rediss://host:port") from exc


async def serves_cluster(client: avalkey.Valkey) -> bool:
    """As :func:`echomq._client.connection.serves_cluster`: HELLO's mode; a refusal reads as standalone."""
    try:
        return cluster_mode(await client.execute_command("HELLO"))
    except ResponseError as exc:
        if missing_database(exc):
            raise
        return False


async def connect(
    url: str = "redis://127.0.0.1:6379", *, wire: int | str = "auto", cluster: bool | str = "auto",
    max_connections: int = DEFAULT_MAX_CONNECTIONS, pool_timeout: float = DEFAULT_POOL_TIMEOUT_S,
    **client_options: Any,
) -> Connection:
    """Open an asyncio connection on ``wire`` 4, 6 or ``"auto"`` (the default: the node's brand)
    after checking the node, as :func:`echomq.connect` does (``cluster="auto"``, the default, asks
    the node with HELLO in place of a PING). ``max_connections`` and ``pool_timeout`` size the
    pool (see the module's notes); ``client_options`` go to valkey-py's client. Reads wait without
    a limit, as the sync client's do, unless you pass ``socket_timeout``: it then bounds every read,
    a blocking one's too (``bclaim``, an event follower's ``block_ms``), so keep it above the longest
    block you ask for; result waiters listen on quiet channels whatever it is."""
    if cluster not in (True, False, "auto"):
        raise errors.ConfigurationError(f"bad cluster {cluster!r}: True, False or 'auto'")
    client = await _open_client(url, cluster is True, max_connections, pool_timeout, client_options)
    try:
        if cluster == "auto" and await serves_cluster(client):  # type: ignore[arg-type]
            await client.aclose()
            client = await _open_client(url, True, max_connections, pool_timeout, client_options)
        if isinstance(client, AsyncValkeyCluster):
            await client.initialize()  # reads the slot map
        elif cluster is False:
            await client.ping()  # "auto" asked HELLO
        chosen = wire_of_brand(await read_brand(client)) if wire == "auto" else wire
        connection = Connection(client, chosen)  # type: ignore[arg-type]
        await connection.handshake()
    except TRANSPORT_ERRORS as exc:
        await client.aclose()
        raise errors.ConnectionFailed(f"no Valkey answers at {redact_url(url)}: {exc}") from exc
    except (ResponseError, InvalidResponse) as exc:
        await client.aclose()
        refused = opening_refused(url, exc)
        if refused is None:
            raise
        raise refused from exc
    except BaseException:
        await client.aclose()
        raise
    return connection


#: how an asyncio queue's connection is opened (named by the refusal of anything else)
AIO_CONNECT = "await echomq.aio.connect(url)"


class Queue(QueueCore):
    """One queue on one asyncio connection: ``Queue(conn, "emails")``; every method is a coroutine."""

    def __init__(self, connection: Connection, name: str, *, serializer: Serializer = JSON,
                 max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        check_connection(connection, Connection, "echomq.aio.Queue", AIO_CONNECT)
        super().__init__(name, connection, serializer, max_payload_bytes)
        self.connection = connection

    def __repr__(self) -> str:
        return f"aio.Queue({self.name!r}, wire={self.wire})"

    async def _run(self, op: Op[T]) -> T:
        """Drive an operation: each round trip it yields is sent, awaited, and its replies sent back."""
        try:
            request = next(op)
            while True:
                request = op.send(await self.connection.round_trip(request))
        except StopIteration as done:
            return done.value

    async def enqueue(self, payload: Any, *, id: str | None = None, priority: int = 0,
                      unique_for: float | None = None, replace: bool = False, group: str | None = None) -> Enqueued:
        return await self._run(self.op_enqueue(payload, id, priority, unique_for, replace, group))

    async def enqueue_many(self, payloads: Iterable[Any], *, priority: int = 0,
                           group: str | None = None) -> list[Enqueued]:
        return await self._run(self.op_enqueue_many(payloads, priority, group))

    async def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, priority: int = 0,
                       unique_for: float | None = None, replace: bool = False) -> Enqueued:
        return await self._run(self.op_schedule(payload, delay_ms, id, priority, unique_for, replace))

    async def claim(self, lease_ms: int) -> Job | None:
        return await self._run(self.op_claim(lease_ms))

    async def bclaim(self, lease_ms: int, timeout_ms: int) -> Job | None:
        return await self._run(self.op_bclaim(lease_ms, timeout_ms))

    async def claim_many(self, count: int, lease_ms: int) -> Claims:
        return await self._run(self.op_claim_many(count, lease_ms))

    async def claim_lanes(self, count: int, lease_ms: int) -> Claims:
        return await self._run(self.op_lane_claim_many(count, lease_ms))

    async def extend(self, job: JobRef, lease_ms: int, *, token: str | int | None = None) -> int:
        return await self._run(self.op_extend(job, lease_ms, token))

    async def extend_many(self, jobs: Sequence[JobRef | tuple[str, str]], lease_ms: int) -> list[int]:
        return await self._run(self.op_extend_many(jobs, lease_ms))

    async def complete(self, job: JobRef, *, token: str | int | None = None) -> None:
        await self._run(self.op_fenced(self.complete_call(job, token=token)))

    async def complete_many(self, jobs: Sequence[JobRef]) -> list[bool]:
        return await self._run(self.op_complete_many(jobs))

    async def fail(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                   token: str | int | None = None, traceback: str | None = None) -> State:
        call = self.fail_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token,
                              traceback=traceback)
        return await self._run(self.op_fenced(call))

    async def failures_incr(self, job: JobRef, error: str, *, max_attempts: int, backoff_ms: int = 0,
                            token: str | int | None = None, traceback: str | None = None) -> State:
        call = self.failures_incr_call(job, error, max_attempts=max_attempts, backoff_ms=backoff_ms, token=token,
                                       traceback=traceback)
        return await self._run(self.op_fenced(call))

    async def delay(self, job: JobRef, delay_ms: int, *, token: str | int | None = None) -> int:
        return await self._run(self.op_fenced(self.delay_call(job, delay_ms, token=token)))

    async def publish(self, job: JobRef, result: Any = None, *, retention_ms: int,
                      token: str | int | None = None) -> None:
        await self._run(self.op_publish(job, result, retention_ms, token))

    async def progress(self, job: JobRef, value: Any, *, token: str | int | None = None) -> None:
        await self._run(self.op_fenced(self.append_call(job, value, token=token)))

    async def progress_of(self, job_id: str) -> Any:
        """As :meth:`echomq.Queue.progress_of`: the last progress reported, decoded; None for none."""
        return await self._run(self.op_progress_of(job_id))

    async def requeue(self, job: JobRef, *, token: str | int | None = None) -> None:
        await self._run(self.op_fenced(self.requeue_call(job, token=token)))

    async def settle_many(self, calls: Sequence[Call]) -> list[Any]:
        return await self._run(self.op_settle_many(calls))

    async def settle_and_claim(self, calls: Sequence[Call], count: int, lease_ms: int,
                               lanes: int = 0) -> tuple[list[Any], Claims]:
        return await self._run(self.op_settle_and_claim(calls, count, lease_ms, lanes))

    async def promote(self, limit: int = 1000) -> int:
        return await self._run(self.op_promote(limit))

    async def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        return await self._run(self.op_reschedule(job_id, delay_ms))

    async def reprocess(self, job_id: str) -> bool:
        return await self._run(self.op_reprocess(job_id))

    async def remove(self, job_id: str) -> State | None:
        return await self._run(self.op_remove(job_id))

    async def cancel(self, job_id: str) -> bool:
        return await self._run(self.op_cancel(job_id))

    async def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        return await self._run(self.op_purge(older_than_ms, limit))

    async def drain(self, *, limit: int = 1000) -> int:
        return await self._run(self.op_drain(limit))

    async def drain_lanes(self, *, limit: int = 1000) -> int:
        return await self._run(self.op_drain_lanes(limit))

    async def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        return await self._run(self.op_stalled_check(max_stalled, limit))

    async def reap(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        return (await self._run(reaper.op_reap(self, max_stalled, limit)))[0]

    async def pause_group(self, group: str) -> None:
        await self._run(self.op_pause_group(group))

    async def resume_group(self, group: str) -> bool:
        return await self._run(self.op_resume_group(group))

    async def set_lane_limit(self, k: int | None, group: str | None = None) -> None:
        await self._run(self.op_set_lane_limit(k, group))

    async def groups(self) -> dict[str, GroupCounts]:
        return await self._run(self.op_groups())

    async def group_page(self, most: int = 100) -> tuple[int, dict[str, GroupCounts]]:
        return await self._run(self.op_group_page(most))

    async def enqueue_flow(self, payload: Any, *, children: Sequence[Any], id: str | None = None, priority: int = 0,
                           on_child_failure: str = "fail") -> Enqueued:
        root = Flow(self.name, payload, children, id=id, priority=priority, on_child_failure=on_child_failure)
        return await self._run(op_enqueue_flow(plan(root, self.encode, cluster=self.connection.cluster)))

    async def flow_claim(self, count: int, lease_ms: int) -> Claims:
        return await self._run(self.op_flow_claim(count, lease_ms))

    async def flow_extend_many(self, jobs: Sequence[JobRef], lease_ms: int) -> list[int]:
        return await self._run(self.op_flow_extend_many(jobs, lease_ms))

    async def reap_flows(self, *, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        return await self._run(self.op_flow_reap(max_stalled, limit))

    async def children(self, parent_id: str) -> Children:
        return (await self._run(self.op_children([parent_id])))[0]

    async def pause(self) -> None:
        await self._run(self.op_pause())

    async def resume(self) -> None:
        await self._run(self.op_resume())

    async def set_rate_limit(self, rate: str | RateLimit | None) -> None:
        await self._run(self.op_set_rate_limit(rate))

    async def rate_limit(self) -> RateLimit | None:
        return await self._run(self.op_rate_limit())

    async def set_result_layout(self, layout: str) -> None:
        """As :meth:`echomq.Queue.set_result_layout`, awaited."""
        await self._run(self.op_set_result_layout(layout))

    async def result_layout(self) -> ResultLayout:
        return await self._run(self.op_result_layout())

    async def status(self, job_id: str) -> Status:
        return await self._run(self.op_status(job_id))

    async def result(self, job_id: str, *, timeout: float | None = None) -> Any:
        """As :meth:`echomq.Queue.result`, awaited: woken by the job's outcome channel, not polling,
        and riding out a server restart or a failover within its timeout."""
        check_job_id(job_id)
        deadline = None if check_wait(timeout) is None else time.monotonic() + timeout
        failures = 0
        while True:
            try:
                return await self._await_result(job_id, timeout, deadline)
            except errors.ConnectionFailed:
                failures += 1
                pause = relink_pause_s(failures, deadline, time.monotonic())
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                with suppress(*TRANSPORT_ERRORS):  # after a failover, the channel's slot may have moved
                    await self.connection.refresh_slots()

    async def _await_result(self, job_id: str, timeout: float | None, deadline: float | None) -> Any:
        async with self.connection.outcome_listener(self.keys.outcome(job_id)) as wait:
            counted = await self._run(self.op_count_waiter())
            try:
                told = None
                while True:
                    try:
                        read = await self._run(self.op_result_read(job_id, told))
                    except errors.JobNotFound:
                        # a plain COMPLETE between the count and the first read left no row: its word is sent
                        if told is None and (told := await wait(TOLD_GRACE_S)) is not None:
                            continue
                        raise
                    if isinstance(read, Done):
                        return read.value
                    left = time_left(deadline, time.monotonic())
                    if left is not None and left <= 0:
                        raise await self._run(self.op_timed_out(job_id, read, timeout))
                    told = await wait(wait_slice_s(counted, left))
                    if told is None:
                        counted = await self._run(self.op_keep_waiter(counted))
            finally:
                with suppress(errors.ConnectionFailed):
                    await self._run(self.op_uncount_waiter(counted))

    async def enable_events(self, maxlen: int = DEFAULT_MAXLEN) -> None:
        await self._run(self.op_enable_events(maxlen))

    async def disable_events(self) -> None:
        await self._run(self.op_disable_events())

    async def events(self, since: str | None = None, *, follow: bool = False, block_ms: int = 1000,
                     count: int = 100) -> AsyncIterator[Event]:
        """As :meth:`echomq.Queue.events`: ``async for event in q.events(...)``. A follower's
        XREAD BLOCK holds a pooled socket while it waits."""
        last = "0-0" if since is None else await self._run(self.op_last_event_id()) if since == "$" else since
        while True:
            page = await self._run(self.op_events_page(last, count, block_ms if follow else None))
            for event in page:
                last = event.stream_id
                yield event
            if not follow and len(page) < count:
                return

    async def counts(self) -> Counts:
        return await self._run(self.op_counts())

    async def state(self, job_id: str) -> State | None:
        return await self._run(self.op_state(job_id))

    async def job(self, job_id: str) -> dict[str, Any] | None:
        return await self._run(self.op_job(job_id))

    async def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        return await self._run(self.op_ids(state, offset, count))

    async def metrics(self) -> dict[str, int]:
        return await self._run(self.op_metrics())


async def drive(connection: Connection, op: POp[T]) -> T:
    """Drive a partitioned operation, awaiting each round trip (the cluster client routes each by its keys)."""
    try:
        _, request = next(op)
        while True:
            _, request = op.send(await connection.round_trip(request))
    except StopIteration as done:
        return done.value


class PartitionedQueue(PartitionedCore[Queue]):
    """:class:`echomq.PartitionedQueue` on an asyncio connection; every method is a coroutine.
    Open it with ``await PartitionedQueue.open(conn, "emails", partitions=8)`` (which declares N,
    or reads the recorded layout without ``partitions``); the constructor takes a layout already
    declared (the partitions' queue names, as ``op_declare`` in echomq/_client/partitioned.py answers)."""

    def __init__(self, connection: Connection, name: str, layout: Sequence[str], *, serializer: Serializer = JSON,
                 max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> None:
        check_connection(connection, Connection, "echomq.aio.PartitionedQueue", AIO_CONNECT)
        super().__init__(name, [Queue(connection, sub, serializer=serializer, max_payload_bytes=max_payload_bytes)
                                for sub in layout])
        self.connection = connection
        self.wire = connection.wire

    @classmethod
    async def open(cls, connection: Connection, name: str, *, partitions: int | None = None,
                   serializer: Serializer = JSON,
                   max_payload_bytes: int | None = MAX_PAYLOAD_BYTES) -> PartitionedQueue:
        check_connection(connection, Connection, "echomq.aio.PartitionedQueue.open", AIO_CONNECT)
        layout = await drive(connection, op_declare(connection, name, partitions))
        return cls(connection, name, layout, serializer=serializer, max_payload_bytes=max_payload_bytes)

    def __repr__(self) -> str:
        return f"aio.PartitionedQueue({self.name!r}, partitions={len(self.partitions)}, wire={self.wire})"

    async def _run(self, op: POp[T]) -> T:
        return await drive(self.connection, op)

    async def enqueue(self, payload: Any, *, id: str | None = None, key: str | None = None,
                      priority: int = 0) -> Enqueued:
        return await self._run(self.op_enqueue(payload, id, key, priority))

    async def enqueue_many(self, payloads: Iterable[Any], *, keys: Iterable[str] | None = None,
                           priority: int = 0) -> list[Enqueued]:
        return await self._run(self.op_enqueue_many(payloads, keys, priority))

    async def schedule(self, payload: Any, delay_ms: int, *, id: str | None = None, key: str | None = None,
                       priority: int = 0) -> Enqueued:
        return await self._run(self.op_schedule(payload, delay_ms, id, key, priority))

    async def claim(self, lease_ms: int) -> Job | None:
        jobs = await self.claim_many(1, lease_ms)
        return jobs[0] if jobs else None

    async def claim_many(self, count: int, lease_ms: int) -> list[Job]:
        return await self._run(self.op_claim_many(count, lease_ms))

    async def extend(self, job: Job, lease_ms: int) -> int:
        return await self._run(self.op_extend(job, lease_ms))

    async def complete(self, job: Job) -> None:
        await self._run(self.op_complete(job))

    async def complete_many(self, jobs: Sequence[Job]) -> list[bool]:
        return await self._run(self.op_complete_many(jobs))

    async def fail(self, job: Job, error: str, *, max_attempts: int, backoff_ms: int = 0,
                   traceback: str | None = None) -> State:
        return await self._run(self.op_fail(job, error, max_attempts, backoff_ms, traceback))

    async def delay(self, job: Job, delay_ms: int) -> int:
        return await self._run(self.op_delay(job, delay_ms))

    async def requeue(self, job: Job) -> None:
        await self._run(self.op_requeue(job))

    async def find(self, job_id: str) -> Queue | None:
        return await self._run(self.op_find(job_id))

    async def state(self, job_id: str) -> State | None:
        return await self._run(self.op_state(job_id))

    async def job(self, job_id: str) -> dict[str, Any] | None:
        return await self._run(self.op_job(job_id))

    async def remove(self, job_id: str) -> State | None:
        return await self._run(self.op_remove(job_id))

    async def cancel(self, job_id: str) -> bool:
        return await self._run(self.op_cancel(job_id))

    async def reprocess(self, job_id: str) -> bool:
        return await self._run(self.op_reprocess(job_id))

    async def reschedule(self, job_id: str, delay_ms: int) -> int | None:
        return await self._run(self.op_reschedule(job_id, delay_ms))

    async def purge(self, *, older_than_ms: int = 0, limit: int = 1000) -> int:
        return await self._run(self.op_purge(older_than_ms, limit))

    async def drain(self, *, limit: int = 1000) -> int:
        return await self._run(self.op_drain(limit))

    async def promote(self, limit: int = 1000) -> int:
        return await self._run(self.op_promote(limit))

    async def stalled_check(self, max_stalled: int = 1, limit: int = 1000) -> Sweep:
        return await self._run(self.op_stalled_check(max_stalled, limit))

    async def set_result_layout(self, layout: str) -> None:
        await self._run(self.op_set_result_layout(layout))

    async def result_layout(self) -> list[ResultLayout]:
        return await self._run(self.op_result_layout())

    async def pause(self) -> None:
        await self._run(self.op_pause())

    async def resume(self) -> None:
        await self._run(self.op_resume())

    async def counts(self) -> Counts:
        return await self._run(self.op_counts())

    async def counts_by_partition(self) -> dict[str, Counts]:
        return await self._run(self.op_counts_by_partition())

    async def metrics(self) -> dict[str, int]:
        return await self._run(self.op_metrics())

    async def located_ids(self, state: State | str, *, offset: int = 0,
                          count: int = 100) -> list[tuple[Queue, str, float]]:
        return await self._run(self.op_located_ids(state, offset, count))

    async def ids(self, state: State | str, *, offset: int = 0, count: int = 100) -> list[tuple[str, float]]:
        return [(job_id, score) for _, job_id, score in await self.located_ids(state, offset=offset, count=count)]


publish("echomq.aio", globals(), __all__)  # messages name these classes so: echomq.aio.Connection
