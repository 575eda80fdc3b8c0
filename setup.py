"""Builds trafikey (the Rust Valkey module) into the package as a plain cdylib."""

from setuptools import setup
from setuptools_rust import Binding, RustExtension

setup(
    rust_extensions=[
        RustExtension(
            "echomq.libtrafikey",
            path="trafikey/Cargo.toml",
            binding=Binding.NoBinding,
            py_limited_api=False,
        )
    ]
)
