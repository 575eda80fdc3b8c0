"""Completion and death rates over time: samples of the queues' running totals, taken by a
thread of the dashboard process, and the small SVG chart drawn from them."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..admin.inventory import QueueNumbers

log = logging.getLogger("echomq.dashboard")


@dataclass(frozen=True)
class Sample:
    at: float  #: local monotonic seconds
    totals: dict[str, tuple[int, int]]  #: queue -> (completed, dead), running totals


@dataclass(frozen=True)
class Point:
    at: float
    completed_per_s: float
    dead_per_s: float


def rate_series(samples: list[Sample], queue: str | None = None) -> list[Point]:
    """Per-second rates between consecutive samples, for one queue or (None) all of them summed.
    A total that went down (the metrics hash was reset) counts as no progress, not a negative rate."""
    points = []
    for before, after in zip(samples, samples[1:]):
        elapsed = after.at - before.at
        if elapsed <= 0:
            continue
        names = [queue] if queue is not None else list(after.totals)
        done = died = 0
        for name in names:
            if name in after.totals and name in before.totals:
                done += max(0, after.totals[name][0] - before.totals[name][0])
                died += max(0, after.totals[name][1] - before.totals[name][1])
        points.append(Point(after.at, done / elapsed, died / elapsed))
    return points


def svg_chart(points: list[Point], *, width: int = 640, height: int = 160, span_s: float = 300.0,
              min_span_s: float = 30.0) -> str:
    """Two lines (completed/s green, dead/s red) as inline SVG, over the last ``span_s`` seconds,
    or over what has been sampled so far (at least ``min_span_s``) when that is shorter."""
    pad = 28
    frame = (f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
             f'role="img" aria-label="completed and dead per second">'
             f'<rect x="{pad}" y="4" width="{width - pad - 4}" height="{height - pad}" class="frame"/>')
    if not points:
        return frame + f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">sampling…</text></svg>'
    end = points[-1].at
    span_s = min(span_s, max(min_span_s, end - points[0].at))
    shown = [p for p in points if p.at >= end - span_s]
    top = max(1.0, *(max(p.completed_per_s, p.dead_per_s) for p in shown))
    plot_w, plot_h = width - pad - 4, height - pad

    def xy(at: float, value: float) -> str:
        x = pad + plot_w * (1 - (end - at) / span_s)
        y = 4 + plot_h * (1 - value / top)
        return f"{x:.1f},{y:.1f}"

    lines = []
    for name, css in (("completed_per_s", "done"), ("dead_per_s", "died")):
        path = " ".join(xy(p.at, getattr(p, name)) for p in shown)
        lines.append(f'<polyline class="{css}" points="{path}"/>')
    labels = (f'<text x="2" y="14">{top:.0f}/s</text><text x="2" y="{height - pad + 4}">0</text>'
              f'<text x="{pad}" y="{height - 6}">-{_span_label(span_s)}</text>'
              f'<text x="{width - 4}" y="{height - 6}" text-anchor="end">now</text>'
              f'<text x="{pad + 6}" y="18" class="legend">'
              f'<tspan class="done">completed/s {shown[-1].completed_per_s:.1f}</tspan> '
              f'<tspan class="died">dead/s {shown[-1].dead_per_s:.1f}</tspan></text>')
    return frame + "".join(lines) + labels + "</svg>"


def _span_label(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


class Sampler:
    """A daemon thread reading every queue's totals each ``interval_s``; keeps ``keep`` samples."""

    def __init__(self, read: Callable[[], list[QueueNumbers]], interval_s: float = 2.0, keep: int = 180) -> None:
        self.read, self.interval_s = read, interval_s
        self.samples: deque[Sample] = deque(maxlen=keep)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="emq-dashboard-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def sample_once(self) -> None:
        numbers = self.read()
        sample = Sample(time.monotonic(), {n.name: (n.completed, n.dead) for n in numbers})
        with self._lock:
            self.samples.append(sample)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # a link down or a refusal: the chart shows a gap, the thread lives on
                log.warning("dashboard sampler: %s: %s", type(exc).__name__, exc)
            self._stop.wait(self.interval_s)
