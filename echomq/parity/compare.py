"""Key-by-key comparison of two normalised dumps, and of replies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dump import Dump
from .normalise import Err, Offset, same


class _Missing:
    def __repr__(self) -> str:
        return "absent"


MISSING = _Missing()


@dataclass(frozen=True)
class Diff:
    """One difference: a whole key (``part`` None), a hash field or a zset member."""

    key: bytes
    part: str | None  #: "field <f>" or "member <m>"
    left: Any  #: the script node's value (or the earlier value, in a delta)
    right: Any  #: the native node's value (or the later value)

    def __str__(self) -> str:
        where = text(self.key) + (f" {self.part}" if self.part else "")
        return f"{where}: {show(self.left)} | {show(self.right)}"


def text(raw: bytes | str) -> str:
    return raw.decode(errors="backslashreplace") if isinstance(raw, bytes) else raw


def show(value: Any, limit: int = 60) -> str:
    if isinstance(value, (bytes, str)):
        out = repr(text(value))
    elif isinstance(value, dict):
        out = "{" + ", ".join(f"{text(k)}={show(v, 20)}" for k, v in value.items()) + "}"
    else:
        out = repr(value)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def diff(left: Dump, right: Dump) -> list[Diff]:
    found: list[Diff] = []
    for key in sorted(left.keys() | right.keys()):
        a, b = left.get(key), right.get(key)
        if a is None or b is None or a.kind != b.kind:
            found.append(Diff(key, None, _whole(a), _whole(b)))
            continue
        if a.kind in ("hash", "zset"):
            label = "field" if a.kind == "hash" else "member"
            for part in sorted(a.value.keys() | b.value.keys()):
                x, y = a.value.get(part, MISSING), b.value.get(part, MISSING)
                if not same(x, y):
                    found.append(Diff(key, f"{label} {text(part)}", x, y))
        elif not same(a.value, b.value):
            found.append(Diff(key, None, a.value, b.value))
    return found


def _whole(entry):
    return MISSING if entry is None else Whole(entry.kind, entry.value)


@dataclass(frozen=True)
class Whole:
    """A whole key on one side of a difference (the other side lacks it or holds another type)."""

    kind: str
    value: Any

    def __repr__(self) -> str:
        return f"<{self.kind}> {show(self.value, 50)}"


def reply_same(a: Any, b: Any) -> bool:
    if isinstance(a, Err) or isinstance(b, Err):
        return a == b
    return same(a, b)


__all__ = ["Diff", "MISSING", "diff", "reply_same", "show", "text", "Offset"]
