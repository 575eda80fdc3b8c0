"""The connection: one Valkey client, one wire, and the dispatch of every verb.

* wire 4 (scripts): the node's brand must be ``echomq:4.0.0``; every verb is
  EVALSHA of its script, loaded once; NOSCRIPT reloads and retries once.
* wire 6 (trafikey): EMQ.VERSION must list the fourteen job-core tokens and the
  brand must already be ``echomq:6.0.0``; each verb travels as its ``EMQ.*``
  command with the script's numkeys, KEYS and ARGV unchanged; the two declared
  reads stay EVALSHA.

The connection never writes the brand: that is the admin step in ``admin/steps.py``.

Everything that decides (the command for a call on a wire, the handshake's checks,
the mapping of error replies and link faults) is pure and shared with the asyncio
connection in ``aio/``; each connection only sends, through one path
(:meth:`Connection.round_trip`), which maps every link fault to
:class:`~echomq.ConnectionFailed` and emits the ``verb.*`` hooks.

On a Valkey Cluster (``connect`` finds out, or ``cluster=True``) the client is an
:class:`EchoCluster`: every verb goes to the primary of its queue's slot (the
keys share the queue's hashtag), the scripts are loaded on every primary, the
wire-6 handshake asks every primary, and pipelines split by node as valkey-py's
cluster pipeline does. A call whose keys span two slots reaches the server and is
refused ``CROSSSLOT`` there.
"""

from __future__ import annotations

import hashlib
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterable, Iterator, Mapping, Sequence, TypeVar

import valkey
from valkey.cluster import ClusterPipeline, ValkeyCluster
from valkey.exceptions import ClusterError, InvalidResponse, NoScriptError, ResponseError, ValkeyClusterException

from .. import errors, hooks
from .._protocol.keys import VERSION_KEY, Keyspace
from .._protocol.shown import redact_url
from .._protocol.verbs import BY_NAME, ID_ENCODING, JOB_CORE_TOKENS, SCRIPTED, Call, Plain, Verb, build_call

__all__ = ["BRANDS", "Call", "Connection", "Plain", "Script", "WireCodec", "as_refusal", "build_call", "connect"]

BRANDS = {4: b"echomq:4.0.0", 6: b"echomq:6.0.0"}
T = TypeVar("T")

# valkey-py strips these codes off the message and raises its own class: put the code back.
_STRIPPED_CODES = {
    valkey.exceptions.NoPermissionError: "NOPERM",
    valkey.exceptions.OutOfMemoryError: "OOM",
    valkey.exceptions.ReadOnlyError: "READONLY",
    valkey.exceptions.NoScriptError: "NOSCRIPT",
    valkey.exceptions.ClusterCrossSlotError: "CROSSSLOT",
    # a cluster node between states (restarting, no quorum yet): the call did not run; retry later
    valkey.exceptions.MasterDownError: "MASTERDOWN",  # before its base class
    valkey.exceptions.ClusterDownError: "CLUSTERDOWN",
    valkey.exceptions.TryAgainError: "TRYAGAIN",
}


# Codes valkey-py leaves on the message (besides EchoMQ's own EMQ*): any other plain ResponseError
# had "ERR " stripped off -- and ERR texts may start upper-case ("ACL failure in script: ...").
_KEPT_CODES = frozenset(
    "WRONGTYPE BUSY BUSYKEY BUSYGROUP NOGROUP MOVED ASK TRYAGAIN CLUSTERDOWN MASTERDOWN MISCONF "
    "NOREPLICAS NOTBUSY UNBLOCKED UNKILLABLE NOPROTO".split()
)
_EMQ_CODE = re.compile(r"EMQ[A-Z]*")


def as_refusal(exc: ResponseError) -> errors.CommandRefused:
    """The typed EchoMQ error for an error reply from the server."""
    text = str(exc)
    for cls, code in _STRIPPED_CODES.items():
        if isinstance(exc, cls):
            text = f"{code} {text}"
            break
    else:
        # valkey-py strips "ERR " too and raises a plain ResponseError (a Lua runtime error,
        # "hash value is not an integer" from a script): put it back so ``code`` is ERR.
        word = text.split(" ", 1)[0]
        if type(exc) is ResponseError and word not in _KEPT_CODES and not _EMQ_CODE.fullmatch(word):
            text = f"ERR {text}"
    return errors.refusal(text)


