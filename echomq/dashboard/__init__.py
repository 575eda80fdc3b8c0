"""``emq dashboard``: a web UI and Prometheus ``/metrics`` for one node, on either wire.

Install with ``pip install "echomq[dashboard]"`` (Starlette, Jinja2, uvicorn,
prometheus_client). ``create_app`` builds the ASGI app; ``serve`` runs it with uvicorn
after the binding check (beyond localhost a token is required).

An application on top of the library: it may import every layer but ``cli`` (docs/architecture.md).
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from .._client.connection import Connection
from ..errors import ConfigurationError
from ..local.server import free_port
from .app import Settings, create_app
from .auth import check_binding

__all__ = ["Settings", "create_app", "check_binding", "listen", "serve", "serving"]


def listen(host: str, port: int) -> socket.socket:
    """The dashboard's socket, bound before anything says it serves: a port in use is one clear
    error, not a success line and then uvicorn's."""
    listening = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as exc:
        listening.close()
        raise ConfigurationError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; "
                                 "pick another port with --port") from None
    return listening


def serve(connection: Connection, settings: Settings, *, host: str = "127.0.0.1", port: int = 8080,
          listening: socket.socket | None = None) -> None:
    """Run the dashboard until Ctrl-C (refuses a non-loopback ``host`` without a token), on
    ``listening`` if given (:func:`listen`), else on ``host``:``port``."""
    import signal
    import threading

    import uvicorn

    check_binding(host, settings.token)
    if listening is None:
        listening = listen(host, port)
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down on SIGTERM/SIGINT, then re-raises the signal to the handler it found:
        # with this one, a stop is a clean exit (status 0), not a death by signal or a KeyboardInterrupt
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
    config = uvicorn.Config(create_app(connection, settings), host=host, port=port, log_level="warning")
    uvicorn.Server(config).run(sockets=[listening])


@contextmanager
def serving(connection: Connection, settings: Settings, *, start_timeout_s: float = 10.0) -> Iterator[str]:
    """The dashboard on a free loopback port in a thread of this process, for tests and benchmarks:
    yields its base URL and stops it when the block ends."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(connection, settings), host="127.0.0.1", port=port,
                                          log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="emq-dashboard", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not server.started:
            raise RuntimeError(f"the dashboard did not start on 127.0.0.1:{port} in {start_timeout_s}s")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
