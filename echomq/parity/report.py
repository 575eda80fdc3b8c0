"""The report: one row per step (case, call, result), then a one-line total."""

from __future__ import annotations

from typing import Iterable, TextIO

from .compare import show
from .differences import NAMED
from .observation import CaseResult, Verdict
from .runner import Tally

MAX_DIFFS = 8


def result_text(verdict: Verdict) -> list[str]:
    """The result cell: one line, plus indented detail lines for anything not equal."""
    if verdict.kind == "equal":
        return ["equal"]
    lines = []
    if verdict.kind == "named":
        titles = ", ".join(f"§{n} ({NAMED[n].title})" for n in verdict.names)
        lines.append(f"differs as {titles}: {verdict.why}")
    else:
        lines.append(f"UNEXPECTED: {verdict.why}")
    if verdict.replies is not None:
        lines.append(f"  reply: script {show(verdict.replies[0], 80)} | native {show(verdict.replies[1], 80)}")
    if verdict.kind == "unexpected":
        for d in verdict.diffs[:MAX_DIFFS]:
            lines.append(f"  {d}   (script | native)")
        if len(verdict.diffs) > MAX_DIFFS:
            lines.append(f"  … {len(verdict.diffs) - MAX_DIFFS} more")
    if verdict.left_behind:
        lines.append("  the script left: " + "; ".join(str(d) for d in verdict.left_behind[:MAX_DIFFS])
                     + "   (before | after)")
    return lines


def table(results: Iterable[CaseResult], out: TextIO, *, brief: bool = False) -> None:
    width_case, width_call = 42, 44
    out.write(f"{'case':<{width_case}} {'#':>2}  {'call':<{width_call}} result\n")
    out.write("-" * (width_case + width_call + 16) + "\n")
    for result in results:
        for step in result.steps:
            if brief and step.verdict.kind == "equal":
                continue
            call = str(step.step)
            call = call if len(call) <= width_call else call[: width_call - 1] + "…"
            first, *rest = result_text(step.verdict)
            out.write(f"{result.case:<{width_case}} {step.index:>2}  {call:<{width_call}} {first}\n")
            for line in rest:
                out.write(" " * (width_case + width_call + 6) + line + "\n")
        if result.missed:
            out.write(f"{result.case:<{width_case}}     MISSED: the case was written to show "
                      f"{', '.join('§' + n for n in sorted(result.missed))} and did not\n")


def by_kind(tally: Tally) -> str:
    named = tally.named_steps
    kinds = ", ".join(f"§{n} ×{c}" for n, c in sorted(tally.named.items()))
    return (f"{tally.steps} steps: {tally.equal} equal, {named} differ as named"
            + (f" ({kinds})" if kinds else "") + f", {tally.unexpected} UNEXPECTED")


def total(results: list[CaseResult], tally: Tally) -> str:
    missed = sum(1 for r in results if r.missed)
    return (f"parity: {len(results)} cases, {by_kind(tally)}"
            + (f", {missed} cases missed their edge" if missed else ""))


def plants_table(rows: list[tuple[str, str, str, str]], out: TextIO) -> None:
    """rows: (plant, family, what, caught by) — caught by is "case #step" or "NOT CAUGHT"."""
    out.write(f"{'plant':<38} {'family':<10} {'caught by (first case, step)':<44} what\n")
    out.write("-" * 130 + "\n")
    for plant, family, what, caught in rows:
        out.write(f"{plant:<38} {family:<10} {caught:<44} {what}\n")
