"""``emq --version``: this package, the trafikey module it would load, and (given a node's URL)
what that node runs.

Deciding and reading are apart: :func:`version_lines` writes the lines from facts (pure, tested
from made-up facts); :func:`module_facts` reads the module by loading it into a throwaway
valkey-server (what it says loaded is what a server would load: a module that cannot load says
why), and :func:`node_facts` reads a node (INFO server, MODULE LIST, EMQ.VERSION, the brand),
read-only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import valkey

from .._version import __version__
from ..admin.doctor import answered, module_version
from .._protocol.servers import server_kind
from ..errors import EchoMQError
from .._client.connection import open_client, plain_commands, wire_of_brand
from .._protocol.keys import VERSION_KEY
from .._protocol.shown import one_line, redact_url
from .module import module_path
from .server import EmbeddedServer


@dataclass(frozen=True)
class ModuleFacts:
    """The trafikey module this package would load: its path (None: none found), what MODULE LIST
    and EMQ.VERSION said once it loaded, or why it could not be found or loaded."""

    path: str | None
    version: str = ""  #: as MODULE LIST gives it, read (admin.doctor.module_version)
    tokens: str = ""  #: EMQ.VERSION's answer
    problem: str = ""


@dataclass(frozen=True)
class NodeFacts:
    """What a node runs, each part as read or why it could not be."""

    url: str  #: redacted
    server: str
    module: str
    tokens: str
    brand: str


def version_lines(package: str, where: str, module: ModuleFacts) -> list[str]:
    """``emq --version``'s lines about this machine: the package and the module it would load (pure)."""
    lines = [f"echomq {package} (Python {sys.version.split()[0]}, {where})"]
    if module.path is None:
        lines.append(f"trafikey: none to load: {module.problem}")
    elif module.problem:
        lines.append(f"trafikey at {module.path}: does not load: {module.problem}")
    else:
        other = "" if module.version == f"trafikey {package}" else f" (not this package's {package})"
        lines += [f"{module.version} at {module.path}{other}", f"  tokens: {module.tokens}"]
    return [one_line(line) for line in lines]


def node_lines(node: NodeFacts) -> list[str]:
    """``emq --version --url``'s lines about the node (pure)."""
    lines = [f"node {node.url}: {node.server}, {node.module}, brand {node.brand}"]
    if node.tokens:
        lines.append(f"  tokens: {node.tokens}")
    return [one_line(line) for line in lines]


def module_facts() -> ModuleFacts:
    """Load the module :func:`module_path` finds into a throwaway valkey-server and ask it."""
    try:
        path = module_path()
    except EchoMQError as exc:
        return ModuleFacts(None, problem=str(exc))
    try:
        with EmbeddedServer(module=path) as server:
            client = valkey.Valkey.from_url(server.url)
            try:
                facts = ModuleFacts(path, module_version(client.execute_command("MODULE", "LIST")),
                                    client.execute_command("EMQ.VERSION").decode())
            finally:
                client.close()
    except EchoMQError as exc:
        return ModuleFacts(path, problem=str(exc))
    return facts


def node_facts(url: str) -> NodeFacts:
    """What the node at ``url`` runs (this node only: on a cluster, the one the URL names)."""
    client = open_client(url, cluster=False)
    try:
        return facts_of(client, redact_url(url))
    finally:
        client.close()


def facts_of(client: valkey.Valkey, shown_url: str) -> NodeFacts:
    """What the node behind ``client`` runs. The node may carry no brand, so it is read on a raw
    client; a link fault is ConnectionFailed all the same."""
    with plain_commands("the node's versions"):
        info = answered(client.info, "server")
        tokens = answered(client.execute_command, "EMQ.VERSION")
        modules = answered(client.execute_command, "MODULE", "LIST")
        brand = answered(client.get, VERSION_KEY)
    return NodeFacts(shown_url, described_server(info), described_module(tokens, modules),
                     "" if isinstance(tokens, Exception) else tokens.decode(), described_brand(brand))


def described_server(info: dict[str, Any] | Exception) -> str:
    if isinstance(info, Exception):
        return f"server unread (INFO answered {info})"
    kind, version = server_kind(info)
    return f"{kind.capitalize()} {'.'.join(map(str, version))}"


def described_module(tokens: bytes | Exception, modules: list[Any] | Exception) -> str:
    return "no trafikey (wire 4 only)" if isinstance(tokens, Exception) else module_version(modules)


def described_brand(brand: bytes | None | Exception) -> str:
    if isinstance(brand, Exception):
        return f"unread ({brand})"
    if brand is None:
        return "none (not branded: emq brand)"
    try:
        return f"{brand.decode(errors='replace')} (wire {wire_of_brand(brand)})"
    except EchoMQError as exc:
        return f"{brand.decode(errors='replace')} ({exc})"


def local_report() -> list[str]:
    """``emq --version``: read this package and its module, then the lines."""
    return version_lines(__version__, str(Path(__file__).resolve().parent.parent), module_facts())


def node_report(url: str) -> list[str]:
    """``emq --version --url URL``: read the node, then its lines."""
    return node_lines(node_facts(url))
