"""The connection: one Valkey client, one wire, and the dispatch of every verb.

* wire 4 (scripts): the node's brand must be ``echomq:4.0.0``; every verb is
  EVALSHA of its script, loaded once; NOSCRIPT reloads and retries once.
* wire 6 (trafikey): EMQ.VERSION must list the fourteen job-core tokens and the
  brand must already be ``echomq:6.0.0``; each verb travels as its ``EMQ.*``
  command with the script's numkeys, KEYS and ARGV unchanged; the two declared
  reads stay EVALSHA.

The connection never writes the brand: that is the admin step in ``admin.py``.

On a Valkey Cluster (``connect(url, cluster=True)``) the client is an
:class:`EchoCluster`: every verb goes to the primary of its queue's slot (the
keys share the queue's hashtag), the scripts are loaded on every primary, the
wire-6 handshake asks every primary, and pipelines split by node as valkey-py's
cluster pipeline does. A call whose keys span two slots reaches the server and is
refused ``CROSSSLOT`` there.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import valkey
from valkey.cluster import ClusterPipeline, ValkeyCluster
from valkey.exceptions import NoScriptError, ResponseError

from . import errors
from .keys import VERSION_KEY, Keyspace
from .verbs import BY_NAME, JOB_CORE_TOKENS, SCRIPTED, Verb

BRANDS = {4: b"echomq:4.0.0", 6: b"echomq:6.0.0"}

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


def read_brand(client: valkey.Valkey) -> bytes | None:
    """The node's brand; a ``{emq}:version`` of another type is no brand (BrandError, not WRONGTYPE)."""
    try:
        return client.get(VERSION_KEY)
    except ResponseError as exc:
        refusal = as_refusal(exc)
        if isinstance(refusal, errors.WrongType):
            raise errors.BrandError(
                f"the node's {VERSION_KEY} is not a string, so it carries no EchoMQ brand: "
                "the key belongs to something else; use another node"
            ) from exc
        raise refusal from exc


@dataclass(frozen=True)
class Script:
    verb: Verb
    source: bytes
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source).hexdigest())


def load_scripts(verbs: Iterable[Verb]) -> dict[str, Script]:
    return {verb.name: Script(verb, verb.script_path.read_bytes()) for verb in verbs}


@dataclass(frozen=True)
class Call:
    """One verb call, built once and sendable on either wire."""

    verb: Verb
    keys: tuple[str, ...]
    argv: tuple[Any, ...]


def build_call(verb_name: str, keyspace: Keyspace, argv: Sequence[Any]) -> Call:
    verb = BY_NAME[verb_name]
    return Call(verb, tuple(keyspace.key(suffix) for suffix in verb.keys), tuple(argv))


class _RouteByFirstKey:
    """Route a call that carries numkeys (EVALSHA, every ``EMQ.*`` verb) by its first key.

    valkey-py would ask the server for an ``EMQ.*`` command's keys on every call
    (COMMAND GETKEYS, a second round trip) and refuses mixed-slot EVALSHA itself;
    every key of one queue shares its hashtag, so the first key names the slot,
    and a call mixing two queues is left for the server to refuse (CROSSSLOT).
    """

    def determine_slot(self, *args: Any) -> int:
        name = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        name = name.upper()
        at = 2 if name in ("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO") else 1 if name.startswith("EMQ.") else None
        if at is not None and len(args) > at + 1 and int(args[at]) > 0:
            return self.keyslot(args[at + 1])  # type: ignore[attr-defined]
        return super().determine_slot(*args)  # type: ignore[misc]


class EchoClusterPipeline(_RouteByFirstKey, ClusterPipeline):
    pass


class EchoCluster(_RouteByFirstKey, ValkeyCluster):
    """valkey-py's cluster client, routing EchoMQ's verbs by their queue's slot."""

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        pipe.__class__ = EchoClusterPipeline  # same state, our routing; avoids copying its constructor
        return pipe


