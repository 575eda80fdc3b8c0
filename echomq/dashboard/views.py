"""What a page's address asks for, read and written back (pure): a job list's state, page, filter
and where a filtered scan goes on, so that every list, search and bulk confirmation is a link that
survives a reload; and the few numbers the templates format."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping
from urllib.parse import urlencode

from ..admin.selection import NO_FILTER, JobFilter

PAGE_SIZE = 25  #: jobs a page lists
#: the longest search text (a job id is at most 512 bytes; its escaped form may be longer)
SEARCH_CHARS = 2048


class BadQuery(ValueError):
    """A query value out of range: the page answers 400 naming it."""


@dataclass(frozen=True)
class ListQuery:
    """A job list as its address names it: ``state``, ``page`` (unfiltered: 25 a page) or, with a
    filter, the rank ``start`` its scan begins at."""

    state: str = "pending"
    page: int = 1
    start: int = 0
    job_filter: JobFilter = field(default=NO_FILTER)

    def params(self, **changes: Any) -> dict[str, str]:
        """The query naming this list (with ``changes``), default values left out."""
        shown = replace(self, **changes)
        found = {"state": shown.state, **shown.job_filter.query()}
        if shown.page != 1:
            found["page"] = str(shown.page)
        if shown.start:
            found["from"] = str(shown.start)
        return found

    def href(self, path: str, **changes: Any) -> str:
        return f"{path}?{urlencode(self.params(**changes))}"

    def filter_params(self) -> dict[str, str]:
        return self.job_filter.query()


def list_query(params: Mapping[str, str], states: list[str]) -> ListQuery:
    """The list a page's query names (``state``, ``page``, ``from``, ``task``, ``error``, ``min_age``,
    ``max_age``); :class:`BadQuery` naming the value that does not read."""
    state = params.get("state", "pending")
    if state not in states:
        raise BadQuery(f"bad state {state!r}: one of {', '.join(states)}")
    return ListQuery(state, number(params.get("page", "1"), "page", 1), number(params.get("from", "0"), "from", 0),
                     read_filter(params))


def read_filter(params: Mapping[str, str]) -> JobFilter:
    try:
        return JobFilter(error=params.get("error", ""), min_age=params.get("min_age", ""),
                         max_age=params.get("max_age", ""), task=params.get("task", ""))
    except ValueError as exc:
        raise BadQuery(str(exc)) from None


#: the largest page or rank an address may name: past it a ZRANGE's index would not read
MAX_NUMBER = 2**62


def number(text: str, name: str, least: int) -> int:
    """A whole number of at least ``least`` from a query (:class:`BadQuery` otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise BadQuery(f"bad {name} {text[:40]!r}: a number from {least}") from None
    if not least <= value <= MAX_NUMBER:
        raise BadQuery(f"bad {name} {text[:40]!r}: a number from {least} to {MAX_NUMBER}")
    return value


def search_text(params: Mapping[str, str]) -> str:
    """The search box's text, trimmed; :class:`BadQuery` when longer than any id's escaped form."""
    text = params.get("q", "").strip()
    if len(text) > SEARCH_CHARS:
        raise BadQuery(f"a search of {len(text)} characters: a job id or its start, at most {SEARCH_CHARS}")
    return text


def seconds(ms: float | None) -> str:
    """A duration for a table: ``850 ms``, ``12.5 s``, ``3.2 min``, ``1.5 h``; ``–`` for none."""
    if ms is None:
        return "–"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"
