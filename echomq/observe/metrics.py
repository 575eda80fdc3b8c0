"""Prometheus metrics of a node, read at scrape time: ``/metrics`` of ``emq dashboard``.

What is exported (``prometheus_client``, installed with ``echomq[dashboard]``):

| metric | type | labels | what |
|---|---|---|---|
| ``echomq_jobs`` | gauge | queue, state | jobs in each set now: the flat ``pending``, ``active``, ``scheduled``, ``dead`` (every dead job), and the lane and flow jobs' own, ``lane_pending``, ``lane_active``, ``flow_waiting``, ``flow_pending``, ``flow_active``, ``flow_scheduled`` |
| ``echomq_queue_paused`` | gauge | queue | 1 while the queue is paused |
| ``echomq_jobs_completed_total`` | counter | queue | jobs completed, all time (``emq:{q}:metrics:completed``) |
| ``echomq_jobs_dead_total`` | counter | queue | jobs that went dead, all time (``emq:{q}:metrics:failed``) |
| ``echomq_queue_unreadable`` | gauge | queue | 1 when the queue's keys could not be read (a wrong-typed key) |
| ``echomq_unreadable_keys`` | gauge | | keys skipped because their queue name is not one EchoMQ takes (a raw command wrote them) |
| ``echomq_workers_alive`` | gauge | | workers whose heartbeat record is live (``emq workers``) |

The counters are the server's own totals, so every scraper sees the same numbers
whichever process serves them; a restart of the dashboard does not reset them.

``emq worker --metrics-port P`` serves one worker's own view (:class:`WorkerCollector`),
read from its tally at scrape time: ``echomq_worker_jobs_total{outcome}`` (claimed,
completed, retried, dead, delayed, lost, requeued, abandoned, and its sweeps' stalled, recovered,
stalled_dead), ``echomq_worker_task_jobs_total{task, outcome}`` (the settled ones by the
name of the task that ran them: completed, retried, dead, delayed), ``echomq_worker_held``
and ``echomq_worker_concurrency``. They count from the worker's start; sum them over
workers with ``sum by (outcome)``. Two histograms come from the worker's ``Timings``
(the ``job.*`` hooks' ``duration_s`` and ``waited_s``, docs/hooks.md):
``echomq_worker_job_duration_seconds`` (handler run time, every settled outcome) and
``echomq_worker_job_waited_seconds`` (default id minted -> first claim).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .._client.connection import Connection
from .._core.workers import WorkerRecord
from ..admin.inventory import QueueNumbers, QueueScan, numbers_of
from .._protocol.keys import State
from .._client.partitioned import open_queues
from .._protocol.verbs import GROUPED_COUNTS

if TYPE_CHECKING:
    from ..worker.tallies import Histogram
    from ..worker.worker import Worker


def families(numbers: Iterable[QueueNumbers | tuple[str, Exception]], workers: list[WorkerRecord],
             unreadable_keys: int = 0) -> list[Metric]:
    """The metric families for these readings (pure: the collector reads, this decides what to show)."""
    jobs = GaugeMetricFamily("echomq_jobs", "Jobs in each set now: the flat states, then the lane and flow jobs' own",
                             labels=["queue", "state"])
    paused = GaugeMetricFamily("echomq_queue_paused", "1 while the queue is paused", labels=["queue"])
    completed = CounterMetricFamily("echomq_jobs_completed", "Jobs completed, all time", labels=["queue"])
    dead = CounterMetricFamily("echomq_jobs_dead", "Jobs that went dead, all time", labels=["queue"])
    unreadable = GaugeMetricFamily("echomq_queue_unreadable", "1 when the queue's keys could not be read",
                                   labels=["queue"])
    for reading in numbers:
        if isinstance(reading, tuple):
            unreadable.add_metric([reading[0]], 1)
            continue
        name, counts = reading.name, reading.counts
        for state in (*(state.value for state in State), *GROUPED_COUNTS):
            jobs.add_metric([name, state], getattr(counts, state))
        paused.add_metric([name], int(counts.paused))
        completed.add_metric([name], reading.completed)
        dead.add_metric([name], reading.dead)
        unreadable.add_metric([name], 0)
    skipped = GaugeMetricFamily("echomq_unreadable_keys", "Keys skipped: their queue name is not one EchoMQ takes")
    skipped.add_metric([], unreadable_keys)
    alive = GaugeMetricFamily("echomq_workers_alive", "Workers whose heartbeat record is live")
    alive.add_metric([], len(workers))
    return [jobs, paused, completed, dead, unreadable, skipped, alive]


class NodeCollector(Collector):
    """Reads every queue ``queues()`` finds (and ``workers()``) when scraped."""

    def __init__(self, connection: Connection, queues: Callable[[], QueueScan],
                 workers: Callable[[], list[WorkerRecord]]) -> None:
        self.connection = connection
        self.queues = queues
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        scan = self.queues()
        readings: list[QueueNumbers | tuple[str, Exception]] = [
            (name, found) if isinstance(found, Exception) else found
            for name, found in zip(scan.names, numbers_of(open_queues(self.connection, scan.names)))]
        yield from families(readings, self.workers(), scan.unreadable)


class WorkerCollector(Collector):
    """One worker's tally, held jobs and concurrency, read when scraped (the worker's thread keeps
    writing them; a scrape reads plain ints)."""

    def __init__(self, worker: "Worker") -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        tally = self.worker.tally
        jobs = CounterMetricFamily("echomq_worker_jobs", "Jobs this worker handled since it started, by outcome",
                                   labels=["outcome"])
        for item in fields(tally):
            jobs.add_metric([item.name], getattr(tally, item.name))
        tasks = CounterMetricFamily("echomq_worker_task_jobs", "Jobs this worker settled since it started, by task "
                                    "and outcome", labels=["task", "outcome"])
        for (task, outcome), count in sorted(self.worker.settler.task_tally.items()):
            tasks.add_metric([task, outcome], count)
        held = GaugeMetricFamily("echomq_worker_held", "Jobs this worker holds now")
        held.add_metric([], len(self.worker.held))
        concurrency = GaugeMetricFamily("echomq_worker_concurrency", "The most jobs this worker holds at once")
        concurrency.add_metric([], self.worker.config.concurrency)
        yield from (jobs, tasks, held, concurrency)
        timings = self.worker.timings
        yield histogram("echomq_worker_job_duration_seconds",
                        "Handler run time of the jobs this worker settled (start to outcome known)", timings.duration)
        yield histogram("echomq_worker_job_waited_seconds",
                        "First claims of default ids: the id's timestamp (producer clock) to the claim (worker clock)",
                        timings.waited)


def histogram(name: str, documentation: str, source: "Histogram") -> Metric:
    cumulative, total = source.snapshot()
    buckets = [("+Inf" if bound == float("inf") else repr(bound), count) for bound, count in cumulative]
    return HistogramMetricFamily(name, documentation, buckets=buckets, sum_value=total)
