"""``emq dashboard``: a web UI and Prometheus ``/metrics`` for one node, on either wire.

Install with ``pip install "echomq[dashboard]"`` (Starlette, Jinja2, uvicorn,
prometheus_client). ``create_app`` builds the ASGI app; ``serve`` runs it with uvicorn
after the binding check (beyond localhost a token is required).
"""

from __future__ import annotations

from .app import Settings, create_app
from .auth import check_binding

__all__ = ["Settings", "create_app", "check_binding", "serve"]


def serve(connection, settings: Settings, *, host: str = "127.0.0.1", port: int = 8080) -> None:  # type: ignore[no-untyped-def]
    """Run the dashboard until Ctrl-C (refuses a non-loopback ``host`` without a token)."""
    import signal
    import threading

    import uvicorn

    check_binding(host, settings.token)
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down on SIGTERM/SIGINT, then re-raises the signal to the handler it found:
        # with this one, a stop is a clean exit (status 0), not a death by signal or a KeyboardInterrupt
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
    uvicorn.run(create_app(connection, settings), host=host, port=port, log_level="warning")