#: A link fault on either client: refused, reset, timed out, or no cluster node answered.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    valkey.ConnectionError, valkey.TimeoutError, ValkeyClusterException, ClusterError, OSError,
)


def link_failed(exc: BaseException, where: str) -> errors.ConnectionFailed:
    failed = errors.ConnectionFailed(f"the link to Valkey failed during {where}: {type(exc).__name__}: {exc}")
    failed.__cause__ = exc
    return failed


@contextmanager
def plain_commands(where: str) -> Iterator[None]:
    """Raw client commands outside the send path (the inventory's reads, the heartbeat) answer in
    its error tree: a refusal is the typed :class:`~echomq.CommandRefused`, a link fault
    :class:`~echomq.ConnectionFailed`."""
    try:
        yield
    except ResponseError as exc:
        raise as_refusal(exc) from exc
    except TRANSPORT_ERRORS as exc:
        raise link_failed(exc, where) from exc


def brand_unreadable(exc: ResponseError) -> errors.EchoMQError:
    """The error for a failed read (or write) of the brand: a ``{emq}:version`` of another type is
    no brand; a MOVED means a plain client of a cluster node that does not hold the key."""
    refusal = as_refusal(exc)
    if isinstance(refusal, errors.WrongType):
        return errors.BrandError(
            f"the node's {VERSION_KEY} is not a string, so it carries no EchoMQ brand: "
            "the key belongs to something else; use another node"
        )
    if refusal.code == "MOVED":  # cluster=False on a cluster node that does not hold the brand's slot
        return errors.ConfigurationError(
            f"the node runs in cluster mode and {VERSION_KEY} lives on another node ({refusal}): connect with "
            "cluster=True or 'auto' (emq: drop --no-cluster)"
        )
    return refusal


def read_brand(client: valkey.Valkey) -> bytes | None:
    """The node's brand; a ``{emq}:version`` of another type is no brand (BrandError, not WRONGTYPE)."""
    try:
        return client.get(VERSION_KEY)
    except ResponseError as exc:
        raise brand_unreadable(exc) from exc


def check_brand(brand: bytes | None, wire: int) -> None:
    want = BRANDS[wire]
    if brand == want:
        return
    if brand is None:
        raise unbranded(str(wire))
    raise errors.BrandError(
        f"the node is branded {brand.decode(errors='replace')!r}, not {want.decode()!r}: it serves the other "
        f"wire; connect with wire={4 if wire == 6 else 6} (emq: --wire {4 if wire == 6 else 6}) or use another node"
    )


def wire_of_brand(brand: bytes | None) -> int:
    """The wire the node's brand names; BrandError when it is unbranded or carries another brand."""
    for wire, want in BRANDS.items():
        if brand == want:
            return wire
    if brand is None:
        raise unbranded("4|6")
    raise errors.BrandError(f"the node is branded {brand.decode(errors='replace')!r}, which names no EchoMQ wire")


#: What a refusal of wire 6 offers instead, by what was asked: a connection, or a brand (admin.py).
USE_WIRE_4 = "connect with wire=4 (emq: --wire 4)"


def tokens_unavailable(exc: ResponseError, node: str | None = None, instead: str = USE_WIRE_4) -> errors.WireError:
    """``node``: the cluster primary that failed (on a cluster every primary must serve wire 6)."""
    where = "the node" if node is None else f"every primary of the cluster, and the primary {node}"
    return errors.WireError(
        f"wire 6 needs the trafikey module on {where}, and EMQ.VERSION failed there "
        f"({exc}); start valkey-server with --loadmodule $(emq module-path), or {instead}"
    )


def check_tokens(listed: Mapping[Any, bytes]) -> frozenset[str]:
    """Every node's EMQ.VERSION must list the job-core tokens; returns the tokens all of them list."""
    common: set[str] | None = None
    for node, reply in listed.items():
        tokens = set(reply.decode().split())
        missing = [token for token in JOB_CORE_TOKENS if token not in tokens]
        if missing:
            raise errors.WireError(f"the trafikey on {node} lacks job-core tokens {missing}; upgrade the module")
        common = tokens if common is None else common & tokens
    return frozenset(common or ())


