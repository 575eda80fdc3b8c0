"""The process pool: sync handlers run in child processes, so one past its timeout can be killed.

``emq worker --pool process`` (or a task's ``pool="process"``) hands each job of a sync handler to a
child process over a pipe; the worker's thread that handed it waits for the outcome and watches the
job meanwhile: past its timeout the child is sent SIGTERM, then SIGKILL after :data:`TERM_GRACE_S`,
and a fresh child takes its place (the attempt fails with JobTimeout, from the executor, as on
threads); a lost lease or a cancel is told to the child (``ctx.lease_lost``). Between jobs, never
during one, a child that ran ``max_jobs_per_child`` jobs or whose resident memory passed
``max_memory_per_child_mb`` is stopped and replaced (:func:`recycle_reason`, pure).

Children are started by a fork server (``multiprocessing``'s "forkserver"): a single-threaded
process, started fresh, that imports the app's module once and forks each child from itself. A
child never inherits a lock another thread held at the fork (the worker runs many threads: forking
it would copy their held locks, a deadlock in the child), and pays a fork, not an interpreter's
start and the app's import, as "spawn" would. Each child loads the app by its ``MODULE:APP``
(``loading.spec_of``), runs its startup hooks on its own state, and reports ready; it dies with
the worker: its control pipe's end (a thread of its own reads it) and, on Linux, the parent-death
signal (the fork server exits once the worker is gone).

In a child: ``ctx.progress`` and ``ctx.producer`` use a connection of the child's own (opened at
their first use, to the worker's node, on its wire); the return value and an exception come back
pickled (an exception with the child's traceback; one that cannot be pickled as its type's name
and message); a flow parent's children's results are read by the worker and sent along.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from functools import partial
from multiprocessing.connection import Connection as Pipe
from typing import Any, Callable, Mapping

import valkey

from . import policy
from ..aio import _PORTABLE as PORTABLE_OPTIONS
from .._client.connection import Connection, EchoCluster, packing_surrogates
from .._client.queue import Job, Queue
from ..errors import StartupFailed
from .._protocol.shown import quoted
from .outcomes import outcome_of
from .pool import DaemonPool
from .producers import producer_of
from .tasks import App, JobContext, Task

log = logging.getLogger("echomq.worker")

#: after SIGTERM, how long a child past its timeout gets to exit before SIGKILL
TERM_GRACE_S = 1.0
#: how often a thread waiting on a child looks at its job (the timeout's verdict, a lost lease)
WATCH_S = 0.05
#: how long a child gets to load the app and run its startup hooks
READY_TIMEOUT_S = 60.0
#: how long a stopping child gets for its shutdown hooks before it is killed
STOP_TIMEOUT_S = 10.0
_MIB = 1 << 20


class ChildProcessDied(Exception):
    """The child process running a handler died before it answered (killed from outside, out of
    memory, a crash in C code): the attempt fails with this error, and a fresh child takes its place."""


class ChildTraceback(Exception):
    """The traceback of an exception raised in a child process (its ``__cause__`` in the worker)."""

    def __str__(self) -> str:
        return f"\n\n{self.args[0]}"


@dataclass(frozen=True)
class ChildLimits:
    """When a child is replaced between jobs (None: never for that reason)."""

    max_jobs: int | None = None
    max_memory_mb: int | None = None


def recycle_reason(limits: ChildLimits, jobs: int, rss_bytes: int) -> str | None:
    """Why a child that ran ``jobs`` jobs and holds ``rss_bytes`` resident is to be replaced now, or None."""
    if limits.max_jobs is not None and jobs >= limits.max_jobs:
        return f"it ran {jobs} job(s), --max-jobs-per-child {limits.max_jobs}"
    if limits.max_memory_mb is not None and rss_bytes > limits.max_memory_mb * _MIB:
        return f"it holds {rss_bytes / _MIB:.0f} MiB, past --max-memory-per-child {limits.max_memory_mb} MiB"
    return None


@dataclass(frozen=True)
class NodeAddress:
    """Where the worker's node is and how its connection was opened, for a child to open its own."""

    wire: int
    cluster: bool
    options: Mapping[str, Any]
    connection_class: str = "Connection"  #: the valkey-py class a plain client's connections are (or extend)

    @classmethod
    def of(cls, connection: Connection) -> "NodeAddress":
        client: Any = connection.client
        if connection.cluster:
            node = client.get_default_node()
            options = dict(client.get_connection_kwargs(), host=node.host, port=node.port)
            return cls(connection.wire, True, {k: v for k, v in options.items() if k in PORTABLE_OPTIONS})
        pool = client.connection_pool
        kind = next(base.__name__ for base in pool.connection_class.__mro__ if base.__name__ in _CONNECTION_CLASSES)
        return cls(connection.wire, False, {k: v for k, v in pool.connection_kwargs.items()
                                            if k in PORTABLE_OPTIONS}, kind)

    def open(self) -> Connection:
        if self.cluster:
            return Connection(EchoCluster(**self.options), self.wire)
        kind = packing_surrogates(_CONNECTION_CLASSES[self.connection_class])
        pool = valkey.ConnectionPool(connection_class=kind, **self.options)
        return Connection(valkey.Valkey(connection_pool=pool), self.wire)


