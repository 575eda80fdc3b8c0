"""EchoMQ: a job queue for Python on Valkey, every state change one atomic step in the server."""

from . import aio, hooks
from .admin.steps import brand_node
from ._client.connection import Connection, connect
from .errors import (
    ArgumentError,
    BrandError,
    CommandRefused,
    ConfigurationError,
    ConnectionFailed,
    CounterError,
    CrossSlotFlow,
    EchoMQError,
    HostError,
    JobFailed,
    JobNotFound,
    JobTimeout,
    LayoutError,
    LeaseLost,
    PayloadError,
    PermissionDenied,
    PortInUse,
    ResultNotKept,
    ServerNotFound,
    ServerStartError,
    ShapeError,
    StateError,
    UnsupportedOnWire,
    WireError,
    WrongType,
)
from ._core.workers import WorkerRecord
from .admin.workers import list_workers
from .worker.heartbeat import HeartbeatConfig
from ._protocol.events import Event
from ._core.flows import CHILD_FAILURE, Flow
from ._protocol.keys import Keyspace, State
from .local.module import module_path
from ._client.partitioned import PartitionedQueue
from .worker.policy import Backoff, IdlePolicy, LeasePolicy
from ._client.queue import Counts, Enqueued, Job, Queue, Sweep
from ._protocol.rates import RateLimit
from ._protocol.verbs import Admission
from ._protocol.results import Status
from ._protocol.serializers import JSON, RAW, JSONSerializer, RawSerializer
from .local.server import EmbeddedServer
from .worker.tasks import App, AsyncJobContext, Delay, JobContext, Retry, Task
from .worker.timers import TimerConfig, Timers
from .worker.worker import Tally, Worker, WorkerConfig

__all__ = [
    "Admission",
    "ArgumentError", "BrandError", "CommandRefused", "ConfigurationError", "Connection", "ConnectionFailed",
    "CounterError", "Counts", "CrossSlotFlow", "EchoMQError", "EmbeddedServer", "Enqueued", "HostError", "JSON", "JSONSerializer",
    "Event", "Job", "JobFailed", "JobNotFound", "JobTimeout", "Keyspace", "LayoutError", "LeaseLost",
    "PartitionedQueue", "PayloadError", "PermissionDenied", "PortInUse", "Queue", "RAW", "RateLimit", "RawSerializer",
    "ResultNotKept",
    "ServerNotFound", "ServerStartError", "ShapeError", "State", "StateError", "Status", "Sweep", "UnsupportedOnWire",
    "WireError", "WrongType", "aio", "brand_node", "connect", "hooks", "module_path",
    # workers
    "App", "AsyncJobContext", "Backoff", "Delay", "IdlePolicy", "JobContext", "LeasePolicy", "Retry", "Tally", "Task",
    "TimerConfig", "Timers", "Worker", "WorkerConfig",
    # flows
    "CHILD_FAILURE", "Flow",
    # the workers list
    "HeartbeatConfig", "WorkerRecord", "list_workers",
]
__version__ = "0.1.0"
