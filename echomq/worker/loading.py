"""Loading the app ``emq worker MODULE:APP`` names: ``MODULE``'s App, or the App a function of
``MODULE`` makes, and nothing else.

What may be called is decided before anything runs: a builtin, a class, a function of another
module or of the standard library (``os:fork``) is refused (:class:`NotAnApp`, the message says
what was found and what to point at). The current directory is importable after the standard
library, so a ``./queue.py`` does not stand in for the ``queue`` threading's users import.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import sysconfig
import traceback
import weakref
from inspect import isfunction, signature
from typing import Any, Callable

from ..errors import ConfigurationError
from .tasks import App

log = logging.getLogger("echomq.worker")


class NotAnApp(ConfigurationError):
    """``MODULE:APP`` names nothing EchoMQ may load as an app (``emq``'s usage error for APP)."""


def load_app(spec: str, warn: Callable[[str], None] = log.warning) -> App:
    """``module:attr`` -> the App (``attr`` may also be a function of that module returning one).
    Nothing else is called: a builtin, a class, a function of another module or of the standard
    library (``os:fork``) is refused before it runs (:class:`NotAnApp`). Modules of the current
    directory are importable after the standard library's; ``warn`` is told of each one named as a
    standard library module (it is not imported under that name)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise NotAnApp(f"{spec!r}: expected module:app, e.g. myproject.jobs:app")
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names:
        here = [name for name in shadowing(os.listdir(".")) if name.removesuffix(".py") == top]
        raise NotAnApp(f"{module_name!r} is the standard library's, not an app"
                       + (f" (./{top}.py is not imported under a name the standard library has: rename it)"
                          if here else ""))
    for warning in modules_here():
        warn(warning)
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotAnApp(f"cannot import {module_name!r}: {exc}") from exc
    except SyntaxError as exc:
        raise NotAnApp(f"{module_name!r} does not compile: {exc.msg} ({exc.filename}, line {exc.lineno})") from exc
    except Exception as exc:  # the module's own code raised: where, in one line, and how to see the rest
        frame = _own_frame(exc)
        raise NotAnApp(f"importing {module_name!r} raised {type(exc).__name__}: {exc} "
                       f"({frame.filename}, line {frame.lineno}); the whole traceback: "
                       f"python -c 'import {module_name}'") from exc
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise NotAnApp(f"{module_name!r} has no {attr!r}")
    if isinstance(found, App):
        _loaded[found] = spec
        return found
    if not _factory(found, module_name):
        raise NotAnApp(f"{spec} is {_what(found, module_name)}, not an echomq.App or a function of "
                       f"{module_name!r} that takes no arguments and returns one{_apps_in(module_name)}")
    made = found()
    if not isinstance(made, App):
        raise NotAnApp(f"{spec}() returned {_what(made, module_name)}, not an echomq.App")
    _loaded[made] = spec
    return made


#: the ``MODULE:APP`` each app loaded here was loaded as (the process pool loads it again in its children)
_loaded: "weakref.WeakKeyDictionary[App, str]" = weakref.WeakKeyDictionary()


def spec_of(app: App) -> str:
    """The ``MODULE:APP`` that loads ``app`` in another process: the one it was loaded as, else a
    module-level name of it in a module of its handlers; ConfigurationError when it has none."""
    if app in _loaded:
        return _loaded[app]
    for module_name in dict.fromkeys(getattr(task.fn, "__module__", "") for task in app.tasks.values()):
        if module_name == "__main__":  # a script's: a child would not run it under this name
            continue
        module = sys.modules.get(module_name)
        for name, value in vars(module).items() if module is not None else ():
            if value is app:
                return f"{module_name}:{name}"
    raise ConfigurationError(f"{app!r} cannot be loaded in a child process: the process pool loads the app in each "
                             "child by its MODULE:APP, so define it at a module's top level (or run emq worker "
                             "MODULE:APP)")


def _own_frame(exc: BaseException) -> traceback.FrameSummary:
    """The deepest frame of ``exc``'s traceback in the user's code: not importlib's, the standard
    library's or an installed package's."""
    installed = tuple({sys.base_prefix, sys.prefix, sys.exec_prefix})
    frames = traceback.extract_tb(exc.__traceback__)
    own = [frame for frame in frames if not frame.filename.startswith((*installed, "<"))]
    return (own or frames)[-1]


def modules_here() -> list[str]:
    """Modules in the current directory importable, as with ``python -m``, but after the standard
    library: a ``./queue.py`` must not stand in for the ``queue`` that threading's users import.
    Returns a warning naming each such file (it is not imported under that name)."""
    here = os.getcwd()
    sys.path[:] = [entry for entry in sys.path if entry not in ("", here)]  # `python -m` puts it first
    stdlib = {os.path.realpath(sysconfig.get_path(name)) for name in ("stdlib", "platstdlib")}
    last = max((at for at, entry in enumerate(sys.path)
                if any(os.path.realpath(entry or ".").startswith(root) for root in stdlib)), default=-1)
    sys.path.insert(last + 1, here)
    return [f"warning: ./{name} is not imported as `{name.removesuffix('.py')}`: the standard library's comes "
            "first (rename it if your app means it)" for name in shadowing(os.listdir(here))]


def shadowing(entries: list[str]) -> list[str]:
    """The files and packages of a directory listing named as a standard library module (pure)."""
    return sorted(entry for entry in entries
                  if (entry.removesuffix(".py") if entry.endswith(".py") else entry) in sys.stdlib_module_names
                  and (entry.endswith(".py") or "." not in entry))


def _factory(found: Any, module_name: str) -> bool:
    """A Python function of ``module_name`` (its own, not one it imported: ``from os import fork``
    is not an app factory) that can be called with no arguments and does not say it returns
    something other than an App. A class is not taken (App itself would pass), nor a builtin."""
    if not isfunction(found) or hasattr(found, "task") or found.__module__ != module_name:
        return False
    try:
        found_signature = signature(found)
        found_signature.bind()
    except TypeError:
        return False
    returns = found_signature.return_annotation
    named = returns if isinstance(returns, str) else getattr(returns, "__name__", "")
    return returns is found_signature.empty or returns is App or named.rpartition(".")[2].strip("'\"") == "App"


def _what(found: Any, module_name: str) -> str:
    if hasattr(found, "task"):
        return f"the task handler {getattr(found, '__qualname__', found)!r} (registered with @app.task)"
    if not callable(found) or isinstance(found, type):
        return f"a {type(found).__name__}"
    if not isfunction(found):
        return f"a {type(found).__name__} (only a function of the app's module is called)"
    if found.__module__ != module_name:
        return f"a function of {found.__module__!r}"
    try:
        signature(found).bind()
    except TypeError:
        return "a function that takes arguments"
    returns = signature(found).return_annotation
    return f"a function that returns {getattr(returns, '__name__', returns)!r}"


def _apps_in(module_name: str) -> str:
    names = [name for name, value in vars(sys.modules[module_name]).items() if isinstance(value, App)]
    return f"; point at the App instead: {', '.join(f'{module_name}:{n}' for n in names)}" if names else ""

