"""``emq doctor``: is this node ready for production? One verdict per check (ok, warning, error).

Deciding and reading are apart. Each ``check_*`` function decides from replies as the server
gave them (INFO sections, CONFIG GET, EMQ.VERSION, MODULE LIST, TIME, CLUSTER INFO, and the
answers of the ACL probes), so each is unit-tested from recorded replies. :func:`examine` is
the thin layer that reads the node: every primary of a cluster, read-only (the ACL probes are
queued inside a MULTI that is DISCARDed: the server checks a command's permissions as it queues
it, and runs nothing).

Checks: the server's version; trafikey (loaded, its version, its tokens against this client's);
the brand; ``maxmemory-policy`` (anything but ``noeviction`` is an error: an evicted row is a lost
job); persistence (none: a warning); the cluster's state and slot coverage; replicas and their
lag; the clock offset between this machine and the server; and the current ACL user's
permissions on the queues named.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import valkey
from valkey.cluster import ValkeyCluster
from valkey.exceptions import ResponseError

from .._client.connection import (BRANDS, WireCodec, as_refusal, open_client, plain_commands, served_tokens,
                                 wire_of_brand)
from ..errors import EchoMQError
from .._protocol.keys import SLOTS, VERSION_KEY, Keyspace, check_queue_name
from .._protocol.servers import HSETEX_VERSION, server_kind, writes_fields
from .._protocol.verbs import BY_NAME, JOB_CORE_TOKENS

#: The oldest servers SPEC §4 promises the scripts run on, and the first with hash field expiry
#: (a result waiter's count expires there: docs/spec.md §12 "Waiters").
MIN_VERSION = {"valkey": (7, 2), "redis": (7, 0)}
FIELD_EXPIRY_VERSION = {"valkey": (9, 0), "redis": (7, 4)}
#: A replica further behind than this (INFO's lag, seconds) is a warning: a failover now loses that much.
MAX_REPLICA_LAG_S = 10
#: A clock further off than this is a warning (EchoMQ's times are the server's; people read theirs).
MAX_CLOCK_OFFSET_S = 2.0
#: What the ACL probes name: a job id no job has (nothing is run, but a key must be named).
PROBE_ID = "doctor-probe"


class Level(str, enum.Enum):
    """A check's verdict; ``emq doctor`` exits 1 when any is an error."""

    OK = "ok"
    WARNING = "warning"  #: works, but something a production node should not leave so
    ERROR = "error"  #: jobs would be lost, refused or never run


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    detail: str
    node: str = ""  #: the node it read, where a cluster has several

    def as_json(self) -> dict[str, str]:
        return {**asdict(self), "level": self.level.value}


def ok(name: str, detail: str) -> Check:
    return Check(name, Level.OK, detail)


def warning(name: str, detail: str) -> Check:
    return Check(name, Level.WARNING, detail)


def error(name: str, detail: str) -> Check:
    return Check(name, Level.ERROR, detail)


# -- deciding: pure -----------------------------------------------------------------------------


def check_server(info_server: Mapping[str, Any]) -> Check:
    kind, version = server_kind(info_server)
    shown = f"{kind.capitalize()} {'.'.join(map(str, version))}"
    if version < MIN_VERSION[kind]:
        oldest = ".".join(map(str, MIN_VERSION[kind]))
        return error("server", f"{shown}: EchoMQ needs {kind.capitalize()} {oldest} or later")
    if version < FIELD_EXPIRY_VERSION[kind]:
        first = ".".join(map(str, FIELD_EXPIRY_VERSION[kind]))
        return warning("server", f"{shown}: no hash field expiry (from {kind.capitalize()} {first}), so a result "
                                 "waiter that dies stays counted and every COMPLETE/FAIL of its queue keeps telling "
                                 "(docs/results.md, Limits)")
    return ok("server", shown)


