"""The queue's core, with no I/O: what each method sends and what its replies mean.

Every :class:`echomq.Queue` method (and its coroutine twin in :class:`echomq.aio.Queue`)
is one *operation* here: a generator that yields a round trip -- a list of
:class:`~echomq._protocol.verbs.Call` and :class:`~echomq._protocol.verbs.Plain` commands, sent together
-- receives their replies (error replies as exception objects), and returns the
method's answer. The two queues only drive these generators over their connection,
one blocking, one awaiting, so both build the same calls, check the same limits and
answer and raise the same way (httpx's ``BaseClient``/``Client``/``AsyncClient``
split). Argument limits and reply decoding live in the verb rows (:mod:`echomq._protocol.verbs`).

An operation returns everything it learned (a claim's rate-limit wait, say, in its
:class:`~echomq._core.claims.Claims`); nothing is left on the queue for a caller to read after,
so any number of callers may share one queue.

:class:`QueueCore` is the families of operations together, one file each: ``admission``
(enqueue, schedule), ``claims``, ``settles`` (and the lease), ``lanes``, ``flows``, ``bus``
(status, results, progress, events), ``control`` (the timers' and the operator's moves) and
``reads``; ``base`` is what they share and ``batching`` how settles travel as one command.
This module is also where the layers above import the core's names from.
"""

from __future__ import annotations

from .admission import AdmissionOps, Enqueued, op_enqueue_into, unique_ms
from .base import (MAX_PAYLOAD_BYTES, Codec, Job, JobRef, Op, RoundTrip, T, check_connection, encode_payload,
                   pairs, raise_first, scored)
from .batching import batched_settles, settle_answers
from .bus import BusOps, Done, check_wait, time_left, timed_out
from .claims import ClaimOps, Claims
from .control import ControlOps, due_in_ms
from .flows import Children, FlowOps
from .lanes import GroupCounts, LaneOps
from .reads import ReadOps
from .settles import SettleOps

__all__ = ["Children", "ClaimOps", "Claims", "Codec", "Done", "Enqueued", "GroupCounts", "Job", "JobRef",
           "MAX_PAYLOAD_BYTES", "Op", "QueueCore", "RoundTrip", "T", "batched_settles", "check_connection",
           "check_wait", "due_in_ms", "encode_payload", "op_enqueue_into", "pairs", "raise_first", "scored", "settle_answers", "time_left",
           "timed_out", "unique_ms"]


class QueueCore(AdmissionOps, ClaimOps, SettleOps, LaneOps, FlowOps, BusOps, ControlOps, ReadOps):
    """One queue's calls and answers; :class:`echomq.Queue` and :class:`echomq.aio.Queue` send them."""
