"""A worker process's lifecycle hooks: ``@app.on_startup`` before its first claim,
``@app.on_shutdown`` after its last settle, and the state they share with the handlers.

    @app.on_startup
    async def open_db(state: echomq.AppState) -> None:
        state.db = await asyncpg.create_pool(DSN)   # made on the loop async handlers run on

    @app.task
    async def charge(payload, ctx):
        async with ctx.state.db.acquire() as db: ...

A hook takes the app's :class:`AppState` or nothing. Sync hooks run on the worker's own thread,
``async def`` ones on the asyncio loop the async handlers use (so what they make there is usable
there). They run once in each worker process (under ``emq worker -p N`` once in each of the N; with
the process pool, once in each child too, which has its own state). A startup hook that raises stops
the worker before it claims anything (:class:`~echomq.StartupFailed`: ``emq worker`` exits 1 with
one line); the shutdown hooks then do not run. A shutdown hook that raises is logged, the others
still run, and the worker says so (``Worker.shutdown_errors``; ``emq worker`` exits 1).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine

from ..errors import ConfigurationError, StartupFailed

log = logging.getLogger("echomq.worker")

#: a lifecycle hook: takes the app's state, or nothing; sync or ``async def``
Hook = Callable[..., Any]
#: runs a coroutine to its end on the async handlers' loop and answers its value
RunOnLoop = Callable[[Coroutine[Any, Any, Any]], Any]


class AppState:
    """What the lifecycle hooks make for the handlers (a DB pool, a client): set any attribute
    (``state.db = ...``), read it from a handler as ``ctx.state.db`` (or ``app.state.db``).
    Each worker process, and each child of the process pool, has its own."""

    def __setattr__(self, name: str, value: Any) -> None:  # declared so that type checkers take any name
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:  # only for a name never set: say which, and where to set it
        raise AttributeError(f"the app's state has no {name!r}: set it in an @app.on_startup hook "
                             f"(state.{name} = ...); it has {sorted(vars(self))}")

    def __repr__(self) -> str:
        return f"AppState({', '.join(sorted(vars(self)))})"


def _takes_state(hook: Hook) -> bool:
    """Whether ``hook`` takes the state (one positional parameter) or nothing."""
    try:
        params = [p for p in inspect.signature(hook).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return True
    return bool(params)


def check_hook(hook: object, kind: str) -> Hook:
    """A hook as registered: callable, taking the state or nothing."""
    if not callable(hook):
        raise ConfigurationError(f"@app.{kind} decorates a function, not {type(hook).__name__}")
    try:
        inspect.signature(hook).bind(None)
    except TypeError:
        try:
            inspect.signature(hook).bind()
        except TypeError:
            raise ConfigurationError(f"the {kind} hook {getattr(hook, '__qualname__', hook)!r} takes the app's "
                                     "state or nothing: def hook(state) or def hook()") from None
    except ValueError:  # no signature to read (a builtin): called with the state
        pass
    return hook


def hook_name(hook: Hook) -> str:
    return f"{getattr(hook, '__module__', '?')}.{getattr(hook, '__qualname__', repr(hook))}"


@dataclass
class Lifecycle:
    """An app's hooks, in the order registered, and the state they share with the handlers."""

    startup: list[Hook] = field(default_factory=list)
    shutdown: list[Hook] = field(default_factory=list)
    state: AppState = field(default_factory=AppState)

    @property
    def any_async(self) -> bool:
        """A hook needs the async handlers' loop."""
        return any(asyncio.iscoroutinefunction(hook) for hook in self.startup + self.shutdown)

    def start(self, run_on_loop: RunOnLoop) -> None:
        """Run the startup hooks in order; the first that raises stops them: StartupFailed, naming it."""
        for hook in self.startup:
            try:
                self._call(hook, run_on_loop)
            except Exception as exc:
                log.exception("worker %d: the startup hook %s raised", os.getpid(), hook_name(hook))
                raise StartupFailed(f"the startup hook {hook_name(hook)} raised {type(exc).__name__}: {exc}; "
                                    "the worker claimed nothing and stops (see the log for the traceback)") from exc

    def stop(self, run_on_loop: RunOnLoop) -> list[BaseException]:
        """Run every shutdown hook (one that raises is logged, the next still runs); what they raised."""
        errors: list[BaseException] = []
        for hook in self.shutdown:
            try:
                self._call(hook, run_on_loop)
            except Exception as exc:
                log.exception("worker %d: the shutdown hook %s raised", os.getpid(), hook_name(hook))
                errors.append(exc)
        return errors

    def _call(self, hook: Hook, run_on_loop: RunOnLoop) -> None:
        args = (self.state,) if _takes_state(hook) else ()
        if asyncio.iscoroutinefunction(hook):
            run_on_loop(hook(*args))
        else:
            value = hook(*args)
            if inspect.isawaitable(value):  # a sync function that returned a coroutine: awaited as one
                run_on_loop(_awaited(value))


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def runner_of(submit: Callable[[Coroutine[Any, Any, Any]], Future]) -> RunOnLoop:
    """A :data:`RunOnLoop` from a loop thread's submit (``AsyncRunner.submit``): waits for the result."""
    return lambda coro: submit(coro).result()
