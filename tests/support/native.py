"""The trafikey tests' raw EMQ.* verb lines (:class:`NativeQueue`), the tokens and arities the
module registers, and blocked EMQ.BCLAIM calls observed from outside (:class:`Blocker`).

Every test gets a queue of its own (a fresh name) on a shared server, so a refusal's
"nothing written" is checked with DEBUG DIGEST of the whole dataset before and after
(:func:`support.dataset.refused`).
"""

from __future__ import annotations

import threading

from echomq._protocol import verbs

from .queues import fresh_name
from .waiting import Client, wait_server_past, wait_until

#: The job-core tokens EMQ.VERSION must list, in registration-table order (SPEC §6): the verb table's.
TOKENS = " ".join(verbs.JOB_CORE_TOKENS)

#: The optional tokens registered after the job core (SPEC §9.4), in the order they landed: the verb
#: table's.
OPTIONAL_TOKENS = " ".join(verbs.OPTIONAL_TOKENS)

#: A well-formed value of each argument, by its name in the verb table: lines() fills a verb's ARGV
#: with these.
SAMPLE = {"id": "x", "token": "1", "payload": "p", "priority": 0, "lease_ms": 1000, "delay_ms": 0,
          "backoff_ms": 0, "age_ms": 0, "limit": 10, "max_attempts": 3, "max_stalled": 3, "error": "e",
          "progress": "50", "result": "r", "retention_ms": 1000, "count": 2, "unique_ms": 1000, "replace": 0,
          "timeout_ms": 1,  # BCLAIM's: a line that is not refused cannot hang a test
          "traceback": "Traceback (most recent call last):", "rated": "1"}

#: Every registered verb (the verb table's job core and optional verbs) by its command.
REGISTERED = {verb.command: verb for verb in verbs.VERBS + verbs.OPTIONAL if verb.command}

#: Every registered verb with its numkeys and ARGV count (SPEC §3).
VERBS = {command: (len(verb.keys), len(verb.argv)) for command, verb in REGISTERED.items()}

#: A verb's optional trailing ARGV (late arguments, SPEC §9.4): lines() leaves them out.
LATE = {command: tuple(SAMPLE[name] for name, _ in verb.late) for command, verb in REGISTERED.items() if verb.late}


