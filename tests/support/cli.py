"""`emq` run in-process (click's runner), as the CLI tests call it."""

from __future__ import annotations

from click.testing import CliRunner, Result

from echomq.cli import main


def emq(*args: str, url: str | None = None) -> Result:
    """Run ``emq *args`` in this process (``--url url`` appended when given); rich tables unwrapped."""
    runner = CliRunner(env={"COLUMNS": "200"})
    return runner.invoke(main, [*args, *(("--url", url) if url else ())], catch_exceptions=False)