def served_tokens(client: valkey.Valkey | ValkeyCluster, instead: str = USE_WIRE_4) -> frozenset[str]:
    """The tokens EMQ.VERSION lists on the node (on a cluster: on every primary, the ones all list);
    WireError when one lacks trafikey (``instead``: what the error offers) or a job-core token."""
    if not isinstance(client, ValkeyCluster):
        try:
            return check_tokens({"node": client.execute_command("EMQ.VERSION")})
        except ResponseError as exc:
            raise tokens_unavailable(exc, instead=instead) from exc
    listed = {}
    for node in client.get_primaries():  # every primary must serve the verbs, not just one
        try:
            listed[node.name] = client.execute_command("EMQ.VERSION", target_nodes=node)
        except ResponseError as exc:
            raise tokens_unavailable(exc, node.name, instead) from exc
    return check_tokens(listed)


@dataclass(frozen=True)
class Script:
    verb: Verb
    source: bytes
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source).hexdigest())


def read_scripts(verbs: Iterable[Verb]) -> dict[str, Script]:
    """The scripts' sources from the package (loading them into a server is ``Connection.load_scripts``)."""
    return {verb.name: Script(verb, verb.source()) for verb in verbs}


def first_key_at(args: Sequence[Any]) -> int | None:
    """Where the first key is in a command that carries numkeys (EVALSHA, every ``EMQ.*`` verb)."""
    name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
    name = name.upper()
    at = 2 if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO") else 1 if name.startswith("EMQ.") else None
    if at is not None and len(args) > at + 1 and int(args[at]) > 0:
        return at + 1
    return None


def as_sent(args: Sequence[Any]) -> tuple[Any, ...]:
    """A command's arguments with its text as the bytes the server holds: surrogate escapes (an id
    that is not UTF-8, as :func:`echomq._protocol.verbs.text` read it) back to those bytes."""
    return tuple(arg.encode("utf-8", ID_ENCODING) if isinstance(arg, str) else arg for arg in args)


class _SurrogatesPacked:
    """A connection's packer that sends surrogate escapes as their bytes: libvalkey's packer (and
    valkey-py's own by default) refuse them. Only a command that holds one pays for it."""

    def __init__(self, packer: Any) -> None:
        self.packer = packer

    def pack(self, *args: Any) -> Any:
        try:
            return self.packer.pack(*args)
        except UnicodeEncodeError:
            return self.packer.pack(*as_sent(args))


class _PacksSurrogates:
    """Mixed into a sync connection class: its packer is wrapped in :class:`_SurrogatesPacked`."""

    def _construct_command_packer(self, packer: Any) -> Any:
        return _SurrogatesPacked(super()._construct_command_packer(packer))  # type: ignore[misc]


_SURROGATE_PACKING: dict[type, type] = {}


def packing_surrogates(kind: type) -> type:
    """``kind`` (a valkey-py sync connection class) with :class:`_PacksSurrogates` mixed in, made once."""
    if issubclass(kind, _PacksSurrogates):
        return kind
    if kind not in _SURROGATE_PACKING:
        _SURROGATE_PACKING[kind] = type(f"SurrogatePacking{kind.__name__}", (_PacksSurrogates, kind), {})
    return _SURROGATE_PACKING[kind]


class _RouteByFirstKey:
    """Route a call that carries numkeys (EVALSHA, every ``EMQ.*`` verb) by its first key.

    valkey-py would ask the server for an ``EMQ.*`` command's keys on every call
    (COMMAND GETKEYS, a second round trip) and refuses mixed-slot EVALSHA itself;
    every key of one queue shares its hashtag, so the first key names the slot,
    and a call mixing two queues is left for the server to refuse (CROSSSLOT).
    """

    def determine_slot(self, *args: Any) -> int:
        at = first_key_at(args)
        if at is not None:
            return self.keyslot(args[at])  # type: ignore[attr-defined]
        return super().determine_slot(*args)  # type: ignore[misc]


class EchoClusterPipeline(_RouteByFirstKey, ClusterPipeline):
    pass