class Connection:
    """A client bound to one wire. Build it with :func:`connect`.

    ``client`` is a ``valkey.Valkey`` or, on a cluster, an :class:`EchoCluster`.
    """

    def __init__(self, client: valkey.Valkey | ValkeyCluster, wire: int) -> None:
        if wire not in BRANDS:
            raise errors.ConfigurationError(f"bad wire {wire!r}: EchoMQ speaks wire 4 (scripts) or wire 6 (trafikey)")
        self.client = client
        self.wire = wire
        self.tokens: frozenset[str] = frozenset()  #: wire 6: the tokens every node's EMQ.VERSION lists
        self.scripts = load_scripts(v for v in SCRIPTED if wire == 4 or v.read_only)
        self._handshake()

    # -- opening ------------------------------------------------------------
    def _handshake(self) -> None:
        if self.wire == 6:
            self._require_tokens()
        self._require_brand()
        self.load_scripts()

    @property
    def cluster(self) -> bool:
        return isinstance(self.client, ValkeyCluster)

    def _require_tokens(self) -> None:
        try:
            if self.cluster:  # every primary must serve the verbs, not just one
                listed = self.client.execute_command("EMQ.VERSION", target_nodes=ValkeyCluster.PRIMARIES)
            else:
                listed = {"node": self.client.execute_command("EMQ.VERSION")}
        except ResponseError as exc:
            raise errors.WireError(
                "wire 6 needs the trafikey module on the node, and EMQ.VERSION failed "
                f"({exc}); start valkey-server with --loadmodule $(emq module-path), or connect with wire=4"
            ) from exc
        common: set[str] | None = None
        for node, reply in listed.items():
            tokens = set(reply.decode().split())
            missing = [token for token in JOB_CORE_TOKENS if token not in tokens]
            if missing:
                raise errors.WireError(f"the trafikey on {node} lacks job-core tokens {missing}; upgrade the module")
            common = tokens if common is None else common & tokens
        self.tokens = frozenset(common or ())

    def _require_brand(self) -> None:
        brand = read_brand(self.client)
        want = BRANDS[self.wire]
        if brand == want:
            return
        if brand is None:
            raise unbranded(str(self.wire))
        raise errors.BrandError(
            f"the node is branded {brand.decode(errors='replace')!r}, not {want.decode()!r}: it serves the other "
            f"wire; connect with wire={4 if self.wire == 6 else 6} or use another node"
        )

    def load_scripts(self) -> None:
        # on a cluster valkey-py sends SCRIPT LOAD to every primary
        for script in self.scripts.values():
            self.client.script_load(script.source)

    def serves(self, verb_name: str) -> bool:
        """Does this connection carry ``verb_name``? Wire 4: every scripted verb; wire 6: a verb
        whose tokens EMQ.VERSION lists (the job core always, a later verb when the module has it)."""
        verb = BY_NAME[verb_name]
        if self.wire == 4:
            return verb.name in self.scripts
        return verb.read_only or all(token in self.tokens for token in verb.tokens)

    # -- sending --------------------------------------------------------------
    def command_args(self, call: Call) -> tuple[Any, ...]:
        """The command that carries ``call`` on this connection's wire."""
        verb = call.verb
        if self.wire == 6 and not verb.read_only:
            lacking = [token for token in verb.tokens if token not in self.tokens]
            if lacking:  # a verb added after the job core (SPEC §9.4): only when the module lists it
                raise errors.UnsupportedOnWire(
                    f"{verb.command} is not served by this node's trafikey (EMQ.VERSION lacks {' '.join(lacking)}); "
                    "upgrade the module"
                )
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

    def send(self, call: Call) -> Any:
        args = self.command_args(call)
        try:
            try:
                return self.client.execute_command(*args)
            except NoScriptError:
                self.load_scripts()  # SCRIPT FLUSH or a restart without the cache: load once, retry once
                return self.client.execute_command(*args)
        except ResponseError as exc:
            raise as_refusal(exc) from exc

    def send_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipeline ``calls`` (no transaction); error replies come back as exception objects."""
        return self._send_many(calls)[0]

    def send_many_and_read_pause(self, calls: Sequence[Call], keyspace: Keyspace) -> tuple[list[Any], bool]:
        """``send_many(calls)`` with the scripted claim's pause read (SPEC §4) in the same round
        trip, after them: (the calls' replies, paused). As :meth:`paused`, any non-nil reply,
        an error reply included, reads as paused."""
        results, pause = self._send_many(calls, pause_of=keyspace)
        return results, pause is not None

    def _send_many(self, calls: Sequence[Call], *, pause_of: Keyspace | None = None) -> tuple[list[Any], Any]:
        results = self._pipeline(calls, pause_of=pause_of)
        pause = results.pop() if pause_of is not None else None
        retry = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if retry:
            self.load_scripts()  # a NOSCRIPT reply means the call did not run: resending is safe
            for i, result in zip(retry, self._pipeline([calls[i] for i in retry])):
                results[i] = result
        return [as_refusal(r) if isinstance(r, ResponseError) else r for r in results], pause

    def _pipeline(self, calls: Sequence[Call], *, pause_of: Keyspace | None = None) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*self.command_args(call))
        if pause_of is not None:
            pipe.hget(pause_of.meta, "paused")
        return pipe.execute(raise_on_error=False)

    # -- waiting on an outcome channel (the bus) ---------------------------------
    @contextmanager
    def outcome_listener(self, channel: str, *, confirm_s: float = 10.0) -> Iterator[Callable[[float | None], None]]:
        """Subscribe to a job's outcome channel (SSUBSCRIBE: the queue's slot) on a connection of
        its own and wait for the server's confirmation; yields ``wait(timeout_s)``, which returns
        at the next message or when the time runs out (None: no limit)."""
        pubsub = self.client.pubsub()
        # on a cluster, read the node that serves the channel's slot (without it valkey-py's
        # cluster pub/sub polls every node once and never waits)
        node = {"target_node": self.client.get_node_from_key(channel)} if self.cluster else {}
        try:
            pubsub.ssubscribe(channel)
            confirmed = pubsub.get_sharded_message(ignore_subscribe_messages=False, timeout=confirm_s, **node)
            if not confirmed:
                raise errors.ConnectionFailed(f"no confirmation of SSUBSCRIBE {channel} within {confirm_s:g} s")

            def wait(timeout_s: float | None) -> None:
                pubsub.get_sharded_message(timeout=timeout_s, **node)

            yield wait
        finally:
            pubsub.close()

    # -- the pause read of the scripted claim ----------------------------------
    def paused(self, keyspace: Keyspace) -> bool:
        """SPEC §4: any non-nil reply means paused, an error reply included; only a
        connection fault reads as not paused (and then the claim itself fails)."""
        try:
            return self.client.hget(keyspace.meta, "paused") is not None
        except ResponseError:
            return True
        except (valkey.ConnectionError, valkey.TimeoutError):
            return False

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unbranded(wire: str) -> errors.BrandError:
    return errors.BrandError(
        f"the node is not branded for EchoMQ: {VERSION_KEY} is missing. Brand it once with "
        f"`emq brand URL --wire {wire}` (or echomq.brand_node(client, {wire.replace('|', ' or ')}))"
    )


def branded_wire(client: valkey.Valkey) -> int:
    """The wire the node's brand names; BrandError when it is unbranded or carries another brand."""
    brand = read_brand(client)
    for wire, want in BRANDS.items():
        if brand == want:
            return wire
    if brand is None:
        raise unbranded("4|6")
    raise errors.BrandError(f"the node is branded {brand.decode(errors='replace')!r}, which names no EchoMQ wire")


