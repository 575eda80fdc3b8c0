"""Builds trafikey (the Rust Valkey module) into the package as a plain cdylib.

``./run`` sets ECHOMQ_NATIVE_BUILD=cargo: it builds the crate with cargo itself on
every run (so Rust edits are picked up), and the editable install skips a second,
identical build. ``pip install .`` builds it here when a Rust toolchain is present;
without one the package installs anyway (wire 4 and the embedded server need no
module) and ``emq module-path`` says how to build it.
"""

import os

from setuptools import setup
from setuptools_rust import Binding, RustExtension

native = [
    RustExtension(
        "echomq.local.libtrafikey",
        path="trafikey/Cargo.toml",
        binding=Binding.NoBinding,
        py_limited_api=False,
        optional=True,
    )
]

setup(rust_extensions=[] if os.environ.get("ECHOMQ_NATIVE_BUILD") == "cargo" else native)
