"""Who may reach the dashboard: the binding check at start, the token on every request,
and the form secret that keeps another site from posting actions with the user's login."""

from __future__ import annotations

import base64
import hmac
import ipaddress
from typing import Any, Awaitable, Callable

from ..errors import ConfigurationError

#: the Host headers a dashboard without a token answers (it listens on loopback only)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_binding(host: str, token: str | None) -> None:
    """Bound beyond localhost, the dashboard (which can reprocess and pause) needs a token."""
    if not is_loopback(host) and not token:
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host} without a token: anyone who can reach it could act on "
            "your queues. Pass --token T (or set EMQ_DASHBOARD_TOKEN), or bind --host 127.0.0.1"
        )


def authorized(header: str | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, or Basic auth (any user name) whose password is the token."""
    if not header:
        return False
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        offered = value.strip()
    elif scheme == "basic":
        try:
            offered = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
    else:
        return False
    return hmac.compare_digest(offered.encode(), token.encode())


class TokenRequired:
    """ASGI middleware: every HTTP request must carry the token (401 with a Basic challenge, so a
    browser asks for it: any user name, the token as password)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            header = headers.get(b"authorization", b"").decode("latin-1") or None
            if not authorized(header, self.token):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"www-authenticate", b'Basic realm="emq dashboard"')]})
                await send({"type": "http.response.body",
                            "body": b"401: this dashboard needs its token (Basic auth password, or Bearer)\n"})
                return
        await self.app(scope, receive, send)
