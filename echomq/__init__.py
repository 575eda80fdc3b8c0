"""EchoMQ: a job queue for Python on Valkey, every state change one atomic step in the server."""

from . import aio, hooks
from .admin import brand_node
from .connection import Connection, connect
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
from .heartbeat import HeartbeatConfig, WorkerRecord, list_workers
from .events import Event
from .flows import CHILD_FAILURE, Flow
from .keys import Keyspace, State
from .module import module_path
from .partitioned import PartitionedQueue
from .policy import Backoff, IdlePolicy, LeasePolicy
from .queue import Counts, Enqueued, Job, Queue, Sweep
from .rates import RateLimit
from .verbs import Admission
from .results import Status
from .serializers import JSON, RAW, JSONSerializer, RawSerializer
from .server import EmbeddedServer
from .tasks import App, AsyncJobContext, Delay, JobContext, Retry, Task
from .timers import TimerConfig, Timers
from .worker import Tally, Worker, WorkerConfig

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
