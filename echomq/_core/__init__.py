"""The queue's operations, with no I/O (private): what each call sends and what its replies mean.

``core`` holds :class:`QueueCore`, whose every method is a generator that yields a round trip and
returns the answer, so the blocking client and the asyncio one drive the very same code; ``flows``
plans a flow tree, ``reaper`` recovers the lane and flow leases STALLED.CHECK refuses, ``workers``
reads the workers list.

May import: ``echomq.errors`` and ``_protocol`` (docs/architecture.md).
"""
