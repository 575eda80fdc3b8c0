"""The worker runtime (internal; its public names are exported by ``echomq``).

``worker`` runs the loop claim -> run -> renew -> settle; ``tasks`` is the App and what a handler
sees; ``policy`` decides (pure); ``timers``, ``cron`` and ``heartbeat`` are the services each worker
runs beside it; ``waiter`` blocks while queues are idle; ``supervisor`` runs N worker processes;
``loading`` finds the app ``emq worker MODULE:APP`` names.

May import: the layers below it (``echomq.errors``, ``echomq.hooks``, ``_protocol``, ``_core``,
``_client``, ``aio``, ``admin``), never ``observe``, ``local`` or the applications (docs/architecture.md).
"""
