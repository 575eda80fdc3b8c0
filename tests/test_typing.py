"""Type checking: mypy runs clean on tests/ (its support package too) and docs/examples/, and
``@app.task`` keeps the decorated function's signature (a misuse is reported, a correct use is not)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # mypy over the tests and the docs' examples

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("mypy", reason="mypy is in the test extras: pip install -e .[test]")


def mypy(*paths: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, MYPYPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))  # echomq as the source
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", str(ROOT / ".mypy_cache"), *map(str, paths)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )


def test_tests_and_docs_examples_type_check_clean():
    files = [*sorted(ROOT.glob("tests/*.py")), *sorted(ROOT.glob("tests/support/*.py")),
             *sorted(ROOT.glob("docs/examples/*.py"))]
    done = mypy(*files)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 0 and not errors, done.stdout + done.stderr


TYPED = '''
import echomq

app = echomq.App()


@app.task(queue="emails")
def send_email(payload: dict[str, str], ctx: echomq.JobContext) -> int:
    return len(payload)


@app.task
async def thumbnail(payload: bytes) -> None:
    return None


n: int = send_email({"to": "ada"}, echomq.JobContext("a", "emails", 1))
task: echomq.Task = send_email.task
send_email("not a dict", echomq.JobContext("a", "emails", 1))
s: str = send_email({}, echomq.JobContext("a", "emails", 1))
pending = thumbnail(1)  # never run: this file is only type-checked
'''


def test_app_task_keeps_the_signature_for_type_checkers(tmp_path):
    (tmp_path / "typed_app.py").write_text(TYPED)
    done = mypy(tmp_path / "typed_app.py", cwd=tmp_path)
    errors = [line.split(": error: ", 1)[1] for line in done.stdout.splitlines() if ": error: " in line]
    assert errors == [
        'Argument 1 to "__call__" of "TaskFunction" has incompatible type "str"; expected "dict[str, str]"  [arg-type]',
        'Incompatible types in assignment (expression has type "int", variable has type "str")  [assignment]',
        'Argument 1 to "__call__" of "TaskFunction" has incompatible type "int"; expected "bytes"  [arg-type]',
    ], done.stdout