def connect(
    url: str = "redis://127.0.0.1:6379", *, wire: int | str = 4, cluster: bool = False, **client_options: Any
) -> Connection:
    """Open a connection on ``wire`` 4 (scripts) or 6 (trafikey) after checking the node.

    ``wire="auto"`` takes the wire the node is branded for; every check still runs.

    ``url`` takes the valkey-py forms: ``redis://``, ``rediss://`` (TLS),
    ``redis://user:password@host:port/db``, ``unix://``. With ``cluster=True`` the
    URL names any one node of a Valkey Cluster; the client discovers the others.
    """
    try:
        if cluster:
            client: valkey.Valkey | ValkeyCluster = EchoCluster.from_url(url, **client_options)
        else:
            client = valkey.Valkey.from_url(url, **client_options)
    except ValueError as exc:
        raise errors.ConfigurationError(f"bad URL {url!r}: {exc}; use redis://host:port or rediss://host:port") from exc
    except (valkey.ConnectionError, valkey.TimeoutError, valkey.exceptions.ValkeyClusterException) as exc:
        # the cluster client reads the slot map as it is built: no node, no client
        raise errors.ConnectionFailed(f"no Valkey Cluster answers at {url}: {exc}") from exc
    try:
        client.ping()
    except (valkey.ConnectionError, valkey.TimeoutError, valkey.exceptions.ValkeyClusterException) as exc:
        raise errors.ConnectionFailed(f"no Valkey answers at {url}: {exc}") from exc
    return Connection(client, branded_wire(client) if wire == "auto" else wire)
