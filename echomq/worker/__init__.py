"""The worker runtime (internal; its public names are exported by ``echomq``).

``worker`` is the :class:`Worker`, claim -> run -> renew -> settle, composed of its parts by role:
``loop`` (the steps, exchanges, relays), ``pacing`` (when to claim and how many; no I/O),
``executor``, ``outcomes`` and ``pool`` (handlers run, outcomes gathered), ``settling``,
``leases``, ``waiting`` (the waiters armed, their reports read), ``shutdown`` (stop, grace,
requeue) and ``tallies``, over ``held`` (a held job's record) and ``config``. ``tasks`` is the App
and what a handler sees; ``policy`` decides (pure); ``timers``, ``cron`` and ``heartbeat`` are the
services each worker runs beside it; ``waiter`` is a thread that blocks while queues are idle;
``supervisor`` runs N worker processes; ``loading`` finds the app ``emq worker MODULE:APP`` names.

May import: the layers below it (``echomq.errors``, ``echomq.hooks``, ``_protocol``, ``_core``,
``_client``, ``aio``, ``admin``), never ``observe``, ``local`` or the applications (docs/architecture.md).
"""
