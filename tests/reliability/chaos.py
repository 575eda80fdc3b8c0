"""A bounded chaos run with a ledger: workers SIGKILLed and frozen, the server crashed
and restarted from its AOF, and at the end every enqueued id accounted for.

    python -m tests.reliability.chaos --wire 6 --jobs 2000            # a small run
    python -m tests.reliability.chaos --wire 6 --long                 # 100k jobs
    python -m tests.reliability.chaos --wire 4 --fsync everysec --power-loss
    python -m tests.reliability.chaos --wire 6 --replica --failovers 2     # failovers to a replica
    python -m tests.reliability.chaos --wire 6 --cluster --queues 6        # a 3-primary cluster

Processes: this one (producer, sweeper, chaos controller, checker) and N worker
processes (``chaos.py worker``). Everyone appends one line per event to its own
ledger file with ``os.write`` (unbuffered: a SIGKILLed worker loses at most the
line it was writing). Times are CLOCK_MONOTONIC ns, shared by all processes.

    E t q id ok|conn              producer: enqueue acknowledged / connection fault
    C t q id token                worker: claim granted (reply received)
    S t q id token verb           worker: settle about to be sent
    R t q id token verb outcome   worker: settle answered (ok:<reply> lost err:<code> conn abandoned)
    G t q id token                worker: a claim returned a row without payload (a phantom)
    V t q run verdict id          sweeper: STALLED.CHECK verdict (rec exe dead); t = when it was sent
    A t q id token                controller: a lease that crossed the restart just made (in active
                                  after the restart with a deadline granted before it)
    K/Z/U t pid                   controller: SIGKILL / SIGSTOP / SIGCONT of a worker
    D t crash|power|failover      controller: a node goes down (a power cut kills every worker too)
    P t run_ids                   controller: up again (new run_id), or the replica promoted
    L t bytes                     controller: AOF bytes cut by the power-loss model
    F t 0|1 queues                controller, under everysec, just before a crash: 1 if the node's
                                  background fsync was still running (its AOF may hold writes back)

The checker (:func:`check`) proves, from the ledgers and a dump of the final keyspace:
every id is completed (no row, no set, a complete was sent for it) or dead (row
``state dead``, in dead only, ``last_error`` set); none is lost (but see ``F``), none sits in two
sets, no row disagrees with its set; no settle was accepted with a stale token (a
token older than one already granted); and on wire 6 every expiry that crossed a
restart was exempt and every other one counted.

Under everysec a crash of the process can lose acknowledged writes too: while the
background fsync of the last second is still running, Valkey holds new writes back from the
AOF for up to 2 s and answers them all the same (``flushAppendOnlyFile`` in aof.c). A slow
disk does that. The controller reads ``aof_pending_bio_fsync`` just before each crash (``F``);
after a crash that found it running, an id whose enqueue was acknowledged in the 2.5 s before
it and is gone is counted as held back (``regressions``), not lost, and the checks a lost
claim or settle can break are measured, not judged, as for a power cut.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import valkey

import echomq
from echomq import EmbeddedServer, Queue, connect, errors
from echomq._protocol.serializers import JSON

ROOT = Path(__file__).resolve().parents[2]
# the send path raises ConnectionFailed for a link fault; the plain clients here (the ledger's
# reads, the restarts) still raise valkey-py's own
FATAL = (errors.ConnectionFailed, valkey.ConnectionError, valkey.TimeoutError,
         valkey.exceptions.ValkeyClusterException, valkey.exceptions.ClusterDownError,
         valkey.exceptions.TryAgainError)  # + WrongNode


# no AOF rewrite mid-run (the power-loss model cuts the incr file); a replica's full sync starts at once
EXTRA = ("--auto-aof-rewrite-percentage", "0", "--repl-diskless-sync-delay", "0")


NOT_NOW = ("READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")


class WrongNode(Exception):
    """The node answered READONLY (a replica now sits at the old primary's address), LOADING, or a
    cluster node is between states (CLUSTERDOWN, TRYAGAIN): the call did not run."""


def checked(fn, *args, **kwargs):
    """Call ``fn``; a READONLY/LOADING refusal means this link is on the wrong node: reconnect."""
    try:
        return fn(*args, **kwargs)
    except errors.CommandRefused as exc:
        if exc.code in NOT_NOW:
            raise WrongNode(str(exc)) from exc
        raise


def wall_ms() -> int:
    """The host's clock in ms: what TIME answers on a server running here."""
    return time.time_ns() // 1_000_000


def now() -> int:
    return time.monotonic_ns()


def _raise(exc: Exception):
    raise exc


class Ledger:
    """One append-only event file per process; a line is one os.write (atomic for short lines)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lock = threading.Lock()

    def log(self, *fields: Any, t: int | None = None) -> None:
        line = (" ".join(str(f) for f in (fields[0], t or now(), *fields[1:])) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)


# ---------------------------------------------------------------------------------------------
# connecting through restarts
# ---------------------------------------------------------------------------------------------


def open_connection(url, wire: int, cluster: bool, deadline_s: float = 60.0) -> echomq.Connection:
    """Connect, polling while the server is down or loading its AOF; ``url`` may be a callable,
    read at every try (a failover names a new primary)."""
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            return connect(url() if callable(url) else url, wire=wire, cluster=cluster, socket_timeout=5)
        except errors.CommandRefused as exc:
            if exc.code not in NOT_NOW or time.monotonic() > give_up:
                raise
            time.sleep(0.02)
        except (errors.ConnectionFailed, errors.BrandError, errors.WireError, *FATAL):
            if time.monotonic() > give_up:
                raise
            time.sleep(0.02)


class Link:
    """A connection and its queues, rebuilt after a connection fault."""

    def __init__(self, url, wire: int, cluster: bool, queues: list[str]) -> None:
        # url: a string, or a callable read at every (re)connect (after a failover it names the new primary)
        self.url, self.wire, self.cluster, self.names = url, wire, cluster, queues
        self.conn: echomq.Connection | None = None
        self.queues: dict[str, Queue] = {}

    def get(self) -> dict[str, Queue]:
        if self.conn is None:
            self.conn = open_connection(self.url, self.wire, self.cluster)
            self.queues = {name: Queue(self.conn, name, serializer=JSON) for name in self.names}
        return self.queues

    def drop(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None


# ---------------------------------------------------------------------------------------------
# the worker process
# ---------------------------------------------------------------------------------------------


def worker_main(args: argparse.Namespace) -> None:
    ledger = Ledger(Path(args.ledger))
    url_file = Path(args.url)
    link = Link(lambda: url_file.read_text().strip(), args.wire, args.cluster, args.queues.split(","))
    rng = random.Random(args.seed)
    names = args.queues.split(",")
    idle = 0
    ready = False
    while True:
        try:
            queues = link.get()
            if not ready:
                ledger.log("W", os.getpid())  # connected: from now on a kill can find it holding a job
                ready = True
            job = checked(queues[names[rng.randrange(len(names))]].claim, args.lease_ms)
        except (*FATAL, WrongNode):
            link.drop()
            continue
        if job is None:
            idle += 1
            time.sleep(min(0.001 * idle, 0.01))  # an idle poll of an empty queue, not a synchronisation
            continue
        idle = 0
        ledger.log("C", job.queue, job.id, job.token)
        granted = time.monotonic()
        spec = job.payload
        if spec is None:  # a row a script minted from a ghost: no payload (SPEC §5.4)
            ledger.log("G", job.queue, job.id, job.token)
            settle(ledger, link, job, "fail", lambda q: q.fail(job, "phantom", max_attempts=1), granted, args)
            continue
        if spec.get("ms"):
            time.sleep(spec["ms"] / 1000)  # the job's work
        if spec.get("slow") and job.attempt == 1:
            overrun(link, job, args)  # its settle goes stale
        if spec.get("poison") or job.attempt <= spec.get("fail", 0):
            verb, send = "fail", lambda q: q.fail(job, "boom", max_attempts=args.max_attempts, backoff_ms=spec.get("backoff", 0))
        else:
            verb, send = "complete", lambda q: q.complete(job)
        settle(ledger, link, job, verb, send, granted, args)


def overrun(link: Link, job: echomq.Job, args) -> None:
    """A first run that overruns its lease until another worker holds the job (the sweep recovered it
    and it was claimed again: its row's token moved on, or its row is gone), at most four leases. Its
    settle is then stale for certain, the case the checker's stale-settle rule needs; a fixed
    overrun left it to chance whether anyone had claimed the job by then."""
    give_up = time.monotonic() + args.lease_ms * 4 / 1000
    time.sleep(args.lease_ms / 1000)  # the job's work, as long as its lease
    while time.monotonic() < give_up:
        try:
            row = checked(link.get()[job.queue].job, job.id)
        except (*FATAL, WrongNode):
            link.drop()
            continue
        if row is None or int(row.get("attempts", 0)) > job.attempt:
            return
        time.sleep(0.01)  # the work goes on; look again


def settle(ledger: Ledger, link: Link, job: echomq.Job, verb: str, send, granted: float, args) -> None:
    """Send one fenced settle; after a connection fault resend it with the same token.

    Wire 6 refuses a resend that comes after the sweep recovered the job (EMQSTATE, raised as
    LeaseLost). A
    script acts on any row whose token matches, a recovered one included (SPEC §5.2), so
    on wire 4 a settle is resent only while the lease surely holds; past it, the job is
    left to the sweep (at-least-once: it may run again)."""
    for attempt in range(100):
        if attempt and args.wire == 4 and time.monotonic() - granted > args.lease_ms * 0.8 / 1000:
            ledger.log("R", job.queue, job.id, job.token, verb, "abandoned")
            return
        ledger.log("S", job.queue, job.id, job.token, verb)
        try:
            reply = checked(send, link.get()[job.queue])
        except errors.LeaseLost:
            ledger.log("R", job.queue, job.id, job.token, verb, "lost")
            return
        except errors.CommandRefused as exc:
            ledger.log("R", job.queue, job.id, job.token, verb, f"err:{exc.code}")
            return
        except (*FATAL, WrongNode):
            ledger.log("R", job.queue, job.id, job.token, verb, "conn")
            link.drop()
            continue
        ledger.log("R", job.queue, job.id, job.token, verb, f"ok:{reply.value if hasattr(reply, 'value') else 1}")
        return


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------


def whole_commands(head: bytes, size: int, whole: int) -> int:
    """How much of an AOF file of ``whole`` bytes a power cut keeps when ``size`` bytes were on disk
    (``head``: the file's first ``size + 1`` bytes). A page-sized loss can split a command, which
    Valkey then refuses to load; the model keeps whole commands: a size that ends one is kept as it
    is (the next byte starts a command), one inside a command is cut back to that command's start."""
    if size <= 0 or size >= whole or head[size - 2:size + 1] == b"\r\n*":
        return max(0, min(size, whole))
    return head.rfind(b"\r\n*", 0, size) + 2


@dataclass
class Config:
    wire: int = 6
    jobs: int = 2000
    workers: int = 4
    queues: int = 3
    lease_ms: int = 1500
    max_attempts: int = 4
    max_stalled: int = 3
    fsync: str = "always"
    restarts: int = 3
    kills: int = 6
    freezes: int = 3
    power_cuts: int = 1  #: restarts that also SIGKILL every worker (their leases cross the restart)
    slow_every: int = 0  #: every n-th job overruns its lease on its first run (stale settles)
    power_loss: bool = False  #: on a crash, cut the AOF back to what was on disk a second earlier
    replica: bool = False  #: run a replica; at the end its DEBUG DIGEST must equal the primary's
    failovers: int = 0  #: of the restarts, how many are failovers to the replica (REPLICAOF NO ONE)
    abrupt: bool = False  #: fail over without letting the replica catch up first (measured, not judged)
    failover_kills_workers: bool = True  #: the old primary's site dies with it: every worker SIGKILLed
    poison_every: int = 50
    fail_every: int = 7
    work_ms: int = 2
    cluster: bool = False
    seed: int = 1
    drain_timeout_s: float = 120.0


@dataclass
class Report:
    config: dict
    seconds: float = 0.0
    enqueued: int = 0
    completed: int = 0
    dead: dict = field(default_factory=dict)
    lost: int = 0
    erased_after_running: int = 0
    in_two_sets: int = 0
    row_set_mismatch: int = 0
    unknown_keys: int = 0
    restarts: int = 0
    worker_kills: int = 0
    freezes: int = 0
    claims: int = 0
    settles_accepted: int = 0
    stale_settles_tried: int = 0
    stale_settles_accepted: int = 0
    tokens_settled_twice: int = 0
    verdicts: dict = field(default_factory=dict)
    crossed_restart_counted: int = 0  #: expiries that crossed a restart and were counted as stalls
    crossed_restart_exempt: int = 0
    counted_expiry_exempt: int = 0  #: expiries that did not cross a restart but were exempted
    duplicate_completes: int = 0
    settles_abandoned: int = 0  #: wire 4: a resend after a connection fault, past the lease: left to the sweep
    recreated: int = 0  #: an enqueue resent after a fault, once the job had completed: it runs again
    phantoms: int = 0  #: claims of a row without payload: a script turned a ghost into a row
    held_back_crashes: int = 0  #: everysec crashes that found the AOF's fsync running (writes may be held back)
    replica_digest_equal: bool | None = None
    metrics: dict = field(default_factory=dict)
    regressions: dict = field(default_factory=dict)
    violations: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


class Run:
    def __init__(self, config: Config, workdir: Path) -> None:
        self.c = config
        self.dir = workdir
        self.rng = random.Random(config.seed)
        self.tag = f"c{config.seed}"
        self.queue_names = [f"chaos{config.seed}-{i}" for i in range(config.queues)]
        self.ledger = Ledger(workdir / "main.log")
        self.workers: list[subprocess.Popen] = []
        self.frozen: set[int] = set()
        self.stop = threading.Event()
        self.restart_lock = threading.Lock()
        self.aof_sizes: list[tuple[float, Path, int]] = []
        self.server = None
        self.replica = None
        self.cluster = None
        self.url_file = workdir / "url"
        self.replicas_made = 0
        self.spawned = 0
        self.span_s = max(3.0, config.jobs / 400)  # roughly the time the workers need for the jobs

    # -- servers ------------------------------------------------------------------------------
    def start_servers(self) -> None:
        module = echomq.module_path() if self.c.wire == 6 else None
        extra = EXTRA
        if self.c.cluster:
            from echomq.local.cluster import LocalCluster

            self.cluster = LocalCluster(3, module=module, brand=self.c.wire, aof=True, appendfsync=self.c.fsync,
                                        extra_args=extra).start()
            self.url = self.cluster.url
        else:
            self.server = EmbeddedServer(module=module, brand=self.c.wire, aof=True, appendfsync=self.c.fsync,
                                         directory=self.dir / "valkey", extra_args=extra).start()
            self.url = self.server.url
            if self.c.replica:
                self.replica = self.start_replica()
        self.url_file.write_text(self.url)
        self.ledger.log("P", self.run_ids())

    def start_replica(self) -> EmbeddedServer:
        self.replicas_made += 1
        module = echomq.module_path() if self.c.wire == 6 else None
        replica = EmbeddedServer(module=module, aof=True, appendfsync=self.c.fsync, replicaof=("127.0.0.1", self.server.port),
                                 directory=self.dir / f"replica-{self.replicas_made}",
                                 extra_args=EXTRA).start()
        self.wait_synced(replica)
        return replica

    def wait_synced(self, replica: EmbeddedServer, timeout_s: float = 60.0) -> None:
        """Poll until the replica's offset equals the primary's (and the link is up)."""
        give_up = time.monotonic() + timeout_s
        with self.server.client() as primary, replica.client() as rep:
            while True:
                want = primary.info("replication")["master_repl_offset"]
                info = rep.info("replication")
                if info.get("master_link_status") == "up" and info.get("slave_repl_offset", -1) >= want:
                    return
                if time.monotonic() > give_up:
                    raise TimeoutError(f"replica did not catch up: {info} vs {want}")
                time.sleep(0.01)

    def failover(self) -> None:
        """Promote the replica (REPLICAOF NO ONE) and crash the old primary; a fresh replica
        follows the new primary. Coordinated unless --abrupt: the old primary's writes are
        paused and the replica caught up before the switch, so nothing acknowledged is lost."""
        with self.restart_lock:
            old, new = self.server, self.replica
            if self.c.failover_kills_workers:
                for proc in list(self.workers):
                    self.kill_worker(proc, respawn=False)
            if not self.c.abrupt:
                with old.client() as client:
                    client.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
                self.wait_synced(new)
            self.ledger.log("D", "failover")
            old.kill()
            down_ms = wall_ms()  # every lease the old primary granted, it granted before this
            with new.client() as client:
                client.execute_command("REPLICAOF", "NO", "ONE")
            new.replicaof = None  # a later restart of this node must come back a primary
            self.server, self.url = new, new.url
            self.url_file.write_text(self.url)
            self.ledger.log("P", self.run_ids())
            self.snapshot_crossing(new, down_ms)
            old.cleanup()
            self.replica = self.start_replica()
            if self.c.failover_kills_workers:
                for _ in range(self.c.workers):
                    self.spawn_worker()

    def digests_equal(self) -> bool:
        self.wait_synced(self.replica)
        with self.server.client() as primary, self.replica.client() as rep:
            return primary.execute_command("DEBUG", "DIGEST") == rep.execute_command("DEBUG", "DIGEST")

    def nodes(self) -> list[EmbeddedServer]:
        return self.cluster.nodes if self.cluster else [self.server]

    def run_ids(self) -> str:
        return ",".join(node.run_id().decode() for node in self.nodes())

    def restart(self, kind: str) -> None:
        """Crash one server (SIGKILL) and start it again from its AOF: a new run_id."""
        node = self.rng.choice(self.nodes())
        with self.restart_lock:
            if kind == "power":
                for proc in list(self.workers):
                    self.kill_worker(proc, respawn=False)
            if self.c.fsync == "everysec":
                self.ledger.log("F", int(self.fsync_running(node)), ",".join(self.queues_on(node)))
            self.ledger.log("D", kind)
            node.kill()
            down_ms = wall_ms()  # every lease the old run granted, it granted before this
            if self.c.power_loss:
                self.cut_aof(node)
            node.start()
            self.floor_aof(node)
            if self.cluster:
                self.cluster.wait_ok()
            self.ledger.log("P", self.run_ids())
            self.snapshot_crossing(node, down_ms)
            if kind == "power":
                for _ in range(self.c.workers):
                    self.spawn_worker()

    @staticmethod
    def fsync_running(node: EmbeddedServer) -> bool:
        """Whether the node's background AOF fsync is still running. Under everysec Valkey then
        holds new writes back from the file (up to 2 s) and still answers them: a crash now loses
        them. A write answered once this reply is read went to the file first, unless a new fsync
        starts between this read and the kill (a window of a millisecond or so)."""
        with node.client(socket_timeout=2) as client:
            return client.info("persistence").get("aof_pending_bio_fsync", 0) > 0

    def queues_on(self, node: EmbeddedServer) -> list[str]:
        if not self.cluster:
            return self.queue_names
        return [name for name in self.queue_names if self.cluster.node_for(echomq.Keyspace(name).active) is node]

    def snapshot_crossing(self, node: EmbeddedServer, down_ms: int) -> None:
        """Log the leases that crossed this restart: active members of the restarted node granted
        (deadline - lease_ms, server clock) no later than the moment the old process was dead.
        The servers run on this host, so their clock is this clock; workers may already be
        claiming on the new process, but those grants come later. The sweeper is held off
        (restart_lock) until this is read."""
        with node.client() as client:
            for name in self.queues_on(node):
                keys = echomq.Keyspace(name)
                crossed = [(member.decode(), score) for member, score in client.zrange(keys.active, 0, -1, withscores=True)
                           if score - self.c.lease_ms <= down_ms]
                if not crossed:
                    continue
                # each one's deadline again and its token, in one transaction: between the range
                # and a token read one at a time, a worker may settle the lease and another claim
                # the job on the new process, whose token would be logged as the crossing one
                read = client.pipeline(transaction=True)
                for member, _ in crossed:
                    read.zscore(keys.active, member)
                    read.hget(keys.job(member), "attempts")
                replies = read.execute()
                for (member, score), now_score, token in zip(crossed, replies[::2], replies[1::2]):
                    if now_score == score:  # still the lease that crossed (a new one ends later)
                        self.ledger.log("A", name, member, (token or b"-").decode())

    def aof_file(self, node: EmbeddedServer) -> Path | None:
        folder = node.dir / "appendonlydir"
        incr = sorted(folder.glob("*.incr.aof"), key=lambda p: p.stat().st_mtime) if folder.exists() else []
        return incr[-1] if incr else None

    def watch_aof(self) -> None:
        """Record the AOF's size over time: the model of what an fsync every second has made durable."""
        while not self.stop.is_set():
            for node in self.nodes():
                path = self.aof_file(node)
                if path is not None:
                    try:
                        self.aof_sizes.append((time.monotonic(), path, path.stat().st_size))
                    except OSError:
                        pass
            time.sleep(0.05)

    def floor_aof(self, node: EmbeddedServer) -> None:
        """What a restart loaded was on disk: forget older sizes, the next cut stops here."""
        path = self.aof_file(node)
        if path is not None:
            self.aof_sizes = [(t, p, size) for t, p, size in self.aof_sizes if p != path]
            self.aof_sizes.append((0.0, path, path.stat().st_size))

    def floor_setup(self) -> None:
        """The nodes' setup (the brand, what the workers wrote as they started) is in each AOF file
        before the first fault, and no power-loss cut goes below it: the model is a running system
        losing its last second, not a node set up a moment ago. Under everysec Valkey may hold the
        first writes back while an fsync runs: a cut to the file's size of a second before once kept
        only its SELECT, and the node came back unbranded."""
        for node in self.nodes():
            with node.client() as client:
                give_up = time.monotonic() + 10
                while client.info("persistence").get("aof_buffer_length", 0):
                    if time.monotonic() > give_up:
                        raise TimeoutError("the setup's writes stayed held back from the AOF for 10 s")
                    time.sleep(0.01)
            self.floor_aof(node)

    def cut_aof(self, node: EmbeddedServer) -> None:
        """Power loss under everysec: keep only what the file held one second before the crash."""
        path = self.aof_file(node)
        if path is None:
            return
        before = time.monotonic() - 1.0
        sizes = [size for t, p, size in self.aof_sizes if p == path and t <= before]
        if sizes:
            size, whole = sizes[-1], path.stat().st_size
            with open(path, "rb") as f:
                keep = whole_commands(f.read(size + 1), size, whole)
            cut = whole - keep
            os.truncate(path, keep)
            self.ledger.log("L", cut)

    # -- workers --------------------------------------------------------------------------------
    def spawn_worker(self) -> None:
        self.spawned += 1
        n = self.spawned
        cmd = [sys.executable, "-m", "tests.reliability.chaos", "worker", "--url", str(self.url_file), "--wire", str(self.c.wire),
               "--queues", ",".join(self.queue_names), "--lease-ms", str(self.c.lease_ms),
               "--max-attempts", str(self.c.max_attempts), "--ledger", str(self.dir / f"worker-{n}.log"),
               "--seed", str(self.rng.randrange(1 << 30))]
        if self.c.cluster:
            cmd.append("--cluster")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)
        proc.ledger = self.dir / f"worker-{n}.log"  # type: ignore[attr-defined]
        self.workers.append(proc)

    def ready_workers(self) -> list[subprocess.Popen]:
        """Workers that have connected (their ledger has a line) and are not frozen."""
        return [p for p in self.workers if p.pid not in self.frozen and p.ledger.exists() and p.ledger.stat().st_size]

    def wait_ready(self, count: int, timeout_s: float = 60.0) -> None:
        give_up = time.monotonic() + timeout_s
        while len(self.ready_workers()) < count:
            if time.monotonic() > give_up:
                raise TimeoutError(f"fewer than {count} workers connected in {timeout_s}s")
            time.sleep(0.01)

    def kill_worker(self, proc: subprocess.Popen, respawn: bool = True) -> None:
        self.ledger.log("K", proc.pid)
        proc.kill()
        proc.wait()
        self.workers.remove(proc)
        self.frozen.discard(proc.pid)
        if respawn:
            self.spawn_worker()

    # -- the producer and the sweeper -----------------------------------------------------------
    def payload(self, n: int) -> dict:
        spec: dict[str, Any] = {"n": n, "ms": self.rng.randrange(self.c.work_ms + 1)}
        if self.c.poison_every and n % self.c.poison_every == 0:
            spec["poison"] = True
        elif self.c.slow_every and n % self.c.slow_every == 1:
            spec["slow"] = True
        elif self.c.fail_every and n % self.c.fail_every == 0:
            spec["fail"] = self.rng.randrange(1, self.c.max_attempts)
            spec["backoff"] = self.rng.choice([0, 0, 20])
        return spec

    def job_id(self, n: int) -> str:
        return f"{self.tag}-{n:07d}"

    def produce(self) -> None:
        link = Link(lambda: self.url, self.c.wire, self.c.cluster, self.queue_names)
        batch = 100
        began, rate = time.monotonic(), self.c.jobs / (self.span_s * 0.8)  # admit over most of the run
        for start in range(0, self.c.jobs, batch):
            while time.monotonic() - began < start / rate and not self.stop.is_set():
                time.sleep(0.005)  # pacing the producer, so faults land among enqueues too
            ns = range(start, min(start + batch, self.c.jobs))
            todo: dict[str, list[tuple[int, dict]]] = defaultdict(list)
            for n in ns:
                todo[self.queue_names[n % len(self.queue_names)]].append((n, self.payload(n)))
            while todo:
                name = next(iter(todo))
                try:
                    q = link.get()[name]
                    calls = [q.enqueue_call(payload, id=self.job_id(n)) for n, payload in todo[name]]
                    for call, reply in zip(calls, link.conn.send_many(calls)):
                        if isinstance(reply, Exception):
                            checked(_raise, reply)
                        # 1 created; 0 the row exists (a resend after a fault). A resend once the
                        # row is gone (completed) creates the job again: idempotent only while it lives
                        self.ledger.log("E", name, call.argv[0], f"ok:{reply}")
                    del todo[name]  # acknowledged: never resent
                except (*FATAL, WrongNode):
                    for n, _ in todo[name]:
                        self.ledger.log("E", name, self.job_id(n), "conn")
                    link.drop()
            if self.stop.is_set():
                return

    def sweep(self) -> None:
        link = Link(lambda: self.url, self.c.wire, self.c.cluster, self.queue_names)
        while not self.stop.is_set():
            with self.restart_lock:  # never sweep between a restart and its crossing snapshot
                try:
                    queues = link.get()
                    for q in queues.values():
                        checked(q.promote)
                        sent = now()
                        result = checked(q.stalled_check, self.c.max_stalled, 1000)
                        for verdict, ids in (("rec", result.recovered), ("exe", result.exempt), ("dead", result.dead)):
                            for job_id in ids:
                                self.ledger.log("V", q.name, "-", verdict, job_id, t=sent)
                except (*FATAL, WrongNode):
                    link.drop()
                except errors.CommandRefused as exc:
                    self.ledger.log("X", "sweep", exc.code)
            time.sleep(0.05)  # the sweeper's period

    # -- the run --------------------------------------------------------------------------------
    def chaos_plan(self, span_s: float) -> list[tuple[float, str]]:
        """When each fault strikes, seconds after the start (seeded)."""
        c = self.c
        plan = [(self.rng.uniform(0.1, span_s), "kill") for _ in range(c.kills)]
        plan += [(self.rng.uniform(0.1, span_s), "freeze") for _ in range(c.freezes)]
        fails = min(c.failovers, c.restarts)
        cuts = min(c.power_cuts, c.restarts - fails)
        kinds = ["failover"] * fails + ["power"] * cuts + ["crash"] * (c.restarts - fails - cuts)
        self.rng.shuffle(kinds)
        plan += [(span_s * (i + 1) / (c.restarts + 1), kind) for i, kind in enumerate(kinds)]
        return sorted(plan)

    def execute(self) -> Report:
        began = time.monotonic()
        self.start_servers()
        for _ in range(self.c.workers):
            self.spawn_worker()
        self.wait_ready(self.c.workers)
        self.floor_setup()
        started = time.monotonic()
        threads = [threading.Thread(target=f, daemon=True) for f in (self.produce, self.sweep, self.watch_aof)]
        for t in threads:
            t.start()
        span_s = self.span_s
        thaw: list[tuple[float, subprocess.Popen]] = []
        for at, kind in self.chaos_plan(span_s):
            while time.monotonic() - started < at:
                self.thaw_due(thaw)
                time.sleep(0.01)
            self.wait_ready(1)  # a fault strikes a worker that is really working
            live = self.ready_workers()
            if kind == "kill" and live:
                self.kill_worker(self.rng.choice(live))
            elif kind == "freeze" and live:
                proc = self.rng.choice(live)
                self.ledger.log("Z", proc.pid)
                proc.send_signal(signal.SIGSTOP)
                self.frozen.add(proc.pid)
                thaw.append((time.monotonic() + self.c.lease_ms / 1000 * 1.5, proc))
            elif kind in ("crash", "power"):
                self.restart(kind)
            elif kind == "failover":
                self.failover()
        threads[0].join()  # every job admitted
        self.drain(thaw)
        self.stop.set()
        for t in threads[1:]:
            t.join(timeout=10)
        for proc in list(self.workers):
            proc.kill()
            proc.wait()
        report = check(self.dir, self.c, self.final_dump())
        if self.replica is not None:
            report.replica_digest_equal = self.digests_equal()
            if not report.replica_digest_equal:
                report.violations.append("the replica's DEBUG DIGEST differs from the primary's")
        report.seconds = round(time.monotonic() - began, 1)
        for node in self.nodes():
            node.cleanup()
        return report

    def all_nodes(self) -> list[EmbeddedServer]:
        return self.nodes() + ([self.replica] if self.replica else [])

    def thaw_due(self, thaw: list) -> None:
        for item in list(thaw):
            due, proc = item
            if time.monotonic() >= due:
                thaw.remove(item)
                if proc.poll() is None:
                    self.ledger.log("U", proc.pid)
                    proc.send_signal(signal.SIGCONT)
                self.frozen.discard(proc.pid)

    def drain(self, thaw: list) -> None:
        """Poll the queues until every job has settled (pending, active and schedule empty)."""
        link = Link(lambda: self.url, self.c.wire, self.c.cluster, self.queue_names)
        give_up = time.monotonic() + self.c.drain_timeout_s
        while True:
            self.thaw_due(thaw)
            try:
                counts = [checked(q.counts) for q in link.get().values()]
                if not thaw and all(c.pending == c.active == c.scheduled == 0 for c in counts):
                    return
            except (*FATAL, WrongNode):
                link.drop()
            if time.monotonic() > give_up:
                raise TimeoutError(f"chaos run did not drain in {self.c.drain_timeout_s}s: {counts}")
            time.sleep(0.05)

    def final_dump(self) -> dict:
        """Every key of every queue: type and content (rows as field maps, sets as id → score)."""
        conn = open_connection(self.url, self.c.wire, self.c.cluster)
        out: dict[str, Any] = {"keys": {}, "metrics": {}}
        for name in self.queue_names:
            q = Queue(conn, name)
            for node_client in self._node_clients():
                for key in node_client.scan_iter(match=q.keys.pattern(), count=1000):
                    kind = node_client.type(key).decode()
                    if kind == "hash":
                        out["keys"][key.decode()] = ("hash", {k.decode(): v.decode(errors="replace")
                                                              for k, v in node_client.hgetall(key).items()})
                    elif kind == "zset":
                        out["keys"][key.decode()] = ("zset", {m.decode(): s for m, s in
                                                              node_client.zrange(key, 0, -1, withscores=True)})
                    else:
                        out["keys"][key.decode()] = (kind, None)
            out["metrics"][name] = q.metrics()
        conn.close()
        return out

    def _node_clients(self):
        return [node.client() for node in self.nodes()]


# ---------------------------------------------------------------------------------------------
# the checker
# ---------------------------------------------------------------------------------------------


def read_events(folder: Path) -> list[list[str]]:
    events = []
    for path in folder.glob("*.log"):
        for line in path.read_text().splitlines():
            parts = line.split(" ")
            if len(parts) >= 2 and parts[1].isdigit():
                events.append(parts)
    events.sort(key=lambda e: int(e[1]))
    return events


def check(folder: Path, c: Config, dump: dict) -> Report:
    report = Report(config=asdict(c))
    v = report.violations
    events = read_events(folder)
    # crashes that found the AOF's fsync running: (from, until, the queues on that node), from 2.5 s
    # before the reading (Valkey holds writes back for up to 2 s) until the node was up again (P):
    # every write answered in between was answered by the old process
    ups_at = [int(e[1]) for e in events if e[0] == "P"]
    held_back = [(int(e[1]) - 2_500_000_000, min((t for t in ups_at if t > int(e[1])), default=int(e[1])),
                  set(e[3].split(","))) for e in events if e[0] == "F" and e[2] == "1"]
    cut = c.power_loss or (c.abrupt and c.failovers > 0)  # history may lose its tail: measured, not judged
    lossy = cut or bool(held_back)  # … or its last 2 s, at a held-back crash
    report.held_back_crashes = len(held_back)
    enqueue_acked: dict[str, tuple[int, str]] = {}  # id -> (time, queue) of its latest acknowledged enqueue

    def held_back_by_a_crash(job_id: str) -> bool:
        """Its enqueue was answered in a window a crash's AOF may have held back."""
        acked, queue = enqueue_acked.get(job_id, (-1, ""))
        return any(start <= acked <= end and queue in queues for start, end, queues in held_back)

    claims: dict[str, list[tuple[int, int]]] = defaultdict(list)  # id -> [(t, token)]
    sends: dict[tuple, int] = {}
    complete_sent: set[str] = set()
    accepted: Counter = Counter()
    enqueued: set[str] = set()
    ups: list[int] = []
    verdicts: list[tuple[int, str, str]] = []
    crossing: dict[str, list[tuple[int, str]]] = defaultdict(list)  # id -> [(restart time, token)] snapshots
    # id -> [(t, token)] of settles sent, and of settles answered: a settle sent before a restart may be
    # retried by the client across it and answered (applied) by the new process
    sent_after: dict[str, list[tuple[int, str]]] = defaultdict(list)
    completes_ok: Counter = Counter()
    incarnation: Counter = Counter()
    for e in events:
        kind, t = e[0], int(e[1])
        if kind == "E" and e[4].startswith("ok"):  # ok:0 = a resend found the row: it was in
            if e[4] == "ok:1" and e[3] in enqueued:  # created again after its row was gone: a new incarnation
                report.recreated += 1
                claims[e[3]] = []
                incarnation[e[3]] += 1
            enqueued.add(e[3])
            enqueue_acked[e[3]] = (t, e[2])
        elif kind == "C":
            claims[e[3]].append((t, int(e[4])))
            report.claims += 1
        elif kind == "S":
            sends[(e[3], e[4], e[5])] = t  # the latest send of this settle
            sent_after[e[3]].append((t, e[4]))
            if e[5] == "complete":
                complete_sent.add(e[3])
        elif kind == "R":
            job_id, token, verb, outcome = e[3], int(e[4]), e[5], e[6]
            sent = sends.get((job_id, e[4], verb), t)
            stale = any(tok > token and tc < sent for tc, tok in claims[job_id])
            report.stale_settles_tried += stale
            if outcome == "abandoned":
                report.settles_abandoned += 1
            if outcome.startswith("ok"):
                sent_after[job_id].append((t, e[4]))
                report.settles_accepted += 1
                accepted[(job_id, token, incarnation[job_id])] += 1
                if stale:
                    report.stale_settles_accepted += 1
                    if not lossy:  # a claim erased by the cut hands its token out again
                        v.append(f"stale settle accepted: {verb} {job_id} token {token}")
                if verb == "complete":
                    completes_ok[job_id] += 1
        elif kind == "P":
            ups.append(t)
        elif kind == "A":
            crossing[e[3]].append((ups[-1], e[4]))
        elif kind == "V":
            verdicts.append((t, e[4], e[5]))
        elif kind == "G":
            report.phantoms += 1
            v.append(f"a claim returned a row with no payload (a script minted it from a ghost): {e[3]}")
        elif kind == "K":
            report.worker_kills += 1
        elif kind == "Z":
            report.freezes += 1
        elif kind == "L":
            report.regressions["aof_bytes_cut"] = report.regressions.get("aof_bytes_cut", 0) + int(e[2])
    report.restarts = max(0, len(ups) - 1)
    report.enqueued = len(enqueued)
    report.tokens_settled_twice = sum(1 for n in accepted.values() if n > 1)
    if report.tokens_settled_twice and not lossy:
        v.append(f"{report.tokens_settled_twice} tokens had two accepted settles")
    report.duplicate_completes = sum(n - 1 for n in completes_ok.values() if n > 1)
    if report.duplicate_completes > report.recreated and not lossy:
        v.append(f"{report.duplicate_completes} jobs completed twice, only {report.recreated} were enqueued again")

    # -- verdicts against restarts -------------------------------------------------------------
    # A verdict judges a lease that crossed a restart when its id was in that restart's
    # snapshot and this is the id's first verdict since (a lease must be swept before the
    # job can be claimed again). If its holder sent a settle meanwhile, or a settle it sent
    # before the restart was answered after it, the lease may have ended and another begun:
    # ambiguous, not judged.
    tally: Counter = Counter()
    last_verdict: dict[str, int] = {}
    for tv, verdict, job_id in sorted(verdicts):
        tally[verdict] += 1
        crossed = False
        since = last_verdict.get(job_id, -1)
        last_verdict[job_id] = tv
        snaps = [(up, token) for up, token in crossing.get(job_id, []) if since < up < tv]
        if snaps:
            up, token = snaps[-1]
            if any(up < ts < tv and tok == token for ts, tok in sent_after[job_id]):
                tally["ambiguous"] += 1
                continue
            crossed = True
        if crossed and verdict == "exe":
            report.crossed_restart_exempt += 1
        elif crossed:
            report.crossed_restart_counted += 1
            if c.wire == 6:
                v.append(f"wire 6 counted a restart-crossing expiry as a stall: {job_id}")
        elif verdict == "exe":
            report.counted_expiry_exempt += 1
            if not lossy:  # a cut moves the dataset back in time under the ledger's feet
                v.append(f"an expiry within one run was exempted: {job_id}")
    report.verdicts = dict(tally)

    # -- the final keyspace, id by id ----------------------------------------------------------
    keys = dump["keys"]
    members: dict[str, list[str]] = defaultdict(list)
    rows: dict[str, dict] = {}
    known = set()
    for key, (kind, content) in keys.items():
        suffix = key[key.index("}") + 2 :]
        if suffix.startswith("job:") and kind == "hash":
            rows[suffix[4:]] = content
            known.add(key)
        elif suffix in ("pending", "active", "schedule", "dead") and kind == "zset":
            for member in content:
                members[member].append(suffix)
            known.add(key)
        elif suffix.startswith("metrics:") or suffix == "meta":
            known.add(key)
        elif suffix == "wake" and kind == "zset" and set(content) == {"w"}:
            known.add(key)  # wire 4's wake marker (SPEC §9.3): one member, a hint to waiting workers
    report.unknown_keys = len(set(keys) - known)
    if report.unknown_keys:
        v.append(f"unknown keys: {sorted(set(keys) - known)[:5]}")
    dead_reasons: Counter = Counter()
    ledger_ids = {f"c{c.seed}-{n:07d}" for n in range(c.jobs)}
    for job_id in sorted(ledger_ids | set(rows) | set(members)):
        sets, row = members.get(job_id, []), rows.get(job_id)
        if job_id not in ledger_ids:
            v.append(f"an id nobody enqueued: {job_id}")
            continue
        if len(sets) > 1:
            report.in_two_sets += 1
            v.append(f"{job_id} in {sets}")
        if row is None and not sets:
            if job_id in complete_sent:
                report.completed += 1
            elif not cut and held_back_by_a_crash(job_id):
                held = report.regressions.get("enqueues_held_back_from_the_aof", 0)
                report.regressions["enqueues_held_back_from_the_aof"] = held + 1
            elif claims[job_id]:
                report.erased_after_running += 1  # ran (a dead letter, or failing), then its record was cut
                if not cut:
                    v.append(f"erased: {job_id} ran but has no row and never completed")
            else:
                report.lost += 1
                if not cut:
                    v.append(f"lost: {job_id} (no row, no set, never claimed)")
        elif row is not None and row.get("state") == "dead" and sets == ["dead"] and row.get("last_error"):
            dead_reasons[row["last_error"]] += 1
            if c.wire == 6:
                counted = sum(1 for _, verdict, i in verdicts if i == job_id and verdict in ("rec", "dead"))
                if int(row.get("stalled", 0)) != counted:
                    v.append(f"{job_id}: stalled={row.get('stalled')} but {counted} counted verdicts")
        else:
            report.row_set_mismatch += 1
            v.append(f"{job_id}: row {row and row.get('state')} sets {sets}")
    report.dead = dict(dead_reasons)
    poison = {f"c{c.seed}-{n:07d}" for n in range(c.jobs) if c.poison_every and n % c.poison_every == 0}
    for job_id in poison:
        row = rows.get(job_id)
        if (row is None or row.get("state") != "dead") and not lossy:
            v.append(f"poison job {job_id} did not end dead: {row}")
        elif row is None:
            report.regressions["dead_letters_erased"] = report.regressions.get("dead_letters_erased", 0) + 1
    completed_metric = sum(m["completed"] for m in dump["metrics"].values())
    failed_metric = sum(m["failed"] for m in dump["metrics"].values())
    report.metrics = {"completed": completed_metric, "failed": failed_metric}
    if completed_metric != report.completed + report.duplicate_completes and not lossy:
        v.append(f"metrics:completed {completed_metric} != {report.completed} completed")
    if lossy:
        report.regressions.update(
            acknowledged_enqueues_lost_never_ran=report.lost,
            records_erased_after_running=report.erased_after_running,
            completed_metric_regressed_by=report.completed + report.duplicate_completes - completed_metric,
            jobs_run_again_after_completing=report.duplicate_completes,
            tokens_handed_out_twice=report.stale_settles_accepted + report.tokens_settled_twice,
        )
    if len(report.violations) > 50:
        report.violations = report.violations[:50] + [f"... {len(v) - 50} more"]
    return report


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------


def run(config: Config, keep: str | None = None) -> Report:
    folder = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="echomq-chaos-"))
    folder.mkdir(parents=True, exist_ok=True)
    chaos = Run(config, folder)
    try:
        return chaos.execute()
    finally:
        for proc in chaos.workers:
            if proc.poll() is None:
                proc.kill()
        for node in chaos.all_nodes() if (chaos.server or chaos.cluster) else []:
            node.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.reliability.chaos")
    sub = parser.add_subparsers(dest="cmd")
    w = sub.add_parser("worker")
    for name in ("url", "queues", "ledger"):
        w.add_argument(f"--{name}", required=True)
    for name in ("wire", "lease-ms", "max-attempts", "seed"):
        w.add_argument(f"--{name}", type=int, required=True)
    w.add_argument("--cluster", action="store_true")
    for name, default in asdict(Config()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    parser.add_argument("--long", action="store_true", help="100k jobs, 8 restarts, 40 kills (minutes)")
    parser.add_argument("--keep", help="keep the ledgers in this folder")
    args = parser.parse_args(argv)
    if args.cmd == "worker":
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        worker_main(args)
        return 0
    config = Config(**{k: getattr(args, k) for k in asdict(Config())})
    if args.long:
        config.jobs, config.restarts, config.kills, config.freezes, config.workers = 100_000, 8, 40, 10, 6
        config.slow_every = config.slow_every or 500
        config.drain_timeout_s = 900
    report = run(config, args.keep)
    out = asdict(report)
    print(json.dumps(out, indent=1))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
