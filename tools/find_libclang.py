"""Would bindgen find a libclang here? ``./run`` installs ``libclang-dev`` when this says no.

bindgen (in the valkey-module crate) loads libclang through clang-sys, which looks in
``$LIBCLANG_PATH`` alone when it is set, else in ``llvm-config --prefix``'s lib and bin
and a fixed list of system directories, for the names below, and skips the C++ library
``libclang-cpp``: a machine with only llvm-14 (``libclang-cpp.so.14``) has no libclang.
The names and directories are clang-sys 1.9's (``build/dynamic.rs``, ``build/common.rs``).

``python3 tools/find_libclang.py`` prints the library found and exits 0, or exits 1.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import subprocess
import sys
from typing import Iterable, Mapping

# clang-sys with its `runtime` feature (bindgen's default) also accepts suffix-versioned files
NAMES = ("libclang.so", "libclang-*.so", "libclang.so.*", "libclang-*.so.*")
SYSTEM_DIRECTORIES = (
    "/usr/local/llvm*/lib*", "/usr/local/lib*/*/*", "/usr/local/lib*/*", "/usr/local/lib*",
    "/usr/lib*/*/*", "/usr/lib*/*", "/usr/lib*",
)


def is_libclang(path: str) -> bool:
    """Whether clang-sys would take this file for libclang (never libclang-cpp)."""
    name = os.path.basename(path)
    return "-cpp." not in name and any(fnmatch.fnmatchcase(name, pattern) for pattern in NAMES)


def find_libclang(paths: Iterable[str]) -> str | None:
    """The first of ``paths`` that is a libclang, or None: then libclang-dev must be installed."""
    return next((path for path in paths if is_libclang(path)), None)


def search_directories(environ: Mapping[str, str]) -> list[str]:
    """Where clang-sys looks, in its order."""
    if environ.get("LIBCLANG_PATH"):
        return [environ["LIBCLANG_PATH"]]
    directories = []
    try:
        prefix = subprocess.run(["llvm-config", "--prefix"], capture_output=True, text=True, check=True).stdout
        directories += [os.path.join(prefix.strip(), sub) for sub in ("bin", "lib", "lib64")]
    except (OSError, subprocess.CalledProcessError):
        pass  # no llvm-config on the PATH: clang-sys skips it too
    for pattern in SYSTEM_DIRECTORIES:
        directories += sorted(path for path in glob.glob(pattern) if os.path.isdir(path))
    return directories


def files_in(directories: Iterable[str]) -> Iterable[str]:
    for directory in directories:
        if os.path.isfile(directory):  # LIBCLANG_PATH may name the library itself
            yield directory
            continue
        try:
            yield from sorted(os.path.join(directory, name) for name in os.listdir(directory))
        except OSError:
            continue


def main() -> int:
    found = find_libclang(files_in(search_directories(os.environ)))
    if found is None:
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