def check_results(info_server: Mapping[str, Any], brand: bytes | None) -> Check:
    """Where the node's queues keep their completed records (docs/spec.md §12): fields of each
    queue's hash ``done`` where it writes them (trafikey; the scripts on a server with HSETEX),
    else a key ``done:<id>`` each; a queue's own switch (``emq results-layout``) may keep keys."""
    try:
        wire = wire_of_brand(brand) if brand is not None else 4
    except EchoMQError:
        wire = 4
    switch = "; a queue switched to record (emq results-layout) keeps a key done:<id> each"
    if writes_fields(wire, info_server):
        how = "trafikey" if wire == 6 else "the server has HSETEX"
        return ok("results", f"completed records are fields of each queue's hash done, each with its own expiry "
                             f"({how}){switch}")
    kind, version = server_kind(info_server)
    first = ".".join(map(str, HSETEX_VERSION[kind]))
    return ok("results", f"completed records are a key done:<id> each: {kind.capitalize()} before {first} has no "
                         "hash field expiry in one command (HSETEX); Valkey 9 keeps them as fields, for less")


def check_trafikey(version_reply: bytes | Exception, modules: Sequence[Any] | Exception, brand: bytes | None
                   ) -> Check:
    """``version_reply``: EMQ.VERSION's answer (an error: not loaded); ``modules``: MODULE LIST's."""
    if isinstance(version_reply, Exception):
        if brand == BRANDS[6]:
            return error("trafikey", "not loaded, but the node is branded for wire 6: every wire-6 call fails; start "
                                     "valkey-server with --loadmodule $(emq module-path)")
        return ok("trafikey", "not loaded: the node serves wire 4 (the scripts)")
    tokens = version_reply.decode().split()
    missing = [token for token in JOB_CORE_TOKENS if token not in tokens]
    version = module_version(modules)
    if missing:
        return error("trafikey", f"{version} lacks the job-core tokens {missing}: upgrade the module")
    known = client_tokens()
    older = [token for token in known if token not in tokens]
    newer = [token for token in tokens if token not in known]
    if older:
        return warning("trafikey", f"{version}, older than this client: it lacks {older} (their fallbacks run); "
                                   "upgrade the module")
    return ok("trafikey", f"{version}, every token this client uses" + (f" (and {newer}, newer)" if newer else ""))


def client_tokens() -> list[str]:
    """Every capability token this client can use, in the verb table's order."""
    found: list[str] = []
    for verb in BY_NAME.values():
        for token in (*verb.tokens, *(token for _, token in verb.late)):
            if token not in found:
                found.append(token)
    return found


def module_version(modules: Sequence[Any] | Exception) -> str:
    """trafikey's version as MODULE LIST gives it (a list of flat name/value lists)."""
    if isinstance(modules, Exception):
        return f"trafikey (version unread: MODULE LIST answered {modules})"
    for entry in modules:
        fields = entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2]))
        name = fields.get(b"name", fields.get("name"))
        if name in (b"trafikey", "trafikey"):
            return f"trafikey {module_release(int(fields.get(b'ver', fields.get('ver', 0))))}"
    return "trafikey"


#: What every trafikey before 0.2.0 answered as its MODULE LIST version.
UNNUMBERED = 1


def module_release(number: int) -> str:
    """trafikey's MODULE LIST version as the package's version it was built with: major·10000 +
    minor·100 + patch (trafikey/src/version.rs), as Valkey's modules number theirs."""
    if number == UNNUMBERED:
        return f"before 0.2.0 (MODULE LIST version {number})"
    return f"{number // 10_000}.{number // 100 % 100}.{number % 100}"


def check_brand(brand: bytes | Exception | None) -> Check:
    if isinstance(brand, Exception):
        return error("brand", str(brand))
    if brand is None:
        return error("brand", f"not branded ({VERSION_KEY} is missing): brand it once, emq brand URL --wire 4|6")
    try:
        wire = wire_of_brand(brand)
    except EchoMQError as exc:
        return error("brand", str(exc))
    return ok("brand", f"{brand.decode()}: wire {wire}")


def check_eviction(policy: str | Exception) -> Check:
    if isinstance(policy, Exception):
        return warning("eviction", f"maxmemory-policy unread (CONFIG GET answered {policy}): it must be noeviction")
    if policy != "noeviction":
        return error("eviction", f"maxmemory-policy is {policy}: an evicted row or set is a lost job; "
                                 "CONFIG SET maxmemory-policy noeviction (and in the node's config file)")
    return ok("eviction", "maxmemory-policy noeviction: a full node refuses writes, it never drops a job")


