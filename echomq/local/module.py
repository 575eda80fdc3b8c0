"""Where the built trafikey module is: ``emq module-path`` prints it.

Order: the ``ECHOMQ_MODULE`` environment variable; else the newest of the file the
package install built beside this module (``echomq/local/``) and the crate's own ``target/release`` build
(in a source checkout a later ``cargo build`` must win over an older install).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import WireError

MODULE_ENV = "ECHOMQ_MODULE"
PACKAGE_DIR = Path(__file__).parent  #: where setup.py's extension target ``echomq.local.libtrafikey`` lands
CRATE_DIR = PACKAGE_DIR.parent.parent / "trafikey"


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
    raise WireError(missing_module_message(CRATE_DIR, in_checkout=(CRATE_DIR / "Cargo.toml").is_file()))


def missing_module_message(crate_dir: Path, *, in_checkout: bool) -> str:
    """How to get the module: a source checkout builds it; an install without Rust needs reinstalling."""
    if in_checkout:
        how = (f"build it with `./run setup` in {crate_dir.parent}, or with "
               f"`cargo build --release --manifest-path {crate_dir / 'Cargo.toml'}`")
    else:
        how = ("this install was made without a Rust toolchain: install the echomq wheel for this platform (it "
               "carries the module), or install Rust (https://rustup.rs) and reinstall echomq from the same "
               "source (`pip install --force-reinstall --no-deps --no-cache-dir SOURCE`: pip keeps the build "
               "that lacked it)")
    return (f"the trafikey module is not built: {how}; or set {MODULE_ENV} to a built libtrafikey.so. "
            "Wire 4 (the scripts) needs no module")