class NativeQueue:
    """One queue's keys and the raw verb lines (SPEC §3), sent as plain commands."""

    def __init__(self, client: Client, name: str | None = None) -> None:
        self.c = client
        self.name = name or fresh_name()
        self.base = f"emq:{{{self.name}}}:".encode()
        self.pending = self.key("pending")
        self.active = self.key("active")
        self.schedule_key = self.key("schedule")
        self.dead = self.key("dead")
        self.meta = self.key("meta")
        self.completed = self.key("metrics:completed")
        self.failed = self.key("metrics:failed")
        self.events = self.key("events")

    def key(self, suffix: str) -> bytes:
        return self.base + suffix.encode()

    def row(self, id) -> bytes:
        return self.base + b"job:" + (id if isinstance(id, bytes) else str(id).encode())

    # -- the verb lines ------------------------------------------------------
    def lines(self) -> dict[str, tuple]:
        """A well-formed line of every verb (used for shape and layout refusals): its KEYS from the
        verb table, its ARGV the samples."""
        return {command: (command, len(verb.keys), *(self.key(suffix) for suffix in verb.keys),
                          *(SAMPLE[name] for name in verb.argv))
                for command, verb in REGISTERED.items()}

    def enqueue(self, id, payload=b"p", priority=0):
        return self.c.execute_command("EMQ.ENQUEUE", 2, self.pending, self.base, id, payload, priority)

    def claim(self, lease_ms=30000):
        return self.c.execute_command("EMQ.CLAIM", 3, self.pending, self.active, self.base, lease_ms)

    def claims(self, count, lease_ms=30000):
        return self.c.execute_command("EMQ.CLAIMS", 3, self.pending, self.active, self.base, lease_ms, count)

    def extend(self, id, token, lease_ms=30000):
        return self.c.execute_command("EMQ.EXTEND", 2, self.active, self.base, id, token, lease_ms)

    def extends(self, lease_ms, *pairs):
        return self.c.execute_command("EMQ.EXTENDS", 2, self.active, self.base, lease_ms, *pairs)

    def complete(self, id, token):
        return self.c.execute_command("EMQ.COMPLETE", 2, self.active, self.base, id, token)

    def completes(self, *pairs):
        return self.c.execute_command("EMQ.COMPLETES", 2, self.active, self.base, *pairs)

    def publishes(self, retention_ms, *triples):
        return self.c.execute_command("EMQ.PUBLISHES", 2, self.active, self.base, retention_ms, *triples)

    def schedule(self, id, payload=b"p", delay_ms=0, priority=0):
        return self.c.execute_command(
            "EMQ.SCHEDULE", 2, self.schedule_key, self.base, id, payload, delay_ms, priority
        )

    def promote(self, limit=100):
        return self.c.execute_command("EMQ.PROMOTE", 3, self.schedule_key, self.pending, self.base, limit)

    def reschedule(self, id, delay_ms):
        return self.c.execute_command("EMQ.RESCHEDULE", 2, self.schedule_key, self.base, id, delay_ms)

    def delay(self, id, token, delay_ms):
        return self.c.execute_command(
            "EMQ.DELAY", 3, self.active, self.schedule_key, self.base, id, token, delay_ms
        )

    def fail(self, id, token, error=b"boom", max_attempts=3, backoff_ms=0, *traceback):
        return self.c.execute_command(
            "EMQ.FAIL", 5, self.active, self.pending, self.schedule_key, self.dead, self.base,
            id, token, error, max_attempts, backoff_ms, *traceback,
        )

    def reprocess(self, id):
        return self.c.execute_command("EMQ.REPROCESS", 3, self.dead, self.pending, self.base, id)

    def requeue(self, id, token):
        return self.c.execute_command("EMQ.REQUEUE", 3, self.active, self.pending, self.base, id, token)

    def stalled_check(self, max_stalled=3, limit=100):
        return self.c.execute_command(
            "EMQ.STALLED.CHECK", 4, self.active, self.pending, self.dead, self.base, max_stalled, limit
        )

    def append(self, id, token, progress=b"50"):
        return self.c.execute_command("EMQ.APPEND", 2, self.active, self.base, id, token, progress)

    def failures_incr(self, id, token, error=b"boom", max_attempts=3, backoff_ms=0, *traceback):
        """FAIL's arguments (the traceback optional, as FAIL's); the tests send one unless told."""
        return self.c.execute_command(
            "EMQ.FAILURES.INCR", 5, self.active, self.pending, self.schedule_key, self.dead, self.base,
            id, token, error, max_attempts, backoff_ms, *(traceback or (b"tb",)),
        )

    def publish(self, id, token, result=b"r", retention_ms=60000):
        return self.c.execute_command("EMQ.PUBLISH", 2, self.active, self.base, id, token, result, retention_ms)

    def done(self, id) -> bytes:
        return self.base + b"done:" + (id if isinstance(id, bytes) else str(id).encode())

    def remove(self, id):
        return self.c.execute_command("EMQ.REMOVE", 4, self.pending, self.schedule_key, self.dead, self.base, id)

    def cancel(self, id):
        return self.c.execute_command("EMQ.CANCEL", 3, self.active, self.dead, self.base, id)

    def purge(self, age_ms=0, limit=100):
        return self.c.execute_command("EMQ.PURGE", 2, self.dead, self.base, age_ms, limit)

    def drain(self, limit=100):
        return self.c.execute_command("EMQ.DRAIN", 2, self.pending, self.base, limit)

    # -- reading the keyspace -------------------------------------------------
    def hrow(self, id) -> dict:
        return self.c.hgetall(self.row(id))

    def zset(self, key) -> list:
        return self.c.zrange(key, 0, -1, withscores=True)

    def expire_all(self, lease_ms=1):
        """Claim the head with a 1 ms lease and wait until the server clock passes it."""
        got = self.claim(lease_ms)
        score = self.c.zscore(self.active, got[0])
        wait_server_past(self.c, int(score))
        return got


# -- blocked calls (EMQ.BCLAIM), observed ---------------------------------------------------

class Blocker:
    """One EMQ.BCLAIM on a connection of its own, in a thread; named so CLIENT LIST finds it."""

    def __init__(self, server, q: NativeQueue, lease_ms=30000, timeout_ms=0, **client_kwargs):
        self.client = server.client(socket_timeout=60, **client_kwargs)
        self.name = fresh_name("blk")
        self.client.client_setname(self.name)
        self.line = ("EMQ.BCLAIM", 3, q.pending, q.active, q.base, lease_ms, timeout_ms)
        self.reply = self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.reply = self.client.execute_command(*self.line)
        except Exception as exc:  # noqa: BLE001 -- handed to the test through result()
            self.error = exc

    def start(self) -> "Blocker":
        self.thread.start()
        return self

    @property
    def done(self) -> bool:
        return not self.thread.is_alive()

    def result(self, within_s: float = 10.0):
        self.thread.join(within_s)
        assert not self.thread.is_alive(), f"{self.name} is still blocked after {within_s}s"
        self.client.close()
        if self.error is not None:
            raise self.error
        return self.reply


def client_entries(admin: Client, name: str) -> list[dict]:
    return [e for e in admin.client_list() if e.get("name") == name]


def is_blocked(admin: Client, name: str) -> bool:
    return any("b" in e["flags"] and e["cmd"].lower() == "emq.bclaim" for e in client_entries(admin, name))


def wait_blocked(admin: Client, *blockers: Blocker) -> None:
    for b in blockers:
        wait_until(lambda: is_blocked(admin, b.name) or b.done, what=f"{b.name} blocked")
        assert not b.done, f"{b.name} answered instead of blocking: {b.reply!r} {b.error!r}"


def still_blocked(admin: Client, *blockers: Blocker) -> None:
    """Blocked now: a signal is served right after the command that made it, so a check after
    that command's reply sees the outcome."""
    for b in blockers:
        assert not b.done and is_blocked(admin, b.name), f"{b.name} was woken: {b.reply!r}"
