"""docs/guarantees.md names the test behind every promise: each named test must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "guarantees.md"


def test_every_test_the_guarantees_name_exists():
    """``tests/x.py::test_a``, then bare ``::test_b`` (same file as the last path named before
    it), and bare ``test_c`` (anywhere under tests/): each must be a defined test."""
    text = DOC.read_text()
    everywhere = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    current = None
    found = 0
    for match in re.finditer(r"(tests/[\w/]+\.py)|::(\w+)|`(test_\w+)\b(?!\.py)", text):
        path, bare, loose = match.groups()
        if path:
            current = ROOT / path
            assert current.exists(), f"{path} does not exist"
        elif bare:
            assert current is not None and f"def {bare}(" in current.read_text(), f"{current}::{bare} not found"
            found += 1
        else:
            assert f"def {loose}(" in everywhere, f"{loose} not found under tests/"
            found += 1
    assert found > 20


def test_no_placeholder_is_left():
    assert re.findall(r"\b(?:LONG|PL|FO|CL|FUZZ|ABRUPT)_[A-Z0-9_]+\b", DOC.read_text()) == []
