"""Random sequences: a hypothesis state machine that interleaves every verb on two
queues, with clocks, ghosts, lane rows, pauses and restarts, and runs each step on
both nodes through :meth:`Pair.step`. An UNEXPECTED step fails the example and
hypothesis shrinks it to a minimal sequence.

Time is kept decisive: a 1 ms lease, delay or backoff is always followed, in
the same rule, by a wait of 2 ms on each node's server clock, so every deadline
is either surely past or (at 60 s) surely ahead when the next verb reads the clock.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, Phase, settings as Settings, seed as hypothesis_seed, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from . import steps as S
from .report import result_text
from .runner import Pair

QUEUES = st.sampled_from(["q", "r"])
IDS = st.sampled_from(["a", "b", "c", "d"])
GHOSTS = st.sampled_from(["g1", "g2"])
TOKENS = st.sampled_from(["1", "1", "2", "2", "3", "0", "9"])  #: mostly tokens a claim can have minted
PRIORITY = st.sampled_from([0, 0, 2, 7])
HELD = st.integers(0, 9)  #: below 7: act on a lease a claim minted (see ParityMachine.target)
#: now and then a priority outside SPEC §3's grammar (§5.6: the script may act on it, native refuses)
ENQUEUE_PRIORITY = st.sampled_from([0, 0, 0, 0, 2, 7, 7, "-1", "x", str(2**31)])
LONG = 60_000


class Unexpected(AssertionError):
    pass


class ParityMachine(RuleBasedStateMachine):
    """Class attributes set by :func:`run_random`: the pair, and whether restarts are drawn."""

    pair: Pair
    restarts = True

    def __init__(self) -> None:
        super().__init__()
        self.pair.reset()
        self.index = 0
        self.leases: list[tuple[str, str, str]] = []  #: (queue, id, token) of every claim seen, newest last

    def target(self, q: str, job: str, token: str, held: int) -> tuple[str, str, str]:
        """Mostly a lease a claim really minted (possibly lost since); now and then the drawn one."""
        if held < 7 and self.leases:
            return self.leases[-1 - held % len(self.leases)]
        return q, job, token

    def do(self, *steps: S.Step) -> None:
        for step in steps:
            self.index += 1
            verdict = self.pair.step(step, case="random", index=self.index)
            if verdict.unexpected:
                raise Unexpected(f"step {self.index} {step}:\n" + "\n".join(result_text(verdict)))

    def _row_exists(self, q: str, job: str) -> bool:
        entry = self.pair._script_dump.get(S.key(q, "job:" + job).encode())
        return entry is not None and entry.kind == "hash"

    # -- a populated start: every sequence begins with jobs in every state worth acting on
    @initialize(priorities=st.lists(PRIORITY, min_size=4, max_size=4), short=st.booleans())
    def populate(self, priorities, short):
        for q in ("q", "r"):
            for job, priority in zip("abcd", priorities):
                self.do(S.enqueue(q, job, "p-" + job, priority))
            self.claim(q, short)
            self.claim(q, False)
        self.do(S.schedule("q", "e", 0, "s-e"), S.schedule("r", "e", LONG, "s-e"))

    # -- admission
    @rule(q=QUEUES, jobs=st.lists(st.tuples(IDS, ENQUEUE_PRIORITY), min_size=1, max_size=3))
    def enqueue(self, q, jobs):
        for job, priority in jobs:
            self.do(S.enqueue(q, job, "p-" + job, priority))

    @rule(q=QUEUES, jobs=st.lists(st.tuples(IDS, ENQUEUE_PRIORITY), min_size=1, max_size=3))
    def enqueues(self, q, jobs):
        self.do(S.enqueues(q, *[(job, "b-" + job, priority) for job, priority in jobs]))

    @rule(q=QUEUES, job=IDS, delay=st.sampled_from([0, LONG]), priority=PRIORITY)
    def schedule(self, q, job, delay, priority):
        self.do(S.schedule(q, job, delay, "s-" + job, priority))

    @rule(q=QUEUES, job=IDS, priority=PRIORITY, unique=st.sampled_from([0, 1, LONG]), replace=st.sampled_from([0, 1]),
          delay=st.sampled_from([None, None, 0, LONG]))
    def enqueue_unique(self, q, job, priority, unique, replace, delay):
        self.do(S.enqueue_unique(q, job, "u-" + job, priority, unique, replace, delay))

    # -- claim and lease
    @rule(q=QUEUES, short=st.booleans(), blocking=st.booleans(), rated=st.booleans())
    def claim(self, q, short, blocking=False, rated=False):
        # BCLAIM (native) against the scripted claim: CLAIM's outcome; where it would block, 1 ms then empty
        lease = 1 if short else LONG
        self.do(S.bclaim(q, lease, 1, rated) if blocking and self.pair.native_is_native else S.claim(q, lease, rated))
        reply = self.pair.last.native_reply
        if isinstance(reply, tuple) and len(reply) == 3:
            self.leases.append((q, reply[0], str(reply[2])))
            if short:
                self.do(S.tick())

    @rule(q=QUEUES, count=st.integers(1, 3), rated=st.booleans())
    def claims(self, q, count, rated):
        self.do(S.claims(q, count, LONG, rated))
        reply = self.pair.last.native_reply
        if isinstance(reply, tuple):
            self.leases += [(q, job[0], str(job[2])) for job in reply if isinstance(job, tuple) and len(job) == 3]

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD, short=st.booleans())
    def extend(self, q, job, token, held, short):
        q, job, token = self.target(q, job, token, held)
        self.do(S.extend(q, job, token, 1), S.tick()) if short else self.do(S.extend(q, job, token, LONG))

    @rule(q=QUEUES, pairs=st.lists(st.tuples(IDS, TOKENS, HELD), min_size=1, max_size=3))
    def extends(self, q, pairs):
        chosen = [self.target(q, job, token, held) for job, token, held in pairs]
        queue = chosen[0][0]  # one EXTENDS renews leases of one queue
        self.do(S.extends(queue, LONG, *[(job, token) for cq, job, token in chosen if cq == queue]))

    @rule(q=QUEUES, cap=st.integers(1, 3))
    def expiry_cycle(self, q, cap):
        """A lease expires (on the server clock), the sweep recovers it, a worker claims again:
        the job now has more attempts than failures, where the two budgets part (§5.7)."""
        self.claim(q, True)
        self.do(S.stalled_check(q, cap))
        self.claim(q, False)

    # -- settle
    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD)
    def complete(self, q, job, token, held):
        self.do(S.complete(*self.target(q, job, token, held)))

    @rule(q=QUEUES, pairs=st.lists(st.tuples(IDS, TOKENS, HELD), min_size=1, max_size=3))
    def completes(self, q, pairs):
        chosen = [self.target(q, job, token, held) for job, token, held in pairs]
        queue = chosen[0][0]  # one COMPLETES settles jobs of one queue
        self.do(S.completes(queue, *[(job, token) for cq, job, token in chosen if cq == queue]))

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD, cap=st.sampled_from([1, 2, 3, 0]),
          backoff=st.sampled_from([0, 0, 1, LONG]), traceback=st.sampled_from([None, None, "", "tb"]))
    def fail(self, q, job, token, held, cap, backoff, traceback):
        q, job, token = self.target(q, job, token, held)
        # cap 0 draws max_attempts = the token: the last attempt by the script's count, which is
        # where the two budgets part after a stall or a requeue (§5.7)
        cap = cap or max(1, int(token))
        # the traceback: none (five ARGV: the field is left), empty, or one per token
        self.do(S.fail(q, job, token, "e" + token, cap, backoff, traceback and traceback + token))
        if backoff == 1:
            self.do(S.tick())

    # -- the bus (docs/spec.md §12)
    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD, retention=st.sampled_from([0, LONG]))
    def publish(self, q, job, token, held, retention):
        q, job, token = self.target(q, job, token, held)
        self.do(S.publish(q, job, token, "r" + token, retention))

    @rule(q=QUEUES, triples=st.lists(st.tuples(IDS, TOKENS, HELD), min_size=1, max_size=3),
          retention=st.sampled_from([0, LONG]))
    def publishes(self, q, triples, retention):
        chosen = [self.target(q, job, token, held) for job, token, held in triples]
        queue = chosen[0][0]  # one PUBLISHES settles jobs of one queue
        self.do(S.publishes(queue, retention, *[(job, token, "r" + token) for cq, job, token in chosen if cq == queue]))

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD, cap=st.sampled_from([1, 3]),
          backoff=st.sampled_from([0, LONG]), traceback=st.sampled_from([None, "", "tb", "tb"]))
    def failures_incr(self, q, job, token, held, cap, backoff, traceback):
        q, job, token = self.target(q, job, token, held)
        # FAIL's arguments: the traceback left out (five ARGV), empty, or one per token
        self.do(S.failures_incr(q, job, token, "e" + token, cap, backoff, traceback and traceback + token))

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD)
    def append(self, q, job, token, held):
        self.do(S.append(*self.target(q, job, token, held)))

    @rule(q=QUEUES, limit=st.sampled_from([0, 0, 2, 5]))
    def rate_limit(self, q, limit):
        # the queue's rate limit (docs/spec.md §13); a long window, so no log expires mid-sequence
        self.do(S.rate_limit(q, limit, LONG))

    @rule(q=QUEUES, bound=st.sampled_from([0, 5, 100]))
    def events(self, q, bound):
        self.do(S.events_on(q, bound))

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD, delay=st.sampled_from([0, 1, LONG]))
    def delay(self, q, job, token, held, delay):
        q, job, token = self.target(q, job, token, held)
        self.do(S.delay(q, job, token, delay))
        if delay == 1:
            self.do(S.tick())

    @rule(q=QUEUES, job=IDS, token=TOKENS, held=HELD)
    def requeue(self, q, job, token, held):
        self.do(S.requeue(*self.target(q, job, token, held)))

    # -- schedule and recovery
    @rule(q=QUEUES, limit=st.sampled_from([1, 1000]))
    def promote(self, q, limit):
        self.do(S.promote(q, limit))

    @rule(q=QUEUES, job=IDS, delay=st.sampled_from([0, LONG]))
    def reschedule(self, q, job, delay):
        self.do(S.reschedule(q, job, delay))

    @rule(q=QUEUES, job=st.one_of(IDS, GHOSTS))
    def reprocess(self, q, job):
        self.do(S.reprocess(q, job))

    @rule(q=QUEUES, cap=st.integers(1, 3), limit=st.sampled_from([1, 1000]))
    def stalled_check(self, q, cap, limit):
        self.do(S.stalled_check(q, cap, limit))

    # -- control
    @rule(q=QUEUES, job=st.one_of(IDS, GHOSTS))
    def remove(self, q, job):
        self.do(S.remove(q, job))

    @rule(q=QUEUES, job=IDS)
    def cancel(self, q, job):
        self.do(S.cancel(q, job))

    @rule(q=QUEUES, age=st.sampled_from([0, LONG]), limit=st.sampled_from([1, 1000]))
    def purge(self, q, age, limit):
        self.do(S.purge(q, age, limit))

    @rule(q=QUEUES, limit=st.sampled_from([1, 2, 1000]))
    def drain(self, q, limit):
        self.do(S.drain(q, limit))

    # -- the world around the verbs
    @rule(q=QUEUES, dice=st.integers(0, 3))
    def pause(self, q, dice):
        self.do(S.pause(q) if dice == 3 else S.resume(q))  # mostly resume: a paused queue claims nothing

    @rule(q=QUEUES, where=st.sampled_from(["pending", "schedule", "active", "dead"]), ghost=GHOSTS)
    def ghost(self, q, where, ghost):
        self.do(S.raw("ZADD", S.key(q, where), "0", ghost, label=f"ghost {ghost} in {q}'s {where}"))

    @rule(q=QUEUES, job=IDS, name=st.sampled_from(["group", "parent"]))
    def lane(self, q, job, name):
        if self._row_exists(q, job):
            self.do(S.raw("HSET", S.key(q, "job:" + job), name, "x", label=f"mark {job} {name}"))

    @precondition(lambda self: self.restarts)
    @rule(dice=st.integers(0, 39))
    def restart(self, dice):
        if dice == 39:  # rare (hypothesis favours small draws, so not 0): a restart costs ~20 steps
            self.do(S.restart())


def run_random(pair: Pair, *, examples: int, steps: int, seed: int, restarts: bool = True) -> None:
    """Run ``examples`` random sequences of up to ``steps`` rule draws each; raises on UNEXPECTED."""
    ParityMachine.pair = pair
    ParityMachine.restarts = restarts

    def factory() -> ParityMachine:
        return ParityMachine()

    hypothesis_seed(seed)(factory)
    run_state_machine_as_test(factory, settings=Settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink], print_blob=False,
    ))


def run_until(pair: Pair, *, min_steps: int, steps: int = 50, seed: int = 0, restarts: bool = True) -> int:
    """Long mode: batches of sequences, seed after seed, until ``min_steps`` pair steps ran."""
    start = pair.tally.steps
    for n in itertools.count():
        if pair.tally.steps - start >= min_steps:
            return pair.tally.steps - start
        run_random(pair, examples=20, steps=steps, seed=seed + n, restarts=restarts)
    raise AssertionError("unreachable")
