"""The upgrade tests' fixtures: data directories written by earlier releases (tests/upgrade/fixtures,
made by tests/upgrade/make_fixtures.py from git history), loaded into this release's server, and a node's dataset in
a form JSON keeps (the fixture's ``dump.json`` is the dataset as the old release left it)."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from echomq import EmbeddedServer, module_path

from .dataset import dump
from .waiting import Client

FIXTURES = Path(__file__).resolve().parents[1] / "upgrade" / "fixtures"


def jsonable(value: Any) -> Any:
    """A dump as JSON can keep it: bytes as text where they are UTF-8, else ``{"hex": ...}``."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"hex": value.hex()}
    if isinstance(value, dict):
        return {jsonable(k) if isinstance(k, bytes) else k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return value


def dataset(client: Client) -> dict[str, Any]:
    """Every key of the node, its type and full content, as :func:`jsonable` writes it."""
    return jsonable(dump(client))


def facts(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "facts.json").read_text())


def recorded(name: str) -> dict[str, Any]:
    """The dataset the old release left (``dump.json``)."""
    return json.loads((FIXTURES / name / "dump.json").read_text())


@contextmanager
def loaded(name: str, wire: int, where: Path) -> Iterator[EmbeddedServer]:
    """This release's server on a copy of fixture ``name``'s data directory, for ``wire`` (6 loads
    this release's trafikey): stop, new version, same data directory, start."""
    shutil.copytree(FIXTURES / name / "appendonlydir", where / "appendonlydir")
    with EmbeddedServer(module=module_path() if wire == 6 else None, aof=True, brand=wire,
                        directory=where) as server:
        yield server