class EchoCluster(_RouteByFirstKey, ValkeyCluster):
    """valkey-py's cluster client, routing EchoMQ's verbs by their queue's slot."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = EchoClusterPipeline  # same state, our routing; avoids copying its constructor
        return pipe


class WireCodec:
    """What both connections share and nothing sends: the wire, its scripts, the command that
    carries a call, and the reading of a round trip's replies."""

    def __init__(self, wire: int) -> None:
        if wire not in BRANDS:
            raise errors.ConfigurationError(f"bad wire {wire!r}: EchoMQ speaks wire 4 (scripts) or wire 6 (trafikey)")
        self.wire = wire
        self.tokens: frozenset[str] = frozenset()  #: what EMQ.VERSION lists on every primary (wire 6)
        self.stream_args = STREAM_ARGS  #: arguments a part of a streamed pipeline (:func:`streamed`)
        # wire 6 sends the EMQ verbs, and keeps only the declared reads and the lane and flow scripts (SPEC §9.6)
        self.scripts = read_scripts(v for v in SCRIPTED if wire == 4 or v.command is None)

    def supports(self, verb_name: str) -> bool:
        """Whether this connection carries ``verb_name``: its script on wire 4; on wire 6 its
        command, listed (with all its tokens) by EMQ.VERSION on every primary."""
        verb = BY_NAME[verb_name]
        if self.wire == 4 or verb.command is None:
            return verb.scripted
        return set(verb.tokens) <= self.tokens

    def carries(self, verb_name: str, argument: str) -> bool:
        """Whether a call of ``verb_name`` may send its late ``argument`` (SPEC §9.4): the
        script reads it on wire 4; on wire 6 EMQ.VERSION must list its token."""
        token = dict(BY_NAME[verb_name].late)[argument]
        return self.supports(verb_name) and (self.wire == 4 or token in self.tokens)

    def command_args(self, call: Call) -> tuple[Any, ...]:
        """The command that carries ``call`` on this connection's wire."""
        verb = call.verb
        if self.wire == 6 and verb.command is not None:
            if not set(verb.tokens) <= self.tokens:
                raise errors.UnsupportedOnWire(
                    f"{verb.name} needs the token(s) {list(verb.tokens)}, which this node's EMQ.VERSION does not "
                    "list; upgrade the trafikey module")
            return (verb.command, len(call.keys), *call.keys, *call.argv)
        script = self.scripts.get(verb.name)
        if script is None:
            raise errors.UnsupportedOnWire(
                f"{verb.name} has no script: it needs wire 6 (trafikey)"
                if self.wire == 4
                else f"script {verb.name!r} is not sent on wire 6"
            )
        # the declared reads go read-only: a read-only ACL user may run them, a replica may serve them
        command = "EVALSHA_RO" if verb.read_only else "EVALSHA"
        return (command, script.sha, len(call.keys), *call.keys, *call.argv)

    def args_of(self, item: Call | Plain) -> tuple[Any, ...]:
        return item.args if isinstance(item, Plain) else self.command_args(item)

    @staticmethod
    def raise_link_fault(replies: Sequence[Any]) -> None:
        """A cluster pipeline hands back a link fault of one node among the replies (its retries ran
        out: "TTL exhausted" while a slot migrates, a node that went away): the round trip failed."""
        for reply in replies:
            if isinstance(reply, TRANSPORT_ERRORS):
                raise reply

    @staticmethod
    def unanswered(replies: Sequence[Any]) -> list[int]:
        """Which replies are NOSCRIPT: those calls did not run, so resending them is safe."""
        return [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]

    @staticmethod
    def refusals(request: Sequence[Call | Plain], replies: Sequence[Any]) -> list[Any]:
        """Each error reply as its typed exception, and each error element of a reply that answers
        per pair (COMPLETES: a refused pair among answered ones)."""
        return [as_refusal(r) if isinstance(r, ResponseError)
                else [as_refusal(e) if isinstance(e, ResponseError) else e for e in r]
                if type(r) is list and type(item) is Call and item.verb.per_pair else r
                for item, r in zip(request, replies)]


class VerbSpan:
    """One round trip as the ``verb.*`` hooks see it (both connections' send paths): ``verb.start``
    now, then :meth:`stopped` or :meth:`failed`. With no subscriber it builds nothing."""

    def __init__(self, request: Sequence[Call | Plain], wire: int) -> None:
        self.request = request
        self.wire = wire
        self.names = names_of(request) if hooks.wanted("verb") else None
        self.started = time.perf_counter()
        if self.names:
            hooks.emit("verb.start", verbs=self.names, wire=wire)

    def stopped(self) -> None:
        if self.names:
            hooks.emit("verb.stop", verbs=self.names, wire=self.wire, duration_s=time.perf_counter() - self.started)

    def failed(self, exc: BaseException) -> errors.ConnectionFailed:
        """The link fault ``exc`` as the ConnectionFailed to raise, ``verb.error`` emitted."""
        failed = link_failed(exc, " ".join(names_of(self.request)))
        if self.names:
            hooks.emit("verb.error", verbs=self.names, wire=self.wire, error=failed,
                       duration_s=time.perf_counter() - self.started)
        return failed