_CONNECTION_CLASSES: dict[str, type] = {
    "Connection": valkey.Connection, "SSLConnection": valkey.SSLConnection,
    "UnixDomainSocketConnection": valkey.UnixDomainSocketConnection,
}


@dataclass(frozen=True)
class ChildSetup:
    """What a child is started with."""

    app_spec: str  #: ``MODULE:APP``, loaded in the child
    node: NodeAddress
    layouts: Mapping[str, list[str]]  #: each task's queues (its partitions), for ``ctx.producer``
    measure_memory: bool = False  #: each reply says the child's resident memory (``max_memory_per_child_mb``)


#: stands in a request's arguments where the handler takes its context (the child puts its own there)
CONTEXT = "<echomq: the job's context>"


@dataclass(frozen=True)
class Request:
    """One job for a child: its task (by queue and name), the job, the handler's arguments."""

    queue: str  #: the task's queue
    task: str  #: the task's name on it
    job: Job
    args: tuple[Any, ...]  #: the handler's positional arguments, CONTEXT where its context goes
    kwargs: dict[str, Any]  #: its keyword arguments (a named task's call)
    report: bool  #: the handler may report progress (``ctx.progress``)
    children: Any = None  #: a flow parent's children's results (a ``Children``), or the error reading them


@dataclass(frozen=True)
class Reply:
    """A child's answer: the handler's outcome, the child's resident memory after it, and the text of
    the traceback of the exception it raised (pickling keeps no traceback)."""

    outcome: policy.Outcome
    rss_bytes: int
    traceback: str = ""


# -- in the child ----------------------------------------------------------------

@dataclass
class _Running:
    """The child's current job's context (its lost flag is set from the control thread)."""

    ctx: JobContext | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def child_main(setup: ChildSetup, requests: Pipe, control: Pipe) -> None:
    """A child's life: load the app, run its startup hooks, answer each request, run the shutdown hooks."""
    _die_with_parent()
    running = _Running()
    threading.Thread(target=_watch_parent, args=(control, running), name="emq-child-control", daemon=True).start()
    from .loading import load_app  # the app's module is the fork server's already: this import costs nothing

    loop = asyncio.new_event_loop()  # async hooks run here (async handlers stay in the worker)
    try:
        app = load_app(setup.app_spec)
        app.lifecycle.start(loop.run_until_complete)
    except Exception as exc:  # the app did not load here, or a startup hook raised: the worker says which
        requests.send(("failed", str(exc) if isinstance(exc, StartupFailed) else f"loading {setup.app_spec}: {exc}"))
        sys.exit(1)
    requests.send(("ready", os.getpid()))
    node = _LazyNode(setup)
    while True:
        try:
            request = requests.recv()
        except EOFError:
            break
        if request is None:
            break
        outcome = _run(app, node, request, running)
        requests.send_bytes(_pickled(outcome, _rss_bytes() if setup.measure_memory else 0))
    errors = app.lifecycle.stop(loop.run_until_complete)
    node.close()
    sys.exit(1 if errors else 0)


class _LazyNode:
    """The child's own connection to the worker's node, opened at the first progress or producer."""

    def __init__(self, setup: ChildSetup) -> None:
        self.setup = setup
        self._connection: Connection | None = None
        self._lock = threading.Lock()

    @property
    def connection(self) -> Connection:
        with self._lock:
            if self._connection is None:
                self._connection = self.setup.node.open()
            return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


def _run(app: App, node: _LazyNode, request: Request, running: _Running) -> policy.Outcome:
    task = app.named.get(request.queue, {}).get(request.task) or app.tasks[request.queue]
    if not any(map(_is_context, (*request.args, *request.kwargs.values()))):
        return outcome_of(partial(task.fn, **request.kwargs), *request.args)
    job = request.job
    ctx = JobContext(job.id, task.queue, job.attempt, partial(_child_producer, app, node),
                     state=app.lifecycle.state)
    if request.report:
        ctx.report = lambda value: Queue(node.connection, job.queue).progress(job, value)
    if request.children is not None:
        ctx.children = partial(_children, request.children)
    with running.lock:
        running.ctx = ctx
    try:
        return outcome_of(partial(task.fn, **{name: ctx if _is_context(value) else value
                                                for name, value in request.kwargs.items()}),
                          *(ctx if _is_context(arg) else arg for arg in request.args))
    finally:
        with running.lock:
            running.ctx = None