def check_persistence(info_persistence: Mapping[str, Any], config: Mapping[str, str] | Exception) -> Check:
    """From INFO persistence, and CONFIG GET appendfsync and save (an error: unread)."""
    if int(info_persistence.get("aof_enabled", 0)):
        fsync = config.get("appendfsync", "?") if not isinstance(config, Exception) else "?"
        if fsync == "no":
            return warning("persistence", "AOF with appendfsync no: the OS decides when it reaches the disk, so a "
                                          "machine crash may lose more than the last second")
        return ok("persistence", f"AOF, appendfsync {fsync}")
    save = "" if isinstance(config, Exception) else config.get("save", "")
    if save.strip():
        return warning("persistence", f"RDB snapshots only (save {save}): a crash loses every write since the "
                                      "last snapshot; appendonly yes keeps them")
    return warning("persistence", "none: a restart loses every job; appendonly yes (emq server: --dir D)")


def check_cluster(cluster_info: Mapping[str, Any] | None) -> Check:
    """From CLUSTER INFO (None: the node is standalone)."""
    if cluster_info is None:
        return ok("cluster", "standalone")
    state = str(cluster_info.get("cluster_state"))
    assigned, served = int(cluster_info.get("cluster_slots_assigned", 0)), int(cluster_info.get("cluster_slots_ok", 0))
    shape = f"{cluster_info.get('cluster_size')} primaries, {served} of {SLOTS} slots served"
    if state != "ok" or assigned != SLOTS or served != SLOTS:
        return error("cluster", f"state {state}, {assigned} slots assigned, {shape}: a queue on a slot nobody serves "
                                "is refused (CLUSTERDOWN)")
    return ok("cluster", f"state ok, {shape}")


def replicas_of(info_replication: Mapping[str, Any]) -> list[dict[str, Any]]:
    """INFO replication's ``slaveN`` entries (valkey-py parses each to a dict)."""
    return [value for key, value in sorted(info_replication.items())
            if re.fullmatch(r"slave\d+", key) and isinstance(value, dict)]


def check_replicas(info_replication: Mapping[str, Any]) -> Check:
    if info_replication.get("role") != "master":
        primary = f"{info_replication.get('master_host')}:{info_replication.get('master_port')}"
        return error("replicas", f"this node is a replica of {primary}: point --url at the primary")
    replicas = replicas_of(info_replication)
    if not replicas:
        return warning("replicas", "none: losing this node loses its jobs (a replica and a failover keep them)")
    behind = [f"{r.get('ip')}:{r.get('port')} ({r.get('state')}, lag {r.get('lag')} s)" for r in replicas
              if r.get("state") != "online" or int(r.get("lag", 0)) > MAX_REPLICA_LAG_S]
    if behind:
        return warning("replicas", f"{len(replicas)}, behind: {', '.join(behind)}: a failover now loses what they lack")
    return ok("replicas", f"{len(replicas)} online, lag at most {max(int(r.get('lag', 0)) for r in replicas)} s")


def check_clock(sent_s: float, server_time: tuple[int, int], received_s: float) -> Check:
    """``server_time``: TIME's (seconds, microseconds), read between ``sent_s`` and ``received_s``
    (this machine's clock)."""
    offset = server_time[0] + server_time[1] / 1e6 - (sent_s + received_s) / 2
    shown = f"the server's clock is {offset:+.3f} s from this machine's (±{(received_s - sent_s) / 2:.3f} s)"
    if abs(offset) > MAX_CLOCK_OFFSET_S:
        return warning("clock", f"{shown}: EchoMQ's times are the server's, so the times it shows and this "
                                "machine's logs disagree; set both clocks by NTP")
    return ok("clock", shown)


