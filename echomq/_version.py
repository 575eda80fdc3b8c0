"""The package's version. It lives in one place, the file ``VERSION`` beside this module: the
build reads it for the package's metadata and trafikey's ``build.rs`` for the module's
(docs/compatibility.md, "Versions")."""

from pathlib import Path

__version__ = Path(__file__).with_name("VERSION").read_text().strip()
