"""Who may reach the dashboard: the binding check at start, the token on every request (a
growing delay after each wrong one), the headers that keep its pages out of other sites' frames,
and the Origin check that, with the form secret, keeps another site from posting actions with
the user's login."""

from __future__ import annotations

import asyncio
import base64
import hmac
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from ..observe.serving import is_loopback

#: the Host headers a dashboard without a token answers (it listens on loopback only)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
MIN_TOKEN_CHARS = 16  #: a shorter token is refused at start: guessable within the delays below
#: after the n-th wrong token in a row from one address, its refusal waits FIRST_DELAY_S * 2^(n-1),
#: at most MAX_DELAY_S; refusals are answered one at a time, so parallel guesses gain nothing
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 10.0
ADDRESSES_KEPT = 4096  #: the addresses whose wrong tokens are counted (the oldest is forgotten past this)
#: every response's headers: no other site frames a page (clickjacking), nothing but the dashboard's
#: own files runs or loads in it, no content is sniffed into another type, no URL leaves in a Referer
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                 b"form-action 'self'; object-src 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


def check_token(token: str | None) -> None:
    """A token, when there is one, of at least MIN_TOKEN_CHARS characters and not all whitespace."""
    if token is None:
        return
    if not token.strip():
        raise ConfigurationError("refusing a dashboard token that is all whitespace: set EMQ_DASHBOARD_TOKEN to a "
                                 f"secret of {MIN_TOKEN_CHARS} characters or more, e.g. from: openssl rand -hex 16")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(f"refusing a dashboard token of {len(token)} characters: use {MIN_TOKEN_CHARS} or "
                                 "more (EMQ_DASHBOARD_TOKEN), e.g. from: openssl rand -hex 16")


def refusal_delay_s(failures: int) -> float:
    """How long the answer to the ``failures``-th wrong token in a row waits (pure)."""
    return min(FIRST_DELAY_S * 2 ** min(failures - 1, 32), MAX_DELAY_S)


def same_origin(origin: str | None, host: str | None) -> bool:
    """A POST's ``Origin`` header names the host it was sent to (pure): a browser sends it with
    every POST, and another site cannot forge it. None (a client that is not a browser) passes:
    the form secret still guards it; ``null`` (a sandboxed frame, a redirect) does not."""
    if origin is None:
        return True
    return host is not None and urlsplit(origin).netloc.lower() == host.lower()


def check_binding(host: str, token: str | None) -> None:
    """Bound beyond localhost, the dashboard (which can reprocess and pause) needs a token; a token
    given must pass :func:`check_token`."""
    check_token(token)
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
    browser asks for it: any user name, the token as password). Each wrong token offered in a row
    from one address waits longer for its 401 (:func:`refusal_delay_s`), one refusal at a time; a
    request without one (a browser's first, before it asks) is answered at once."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        self.app, self.token, self.sleep = app, token, sleep
        self.failures: dict[str, int] = {}  #: wrong tokens in a row, by client address
        self._refusing = asyncio.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            header = headers.get(b"authorization", b"").decode("latin-1") or None
            address = (scope.get("client") or ("?",))[0]
            if authorized(header, self.token):
                self.failures.pop(address, None)
            else:
                if header is not None:
                    await self._wait_out(address)
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"www-authenticate", b'Basic realm="emq dashboard"')]})
                await send({"type": "http.response.body",
                            "body": b"401: this dashboard needs its token (Basic auth password, or Bearer)\n"})
                return
        await self.app(scope, receive, send)

    async def _wait_out(self, address: str) -> None:
        async with self._refusing:
            failures = self.failures.pop(address, 0) + 1
            self.failures[address] = failures  # re-inserted: the dict's order is the least recent first
            while len(self.failures) > ADDRESSES_KEPT:
                del self.failures[next(iter(self.failures))]
            await self.sleep(refusal_delay_s(failures))


class SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP response."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)