def check_acl(queue: str, user: str, refused: Mapping[str, str | None]) -> Check:
    """``refused``: each probe's label and the server's refusal as MULTI queued it (None: allowed)."""
    denied = {label: why for label, why in refused.items() if why is not None}
    tell = "SPUBLISH outcome"
    if not denied:
        return ok(f"acl {queue}", f"user {user} may run every verb on queue {queue}")
    unavailable = [label for label, why in denied.items() if not why.startswith("NOPERM")]
    if unavailable:
        return warning(f"acl {queue}", "not checked: " + ", ".join(f"{label} ({denied[label]})" for label in unavailable))
    if list(denied) == [tell]:
        return warning(f"acl {queue}", f"user {user} may not publish on emq:{{{queue}}}:outcome:*: settles tell "
                                       "no result waiter (grant &emq:{{q}}:outcome:*)")
    return error(f"acl {queue}", f"user {user} is refused {', '.join(label for label in denied if label != tell)} "
                                 f"on queue {queue}: grant ~emq:{{{queue}}}:* and the verbs' commands")


def acl_probes(queue: str, wire: int, tokens: frozenset[str], fields: bool | None = True
               ) -> dict[str, tuple[Any, ...]]:
    """The commands whose permissions make a queue work on ``wire``, by label: the verbs as they
    travel (their declared keys), and the keys they derive (checked as they run, so probed here
    with plain commands of the same kind). ``fields``: whether the node keeps completed records as
    fields (:func:`~echomq._protocol.servers.writes_fields`; False: no HSETEX to probe)."""
    keys, codec = Keyspace(queue), WireCodec(wire)
    codec.tokens = tokens
    calls = {"enqueue": (PROBE_ID, b"", 0), "claim": (30_000,), "complete": (PROBE_ID, 1),
             "fail": (PROBE_ID, 1, "probe", 1, 0), "stalled_check": (1, 1), "promote": (1,), "counts": ()}
    probes = {verb: codec.command_args(BY_NAME[verb].build(keys, *argv)) for verb, argv in calls.items()}
    row, meta = keys.job(PROBE_ID), keys.meta
    probes.update({
        "the job rows": ("HSET", row, "state", "pending"),
        "meta": ("HINCRBY", meta, "waiters", 0),
        "the waiter count's expiry": ("HEXPIRE", meta, 30, "FIELDS", 1, "waiters"),
        "the totals": ("HINCRBY", keys.key("metrics:completed"), "count", 0),
        "the completed records": ("HSET", keys.done(PROBE_ID), "result", ""),
        **({"the completed records' hash": ("HSETEX", keys.done_hash, "PXAT", 1, "FIELDS", 1, PROBE_ID, "")}
           if fields is not False else {}),
        "the wake marker": ("ZADD", keys.wake, 0, "w"),
        "SPUBLISH outcome": ("SPUBLISH", keys.outcome(PROBE_ID), ""),
    })
    return probes


def verdict(checks: Sequence[Check]) -> int:
    """``emq doctor``'s exit status: 1 when any check is an error."""
    return 1 if any(check.level is Level.ERROR for check in checks) else 0


# -- reading the node: the thin layer ---------------------------------------------------------------


