"""The queue's operations, with no I/O (private): what each call sends and what its replies mean.

``core`` holds :class:`QueueCore`, whose every method is a generator that yields a round trip and
returns the answer (everything it learned: nothing is left on the queue), so the blocking client and
the asyncio one drive the very same code. Its operations are one file per family -- ``admission``,
``claims``, ``settles`` (with ``batching``), ``lanes``, ``flows`` (which also plans a flow tree),
``bus``, ``control``, ``reads`` -- over ``base``, what they share. ``reaper`` recovers the lane and
flow leases STALLED.CHECK refuses, ``workers`` reads the workers list.

May import: ``echomq.errors`` and ``_protocol`` (docs/architecture.md).
"""
