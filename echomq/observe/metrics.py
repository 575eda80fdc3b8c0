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
read from its figures at scrape time: ``echomq_worker_jobs_total{queue, task, outcome}``
(claimed, completed, retried, dead, delayed, lost, requeued, abandoned, and its sweeps' stalled,
recovered, stalled_dead, with ``task=""``), ``echomq_worker_failures_total{queue, task, error}``,
``echomq_worker_held`` and ``echomq_worker_concurrency``. A job counts under the task it ran: the
one its headers name, else its queue's one task (``Held.task``). They count from the worker's
start; sum them over workers with ``sum by (outcome)``. Two histograms, by queue and task, hold
the ``job.*`` hooks' ``duration_s`` and ``waited_s`` (docs/hooks.md):
``echomq_worker_job_duration_seconds`` (handler run time, every settled outcome) and
``echomq_worker_job_waited_seconds`` (default id minted -> first claim).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .._client.connection import Connection
from .._core.summaries import OUTCOMES, Figures, TaskSummary
from .._protocol.shown import id_form
from .._core.workers import WorkerRecord
from ..admin.inventory import QueueNumbers, QueueScan, numbers_of
from .._protocol.keys import State
from .._client.partitioned import open_queues
from .._protocol.verbs import GROUPED_COUNTS

if TYPE_CHECKING:
    from ..worker.worker import Worker


def families(numbers: Iterable[QueueNumbers | tuple[str, Exception]], workers: list[WorkerRecord],
             unreadable_keys: int = 0, summaries: Mapping[str, Sequence[TaskSummary]] | None = None) -> list[Metric]:
    """The metric families for these readings (pure: the collector reads, this decides what to show).
    ``summaries``: what each live worker published of its queues' tasks (by worker id)."""
    jobs = GaugeMetricFamily("echomq_jobs", "Jobs in each set now: the flat states, then the lane and flow jobs' own",
                             labels=["queue", "state"])
    paused = GaugeMetricFamily("echomq_queue_paused", "1 while the queue is paused", labels=["queue"])
    completed = CounterMetricFamily("echomq_jobs_completed", "Jobs completed, all time", labels=["queue"])
    dead = CounterMetricFamily("echomq_jobs_dead", "Jobs that went dead, all time", labels=["queue"])
    unreadable = GaugeMetricFamily("echomq_queue_unreadable", "1 when the queue's keys could not be read",
                                   labels=["queue"])
    oldest = GaugeMetricFamily("echomq_oldest_waiting_seconds", "How long the oldest pending job has waited since it "
                               "was admitted (server clock); 0 when none is pending", labels=["queue"])
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
        oldest.add_metric([name], (reading.oldest_waiting_ms or 0) / 1000)
    skipped = GaugeMetricFamily("echomq_unreadable_keys", "Keys skipped: their queue name is not one EchoMQ takes")
    skipped.add_metric([], unreadable_keys)
    alive = GaugeMetricFamily("echomq_workers_alive", "Workers whose heartbeat record is live")
    alive.add_metric([], len(workers))
    return [jobs, paused, completed, dead, unreadable, oldest, skipped, alive, *task_families(summaries or {})]


def task_families(summaries: Mapping[str, Sequence[TaskSummary]]) -> list[Metric]:
    """Each live worker's figures per queue and task since it started, as it published them with its
    heartbeat, labelled by worker too: each series counts up for as long as its worker lives, so
    ``sum by (queue, task) (rate(...))`` is right across workers that come and go (pure)."""
    jobs = CounterMetricFamily("echomq_task_jobs", "Jobs by queue, task and outcome, as each live worker counted "
                               "them since it started", labels=["queue", "task", "worker", "outcome"])
    failures = CounterMetricFamily("echomq_task_failures", "Failed attempts (retried or dead) by error type, as each "
                                   "live worker counted them", labels=["queue", "task", "worker", "error"])
    run = HistogramMetricFamily("echomq_task_run_seconds", "Handler run time of each attempt a live worker settled",
                                labels=["queue", "task", "worker"])
    waited = HistogramMetricFamily("echomq_task_waited_seconds", "Time from enqueue (a default id's mint) to the "
                                   "first claim", labels=["queue", "task", "worker"])
    for worker_id, tasks in sorted(summaries.items()):
        for t in tasks:
            add_figures(t.total, [t.queue, t.task, id_form(worker_id)], jobs, failures, run, waited)
    return [jobs, failures, run, waited]


