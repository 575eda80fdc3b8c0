"""EchoMQ: a job queue for Python on Valkey, every state change one atomic step in the server.

The public surface: what users import is in ``__all__`` (and ``echomq.aio``, ``echomq.testing``,
``echomq.errors``, ``echomq.hooks``, ``echomq.otel``); the folders hold the implementation, in
layers (docs/architecture.md).
"""

from . import aio, hooks
from ._version import __version__
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
    StartupFailed,
    StateError,
    UnknownTask,
    UnsupportedOnWire,
    WireError,
    WrongType,
)
from ._protocol.events import Event
from ._protocol.ids import minted_ms
from ._protocol.keys import Keyspace, State
from ._protocol.rates import RateLimit
from ._protocol.results import ResultLayout, Status
from ._protocol.serializers import JSON, RAW, JSONSerializer, RawSerializer
from ._protocol.shown import publish as _publish
from ._protocol.verbs import Admission
from ._core.flows import CHILD_FAILURE, Flow, same_slot_name
from ._core.workers import WorkerRecord
from ._client.partitioned import PartitionedQueue
from ._client.queue import Claims, Counts, Enqueued, Job, Queue, Sweep
from .worker.heartbeat import HeartbeatConfig
from .worker.lifecycle import AppState
from .worker.policy import Backoff, IdlePolicy, LeasePolicy
from .worker.tasks import App, AsyncJobContext, Delay, JobContext, Retry, Task, TaskFunction
from .worker.canvas import Chain, Group, Signature, chain, group
from .worker.handles import AsyncJobHandle, JobHandle
from .worker.timers import TimerConfig, Timers
from .worker.worker import Tally, Worker, WorkerConfig
from .admin.workers import list_workers
from .local.cluster import LocalCluster
from .local.module import module_path
from .local.server import EmbeddedServer

__all__ = [
    "Admission",
    "ArgumentError", "BrandError", "Claims", "CommandRefused", "ConfigurationError", "Connection", "ConnectionFailed",
    "CounterError", "Counts", "CrossSlotFlow", "EchoMQError", "EmbeddedServer", "Enqueued", "HostError", "JSON", "JSONSerializer",
    "Event", "Job", "JobFailed", "JobNotFound", "JobTimeout", "Keyspace", "LayoutError", "LeaseLost",
    "PartitionedQueue", "PayloadError", "PermissionDenied", "PortInUse", "Queue", "RAW", "RateLimit", "RawSerializer",
    "ResultLayout", "ResultNotKept",
    "ServerNotFound", "ServerStartError", "ShapeError", "StartupFailed", "State", "StateError", "Status", "Sweep", "UnknownTask",
    "UnsupportedOnWire",
    "WireError", "WrongType", "aio", "brand_node", "connect", "hooks", "minted_ms", "module_path",
    # Valkey on this machine (tests, trying things)
    "LocalCluster",
    # workers
    "App", "AppState", "AsyncJobContext", "Backoff", "Delay", "IdlePolicy", "JobContext", "LeasePolicy", "Retry", "Tally", "Task",
    "TimerConfig", "Timers", "Worker", "WorkerConfig",
    # calling tasks: handles, and calls put together (on flows)
    "AsyncJobHandle", "Chain", "Group", "JobHandle", "Signature", "TaskFunction", "chain", "group",
    # flows
    "CHILD_FAILURE", "Flow", "same_slot_name",
    # the workers list
    "HeartbeatConfig", "WorkerRecord", "list_workers",
]
_publish("echomq", globals(), __all__)  # messages name these classes so: echomq.Connection
