"""Run a case on two nodes side by side, step by step, and judge every step.

For each step, on each node: TIME, the call, TIME in one pipeline (the window),
then a dump of every key. The two dumps are normalised and compared, the replies
too, and :func:`differences.classify` judges the step: equal, a named §5
difference, or UNEXPECTED. When a step leaves the nodes different, the script
node is then brought to the native node's state for exactly the keys that
differ (the native node is the stricter executor), so every step starts from
equal datasets and each difference is attributed to the step that made it.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import valkey
from valkey.exceptions import NoScriptError, ResponseError

from ..admin.steps import brand_node
from .._client.connection import BRANDS, Call, Connection, Script, as_refusal, connect
from ..local.server import EmbeddedServer
from .._protocol.verbs import BY_NAME
from . import differences
from .compare import diff
from .dump import EXPIRES, Dump, dump, server_ms
from .normalise import (EXTRAS, WAKE, Err, Origins, Window, err, extras_violations, normalise, normalise_reply,
                        row_key, should_wake, wake_violations)
from .observation import CaseResult, Observation, StepResult, Verdict
from .plants import ScriptPlant
from .steps import Case, Do, Raw, Restart, Step, Tick, Wait

PLANT_ENV = "TRAFIKEY_PLANT"
WAIT_TIMEOUT_S = 10.0


class InstrumentError(RuntimeError):
    """The instrument itself could not do its job (not a parity finding)."""


class Node:
    """One valkey-server of the pair and the connection the instrument drives it with."""

    def __init__(self, role: str, wire: int, *, module: str | None = None, plant: str | None = None,
                 script_plants: Iterable[ScriptPlant] = (), aof: bool = True) -> None:
        self.role = role  #: "script" or "native"
        self.wire = wire
        self.brand = BRANDS[wire]
        self.plant = plant
        self.script_plants = tuple(script_plants)
        self.server = EmbeddedServer(module=module, aof=aof, brand=wire)
        self.origins = Origins()
        self.conn: Connection | None = None
        self.run_id = b""

    @property
    def client(self) -> valkey.Valkey:
        assert self.conn is not None
        return self.conn.client

    def start(self) -> None:
        with _env(PLANT_ENV, self.plant):
            self.server.start()
        self._connect()

    def _connect(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = connect(self.server.url, wire=self.wire)
        if self.wire == 4:
            for plant in self.script_plants:
                verb = BY_NAME[plant.verb]
                self.conn.scripts[plant.verb] = Script(verb, plant.source())
            self.conn.load_scripts()
        self.run_id = self.client.info("server")["run_id"].encode()

    def restart(self) -> None:
        with _env(PLANT_ENV, self.plant):
            self.server.restart()
        self._connect()

    def reset(self) -> None:
        self.client.flushall()
        brand_node(self.client, self.wire)
        self.origins.clear()

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.server.cleanup()

    # -- one step ---------------------------------------------------------------------
    def execute(self, step: Do | Raw) -> tuple[Any, Window]:
        for _ in range(2):
            replies, window = self._bracket(step)
            if not any(isinstance(r, NoScriptError) for r in replies):
                break
            self.conn.load_scripts()  # NOSCRIPT: the call did not run; load and run it again, once
        reply = replies[-1] if replies else []
        if isinstance(reply, ResponseError):
            reply = err(str(as_refusal(reply)))
        elif isinstance(reply, list):  # COMPLETES: a refused pair's error among the answers
            reply = [err(str(as_refusal(r))) if isinstance(r, ResponseError) else r for r in reply]
        return reply, window

    def _bracket(self, step: Do | Raw) -> tuple[list[Any], Window]:
        if isinstance(step, Raw):
            return self._timed([step.args])
        call = Call(BY_NAME[step.verb], step.call_keys(), step.argv)
        if self.wire == 4 and step.verb == "bclaim":
            # scripts cannot block: the scripted stand-in of BCLAIM is the claim (a worker waits on the wake marker)
            call = Call(BY_NAME["claim"], step.call_keys(), step.argv[:1] + step.argv[2:])  # lease_ms[, rated]
        command = self.conn.command_args(call)
        if self.wire == 4 and call.verb.name in ("claim", "claims"):
            # the scripted claim rides with the client's pause read (SPEC §4): any non-nil reply, an
            # error reply included, means paused, and the claim reads as empty (its script, which
            # reads the pause itself, wrote nothing)
            meta = step.call_keys()[-1] + "meta"
            (paused, reply), window = self._timed([("HGET", meta, "paused"), command])
            return [[] if paused is not None and not isinstance(reply, list) else reply], window
        return self._timed([command])

    def _timed(self, commands: list[tuple]) -> tuple[list[Any], Window]:
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")
        for command in commands:
            pipe.execute_command(*command)
        pipe.execute_command("TIME")
        out = pipe.execute(raise_on_error=False)
        return out[1:-1], Window(_ms(out[0]), _ms(out[-1]))

    def consume_wake(self, post: Dump) -> Dump:
        """Delete the wake markers a step wrote (as a waiter's BZPOPMIN would): the dump without them."""
        markers = [key for key in post if WAKE.match(key)]
        if markers:
            self.client.delete(*markers)
        return {key: entry for key, entry in post.items() if key not in markers}

    def tick(self, step: Tick) -> None:
        self._wait_until(server_ms(self.client) + step.ms)

    def wait_past(self, step: Wait, current: Dump) -> None:
        entry = current.get(f"emq:{{{step.queue}}}:{step.set}".encode())
        if entry is None or entry.kind != "zset" or not entry.value:
            return
        if step.member is not None:
            target = entry.value.get(step.member.encode())
            if target is None:
                return
        else:
            target = max(entry.value.values())
        self._wait_until(target + 1)

    def _wait_until(self, target: int) -> None:
        give_up = time.monotonic() + WAIT_TIMEOUT_S
        while server_ms(self.client) < target:  # the server's clock decides, not a guess
            if time.monotonic() > give_up:
                raise InstrumentError(f"{self.role} node's clock did not pass {target}")
            time.sleep(0.0005)


def _ms(reply: Any) -> int:
    if isinstance(reply, (list, tuple)):
        seconds, micros = int(reply[0]), int(reply[1])
        return seconds * 1000 + micros // 1000
    raise InstrumentError(f"TIME answered {reply!r}")


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """The plant switch is read by the module at load: set it only while the server starts."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


# ---------------------------------------------------------------------------------------
@dataclass
class Tally:
    """Figures over everything a pair ran: steps, and verdicts by kind."""

    steps: int = 0
    equal: int = 0
    named_steps: int = 0
    named: dict[str, int] = field(default_factory=dict)  #: per §5 name (a step may show two)
    unexpected: int = 0

    def add(self, verdict: Verdict) -> None:
        self.steps += 1
        if verdict.kind == "equal":
            self.equal += 1
        elif verdict.kind == "named":
            self.named_steps += 1
            for name in verdict.names:
                self.named[name] = self.named.get(name, 0) + 1
        else:
            self.unexpected += 1


class Pair:
    """A script node (brand echomq:4.0.0) and a native node (brand echomq:6.0.0), side by side.

    ``module=None`` runs the instrument against itself: a second script node in
    the native seat (used to test the instrument before the module exists).
    """

    def __init__(self, *, module: str | None, plant: str | None = None,
                 script_plants: Iterable[ScriptPlant] = (), aof: bool = True) -> None:
        self.script = Node("script", 4, script_plants=script_plants, aof=aof)
        if module is None:
            self.native = Node("native", 4, aof=aof)
        else:
            self.native = Node("native", 6, module=module, plant=plant, aof=aof)
        self.tally = Tally()
        self.last: Observation | None = None  #: the latest step's observation
        self._script_dump: Dump = {}
        self._native_dump: Dump = {}

    @property
    def native_is_native(self) -> bool:
        return self.native.wire == 6

    def __enter__(self) -> "Pair":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self.script.start()
            self.native.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in (self.script, self.native):
            node.stop()

    def reset(self) -> None:
        for node in (self.script, self.native):
            node.reset()
        self._script_dump = dump(self.script.client)
        self._native_dump = dump(self.native.client)

    def set_script_plants(self, plants: Iterable[ScriptPlant]) -> None:
        self.script.script_plants = tuple(plants)
        self.script._connect()

    # -- cases ------------------------------------------------------------------------
    def run_case(self, case: Case, *, stop_at_unexpected: bool = False) -> CaseResult:
        self.reset()
        result = CaseResult(case.name, case.family, [], case.expect)
        for index, step in enumerate(case.steps, 1):
            verdict = self.step(step, case=case.name, index=index)
            result.steps.append(StepResult(index, step, verdict))
            if stop_at_unexpected and verdict.unexpected:
                break
        return result

    def step(self, step: Step, *, case: str = "", index: int = 0) -> Verdict:
        s_pre, n_pre = self._script_dump, self._native_dump
        # normalised before the step moves the origins on: a member it removes keeps its offset here
        s_pre_n, n_pre_n = self._norm(self.script, s_pre), self._norm(self.native, n_pre)
        s_window = n_window = None
        s_reply = n_reply = None
        run_id = self.native.run_id
        if isinstance(step, Restart):
            self.script.restart()
            self.native.restart()
        elif isinstance(step, Wait):
            self.script.wait_past(step, s_pre)
            self.native.wait_past(step, n_pre)
        elif isinstance(step, Tick):
            self.script.tick(step)
            self.native.tick(step)
        else:
            s_reply, s_window = self.script.execute(step)
            n_reply, n_window = self.native.execute(step)
        s_post, n_post = dump(self.script.client), dump(self.native.client)
        violations: list[str] = []
        for node, pre, post, reply in ((self.script, s_pre, s_post, s_reply), (self.native, n_pre, n_post, n_reply)):
            if node.wire == 4:
                woke = step.base if isinstance(step, Do) and should_wake(step.verb, reply, step.base, pre, post) else None
                violations += [f"{node.role} node: {v}" for v in wake_violations(pre, post, woke=woke)]
        s_post, n_post = self.script.consume_wake(s_post), self.native.consume_wake(n_post)
        verb_window = isinstance(step, Do)
        self.script.origins.update(s_pre, s_post, s_window if verb_window else None)
        self.native.origins.update(n_pre, n_post, n_window if verb_window else None)

        if isinstance(step, (Restart, Wait, Tick)):
            for role, pre, post in (("script", s_pre, s_post), ("native", n_pre, n_post)):
                if pre != post:
                    changed = "; ".join(str(d) for d in diff(pre, post)[:6])
                    violations.append(f"{step} changed the {role} node's dataset: {changed}")
        if self.native_is_native:
            stamped = _stamped(step, n_reply)
            violations += extras_violations(n_pre, n_post, stamped=stamped, run_id=run_id)
            # the row the native node stamps at a claim must carry the run_id of that call, not a later one
        obs = Observation(
            case=case, index=index, step=step,
            script_reply=normalise_reply(_verb(step), s_reply, s_window) if s_window else None,
            native_reply=normalise_reply(_verb(step), n_reply, n_window) if n_window else None,
            script_window=s_window, native_window=n_window,
            script_pre=s_pre, script_post=s_post, native_pre=n_pre, native_post=n_post,
            script_pre_n=s_pre_n, script_post_n=self._norm(self.script, s_post),
            native_pre_n=n_pre_n, native_post_n=self._norm(self.native, n_post),
            run_id=run_id, native_is_native=self.native_is_native, violations=violations,
        )
        obs.diffs = diff(obs.script_post_n, obs.native_post_n)
        self.last = obs
        verdict = differences.classify(obs)
        self.tally.add(verdict)
        self._native_dump = n_post
        self._script_dump = self._resync(obs) if obs.diffs else s_post
        return verdict

    def _norm(self, node: Node, raw: Dump) -> Dump:
        return normalise(raw, node.origins, brand=node.brand, native_extras=node.wire == 6)

    def _resync(self, obs: Observation) -> Dump:
        """Bring the script node to the native node's state for the keys that differ."""
        client = self.script.client
        keys = sorted({d.key for d in obs.diffs})
        pipe = client.pipeline(transaction=True)
        for key in keys:
            pipe.delete(key)
            entry = obs.native_post.get(key)
            if entry is None:
                continue
            if entry.kind == "hash":
                fields = {f: v for f, v in entry.value.items()
                          if not (self.native_is_native and f in EXTRAS) and f != EXPIRES}
                # a completed record kept as a field: (value, its own expiry), as the dump reads it
                expiring = {f: v[1] for f, v in fields.items() if isinstance(v, tuple) and v[1] is not None}
                fields = {f: v[0] if isinstance(v, tuple) else v for f, v in fields.items()}
                if fields:
                    pipe.hset(key, mapping=fields)
                for field, expires in expiring.items():
                    pipe.execute_command("HPEXPIREAT", key, expires, "FIELDS", 1, field)
                if EXPIRES in entry.value:
                    pipe.pexpireat(key, int(entry.value[EXPIRES]))
            elif entry.kind == "zset":
                pipe.zadd(key, {m: s for m, s in entry.value.items()})
            elif entry.kind == "string":
                pipe.set(key, entry.value)
            elif entry.kind == "list":
                pipe.rpush(key, *entry.value)
            elif entry.kind == "set":
                pipe.sadd(key, *entry.value)
            elif entry.kind == "stream":
                for entry_id, fields in entry.value:
                    pipe.xadd(key, fields, id=entry_id)
            else:
                raise InstrumentError(f"cannot resync {key!r} of type {entry.kind}")
        pipe.execute()
        for key in keys:
            self.script.origins.copy_key(key, self.native.origins)
        synced = dump(client)
        left = diff(self._norm(self.script, synced), obs.native_post_n)
        if left:
            raise InstrumentError(f"resync left differences: {[str(d) for d in left]}")
        return synced


def _verb(step: Step) -> str | None:
    return step.verb if isinstance(step, Do) else None


def _stamped(step: Step, reply: Any) -> set[bytes]:
    """Row keys the native reply says were leased (lease_epoch due)."""
    stamped: set[bytes] = set()
    if not isinstance(step, Do) or isinstance(reply, Err) or reply is None:
        return stamped
    base = step.base
    if step.verb in ("claim", "bclaim") and isinstance(reply, list) and reply:
        stamped.add(row_key(base, _b(reply[0])))
    elif step.verb == "claims" and isinstance(reply, list):
        stamped |= {row_key(base, _b(job[0])) for job in reply if isinstance(job, list)}
    elif step.verb == "extend" and isinstance(reply, int) and reply != 0:
        stamped.add(row_key(base, step.argv[0].encode()))
    elif step.verb == "extends" and isinstance(reply, list):
        for i, answer in enumerate(reply):
            if isinstance(answer, int) and answer != 0 and 1 + 2 * i < len(step.argv):
                stamped.add(row_key(base, step.argv[1 + 2 * i].encode()))
    return stamped


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
