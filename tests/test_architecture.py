"""The house holds its layers (issue 41): every import of ``echomq/`` points down or sideways in
the order docs/architecture.md declares, no import cycles, every folder on the map and the map
true. No server: these read the source and the docs."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "echomq"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: The modules allowed to name valkey-py's link errors: the blocking and the asyncio connection.
CONNECTION_LAYER = ("echomq._client.connection", "echomq.aio")


# --------------------------------------------------------------------------- reading the source


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The echomq modules ``name`` imports, wherever the import stands (under TYPE_CHECKING, in a
    function). ``from P import x`` is the module ``P.x`` when there is one, else ``P``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imported(name, path, set(found)) for name, path in found.items()}


# --------------------------------------------------------------------------- reading the map


def section(title: str) -> str:
    text = ARCHITECTURE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def declared_layers() -> list[list[str]]:
    """The members of each layer, in order: ``1. `a/`, `b.py` — what they are``."""
    layers: list[list[str]] = []
    for number, members in re.findall(r"^(\d+)\. (.*?) — ", section("Layers"), re.M):
        assert int(number) == len(layers) + 1, f"layer {number} is out of order in {ARCHITECTURE}"
        layers.append(re.findall(r"`([^`]+)`", members))
    return layers


def layer_of(name: str, layers: list[list[str]]) -> int:
    """The index of the layer that holds module ``name`` (a folder holds everything under it)."""
    relative = name.split(".")[1:]
    for index, members in enumerate(layers):
        for member in members:
            if member == "__init__.py" and not relative:
                return index
            if member.endswith(".py") and relative == [member[:-3]]:
                return index
            if member.endswith("/") and relative[:1] == [member[:-1]]:
                return index
    raise AssertionError(f"{name} is in no layer of {ARCHITECTURE} ('## Layers'): add its folder or module there")


def mapped_folders() -> set[str]:
    return set(re.findall(r"^\| `([^`]+/)` \|", section("Folders"), re.M))


# --------------------------------------------------------------------------- the tests


def test_the_map_declares_layers_that_name_real_folders_and_modules():
    layers = declared_layers()
    assert len(layers) >= 5 and all(layers)
    named = [member for members in layers for member in members]
    assert len(named) == len(set(named)), "a folder or module is in two layers"
    for member in named:
        assert (PACKAGE / member).exists(), f"{ARCHITECTURE} names {member}, which is not in echomq/"


def test_every_module_has_a_layer_and_imports_none_above_it():
    layers = declared_layers()
    upward = []
    for name, targets in import_graph().items():
        for target in sorted(targets):
            if layer_of(target, layers) > layer_of(name, layers):
                upward.append(f"{name} (layer {layer_of(name, layers) + 1}) imports {target} "
                              f"(layer {layer_of(target, layers) + 1})")
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back_through_others():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_an_import_is_read_wherever_it_stands(tmp_path):
    """Type-only imports and imports inside functions count, relative ones resolved from the package."""
    source = tmp_path / "probe.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..worker import policy\n"
                      "def f():\n    from .._protocol.keys import Keyspace\n    import echomq.local.server\n"
                      "from .. import errors, __version__\n")
    known = set(modules())
    assert imported("echomq._core.probe", source, known) == {
        "echomq.worker.policy", "echomq._protocol.keys", "echomq.local.server", "echomq.errors", "echomq"}


def names_link_errors(path: Path) -> bool:
    """Whether a module names valkey-py's ConnectionError (``valkey.ConnectionError``,
    ``valkey.exceptions.ConnectionError``, or imported by that name from valkey)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "ConnectionError" and \
                ast.unparse(node.value) in ("valkey", "valkey.exceptions"):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("valkey") and \
                any(alias.name == "ConnectionError" for alias in node.names):
            return True
    return False


def test_only_the_connection_layer_names_valkeys_link_errors():
    """Every read and write of the node goes through the connection layer, which turns a link fault
    into ConnectionFailed: no module above it catches or raises valkey-py's own."""
    outside = {name for name, path in modules().items()
               if not name.startswith(CONNECTION_LAYER) and names_link_errors(path)}
    assert outside == set(), "modules that name valkey.ConnectionError outside the connection layer"


