"""Batching (pure): the calls of one round trip that travel as one command of many -- COMPLETE's
as COMPLETES (docs/spec.md §18), PUBLISH's as PUBLISHES (§19), ENQUEUE's as ENQUEUES (§20) -- and
each call's answer read back from the batch's reply."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .._protocol.verbs import BY_NAME, EXTENDS_MAX_PAIRS, Call


#: The verbs whose calls in one round trip travel as one command of many: the batch verb, and how
#: many of a call's ARGV are its own (the rest, the batch's lead, its calls share): COMPLETE's (id,
#: token) as COMPLETES (docs/spec.md §18), PUBLISH's (id, token, result) as PUBLISHES, one per
#: retention_ms (§19), and ENQUEUE's (id, payload, priority) as ENQUEUES (§20).
BATCHES: dict[str, tuple[str, int]] = {"complete": ("completes", 2), "publish": ("publishes", 3),
                                       "enqueue": ("enqueues", 3)}


def chunked(build: Callable[..., Call], lead: Sequence[Any], parts: Sequence[Any], width: int,
            per: int = EXTENDS_MAX_PAIRS) -> list[Call]:
    """The batch calls of ``parts`` (each job's ``width`` ARGV, one after another): one call per
    ``per`` jobs (at most EXTENDS_MAX_PAIRS), each ``build(*lead, *its parts)``."""
    step = width * per
    return [build(*lead, *parts[start:start + step]) for start in range(0, len(parts), step)]


def batched_settles(calls: Sequence[Call], carried: Callable[[str], bool],
                    per: int = EXTENDS_MAX_PAIRS) -> tuple[list[Call], list[tuple[int, int]]]:
    """What to send for ``calls``: the calls of a verb in :data:`BATCHES` whose batch verb is
    ``carried``, two or more of one kind (verb, keys, lead), as its batches of ``per`` (:func:`chunked`) in the
    place of the first; every other call as itself. And for each call, where its reply is: (the
    sent call's index, the call's place in that batch's reply, or -1 for the whole reply)."""
    kinds: dict[tuple[Any, ...], tuple[list[int], list[Any]]] = {}  # each kind's calls, and their own ARGV in a row
    if len(calls) > 1:
        for i, call in enumerate(calls):
            name = call.verb.name
            batch = BATCHES.get(name)
            if batch is not None:
                argv, width = call.argv, batch[1]
                kind = (name, call.keys, argv[width:])
                found = kinds.get(kind)
                if found is None:
                    kinds[kind] = ([i], [*argv[:width]])
                else:
                    found[0].append(i)
                    found[1].extend(argv[:width])
    first = {found[0][0]: (kind, *found) for kind, found in kinds.items()
             if len(found[0]) > 1 and carried(BATCHES[kind[0]][0])}
    if not first:
        return list(calls), [(i, -1) for i in range(len(calls))]
    sent: list[Call] = []
    # each call's route, set for a whole batch at its kind's first call (its members come later in calls):
    # a worker's round trip is mostly one batch, so most calls are routed in that one inner loop
    routes: list[Any] = [None] * len(calls)
    for i, call in enumerate(calls):
        if i in first:  # the kind's first call: its batches go here
            kind, members, parts = first[i]
            name, width = BATCHES[kind[0]]
            verb, keys = BY_NAME[name], call.keys
            opened = len(sent)
            sent += chunked(lambda *argv: Call(verb, keys, argv), kind[2], parts, width, per)
            for n, m in enumerate(members):
                routes[m] = (opened + n // per, n % per)
        elif routes[i] is None:
            routes[i] = (len(sent), -1)
            sent.append(call)
    return sent, routes


def settle_answers(calls: Sequence[Call], routes: Sequence[tuple[int, int]], replies: Sequence[Any]) -> list[Any]:
    """Each job's answer from the ``replies`` to what :func:`batched_settles` sent for ``calls``: a
    call's own reply, or its element of its batch's, answered by its own verb; a batch call among
    ``calls`` (COMPLETES, PUBLISHES: :meth:`Queue.completion_calls`) answers once for each of its
    jobs. A batch refused whole (an error, not a list) answers that refusal for each of its jobs."""
    answers: list[Any] = []
    for call, (k, at) in zip(calls, routes):
        reply = replies[k]
        if at >= 0:  # a verb of BATCHES answers no list (Verb.answer's per_pair): its answer_to, a call less
            answers.append(call.verb.answer_to(call.argv, reply[at] if type(reply) is list else reply))
        elif call.verb.per_pair is None:
            answers.append(call.verb.answer(call, reply))
        elif isinstance(reply, Exception):
            lead, width = call.verb.repeated
            answers += [reply] * ((len(call.argv) - lead) // width)
        else:
            answers += call.verb.answer(call, reply)
    return answers

