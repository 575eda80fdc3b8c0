"""Secrets stay secret (issue 43, item 6; that section of docs/guarantees.md), on both wires: a URL's password
is shown as ``***`` by every command's output and error and in the worker's and the supervisor's
logs, and a password given as ``--url`` on the command line (where ``ps`` shows it to every
user) is warned of."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import valkey
from click.testing import CliRunner

from echomq import EmbeddedServer, aio, errors, module_path
from echomq.cli import main
from support.processes import ROOT, reap
from support.queues import fresh_name

PASSWORD = "s3cret-Pw-0f-the-tests"


@pytest.fixture
def guarded(wire, tmp_path):
    """A node of its own that asks for PASSWORD, branded for the test's wire; yields its URL with it."""
    with EmbeddedServer(module=module_path() if wire == 6 else None, brand=wire, directory=tmp_path) as node:
        with node.client() as admin:
            admin.config_set("requirepass", PASSWORD)
        yield f"redis://:{PASSWORD}@127.0.0.1:{node.port}"


def emq(*args: str, env: dict | None = None):
    return CliRunner(env={"EMQ_URL": None, **(env or {})}).invoke(main, list(args))


def redacted(result) -> str:
    said = result.output + result.stderr
    assert PASSWORD not in said, said
    return said


@pytest.mark.parametrize("command", [["stats"], ["workers"], ["dead", "-q", "q"], ["enqueue", "-q", "q", "{}"],
                                     ["inspect", "some-id"], ["pause", "-q", "q"], ["dashboard"]])
def test_an_error_names_the_url_without_its_password(command):
    url = f"redis://:{PASSWORD}@127.0.0.1:1"  # nothing answers there
    said = redacted(emq(*command, env={"EMQ_URL": url}))
    assert "redis://:***@127.0.0.1:1" in said
    bad = redacted(emq(*command, "--url", f"redis://app:{PASSWORD}@127.0.0.1:notaport"))
    assert "redis://app:***@127.0.0.1:notaport" in bad


def test_a_missing_database_and_a_brand_name_the_url_without_its_password(guarded, wire):
    missing = emq("stats", env={"EMQ_URL": guarded + "/99"})
    assert missing.exit_code == 1 and "names a database" in redacted(missing)
    with EmbeddedServer(brand=None) as node:
        with node.client() as admin:
            admin.config_set("requirepass", PASSWORD)
        url = f"redis://:{PASSWORD}@127.0.0.1:{node.port}"
        branded = emq("brand", "--wire", "4", env={"EMQ_URL": url})
        assert branded.exit_code == 0 and f"redis://:***@127.0.0.1:{node.port} branded" in redacted(branded)


def test_the_asyncio_client_names_the_url_without_its_password():
    with pytest.raises(errors.ConnectionFailed) as failed:
        asyncio.run(aio.connect(f"redis://:{PASSWORD}@127.0.0.1:1"))
    assert PASSWORD not in str(failed.value) and ":***@" in str(failed.value)


def test_a_password_in_url_on_the_command_line_is_warned_of(guarded):
    given = emq("stats", "--url", guarded)
    assert given.exit_code == 0 and "the password in --url is visible" in redacted(given)
    from_env = emq("stats", env={"EMQ_URL": guarded})
    assert from_env.exit_code == 0 and "visible" not in from_env.stderr


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_worker_and_its_supervisor_log_no_password(guarded, processes, tmp_path):
    queue = fresh_name("secret")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]), EMQ_URL=guarded,
               EMQ_TEST_QUEUE=queue, EMQ_TEST_OUT=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "echomq.cli", "worker", "worker_apps:make_app", "--burst",
                             "-p", processes, "--log-level", "debug"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "worker processes" in err if processes == "2" else "queues" in err
        assert PASSWORD not in out + err
    finally:
        reap(proc)
    with valkey.Valkey.from_url(guarded) as admin:  # the node did answer with the password
        assert admin.ping()