def has_keyless(commands: Sequence[tuple[Any, ...]]) -> bool:
    """Whether a round trip holds a command a cluster client cannot route (TIME, which has no key)."""
    return any(str(command[0]).upper() == "TIME" for command in commands)


def names_of(request: Sequence[Call | Plain]) -> list[str]:
    """What the ``verb.*`` hooks report for a round trip: verb names, or a plain command's name."""
    return [item.verb.name if isinstance(item, Call) else str(item.args[0]).lower() for item in request]


#: arguments a part of a streamed pipeline carries (:func:`streamed`): a few ENQUEUES of 500 jobs;
#: a worker's round trip (a claim, a settle batch) fits in one
STREAM_ARGS = 4096


def streamed(commands: Sequence[T], most: int = STREAM_ARGS) -> list[Sequence[T]]:
    """``commands`` (each a command's arguments) cut into the parts a pipeline writes one ahead
    of its reading (pure): a part ends with the command that brings it to ``most`` arguments or
    more, so a round trip within that is one part, written whole as before; the window stays two
    parts however long the round trip."""
    parts: list[Sequence[T]] = []
    start = size = 0
    for i, command in enumerate(commands):
        size += len(command)  # type: ignore[arg-type]
        if size >= most:
            parts.append(commands[start:i + 1])
            start, size = i + 1, 0
    if start < len(commands) or not parts:
        parts.append(commands[start:])
    return parts


class ReplyCallbacks(dict[str, Callable[[Any], Any] | None]):
    """A client's callback for each command name's replies (HGETALL's dict, TIME's pair), None for
    the verbs' commands: ``callbacks[name]``, looked up in the client's table once per name (that
    table ignores case, at a cost a reply). Both connections' pipelined reading applies them."""

    def __init__(self, client: Any) -> None:
        super().__init__()
        self.client = client

    def __missing__(self, name: str) -> Callable[[Any], Any] | None:
        table = self.client.response_callbacks
        callback = self[name] = table[name] if name in table else None
        return callback

    def applied(self, name: str, reply: Any) -> Any:
        """``reply`` to a ``name`` command as the client gives it; an error reply stays as it is."""
        callback = self[name]
        return reply if callback is None or isinstance(reply, ResponseError) else callback(reply)


def retried(link: Any, error: BaseException) -> bool:
    """Whether ``link``'s retry policy tries again after ``error`` (valkey-py's own test, as its
    pipelines make it): otherwise the failure callback raises it."""
    return link.retry_on_error is not None and isinstance(error, tuple(link.retry_on_error))


