"""Reads of a queue (no I/O): its counts, a job's state and row, a page of a set's ids, its metrics."""

from __future__ import annotations

from typing import Any

from .. import errors
from .base import Op, QueueBase, raise_first, scored
from .._protocol import envelope
from .._protocol.keys import STATE_SETS, State, check_job_id
from .._protocol.verbs import Counts, Plain, check_int, text


class ReadOps(QueueBase):
    """What a queue holds, read."""

    def op_counts(self) -> Op[Counts]:
        return (yield from self._one(self.call("counts")))

    def op_state(self, job_id: str) -> Op[State | None]:
        return (yield from self._one(self.build("state", job_id)))

    def op_job(self, job_id: str) -> Op[dict[str, Any] | None]:
        row = yield from self._plain("HGETALL", self.keys.job(check_job_id(job_id)))
        if not row:
            return None
        if not isinstance(row, dict):  # a client without the HGETALL callback answers the flat list
            row = dict(zip(row[::2], row[1::2]))
        fields = {text(k): v for k, v in row.items()}
        raw = fields.pop("payload", None)
        decoded: dict[str, Any] = {k: text(v) for k, v in fields.items()}
        decoded["payload"] = None if raw is None else self.serializer.loads(envelope.unwrap(raw)[1])
        return decoded

    def op_ids(self, state: State | str, offset: int, count: int) -> Op[list[tuple[str, float]]]:
        try:
            key = self.keys.key(STATE_SETS[State(state)])
        except ValueError:
            raise errors.ConfigurationError(f"bad state {state!r}: one of {[s.value for s in State]}") from None
        check_int("offset", offset, 0)
        check_int("count", count, 1)  # count 0 would ask ZRANGE for offset..offset-1: all of it at offset 0
        return scored((yield from self._plain("ZRANGE", key, offset, offset + count - 1, "WITHSCORES")))

    def op_metrics(self) -> Op[dict[str, int]]:
        names = ("completed", "failed")
        replies = yield [Plain(("HGET", self.keys.metrics(name), "count")) for name in names]
        raise_first(replies)
        counts = {}
        for name, reply in zip(names, replies):
            try:
                counts[name] = int(reply or 0)
            except ValueError:  # a count written by hand: this queue's numbers cannot be read, the rest can
                raise errors.CounterError(f"EMQ hash value is not an integer: {self.keys.metrics(name)} count "
                                          f"holds {reply!r}") from None
        return counts
