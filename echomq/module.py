"""Where the built trafikey module is: ``emq module-path`` prints it.

Order: the ``ECHOMQ_MODULE`` environment variable; else the newest of the file the
package install built into ``echomq/`` and the crate's own ``target/release`` build
(in a source checkout a later ``cargo build`` must win over an older install).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import WireError

MODULE_ENV = "ECHOMQ_MODULE"
PACKAGE_DIR = Path(__file__).parent
CRATE_DIR = PACKAGE_DIR.parent / "trafikey"


def candidates() -> list[Path]:
    packaged = sorted(PACKAGE_DIR.glob("libtrafikey*.so")) + sorted(PACKAGE_DIR.glob("trafikey*.so"))
    return packaged + [CRATE_DIR / "target" / "release" / "libtrafikey.so"]


def module_path() -> str:
    """The trafikey ``.so`` to load into valkey-server (``--loadmodule``)."""
    override = os.environ.get(MODULE_ENV)
    if override:
        if not os.path.isfile(override):
            raise WireError(f"{MODULE_ENV}={override!r} is not a file")
        return override
    built = [path for path in candidates() if path.is_file()]
    if built:
        return str(max(built, key=lambda path: path.stat().st_mtime))
    raise WireError(
        "the trafikey module is not built: run the README's setup (./run tests or ./run demo), "
        f"or `cargo build --release --manifest-path {CRATE_DIR}/Cargo.toml`, or set {MODULE_ENV}"
    )