def _is_context(arg: Any) -> bool:
    return isinstance(arg, str) and arg == CONTEXT


def _child_producer(app: App, node: _LazyNode, name: str, serializer: Any) -> Any:
    return producer_of(app, node.connection, node.setup.layouts, name, serializer)


def _children(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


def _pickled(outcome: policy.Outcome, rss_bytes: int) -> bytes:
    """The reply to ``outcome``, pickled once: an exception that cannot be pickled goes as its type and
    message (with its traceback's text either way); a return value that cannot be as the error that
    says so."""
    if isinstance(outcome, policy.Raised):
        error, text = outcome.error, "".join(traceback.format_exception(outcome.error))
        try:
            pickled = pickle.dumps(Reply(policy.Raised(error.with_traceback(None)), rss_bytes, text))
            pickle.loads(pickled)  # an exception whose __init__ takes other arguments than its args does not load
            return pickled
        except Exception:
            return pickle.dumps(Reply(policy.Raised(Exception(f"{type(error).__qualname__}: {error}")), rss_bytes,
                                      text))
    try:
        return pickle.dumps(Reply(outcome, rss_bytes))
    except Exception as exc:
        return pickle.dumps(Reply(policy.Raised(TypeError(
            f"the handler's return value cannot be sent from its child process: {type(exc).__name__}: {exc}")),
            rss_bytes))


def _rss_bytes() -> int:
    """This process's resident memory, in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _watch_parent(control: Pipe, running: _Running) -> None:
    """The child's control thread: a lost lease is told to the running handler; the pipe's end (the
    worker is gone) ends the child at once."""
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):
            os._exit(1)
        with running.lock:  # ("lost", id, attempt): for the job it names only (a late one finds it done)
            ctx = running.ctx
            if ctx is not None and message == ("lost", ctx.id, ctx.attempt):
                ctx.mark_lost()


def _die_with_parent() -> None:
    """On Linux, SIGKILL this child when the process that forked it (the fork server) ends."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- in the worker ----------------------------------------------------------------

class Child:
    """One child process, and the two pipes to it."""

    def __init__(self, context: Any, setup: ChildSetup) -> None:
        self.requests, their_requests = context.Pipe()
        their_control, self.control = context.Pipe(duplex=False)
        self.process = context.Process(target=child_main, args=(setup, their_requests, their_control),
                                       name="emq-child", daemon=True)
        self.process.start()
        their_requests.close()
        their_control.close()
        self.jobs = 0

    @property
    def pid(self) -> int:
        return self.process.pid or 0

    def wait_ready(self) -> None:
        """Until its startup hooks ran; StartupFailed if one raised or the child died first."""
        said = ("failed", f"it was not ready after {READY_TIMEOUT_S:g} s")
        if self.requests.poll(READY_TIMEOUT_S):
            try:
                said = self.requests.recv()
            except EOFError:
                said = ("failed", f"it exited with {self.process.join(TERM_GRACE_S) or self.process.exitcode} "
                                  "before it was ready")
            if said[0] == "ready":
                return
        self.kill()
        raise StartupFailed(f"a child process of the pool did not start: {said[1]}")

    def kill(self) -> None:
        """SIGTERM, then SIGKILL after TERM_GRACE_S; its pipes closed."""
        self.process.terminate()
        self.process.join(TERM_GRACE_S)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        self._close()

    def stop(self) -> None:
        """Between jobs: it runs its shutdown hooks and exits (killed if it does not in time)."""
        try:
            self.requests.send(None)
        except OSError:
            pass
        self.process.join(STOP_TIMEOUT_S)
        if self.process.exitcode is None:
            self.kill()
        self._close()

    def _close(self) -> None:
        self.requests.close()
        self.control.close()


class ProcessPool:
    """The children, one a handler slot, and the threads that hand them jobs (one a child)."""

    def __init__(self, app: App, connection: Connection, layouts: Mapping[str, list[str]], size: int,
                 limits: ChildLimits) -> None:
        from .loading import spec_of

        spec = spec_of(app)
        self._setup = ChildSetup(spec, NodeAddress.of(connection), dict(layouts), limits.max_memory_mb is not None)
        self._context = multiprocessing.get_context("forkserver")
        # the fork server imports the app's module once (where it starts: the first child); each child is its fork
        self._context.set_forkserver_preload([spec.partition(":")[0]])
        self._limits = limits
        self._size = size
        self._lock = threading.Lock()
        self._idle: list[Child] = []
        self._busy: set[Child] = set()
        self._closed = False  #: the worker is done: a child that ends now is not replaced
        self.threads = DaemonPool(size)

    def start(self) -> None:
        """Every child started and ready (its startup hooks run): StartupFailed if one is not."""
        children = [Child(self._context, self._setup) for _ in range(self._size)]
        try:
            for child in children:
                child.wait_ready()
        except BaseException:
            for child in children:
                if child.process.exitcode is None:
                    child.kill()
            raise
        with self._lock:
            self._idle.extend(children)
        log.info("worker %d: the process pool: %d children (%s)", os.getpid(), len(children),
                 ", ".join(str(child.pid) for child in children))

    def run(self, request: Request, timed_out: Callable[[], bool], lost: Callable[[], bool]) -> policy.Outcome | None:
        """``request`` run in a child; its outcome, or None when ``timed_out`` turned true first (the child
        was killed and replaced). ``lost`` turning true is told to the child. The child is replaced, when
        it is to be, before the outcome is handed back (a recycled child's job settles that much later)."""
        try:
            child = self._take()
        except StartupFailed as exc:  # no child left, and a fresh one did not start: this attempt fails
            return policy.Raised(exc)
        told_lost = False
        try:
            data = pickle.dumps(request)
        except Exception as exc:  # arguments pickle cannot write: this attempt fails, the child is not touched
            self._give_back(child)
            return policy.Raised(TypeError(f"the handler's arguments cannot be sent to its child process: "
                                           f"{type(exc).__name__}: {exc}"))
        try:
            child.requests.send_bytes(data)
            while not child.requests.poll(WATCH_S):
                if timed_out():
                    log.error("job %s/%s attempt %d: its child process %d is killed (SIGTERM, SIGKILL after %g s)",
                              request.job.queue, quoted(request.job.id), request.job.attempt, child.pid, TERM_GRACE_S)
                    self._replace(child, child.kill)
                    return None
                if not told_lost and lost():
                    told_lost = True
                    child.control.send(("lost", request.job.id, request.job.attempt))
            reply: Reply = child.requests.recv()
        except (EOFError, OSError):
            child.process.join(TERM_GRACE_S)
            error = ChildProcessDied(f"the handler's child process {child.pid} exited with {child.process.exitcode} "
                                     "before it answered")
            self._replace(child, child.kill)
            return policy.Raised(error)
        child.jobs += 1
        reason = recycle_reason(self._limits, child.jobs, reply.rss_bytes)
        if reason is None:
            self._give_back(child)
        else:
            log.info("worker %d: child process %d is replaced: %s", os.getpid(), child.pid, reason)
            self._replace(child, child.stop)
        return _with_traceback(reply)

    def _take(self) -> Child:
        with self._lock:
            if self._idle:
                child = self._idle.pop()
                self._busy.add(child)
                return child
        child = self._started()  # one replaced child was not ready: one more now
        with self._lock:
            self._busy.add(child)
        return child

    def _give_back(self, child: Child) -> None:
        with self._lock:
            self._busy.discard(child)
            self._idle.append(child)

    def _replace(self, child: Child, end: Callable[[], None]) -> None:
        """``child`` ended (``end``: killed or stopped), a fresh one in its place."""
        with self._lock:
            self._busy.discard(child)
        end()
        if self._closed:
            return
        try:
            fresh = self._started()
        except StartupFailed as exc:  # the next job starts one again
            log.error("worker %d: a child process in place of %d did not start: %s", os.getpid(), child.pid, exc)
            return
        with self._lock:
            if not self._closed:
                self._idle.append(fresh)
                return
        fresh.stop()  # closed while it started

    def _started(self) -> Child:
        child = Child(self._context, self._setup)
        child.wait_ready()
        return child

    def close(self) -> None:
        """Idle children stop (their shutdown hooks run), busy ones are killed; the threads end."""
        with self._lock:
            self._closed = True
            idle, busy, self._idle, self._busy = self._idle, list(self._busy), [], set()
        for child in idle:
            child.stop()
        for child in busy:
            child.kill()
        self.threads.shutdown()


def _with_traceback(reply: Reply) -> policy.Outcome:
    """A child's exception raised here once, so that it has a traceback, caused by the child's."""
    if not isinstance(reply.outcome, policy.Raised):
        return reply.outcome
    try:
        raise reply.outcome.error from ChildTraceback(reply.traceback)
    except BaseException as error:
        return policy.Raised(error)


def task_runs_in_process(task: Task, pool: str) -> bool:
    """A task's handler runs in a child: a sync one whose task, or else the worker, says "process"."""
    return not task.is_async and (task.pool or pool) == "process"
