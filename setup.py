"""Builds trafikey (the Rust Valkey module) into the package as a plain cdylib.

``./run`` sets ECHOMQ_NATIVE_BUILD=cargo for its editable install: it builds the crate with
cargo itself on every run (so Rust edits are picked up), and the install skips a second,
identical build. ``pip install .`` or an sdist builds it here when a Rust toolchain is present;
without one the package installs anyway (wire 4 and the embedded server need no module) and
``emq --version`` / ``emq module-path`` say how to get it. ``./run dist`` builds the wheel after
``./run``'s cargo build, which cargo then finds fresh: the module is compiled once.

The module is not a Python extension (no Python ABI): a wheel that carries it is tagged
``py3-none-<platform>``, one wheel for every Python the package supports.
"""

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools_rust import Binding, RustExtension, build_rust

native = [
    RustExtension(
        "echomq.local.libtrafikey",
        path="trafikey/Cargo.toml",
        binding=Binding.NoBinding,
        py_limited_api=False,
        optional=True,
    )
]


class ModuleBuild(build_rust):
    """The module keeps its own name, ``libtrafikey.so``: valkey-server loads it, Python never
    imports it, so it takes no Python suffix (``.cpython-311-…``) either."""

    def get_dylib_ext_path(self, ext: RustExtension, target_fname: str) -> str:
        return os.path.join(os.path.dirname(super().get_dylib_ext_path(ext, target_fname)), "libtrafikey.so")


class ModuleWheel(bdist_wheel):
    """A wheel whose only native file is the module: any Python 3 on this platform."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


cargo_builds_it = os.environ.get("ECHOMQ_NATIVE_BUILD") == "cargo"
if not cargo_builds_it and shutil.which("cargo") is None:
    print("echomq: no Rust toolchain (cargo) on PATH, so this install has no trafikey module: wire 4 (the "
          "scripts) works, wire 6 needs the module. Install the wheel (it carries the module), or Rust "
          "(https://rustup.rs) and then this source again with pip's --no-cache-dir", file=sys.stderr)

setup(rust_extensions=[] if cargo_builds_it else native,
      cmdclass={"build_rust": ModuleBuild, "bdist_wheel": ModuleWheel})
