"""The operator's reads and writes, shared by ``emq`` and the dashboard (internal).

``steps`` brands a node and holds what both surfaces share (durations as people type them, a
bounded verb repeated until it runs dry); ``inventory`` reads a node's queues, numbers and jobs for
people; ``metrics`` exports them (and a worker's own) to Prometheus; ``workers`` lists the workers.

May import: every layer below it, up to ``worker`` (docs/architecture.md); never ``local``,
the applications (``cli``, ``dashboard``, ``parity``) or the public surface.
"""
