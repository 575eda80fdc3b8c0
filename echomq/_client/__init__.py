"""The blocking client (private; its names are exported by ``echomq``): the connection, the queues.

``connection`` is the one send path of the blocking client on either wire (and the pure wire codec
the asyncio connection shares); ``queue`` drives one queue's operations over it, ``partitioned``
one queue over many slots.

May import: ``echomq.errors``, ``echomq.hooks``, ``_protocol`` and ``_core`` (docs/architecture.md).
"""
