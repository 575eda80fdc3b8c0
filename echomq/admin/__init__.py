"""The operator's reads and writes, as library functions shared by ``emq``, the dashboard and the
worker (internal).

``steps`` brands a node and holds what both surfaces share (durations as people type them, a
bounded verb repeated until it runs dry); ``inventory`` reads a node's queues, numbers and jobs for
people; ``actions`` writes what an operator asks of a queue's jobs (enqueue, reprocess, remove,
cancel, purge, drain, sweep); ``workers`` lists the workers; ``doctor`` checks a node for
production (``emq doctor``; the worker runs its eviction check at start). Every read goes on the
connection's send path, so a dropped link is ``ConnectionFailed`` here as everywhere.

May import: the layers below it, up to ``aio``; never the worker, ``observe``, ``local``, the
applications or the public surface (docs/architecture.md).
"""