def test_the_link_error_finder_finds_each_spelling(tmp_path):
    source = tmp_path / "probe.py"
    for spelling in ("import valkey\ntry:\n    pass\nexcept valkey.ConnectionError:\n    pass\n",
                     "import valkey\nraise valkey.exceptions.ConnectionError('x')\n",
                     "from valkey.exceptions import ConnectionError as LinkError\n"):
        source.write_text(spelling)
        assert names_link_errors(source), spelling
    source.write_text("raise ConnectionError('the builtin one, not valkey-py')\n")
    assert not names_link_errors(source)


def test_every_folder_is_on_the_map_and_every_folder_on_it_exists():
    folders = {p.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("*")
               if p.is_dir() and "__pycache__" not in p.parts}
    assert mapped_folders() - {"echomq/"} == folders
    assert "echomq/" in mapped_folders()
    layout = (ROOT / "README.md").read_text().split("\n## Layout\n")[1].split("\n## ")[0]
    assert {f for f in folders if f.count("/") == 1} <= set(re.findall(r"`echomq/([^`]+/)`", layout)), \
        "the README's layout table names every folder of echomq/"


@pytest.mark.parametrize("package", sorted(name for name, path in modules().items() if path.name == "__init__.py"))
def test_each_folder_says_what_lives_there_and_what_it_may_import(package):
    docstring = ast.get_docstring(ast.parse(modules()[package].read_text())) or ""
    assert docstring, f"{package} has no docstring"
    if package != "echomq":
        assert "docs/architecture.md" in docstring, f"{package}'s docstring should name its layer's rule"


def test_the_docs_index_names_every_page_and_each_link_exists():
    index = (ROOT / "docs" / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"README.md"}
    assert pages <= linked, f"docs/README.md does not name {sorted(pages - linked)}"
    for link in linked:
        assert (ROOT / "docs" / link).is_file(), link


# --------------------------------------------------------------------------- the public surface

PUBLIC = ("echomq", "echomq.aio", "echomq.testing", "echomq.errors", "echomq.hooks", "echomq.otel",
          "echomq.parity", "echomq.cli")
#: Dotted names the docs give that are not import paths: loggers, and the span attributes of echomq.otel.
NOT_IMPORTS = {"echomq.worker", "echomq.timers", "echomq.dashboard.audit", "echomq.verbs", "echomq.wire", "echomq.attempt", "echomq.outcome",
               "echomq.waited_s"}