def answered(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(...)``'s reply, or the server's refusal as a typed exception (returned, not raised)."""
    try:
        return call(*args, **kwargs)
    except ResponseError as exc:
        return as_refusal(exc)


def primaries(client: valkey.Valkey | ValkeyCluster) -> list[tuple[str, valkey.Valkey]]:
    """(name, a plain client) of every node that serves writes: the node itself, or each primary."""
    if isinstance(client, ValkeyCluster):
        return [(node.name, node.valkey_connection) for node in client.get_primaries()]
    return [("", client)]


def examine_node(node: valkey.Valkey, brand: bytes | None) -> list[Check]:
    """The checks one node answers for itself."""
    info = answered(node.info, "everything")
    config = answered(node.config_get, "*")
    policy = config if isinstance(config, Exception) else config.get("maxmemory-policy", "?")
    sent = time.time()
    server_time = answered(node.time)
    received = time.time()
    checks = [check_trafikey(answered(node.execute_command, "EMQ.VERSION"),
                             answered(node.execute_command, "MODULE", "LIST"), brand),
              check_eviction(policy)]
    if isinstance(info, Exception):  # INFO is @dangerous: a restricted user may not read it
        checks += [warning(name, f"unread: INFO answered {info}; run emq doctor as a user allowed INFO")
                   for name in ("server", "results", "persistence", "replicas")]
    else:
        checks = [check_server(info), check_results(info, brand), *checks,
                  check_persistence(info, config), check_replicas(info)]
    checks.append(warning("clock", f"unread: TIME answered {server_time}") if isinstance(server_time, Exception)
                  else check_clock(sent, server_time, received))
    return checks


def refused_in_multi(node: valkey.Valkey, commands: Mapping[str, tuple[Any, ...]]) -> dict[str, str | None]:
    """Each command's refusal as MULTI queues it (None: queued, so permitted), then DISCARD: the
    server checks a command's ACL as it queues it and runs nothing of a discarded MULTI."""
    link = node.connection_pool.get_connection("MULTI")
    try:
        link.send_command("MULTI")
        link.read_response()
        answers: dict[str, str | None] = {}
        for label, command in commands.items():
            link.send_command(*command)
            try:
                link.read_response()
                answers[label] = None
            except ResponseError as exc:
                answers[label] = str(as_refusal(exc))
        link.send_command("DISCARD")
        link.read_response()
        return answers
    except BaseException:
        link.disconnect()  # out of step with its replies, or still inside the MULTI
        raise
    finally:
        node.connection_pool.release(link)


def examine_acl(client: valkey.Valkey | ValkeyCluster, queue: str, wire: int, tokens: frozenset[str]) -> Check:
    check_queue_name(queue)
    node = (client.get_node_from_key(Keyspace(queue).pending).valkey_connection
            if isinstance(client, ValkeyCluster) else client)
    user = answered(node.execute_command, "ACL", "WHOAMI")
    name = "(the current user)" if isinstance(user, Exception) else repr(user.decode())
    info = answered(node.info, "server")
    fields = writes_fields(wire, None if isinstance(info, Exception) else info)
    try:
        refused = refused_in_multi(node, acl_probes(queue, wire, tokens, fields))
    except ResponseError as exc:  # MULTI itself refused
        return warning(f"acl {queue}", f"not checked: {as_refusal(exc)} (the check queues the verbs in a MULTI)")
    return check_acl(queue, name, refused)


def examine_url(url: str, queues: Sequence[str] = (), cluster: bool | str = "auto") -> list[Check]:
    """:func:`examine` of the node at ``url`` (``emq doctor``)."""
    with open_client(url, cluster) as client:
        return examine(client, queues)


def examine(client: valkey.Valkey | ValkeyCluster, queues: Sequence[str] = ()) -> list[Check]:
    """Every check of the node behind ``client`` (each primary of a cluster), read-only. A link
    fault is :class:`~echomq.ConnectionFailed` (the checks need no brand, so no send path)."""
    with plain_commands("the doctor's reads"):
        return read_checks(client, queues)


def read_checks(client: valkey.Valkey | ValkeyCluster, queues: Sequence[str]) -> list[Check]:
    brand = answered(client.get, VERSION_KEY)
    found = primaries(client)
    checks: list[Check] = []
    for name, node in found:
        for check in examine_node(node, None if isinstance(brand, Exception) else brand):
            checks.append(Check(check.name, check.level, check.detail, name if len(found) > 1 else ""))
    checks.append(check_brand(brand))
    checks.append(check_cluster(client.cluster_info() if isinstance(client, ValkeyCluster) else None))
    return checks + acl_checks(client, queues, brand)


def acl_checks(client: valkey.Valkey | ValkeyCluster, queues: Sequence[str], brand: bytes | Exception | None
               ) -> list[Check]:
    if not queues:
        return []
    try:
        wire = wire_of_brand(None if isinstance(brand, Exception) else brand)
        tokens = served_tokens(client) if wire == 6 else frozenset()
    except EchoMQError as exc:
        return [warning(f"acl {queue}", f"not checked: {exc}") for queue in queues]
    return [examine_acl(client, queue, wire, tokens) for queue in queues]