class NodeCollector(Collector):
    """Reads every queue ``queues()`` finds (and ``workers()``, and what ``summaries()`` gives of them)
    when scraped."""

    def __init__(self, connection: Connection, queues: Callable[[], QueueScan],
                 workers: Callable[[], list[WorkerRecord]],
                 summaries: Callable[[list[WorkerRecord]], Mapping[str, Sequence[TaskSummary]]] | None = None) -> None:
        self.connection = connection
        self.queues = queues
        self.workers = workers
        self.summaries = summaries

    def collect(self) -> Iterator[Metric]:
        scan = self.queues()
        readings: list[QueueNumbers | tuple[str, Exception]] = [
            (name, found) if isinstance(found, Exception) else found
            for name, found in zip(scan.names, numbers_of(open_queues(self.connection, scan.names), oldest=True))]
        workers = self.workers()
        yield from families(readings, workers, scan.unreadable,
                            None if self.summaries is None else self.summaries(workers))


class WorkerCollector(Collector):
    """One worker's figures per queue and task, held jobs and concurrency, read when scraped (the
    worker's thread keeps writing them; a scrape reads plain ints and each histogram behind its lock)."""

    def __init__(self, worker: "Worker") -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        stats = self.worker.stats
        yield from worker_families({key: stats.tasks[key].figures() for key in stats.keys()},
                                   {queue: dict(counts) for queue, counts in list(stats.sweeps.items())})
        held = GaugeMetricFamily("echomq_worker_held", "Jobs this worker holds now")
        held.add_metric([], len(self.worker.held))
        concurrency = GaugeMetricFamily("echomq_worker_concurrency", "The most jobs this worker holds at once")
        concurrency.add_metric([], self.worker.config.concurrency)
        yield from (held, concurrency)


def worker_families(tasks: Mapping[tuple[str, str], Figures], sweeps: Mapping[str, Mapping[str, int]]
                    ) -> list[Metric]:
    """A worker's own families from its figures per (queue, task) and its sweeps' per queue (pure)."""
    jobs = CounterMetricFamily("echomq_worker_jobs", "Jobs this worker handled since it started, by queue, task and "
                               "outcome (a sweep's finds: task \"\")", labels=["queue", "task", "outcome"])
    failures = CounterMetricFamily("echomq_worker_failures", "Failed attempts (retried or dead) by error type",
                                   labels=["queue", "task", "error"])
    run = HistogramMetricFamily("echomq_worker_job_duration_seconds", "Handler run time of the jobs this worker "
                                "settled (start to outcome known)", labels=["queue", "task"])
    waited = HistogramMetricFamily("echomq_worker_job_waited_seconds", "First claims of default ids: the id's "
                                   "timestamp (producer clock) to the claim (worker clock)", labels=["queue", "task"])
    for (queue, task), figures in sorted(tasks.items()):
        add_figures(figures, [queue, task], jobs, failures, run, waited)
    for queue, counts in sorted(sweeps.items()):
        for outcome, count in sorted(counts.items()):
            jobs.add_metric([queue, "", outcome], count)
    return [jobs, failures, run, waited]


def add_figures(figures: Figures, labels: list[str], jobs: CounterMetricFamily, failures: CounterMetricFamily,
                run: HistogramMetricFamily, waited: HistogramMetricFamily) -> None:
    """One (queue, task)'s figures into the families: ``labels`` first, then the family's own (outcome, error)."""
    for outcome in OUTCOMES:
        jobs.add_metric([*labels, outcome], figures.counts.get(outcome, 0))
    for kind, count in sorted(figures.errors.items()):
        failures.add_metric([*labels, kind], count)
    for family, buckets in ((run, figures.run), (waited, figures.waited)):
        family.add_metric(labels, buckets=[("+Inf" if bound == float("inf") else repr(bound), count)
                                           for bound, count in zip((*buckets.bounds, float("inf")), buckets.counts)],
                          sum_value=buckets.total)
