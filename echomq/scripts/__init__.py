"""The Lua scripts that serve the verbs on wire 4 (and the lane and flow scripts on both wires),
and their loader.

``<verb>.lua`` is the script of the verb of that name (the file names are a promise: SPEC §5);
``lib/<name>.lua`` is a library of rules several scripts share, and a script is loaded after the
definitions it uses of the libraries its own header names (``-- Loaded after lib/….lua.``).

The bottom of the layers: it imports nothing of EchoMQ (docs/architecture.md).
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

SCRIPTS_DIR = Path(__file__).parent
FLOW_LIBRARY = SCRIPTS_DIR / "lib" / "flow.lua"  #: the flow scripts' family library


#: A library's top-level definition starts at the first column: ``local function f``, ``local a, b``
#: (a declaration, with or without a value), or ``f = function`` (one declared before).
_DEFINITION = re.compile(r"^(?:local function (\w+)|local (\w+(?:, \w+)*)(?: =| --|$)|(\w+) = function)", re.M)
_LUA_NAME = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|--[^\n]*|([A-Za-z_]\w*)")


def _lua_names(text: str) -> set[str]:
    """The names a piece of Lua mentions in its code (not in its strings or comments)."""
    return {m.group(1) for m in _LUA_NAME.finditer(text) if m.group(1)}


def _comments_above(text: str, at: int) -> int:
    """Where the comment and blank lines right above the line at ``at`` begin."""
    while at > 0:
        above = text.rfind("\n", 0, at - 1) + 1
        line = text[above:at]
        if not (line.startswith("--") or not line.strip()):
            break
        at = above
    return at


def library_definitions(name: str) -> list[tuple[set[str], str]]:
    """``scripts/lib/<name>.lua`` as its top-level definitions, in order: each the names it defines
    and its text, from the end of the one before (so its comments go with it) to the next."""
    text = (SCRIPTS_DIR / "lib" / f"{name}.lua").read_text()
    starts = list(_DEFINITION.finditer(text))
    cuts = [0] + [_comments_above(text, m.start()) for m in starts[1:]] + [len(text)]
    return [({n for n in (m.group(1) or m.group(2) or m.group(3)).split(", ")}, text[cuts[i]:cuts[i + 1]])
            for i, m in enumerate(starts)]


#: The header line of a script that names the libraries it is loaded after, in load order.
_LOADED_AFTER = re.compile(r"^-- Loaded after ((?:lib/\w+\.lua, )*lib/\w+\.lua)\.$", re.M)


@functools.cache  # the package's files: read once a process
def script_libraries(script: Path) -> tuple[str, ...]:
    """The libraries ``script`` is loaded after, in load order, as its header names them (its one
    ``-- Loaded after lib/a.lua, lib/b.lua.`` line among the comment lines it starts with); none
    without that line."""
    lines = script.read_text().splitlines(keepends=True)
    header = "".join(itertools.takewhile(lambda line: line.startswith("--"), lines))
    found = _LOADED_AFTER.findall(header)
    if len(found) > 1:
        raise ValueError(f"{script.name}: its header names its libraries {len(found)} times")
    return tuple(re.findall(r"lib/(\w+)\.lua", found[0])) if found else ()


@functools.cache  # the package's files: read once a process (every connection loads the scripts)
def loaded_source(script: Path, label: str) -> bytes:
    """``script`` as it is loaded (:meth:`echomq._protocol.verbs.Verb.source`): of the libraries its
    header names (:func:`script_libraries`), in order, the definitions it uses (itself or through
    another it uses), then its own file; first, where the script or a library uses it, ``local VERB =
    '<label>'``: the name its refusals give the verb (``Verb.label``)."""
    own = script.read_text()
    definitions = [d for name in script_libraries(script) for d in library_definitions(name)]
    wanted = _lua_names(own)
    used = [False] * len(definitions)
    grew = True
    while grew:  # what a used definition names is wanted too
        grew = False
        for i, (names, text) in enumerate(definitions):
            if not used[i] and names & wanted:
                used[i], grew = True, True
                wanted |= _lua_names(text)
    preamble = f"local VERB = '{label}'\n" if "VERB" in wanted else ""
    return (preamble + "".join(text for (_, text), use in zip(definitions, used) if use) + own).encode()
