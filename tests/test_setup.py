"""Set-up on a fresh machine: ./run's libclang check, and `emq module-path` when the module is not built."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from echomq.local.module import MODULE_ENV
from support.processes import ROOT

spec = importlib.util.spec_from_file_location("find_libclang", ROOT / "tools" / "find_libclang.py")
assert spec is not None and spec.loader is not None
find_libclang = importlib.util.module_from_spec(spec)
spec.loader.exec_module(find_libclang)

LLVM_14_ONLY = ["/usr/lib/llvm-14/lib/libclang-cpp.so.14", "/usr/lib/x86_64-linux-gnu/libclang-cpp.so.14",
                "/usr/lib/llvm-14/lib/libclangBasic.a", "/usr/lib/llvm-14/lib/libLLVM-14.so"]


def test_libclang_cpp_alone_is_no_libclang():
    """The fresh machine that failed: llvm-14 installed, only libclang-cpp.so.14, so libclang-dev is needed."""
    assert find_libclang.find_libclang(LLVM_14_ONLY) is None


@pytest.mark.parametrize("library", ["/usr/lib/x86_64-linux-gnu/libclang-14.so.1", "/usr/lib/llvm-14/lib/libclang.so",
                                     "/usr/lib/llvm-14/lib/libclang-14.so", "/usr/lib/llvm-16/lib/libclang.so.16"])
def test_a_real_libclang_is_found(library):
    assert find_libclang.find_libclang([*LLVM_14_ONLY, library]) == library


def missing_packages(libclang_dir: Path) -> list[str]:
    """``./run missing-packages`` with bindgen pointed at ``libclang_dir`` (LIBCLANG_PATH: nowhere else)."""
    result = subprocess.run([str(ROOT / "run"), "missing-packages"], env=dict(os.environ, LIBCLANG_PATH=str(libclang_dir)),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.mark.parametrize("files, installs", [
    (["libclang-cpp.so.14"], True),
    (["libclang-cpp.so.14", "libclang-14.so.1"], False),
    (["libclang.so"], False),
], ids=["libclang-cpp only", "libclang-14.so.1", "libclang.so"])
def test_run_installs_libclang_dev_only_without_a_real_libclang(tmp_path, files, installs):
    for name in files:
        (tmp_path / name).write_bytes(b"")
    assert ("libclang-dev" in missing_packages(tmp_path)) is installs


def module_path_in(tree: Path) -> subprocess.CompletedProcess:
    """`emq module-path` run from a copy of the package in ``tree``, with no module built."""
    shutil.copytree(ROOT / "echomq", tree / "echomq", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != MODULE_ENV}
    env["PYTHONPATH"] = str(tree)
    return subprocess.run([sys.executable, "-m", "echomq.cli", "module-path"], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=60)


def test_module_path_in_an_install_without_rust_says_how_to_get_the_module(tmp_path):
    result = module_path_in(tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert "the trafikey module is not built: this install was made without a Rust toolchain" in result.stderr
    assert "https://rustup.rs" in result.stderr and MODULE_ENV in result.stderr and "Wire 4" in result.stderr


def test_module_path_in_a_checkout_says_how_to_build_it(tmp_path):
    (tmp_path / "trafikey").mkdir()
    shutil.copy(ROOT / "trafikey" / "Cargo.toml", tmp_path / "trafikey" / "Cargo.toml")
    result = module_path_in(tmp_path)
    assert result.returncode == 1
    assert f"build it with `./run setup` in {tmp_path}" in result.stderr
    assert f"cargo build --release --manifest-path {tmp_path / 'trafikey' / 'Cargo.toml'}" in result.stderr
