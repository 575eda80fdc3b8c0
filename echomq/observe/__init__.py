"""What EchoMQ shows of itself to monitoring (internal): ``metrics``, the Prometheus collectors of a
node (the dashboard's ``/metrics``) and of a worker (``emq worker --metrics-port``); ``serving``, the
worker's metrics server.

The instrumentation point and the traces built on it are public modules at the package's top
(``echomq.hooks`` at the bottom of the layers, under the send path that emits through it;
``echomq.otel`` beside the public surface). May import every layer below it: up to ``admin`` and
``worker``, whose numbers it reads (docs/architecture.md).
"""