def public_place(name: str) -> str | None:
    """The public module ``name`` is reached from (``echomq.aio.Queue.enqueue``: ``echomq.aio``), None
    when it is not importable from one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module not in PUBLIC:
            continue
        value = importlib.import_module(module)
        for attr in parts[end:]:
            if attr.startswith("_") or not hasattr(value, attr):
                return None
            value = getattr(value, attr)
            if isinstance(value, ModuleType):  # an internal module, reached as an attribute of its package
                return None
        return module
    return None


def test_every_name_the_docs_give_is_importable_from_a_public_place():
    pages = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    named = {name for page in pages for name in re.findall(r"\bechomq(?:\.[A-Za-z_]\w*)+", page.read_text())}
    assert {name for name in named - NOT_IMPORTS if public_place(name) is None} == set()
    assert public_place("echomq.aio.Queue.enqueue") == "echomq.aio"
    assert public_place("echomq.worker.policy.describe_traceback") is None  # importable, but not public
    assert public_place("echomq.ids.minted_ms") is None and public_place("echomq.minted_ms") == "echomq"


@pytest.mark.parametrize("module", ["echomq", "echomq.aio", "echomq.testing", "echomq.errors"])
def test_each_public_module_has_one_all_and_every_name_in_it_is_there(module):
    loaded = importlib.import_module(module)
    assert all(hasattr(loaded, name) for name in loaded.__all__)
    assert len(loaded.__all__) == len(set(loaded.__all__))


def test_every_error_is_exported_by_echomq():
    import echomq
    from echomq import errors

    raised = {name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)
              and value.__module__ == "echomq.errors"}
    assert set(errors.__all__) == raised and raised <= set(echomq.__all__)


# --------------------------------------------------------------------------- what users read names public places


def internal_names(text: str) -> list[str]:
    """The dotted ``echomq.…`` names in ``text`` no public place exports (a logger's name aside)."""
    return sorted({name for name in re.findall(r"\bechomq(?:\.[A-Za-z_]\w*)+", text)
                   if name not in NOT_IMPORTS and public_place(name) is None})


def message_texts(path: Path) -> list[tuple[int, str]]:
    """Every string a module's code holds, where its messages (raised, logged, printed) come from: its
    docstrings (the developer's map: a public object's are checked below), a logger's name and a
    ``MODULE:APP`` spec a command runs (``emq worker echomq.local.demo:app``) aside."""
    tree = ast.parse(path.read_text())
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body and \
                isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skipped.add(id(node.body[0].value))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("getLogger"):
            skipped.update(id(arg) for arg in node.args)
    return [(node.lineno, re.sub(r"\bechomq(?:\.\w+)+:\w+", "MODULE:APP", node.value)) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped]


def test_no_message_names_an_internal_path():
    """A message (an error, a log line, a hint) names what users can import or read: ``echomq.Connection``,
    a documented constant, a doc page; never the module a name happens to be defined in today."""
    found = [f"{path.relative_to(ROOT)}:{line}: {names}" for path in modules().values()
             for line, text in message_texts(path) if (names := internal_names(text))]
    assert found == []


def test_the_message_finder_finds_an_internal_path_in_an_f_string(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text('import logging\nlog = logging.getLogger("echomq.worker.loop")\n'
                      'def f(n):\n    """Uses echomq._core.core."""\n'
                      '    raise ValueError(f"{n} bytes (echomq._protocol.results.MAX_RESULT_BYTES)")\n')
    assert [internal_names(text) for _, text in message_texts(source) if internal_names(text)] == \
        [["echomq._protocol.results.MAX_RESULT_BYTES"]]


def public_docstrings() -> dict[str, str]:
    """What ``help()`` shows of the public surface: each public module's docstring, and every exported
    class's and function's, with its public methods' and properties'."""
    found: dict[str, str] = {}
    for module_name in ("echomq", "echomq.aio", "echomq.testing", "echomq.errors", "echomq.hooks", "echomq.otel"):
        module = importlib.import_module(module_name)
        found[module_name] = module.__doc__ or ""
        for name in getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")]):
            value = getattr(module, name)
            if isinstance(value, ModuleType) or not getattr(value, "__module__", "").startswith("echomq"):
                continue
            found[f"{module_name}.{name}"] = getattr(value, "__doc__", None) or ""
            for klass in value.__mro__ if isinstance(value, type) else ():
                for attr, member in vars(klass).items() if klass.__module__.startswith("echomq") else ():
                    if not attr.startswith("_") and (callable(member) or isinstance(member, property)):
                        found[f"{module_name}.{name}.{attr}"] = getattr(member, "__doc__", None) or ""
    return found


def test_what_help_shows_of_the_public_surface_names_only_public_places():
    docstrings = public_docstrings()
    assert len(docstrings) > 300  # the surface was walked, methods and all
    assert {where: names for where, text in docstrings.items() if (names := internal_names(text))} == {}


def test_a_message_names_an_echomq_class_by_its_public_spelling():
    from echomq import Connection, aio
    from echomq._core.core import check_connection
    from echomq._protocol.shown import type_name

    with pytest.raises(TypeError, match=r"not a value of type echomq\.aio\.Connection: open one with conn = "):
        check_connection(object.__new__(aio.Connection), Connection, "echomq.Queue", "echomq.connect(url)")
    for module_name in ("echomq", "echomq.aio"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            if isinstance(value := getattr(module, name), type):
                assert public_place(type_name(value)) is not None, (module_name, name, type_name(value))
    assert type_name(dict) == "builtins.dict"
