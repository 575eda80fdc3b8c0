"""Makes tests/upgrade/fixtures from git history, by hand (the suite only reads them, and CI's
clone may be shallow): ``.venv/bin/python tests/upgrade/make_fixtures.py`` from the checkout.

Each fixture is what a node of an earlier release keeps on disk: the release's tree (``git
archive`` of its commit) runs its writer (``writers/``) under its own package against a
valkey-server with the append-only file on and no RDB preamble (the files are commands: they
review and diff as text); then the server stops, and its ``appendonlydir``, the writer's
``facts.json`` and the whole dataset (``dump.json``) are kept. A wire-6 fixture runs the
release's own trafikey, built from its tree (into a target folder that starts from this
checkout's build, so only trafikey itself is compiled). ``fixtures/v0.1.0/scripts`` keeps
0.1.0's scripts byte for byte: the old worker of the rolling-deploy test runs them.

A release that changes a stored shape adds its fixture here (fixtures/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT / "tests")]  # support.upgrade

import valkey  # noqa: E402

from echomq import EmbeddedServer  # noqa: E402
from support.upgrade import FIXTURES, dataset  # noqa: E402

RELEASE_0_1_0 = "7b480d4"  #: the first release: issues 2-7 landed (stop 8)
BEFORE_FLOW_RECORDS = "8fc76d0"  #: main before issue 43 gave a flow parent the record of its children
RELEASE_0_2_0 = "97aca8b"  #: 0.2.0: completed records a key done:<id> each (before issue 44 made them fields)


def tree(commit: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def build_module(source: Path, scratch: Path) -> Path:
    target = scratch / "target"
    shutil.copytree(ROOT / "trafikey" / "target" / "release", target / "release", symlinks=True)
    subprocess.run(["cargo", "build", "--release", "--manifest-path", str(source / "trafikey" / "Cargo.toml")],
                   env={**os.environ, "CARGO_TARGET_DIR": str(target)}, check=True)
    return target / "release" / "libtrafikey.so"


def capture(name: str, source: Path, writer: str, args: list[str], scratch: Path, module: Path | None = None) -> None:
    data = scratch / name.replace("/", "-")
    with EmbeddedServer(module=str(module) if module else None, aof=True, appendfsync="always", directory=data,
                        extra_args=("--aof-use-rdb-preamble", "no")) as server:
        facts = scratch / f"{name.replace('/', '-')}.json"
        subprocess.run([sys.executable, str(HERE / "writers" / writer), server.url, *args, str(facts)],
                       env={**os.environ, "PYTHONPATH": str(source)}, cwd=scratch, check=True)
        state = dataset(valkey.Valkey.from_url(server.url))
    out = FIXTURES / name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(data / "appendonlydir", out / "appendonlydir")
    shutil.copy(facts, out / "facts.json")
    (out / "dump.json").write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="echomq-fixtures-") as scratch_name:
        scratch = Path(scratch_name)
        first = tree(RELEASE_0_1_0, scratch / "v0.1.0")
        capture("v0.1.0/wire4", first, "v0_1_0.py", ["4"], scratch)
        capture("v0.1.0/wire6", first, "v0_1_0.py", ["6"], scratch, build_module(first, scratch))
        shutil.rmtree(FIXTURES / "v0.1.0" / "scripts", ignore_errors=True)
        shutil.copytree(first / "echomq" / "scripts", FIXTURES / "v0.1.0" / "scripts")
        flows = tree(BEFORE_FLOW_RECORDS, scratch / "before-flow-records")
        capture("v0.1.0+8fc76d0", flows, "flows_before_records.py", [], scratch)
        capture("v0.2.0", tree(RELEASE_0_2_0, scratch / "v0.2.0"), "v0_2_0_records.py", [], scratch)


if __name__ == "__main__":
    main()
