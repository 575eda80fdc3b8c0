"""What one step looked like on both nodes, and the verdict on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .compare import Diff
from .dump import Dump
from .normalise import Window
from .steps import Do, Step


@dataclass
class Observation:
    case: str
    index: int
    step: Step
    script_reply: Any  #: normalised (see normalise.normalise_reply)
    native_reply: Any
    script_window: Window | None
    native_window: Window | None
    script_pre: Dump  #: raw dumps, before and after the step on each node
    script_post: Dump
    native_pre: Dump
    native_post: Dump
    script_pre_n: Dump  #: the same, normalised
    script_post_n: Dump
    native_pre_n: Dump
    native_post_n: Dump
    run_id: bytes  #: the native node's run_id during the step
    native_is_native: bool  #: False when the instrument runs script against script (self-test)
    violations: list[str] = field(default_factory=list)  #: native extras that broke their rule
    diffs: list[Diff] = field(default_factory=list)  #: script_post_n vs native_post_n

    @property
    def verb(self) -> str | None:
        return self.step.verb if isinstance(self.step, Do) else None

    @property
    def argv(self) -> tuple[str, ...]:
        return self.step.argv if isinstance(self.step, Do) else ()

    @property
    def keys(self) -> tuple[bytes, ...]:
        return tuple(k.encode() for k in self.step.call_keys()) if isinstance(self.step, Do) else ()

    @property
    def base(self) -> bytes:
        return self.step.base if isinstance(self.step, Do) else b""


@dataclass
class Verdict:
    kind: str  #: "equal", "named" or "unexpected"
    names: tuple[str, ...] = ()  #: the §5 differences that account for everything (kind "named")
    why: str = ""
    diffs: list[Diff] = field(default_factory=list)
    replies: tuple[Any, Any] | None = None  #: (script, native) when they differ
    left_behind: list[Diff] = field(default_factory=list)  #: what a failing script wrote before its error
    violations: list[str] = field(default_factory=list)

    @property
    def unexpected(self) -> bool:
        return self.kind == "unexpected"


@dataclass
class StepResult:
    index: int
    step: Step
    verdict: Verdict


@dataclass
class CaseResult:
    case: str
    family: str
    steps: list[StepResult]
    expect: frozenset[str] = frozenset()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(n for s in self.steps for n in s.verdict.names)

    @property
    def unexpected(self) -> list[StepResult]:
        return [s for s in self.steps if s.verdict.unexpected]

    @property
    def missed(self) -> frozenset[str]:
        """Named differences the case was written to show and did not."""
        return self.expect - self.names
