"""One version, everywhere (issue 40 item 2): the package's version lives in echomq/VERSION and
nowhere else; the module reports it (MODULE LIST), and ``emq --version`` prints the package, the
module it would load and, given ``--url``, what a node runs."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import valkey
from click.testing import CliRunner

import echomq
from echomq.admin.doctor import module_release, module_version
from echomq.cli import main
from echomq.local.versions import ModuleFacts, NodeFacts, described_brand, node_lines, version_lines

ROOT = Path(__file__).resolve().parent.parent
VERSION = (ROOT / "echomq" / "VERSION").read_text().strip()


def module_number(dotted: str) -> int:
    major, minor, patch = map(int, dotted.split("."))
    return major * 10_000 + minor * 100 + patch


# -- one place -------------------------------------------------------------------------------


def test_the_version_is_said_once_and_everything_reads_it():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert echomq.__version__ == VERSION
    assert importlib.metadata.version("echomq") == VERSION  # the build read the same file
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "echomq/VERSION"}
    crate = tomllib.loads((ROOT / "trafikey" / "Cargo.toml").read_text())
    assert "version" not in crate["package"]  # build.rs reads echomq/VERSION
    assert '"../echomq/VERSION"' in (ROOT / "trafikey" / "build.rs").read_text()


def test_the_changelog_has_a_section_for_this_version():
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d\d-\d\d$",
                     (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_the_module_reports_the_packages_version(server6):
    client = valkey.Valkey.from_url(server6.url)
    listed = {entry[1]: dict(zip(entry[::2], entry[1::2])) for entry in client.execute_command("MODULE", "LIST")}
    assert listed[b"trafikey"][b"ver"] == module_number(VERSION)
    assert module_version(client.execute_command("MODULE", "LIST")) == f"trafikey {VERSION}"


# -- deciding: pure ------------------------------------------------------------------------


@pytest.mark.parametrize("number, said", [
    (200, "0.2.0"), (10_203, "1.2.3"), (129_999, "12.99.99"), (0, "0.0.0"),
    (1, "before 0.2.0 (MODULE LIST version 1)"),  # every module before 0.2.0 said 1
])
def test_module_list_numbers_read_as_versions(number, said):
    assert module_release(number) == said


TOKENS = "enqueue claim"


@pytest.mark.parametrize("module, said", [
    (ModuleFacts("/m/libtrafikey.so", "trafikey 0.2.0", TOKENS),
     ["trafikey 0.2.0 at /m/libtrafikey.so", f"  tokens: {TOKENS}"]),
    (ModuleFacts("/m/libtrafikey.so", "trafikey 0.1.9", TOKENS),
     ["trafikey 0.1.9 at /m/libtrafikey.so (not this package's 0.2.0)", f"  tokens: {TOKENS}"]),
    (ModuleFacts(None, problem="the trafikey module is not built: ..."),
     ["trafikey: none to load: the trafikey module is not built: ..."]),
    (ModuleFacts("/m/libtrafikey.so", problem="valkey-server exited: Module /m/libtrafikey.so failed to load"),
     ["trafikey at /m/libtrafikey.so: does not load: valkey-server exited: Module /m/libtrafikey.so failed to load"]),
])
def test_the_lines_about_this_machine(module, said):
    lines = version_lines("0.2.0", "/site/echomq", module)
    assert re.fullmatch(r"echomq 0\.2\.0 \(Python 3\.\d+\.\d+\S*, /site/echomq\)", lines[0])
    assert lines[1:] == said


def test_the_lines_about_a_node_are_escaped():
    node = NodeFacts("redis://:***@h:1", "Valkey 9.1.2", "trafikey 0.2.0", TOKENS, "echomq:6.0.0\x1b[2J (wire 6)")
    assert node_lines(node) == [r"node redis://:***@h:1: Valkey 9.1.2, trafikey 0.2.0, brand echomq:6.0.0\x1b[2J (wire 6)",
                                f"  tokens: {TOKENS}"]
    assert node_lines(NodeFacts("redis://h:1", "Redis 7.0.15", "no trafikey (wire 4 only)", "", "x")) == [
        "node redis://h:1: Redis 7.0.15, no trafikey (wire 4 only), brand x"]


@pytest.mark.parametrize("brand, said", [
    (b"echomq:6.0.0", "echomq:6.0.0 (wire 6)"), (b"echomq:4.0.0", "echomq:4.0.0 (wire 4)"),
    (None, "none (not branded: emq brand)"),
])
def test_the_brand_as_said(brand, said):
    assert described_brand(brand) == said


# -- emq --version ---------------------------------------------------------------------------


def test_emq_version_names_the_package_and_the_module_it_would_load(server6):
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"echomq {VERSION} (Python ")
    assert lines[1] == f"trafikey {VERSION} at {echomq.module_path()}"
    tokens = valkey.Valkey.from_url(server6.url).execute_command("EMQ.VERSION").decode()
    assert lines[2] == f"  tokens: {tokens}"


@pytest.mark.parametrize("wire", [4, 6])
def test_emq_version_with_a_url_says_what_the_node_runs(wire, request):
    server = request.getfixturevalue(f"server{wire}")
    result = CliRunner().invoke(main, ["--version", "--url", server.url])
    assert result.exit_code == 0, result.output
    node = result.output.splitlines()[3]
    module = f"trafikey {VERSION}" if wire == 6 else "no trafikey (wire 4 only)"
    assert re.fullmatch(rf"node {re.escape(server.url)}: Valkey \d+\.\d+\.\d+, {re.escape(module)}, "
                        rf"brand echomq:{wire}\.0\.0 \(wire {wire}\)", node), node


def test_emq_version_says_when_there_is_no_node():
    result = CliRunner().invoke(main, ["--version", "--url", "redis://127.0.0.1:1"])
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith(f"echomq {VERSION}")  # what it could read, first
    assert "no Valkey answers at redis://127.0.0.1:1" in result.output


def test_a_url_before_a_command_without_version_is_refused():
    result = CliRunner().invoke(main, ["--url", "redis://127.0.0.1:1", "stats"])
    assert result.exit_code == 2 and "--url before a command goes with --version" in result.output


def test_emq_alone_shows_its_help():
    assert "Commands:" in CliRunner().invoke(main, []).output
