"""Waiting on what a test can observe, against a deadline: a count, a file a handler wrote, a log
line, the server's clock, a replica's offset. Nothing here sleeps as synchronisation: each wait
polls a condition and fails, saying what it waited for, when the deadline passes."""

from __future__ import annotations

import time
from typing import Any, Callable

# valkey-py's annotations mix its sync and asyncio returns (``Awaitable[Any] | Any``) and want str
# keys: the helpers take its sync client as Any, so type checkers read the tests, not its stubs.
Client = Any


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "the condition", *,
               every: float = 0.01) -> Any:
    """Poll ``predicate`` every ``every`` s until it returns something truthy (returned), or fail
    after ``timeout`` s naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def server_ms(client: Client) -> int:
    """The server clock in ms, as the verbs read it (TIME)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_server_past(client: Client, deadline_ms: float, timeout_s: float = 10.0) -> None:
    """Poll the server's clock until it is past ``deadline_ms`` (a lease's score, a due time): waits
    on the server, not on a guess. Polled each ms: a test waits a lease of a few ms, not ten."""
    wait_until(lambda: server_ms(client) > deadline_ms, timeout_s, f"the server clock past {deadline_ms}", every=0.001)


def wait_link_up(replica: Any, timeout_s: float = 20.0) -> None:
    """Wait until ``replica`` (an EmbeddedServer started with ``replicaof``) is linked to its primary."""
    with replica.client() as client:
        wait_until(lambda: client.info("replication").get("master_link_status") == "up", timeout_s,
                   "the replica linked to its primary")


def caught_up(primary: Client, replica: Client, timeout_s: float = 30.0) -> None:
    """Wait until the replica's link is up and its offset has reached the primary's (two clients)."""

    def there() -> bool:
        info = replica.info("replication")
        return info.get("master_link_status") == "up" and \
            info.get("slave_repl_offset", -1) >= primary.info("replication")["master_repl_offset"]

    wait_until(there, timeout_s, "the replica caught up with its primary", every=0.002)
