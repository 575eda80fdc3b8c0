"""The default JSON serializer reads exactly what ``json.loads`` reads (its fast path for the
payloads a worker decodes included), and refuses NaN and Infinity both ways."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echomq._protocol.serializers import JSON

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)
space = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


def _refuse(name: str) -> None:
    raise ValueError(f"{name} is not standard JSON")


def read(reader, data):
    try:
        return "value", reader(data)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        return type(exc), str(exc)


def reference(data):
    return json.loads(data, parse_constant=_refuse)


@settings(max_examples=200, deadline=None)
@given(value=values, before=space, after=space, extra=st.sampled_from(["", "x", "[1]", "}"]))
def test_json_text_reads_as_json_loads_reads_it(value, before, after, extra):
    data = (before + json.dumps(value, separators=(",", ":")) + after + extra).encode()
    assert read(JSON.loads, data) == read(reference, data)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=24))
def test_any_bytes_read_as_json_loads_reads_them(data):
    assert read(JSON.loads, data) == read(reference, data)


@pytest.mark.parametrize("text, value", [("NaN", float("nan")), ("[Infinity]", [float("inf")]),
                                         ('{"a":-Infinity}', {"a": float("-inf")})])
def test_nan_and_infinity_are_refused_both_ways(text, value):
    with pytest.raises(ValueError, match="is not standard JSON"):
        JSON.loads(text.encode())
    with pytest.raises(ValueError, match="not JSON compliant"):
        JSON.dumps(value)


@settings(max_examples=300, deadline=None)
@given(values)
def test_dumps_writes_what_json_dumps_writes_compact(value):
    """dumps runs the C encoder it built once (no cycle markers): the bytes json.dumps writes."""
    expected = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    assert JSON.dumps(value) == (b"null" if value is None else expected)


def test_dumps_refuses_a_cycle_and_a_value_nested_too_deep_naming_which():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="^Circular reference detected$"):
        JSON.dumps({"a": cycle})
    deep: list = []
    inner = deep
    for _ in range(50_000):
        inner.append([])
        inner = inner[0]
    with pytest.raises(ValueError, match="nested deeper than Python's JSON reads"):
        JSON.dumps(deep)
    with pytest.raises(ValueError, match="Out of range float"):
        JSON.dumps({"x": float("nan")})
