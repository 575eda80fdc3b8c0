"""The worker's settings (:class:`WorkerConfig`): its slots, batches, grace, lease, back-offs and timers."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigurationError
from .._protocol.verbs import LIMIT_MAX
from .heartbeat import HeartbeatConfig
from .policy import IdlePolicy, LeasePolicy
from .tasks import POOLS, Task, check_timeout
from .timers import TimerConfig


@dataclass(frozen=True)
class WorkerConfig:
    concurrency: int = 10  #: jobs held (and handlers running) at once in this process
    claim_batch: int = 10  #: the most claims pipelined in one round trip
    grace_s: float = 10.0  #: how long running jobs may finish after a stop signal
    lease: LeasePolicy = field(default_factory=LeasePolicy)
    idle: IdlePolicy = field(default_factory=IdlePolicy)
    timers: TimerConfig = field(default_factory=TimerConfig)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)  #: the workers list (`emq workers`)
    burst: bool = False  #: stop once the queues are empty (:meth:`Worker.drained`)
    timeout_s: float | None = None  #: overrides every task's ``timeout`` (``emq worker --timeout``)
    #: while a queue is busy, the longest wait between two polls of its flow sets that give nothing
    #: (they back off as ``idle`` does, up to this); an idle queue's are polled when its waiter's
    #: block ends (docs/lanes-and-flows.md "The worker")
    flow_poll_max_ms: int = 5000
    #: how long a finished handler's settle may wait for the rest of its claim batch (others still
    #: running that started less than this ago), so quick jobs settle together in one step (0: at once)
    settle_wait_ms: float = 1.0
    #: claim this many jobs, settle them, then stop (``emq worker --max-jobs``: a process that leaks
    #: starts afresh under its supervisor); None: no limit
    max_jobs: int | None = None
    #: where sync handlers run: ``"thread"`` (the worker's threads) or ``"process"`` (child processes the
    #: worker kills past their timeout: echomq.worker.children); a task's own ``pool`` wins
    pool: str = "thread"
    #: (process pool) a child is replaced after this many jobs (``--max-jobs-per-child``); None: never
    max_jobs_per_child: int | None = None
    #: (process pool) a child is replaced after a job that leaves it holding more resident memory than
    #: this, MiB (``--max-memory-per-child``); None: never
    max_memory_per_child_mb: int | None = None

    def __post_init__(self) -> None:
        check_timeout(self.timeout_s, "the worker")
        if not 0 <= self.settle_wait_ms <= 1000:
            raise ConfigurationError(f"bad settle_wait_ms {self.settle_wait_ms!r}: from 0 to 1000 ms")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigurationError(f"bad concurrency {self.concurrency!r}: an integer >= 1")
        if not isinstance(self.claim_batch, int) or not 1 <= self.claim_batch <= LIMIT_MAX:
            raise ConfigurationError(f"bad claim_batch {self.claim_batch!r}: from 1 to {LIMIT_MAX}")
        if not self.grace_s >= 0:
            raise ConfigurationError(f"bad grace_s {self.grace_s!r}: seconds >= 0")
        if self.max_jobs is not None and (isinstance(self.max_jobs, bool) or not isinstance(self.max_jobs, int)
                                          or self.max_jobs < 1):
            raise ConfigurationError(f"bad max_jobs {self.max_jobs!r}: an integer >= 1, or None")

        if self.pool not in POOLS:
            raise ConfigurationError(f"bad pool {self.pool!r}: one of {', '.join(POOLS)}")
        for name in ("max_jobs_per_child", "max_memory_per_child_mb"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"bad {name} {value!r}: an integer >= 1, or None")

    def timeout_of(self, task: Task) -> float | None:
        """A handler's timeout in seconds (None: none): the worker's ``timeout_s``, else the task's."""
        return self.timeout_s if self.timeout_s is not None else task.timeout
