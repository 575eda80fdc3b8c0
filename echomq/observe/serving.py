"""Serving what EchoMQ shows over HTTP: whether an address reaches beyond this host (the worker's
metrics and the dashboard both ask), and the worker's Prometheus ``/metrics`` server
(``emq worker --metrics-port``)."""

from __future__ import annotations

import ipaddress
import logging
import os
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server

from ..errors import ConfigurationError
from .metrics import WorkerCollector

if TYPE_CHECKING:
    from ..worker.worker import Worker

log = logging.getLogger("echomq.worker")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 in brackets or not) is only this machine's."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def serve_worker_metrics(instance: "Worker", host: str, port: int) -> None:
    """Prometheus /metrics for this worker on a daemon thread (it ends with the process); a port
    that cannot be bound is a :class:`~echomq.ConfigurationError`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(instance))
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigurationError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    log.info("worker %d: metrics on http://%s:%d/metrics", os.getpid(), host, server.server_port)
    if not is_loopback(host):  # allowed (a scraper on another host), said: it takes no token
        log.warning("worker %d: the metrics on %s:%d are reachable beyond this host and take no token: anyone who "
                    "reaches the port reads this worker's counters (they name its app's queues, tasks and error "
                    "types; no job, id or payload is in them)", os.getpid(), host, server.server_port)