class Connection(WireCodec):
    """A client bound to one wire. Build it with :func:`connect`.

    ``client`` is a ``valkey.Valkey`` or, on a cluster, an :class:`EchoCluster`.
    """

    def __init__(self, client: valkey.Valkey | ValkeyCluster, wire: int) -> None:
        super().__init__(wire)
        self.client = client
        #: a cluster client (read a few times a round trip: ValkeyCluster's isinstance check costs
        #: several Python calls through its metaclass, so it is made once)
        self.cluster = isinstance(client, ValkeyCluster)
        self._reply_callbacks = ReplyCallbacks(client)
        self._handshake()

    # -- opening ------------------------------------------------------------
    def _handshake(self) -> None:
        try:
            if self.wire == 6:
                self._require_tokens()
            check_brand(read_brand(self.client), self.wire)
            self.load_scripts()
        except TRANSPORT_ERRORS as exc:
            raise link_failed(exc, "the handshake") from exc

    def _require_tokens(self) -> None:
        self.tokens = served_tokens(self.client)

    def load_scripts(self) -> None:
        # on a cluster valkey-py sends SCRIPT LOAD to every primary
        for script in self.scripts.values():
            self.client.script_load(script.source)

    # -- sending: the one path --------------------------------------------------
    def round_trip(self, request: Sequence[Call | Plain], on: Keyspace | None = None) -> list[Any]:
        """Send ``request`` in one round trip (one command alone, more as a pipeline, no
        transaction); error replies come back as typed exception objects, a link fault
        raises :class:`~echomq.ConnectionFailed`. NOSCRIPT reloads the scripts and resends
        only the calls that did not run, once. On a cluster a round trip with a keyless command
        (TIME) goes whole to the node of ``on``, the queue it serves."""
        commands = [self.args_of(item) for item in request]
        client = self.node_client(on) if on is not None and self.cluster and has_keyless(commands) else self.client
        return self._round_trip_on(client, request, commands)

    def _round_trip_on(self, client: valkey.Valkey | ValkeyCluster, request: Sequence[Call | Plain],
                       commands: list[tuple[Any, ...]]) -> list[Any]:
        """:meth:`round_trip` to ``client``: this connection's own, or a plain client of one node."""
        span = VerbSpan(request, self.wire)
        try:
            replies = self._exchange(client, commands)
            retry = self.unanswered(replies)
            if retry:
                self.load_scripts()  # SCRIPT FLUSH or a restart without the cache
                for i, reply in zip(retry, self._exchange(client, [commands[i] for i in retry])):
                    replies[i] = reply
            self.raise_link_fault(replies)
        except TRANSPORT_ERRORS as exc:
            raise span.failed(exc) from exc
        span.stopped()
        return self.refusals(request, replies)

    def _exchange(self, client: valkey.Valkey | ValkeyCluster, commands: list[tuple[Any, ...]]) -> list[Any]:
        if len(commands) == 1:
            try:
                return [client.execute_command(*commands[0])]
            except ResponseError as exc:
                return [exc]
        if client is self.client and not self.cluster:
            return self._pipelined(commands)
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return pipe.execute(raise_on_error=False)

    def _pipelined(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """What valkey-py's pipeline without a transaction does, minus its layers per command (a
        worker's round trip carries a claim and a settle per job): the commands written in the
        parts :func:`streamed` cuts, each part sent before the replies of the one before it are
        read (the server runs a part while the client reads the last one's replies and packs the
        next: enqueue_many's jobs), each reply read in turn, an error reply kept as its exception,
        the client's reply callbacks applied by command name. A link fault drops the socket (its replies can no longer be paired
        with their commands) and is retried only as the client's own retry policy says, as there."""
        pool, callbacks = self.client.connection_pool, self._reply_callbacks
        link = pool.get_connection("PIPELINE")
        parts = streamed(commands, self.stream_args)

        def attempt() -> list[Any]:
            link.send_packed_command(link.pack_commands(parts[0]))
            replies: list[Any] = []
            for k, part in enumerate(parts):
                if k + 1 < len(parts):  # the next part goes out before this one's replies are read
                    link.send_packed_command(link.pack_commands(parts[k + 1]))
                for command in part:
                    try:
                        reply = link.read_response()
                    except ResponseError as exc:
                        reply = exc
                    replies.append(callbacks.applied(command[0], reply))
            return replies

        def failed(error: BaseException) -> None:
            link.disconnect()
            if not retried(link, error):
                raise error

        try:
            return link.retry.call_with_retry(attempt, failed)
        except BaseException:
            link.disconnect()  # whatever broke off the reading, the socket is out of step
            raise
        finally:
            pool.release(link)

    def node_client(self, keyspace: Keyspace) -> valkey.Valkey:
        """A plain client of the node that holds ``keyspace``'s queue (this connection's own client
        off a cluster): for what a cluster pipeline refuses (TIME) and for a waiter's socket."""
        if self.cluster:
            return self.client.get_node_from_key(keyspace.pending).valkey_connection
        return self.client

    def refresh_slots(self) -> None:
        """Read the cluster's slot map again (a waiter's socket follows its queue after a MOVED, a
        failover or a lost node; the cluster client does the same for itself)."""
        if self.cluster:
            self.client.nodes_manager.initialize()

    def scan(self, match: str, count: int = 1000) -> Iterator[bytes]:
        """Every key that matches ``match``: SCAN of the node, or of each primary of a cluster, each
        step a round trip on the send path (a link fault is :class:`~echomq.ConnectionFailed`)."""
        nodes = [node.valkey_connection for node in self.client.get_primaries()] if self.cluster else [self.client]
        for node in nodes:
            cursor = 0
            while True:
                step = [Plain(("SCAN", cursor, "MATCH", match, "COUNT", count))]
                (reply,) = self._round_trip_on(node, step, [step[0].args])
                if isinstance(reply, Exception):
                    raise reply
                cursor, keys = reply
                yield from keys
                if not int(cursor):
                    break

    def send(self, call: Call | Plain) -> Any:
        """Send one call; its error reply is raised as the typed EchoMQ error."""
        (reply,) = self.round_trip([call])
        if isinstance(reply, Exception):
            raise reply
        return reply

    def send_many(self, calls: Sequence[Call | Plain]) -> list[Any]:
        """Pipeline ``calls``; error replies come back as exception objects."""
        return self.round_trip(calls) if calls else []

    # -- waiting on an outcome channel (the bus) ---------------------------------
    @contextmanager
    def outcome_listener(self, channel: str, *, confirm_s: float = 10.0
                         ) -> Iterator[Callable[[float | None], bytes | None]]:
        """Subscribe to a job's outcome channel (SSUBSCRIBE: the queue's slot) on a connection of
        its own and wait for the server's confirmation; yields ``wait(timeout_s)``, which returns
        the next message (``completed``, ``dead``) or None when the time runs out (None: no
        limit). A link fault is :class:`~echomq.ConnectionFailed`, as on the send path."""
        pubsub = self.client.pubsub()
        # on a cluster, read the node that serves the channel's slot (without it valkey-py's
        # cluster pub/sub polls every node once and never waits)
        node = {"target_node": self.client.get_node_from_key(channel)} if self.cluster else {}

        def wait(timeout_s: float | None, *, confirming: bool = False) -> bytes | None:
            try:
                got = pubsub.get_sharded_message(timeout=timeout_s, **node)
            except TRANSPORT_ERRORS as exc:
                raise link_failed(exc, f"a wait on {channel}") from exc
            if confirming and not got:
                raise errors.ConnectionFailed(f"no confirmation of SSUBSCRIBE {channel} within {timeout_s:g} s")
            if got and got["type"] == "sunsubscribe":
                raise slot_moved(channel)
            return got["data"] if got and got["type"] == "smessage" else None

        try:
            try:
                pubsub.ssubscribe(channel)
            except TRANSPORT_ERRORS as exc:
                raise link_failed(exc, f"SSUBSCRIBE {channel}") from exc
            wait(confirm_s, confirming=True)
            yield wait
        finally:
            pubsub.close()

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_op(connection: Connection, op: Generator[Sequence[Call | Plain], list[Any], T], on: Keyspace | None = None
           ) -> T:
    """Drive an operation (a generator of round trips, as ``QueueCore``'s): each round trip it yields
    goes on the send path (``on``: the queue it serves, whose node takes a keyless TIME on a
    cluster) and its replies go back in; its return value is the answer."""
    try:
        request = next(op)
        while True:
            request = op.send(connection.round_trip(request, on=on))
    except StopIteration as done:
        return done.value


def slot_moved(channel: str | bytes) -> errors.ConnectionFailed:
    """The server ended a subscription we did not end: the channel's slot left the node (a failover
    made it a replica, or a migration), so the word would never come there."""
    name = channel.decode(errors="replace") if isinstance(channel, bytes) else channel
    return errors.ConnectionFailed(f"the server unsubscribed {name}: its slot left the node (a failover or a "
                                   "slot migration)")


def unbranded(wire: str) -> errors.BrandError:
    return errors.BrandError(
        f"the node is not branded for EchoMQ: {VERSION_KEY} is missing from the database the URL names "
        f"(each database carries its own brand). Brand it once with `emq brand URL --wire {wire}` "
        f"(or echomq.brand_node(client, {wire.replace('|', ' or ')}))"
    )


def branded_wire(client: valkey.Valkey) -> int:
    """The wire the node's brand names; BrandError when it is unbranded or carries another brand."""
    return wire_of_brand(read_brand(client))


def cluster_mode(hello: Any) -> bool:
    """Whether a HELLO reply (a flat list on RESP2, a map on RESP3) says the node runs in cluster mode."""
    fields = hello if isinstance(hello, dict) else dict(zip(hello[::2], hello[1::2]))
    mode = fields.get(b"mode", fields.get("mode"))
    return (mode.decode() if isinstance(mode, bytes) else mode) == "cluster"


def serves_cluster(client: valkey.Valkey) -> bool:
    """Whether the node runs in cluster mode: HELLO's ``mode`` (one round trip, which also proves
    the link). HELLO is a connection command every ACL user has unless taken away; INFO is
    @dangerous. A node that refuses HELLO is taken as standalone."""
    try:
        return cluster_mode(client.execute_command("HELLO"))
    except ResponseError as exc:
        if missing_database(exc):  # not HELLO's refusal: the link's SELECT of the URL's /db failed
            raise
        return False


def missing_database(exc: ResponseError) -> bool:
    """``exc`` is the node's refusal of the SELECT a link sends for the URL's ``/db``."""
    return "DB index" in str(exc)


def opening_refused(url: str, exc: ResponseError | InvalidResponse) -> errors.ConnectionFailed | None:
    """What a link to ``url`` that failed as it opened means to the user (both clients ask): what
    answers does not speak RESP (an HTTP server, say), or the node lacks the URL's ``/db``. None
    for a refusal of a command, which is not the link's."""
    if isinstance(exc, InvalidResponse):
        return errors.ConnectionFailed(f"what answers at {redact_url(url)} is not Valkey or Redis ({exc}): point "
                                       "the URL at a Valkey node's port")
    if missing_database(exc):
        return errors.ConnectionFailed(f"{redact_url(url)} names a database this node does not have ({exc}): use "
                                       "/0, or a number below the node's `databases` setting")
    return None


def open_client(url: str, cluster: bool | str = "auto", **client_options: Any) -> valkey.Valkey | ValkeyCluster:
    """A client of the node at ``url`` that has answered once: an :class:`EchoCluster` when
    ``cluster`` is True, or ``"auto"`` and the node runs in cluster mode; else a plain client.
    Raises ConfigurationError for a bad URL, ConnectionFailed when nothing answers."""
    if cluster not in (True, False, "auto"):
        raise errors.ConfigurationError(f"bad cluster {cluster!r}: True, False or 'auto'")
    client_options.setdefault("encoding_errors", ID_ENCODING)
    if cluster is True and not url.startswith("rediss:"):  # TLS: valkey-py puts its own class in (a limit)
        client_options.setdefault("connection_class", packing_surrogates(valkey.Connection))
    try:
        client: valkey.Valkey | ValkeyCluster = (
            EchoCluster.from_url(url, **client_options) if cluster is True
            else valkey.Valkey.from_url(url, **client_options))
    except ValueError as exc:
        raise errors.ConfigurationError(f"bad URL {redact_url(url)!r}: {exc}; use redis://host:port or "
                                        "rediss://host:port") from exc
    except TRANSPORT_ERRORS as exc:
        # the cluster client reads the slot map as it is built: no node, no client
        raise errors.ConnectionFailed(f"no Valkey Cluster answers at {redact_url(url)}: {exc}") from exc
    if not isinstance(client, ValkeyCluster):
        pool = client.connection_pool
        pool.connection_class = packing_surrogates(pool.connection_class)
    try:
        if cluster == "auto" and serves_cluster(client):  # HELLO is the link check here
            client.close()
            return open_client(url, True, **client_options)
        if cluster is False:
            client.ping()  # the cluster client read the slot map as it was built
    except TRANSPORT_ERRORS as exc:
        client.close()
        raise errors.ConnectionFailed(f"no Valkey answers at {redact_url(url)}: {exc}") from exc
    except (ResponseError, InvalidResponse) as exc:
        client.close()
        refused = opening_refused(url, exc)
        if refused is None:
            raise
        raise refused from exc
    return client


def connect(
    url: str = "redis://127.0.0.1:6379", *, wire: int | str = "auto", cluster: bool | str = "auto",
    **client_options: Any,
) -> Connection:
    """Open a connection on ``wire`` 4 (scripts) or 6 (trafikey) after checking the node.

    ``wire="auto"``, the default, takes the wire the node is branded for (as every ``emq``
    command does); every check still runs. Name the wire to refuse a node branded for the other.

    ``url`` takes the valkey-py forms: ``redis://``, ``rediss://`` (TLS),
    ``redis://user:password@host:port/db``, ``unix://``. ``cluster="auto"`` (the default)
    asks the node (HELLO, in place of a PING: no extra round trip) and, on a Valkey Cluster
    node, opens the cluster client: the URL names any one node and the client discovers the
    others. ``cluster=True`` or ``False`` says so without asking (False on a cluster node
    reaches only the queues that node holds; the others answer MOVED).
    """
    client = open_client(url, cluster, **client_options)
    try:
        chosen = branded_wire(client) if wire == "auto" else wire
        return Connection(client, chosen)
    except TRANSPORT_ERRORS as exc:
        client.close()
        raise errors.ConnectionFailed(f"no Valkey answers at {redact_url(url)}: {exc}") from exc
    except BaseException:
        client.close()
        raise
