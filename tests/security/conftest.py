"""``emq``: the command line run in-process on the test's server (a module's own ``server``, when it
defines one), for the security tests."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from echomq.cli import main


@pytest.fixture
def emq(server):
    """``emq(*args)`` runs the CLI on the test's server; returns the click Result."""
    runner = CliRunner(env={"COLUMNS": "200"})  # rich tables unwrapped

    def run(*args: str):
        return runner.invoke(main, [*args, "--url", server.url], catch_exceptions=False)

    return run
