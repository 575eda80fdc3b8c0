"""What every benchmark handler calls, EchoMQ's and each peer's alike: count a job, stamp a latency.

A handler must not pay a round trip per job to be counted (that would tax the fastest
queue most), so ``done()`` only bumps a counter in the process; a daemon thread adds
it to ``bench:done`` on the server every few milliseconds, and likewise pushes pick-up
latencies to ``bench:lat`` (RPUSH, in milliseconds). The harness polls ``bench:done``.
Both sides use commands no queue uses (INCRBYFLOAT to add, GETRANGE to read), so the
harness can leave them out of a queue's own server cost. The thread is started per process id, so it survives the
forks of prefork pools. Needs only redis-py or valkey-py, whichever is installed.
"""

from __future__ import annotations

import os
import threading
import time

DONE_KEY = "bench:done"
LAT_KEY = "bench:lat"
FLUSH_S = 0.002

_lock = threading.Lock()
_state = {"pid": None, "count": 0, "lat": []}


def _client():
    url = os.environ["BENCH_URL"]
    try:
        import redis

        return redis.Redis.from_url(url)
    except ImportError:
        import valkey

        return valkey.Valkey.from_url(url)


def _flusher() -> None:
    client = _client()
    while True:
        time.sleep(FLUSH_S)
        with _lock:
            count, lat = _state["count"], _state["lat"]
            _state["count"], _state["lat"] = 0, []
        if count or lat:
            pipe = client.pipeline(transaction=False)
            if lat:
                pipe.rpush(LAT_KEY, *lat)
            if count:
                pipe.incrbyfloat(DONE_KEY, count)
            pipe.execute()


def _ensure_thread() -> None:
    pid = os.getpid()
    if _state["pid"] != pid:
        with _lock:
            if _state["pid"] != pid:
                _state.update(pid=pid, count=0, lat=[])
                threading.Thread(target=_flusher, name="bench-probe", daemon=True).start()


def done(t: float | None = None) -> None:
    """Count one finished no-op job; ``t`` (epoch seconds at enqueue) also records its pick-up latency."""
    if t is not None:
        lat_ms = (time.time() - float(t)) * 1000.0
    _ensure_thread()
    with _lock:
        _state["count"] += 1
        if t is not None:
            _state["lat"].append(f"{lat_ms:.3f}")


def gaps(m: int, lo_ms: float, hi_ms: float) -> list[float]:
    """The same spread of idle gaps (seconds) for every queue: a golden-ratio walk over [lo, hi]."""
    return [(lo_ms + (hi_ms - lo_ms) * ((i * 0.6180339887) % 1.0)) / 1000.0 for i in range(m)]


def done_now(t: float | None = None) -> None:
    """As ``done`` but sent before returning: for a job run in a child that exits right after (RQ's fork)."""
    client = _client()
    pipe = client.pipeline(transaction=False)
    if t is not None:
        pipe.rpush(LAT_KEY, f"{(time.time() - float(t)) * 1000.0:.3f}")
    pipe.incrbyfloat(DONE_KEY, 1)
    pipe.execute()
