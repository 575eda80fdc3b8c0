"""Valkey on this machine (internal; ``EmbeddedServer``, ``LocalCluster`` and ``module_path`` are
exported by ``echomq``): the embedded server, a local cluster, where the built trafikey module is
(and, beside it, the module a package install built), and the demo.

May import: every layer below it, up to ``observe`` (docs/architecture.md).
"""
