"""The Compare page's logic (no streamlit here): two lists from any source, side by side, with scores."""

from __future__ import annotations

from typing import Any

import duckdb
from pydantic import BaseModel, Field

from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.compare import NearMiss
from phenoforge.lists.comparison import CodeListComparison, compare_code_lists, named
from phenoforge.lists.sources import CodeList, check_codes

NEAR_WIDTHS = (80, 270, 110, 260, 70)
"""Widths (px) of a near-miss table's five columns: the code, its title, the nearest code, its title, distance."""
SOURCES = ["Signed-off version", "Curated cohort", "Saved run", "Uploaded CSV"]
EMPTY_BOTH = "Both lists are empty: there is nothing to compare. Pick a list with codes on at least one side."
MAX_ROWS = 1000
"""The most rows a table of the page draws (the caption says how many there are; the CLI's --json has all)."""


class Comparison(BaseModel):
    """What the page shows: the comparison, and per side what the vocabulary says of its codes."""

    result: CodeListComparison | None = None
    messages: list[str] = Field(default_factory=list, description="warnings: unknown and non-billable codes")
    empty: str | None = None


def compare_sides(con: duckdb.DuckDBPyConnection, left: CodeList, right: CodeList, max_distance: int) -> Comparison:
    """``right`` scored with ``left`` as the ground truth; two empty lists are a message, not a comparison."""
    if not left.codes and not right.codes:
        return Comparison(empty=EMPTY_BOTH)
    messages = []
    for side in (left, right):
        if not side.codes:
            messages.append(f"{side.name} is empty: every code of the other list is only on that side.")
        messages += check_codes(con, side.codes).messages(side.name)
    result = compare_code_lists(get_hierarchy(con), left.codes, right.codes, left.name, right.name, max_distance)
    return Comparison(result=result, messages=messages)


def _names(con: duckdb.DuckDBPyConnection, codes: list[str]) -> dict[str, str]:
    hierarchy = get_hierarchy(con)
    out = {}
    for code in codes:
        node = hierarchy.resolve(code)
        out[code] = hierarchy.name[node] if node is not None else "(not in this vocabulary)"
    return out


def code_rows(con: duckdb.DuckDBPyConnection, codes: list[str]) -> list[dict[str, Any]]:
    """The first ``MAX_ROWS`` codes with their titles (``shown_of`` says how many there are)."""
    codes = codes[:MAX_ROWS]
    names = _names(con, codes)
    return [{"code": code, "description": names[code]} for code in codes]


def shown_of(total: int) -> str:
    """A table's count: '12', or 'first 1,000 of 1,000,000'."""
    return f"{total:,}" if total <= MAX_ROWS else f"first {MAX_ROWS:,} of {total:,}"


def unknown_caption(result: CodeListComparison) -> str:
    """The codes no side's vocabulary knows, named up to a few and counted."""
    return (
        f"Not in this vocabulary ({len(result.unknown):,}): {named(result.unknown)}. As in the benchmark, such a "
        "code of the right list counts as a miss and one of the left list (the ground truth) is left out of the "
        "scores; one both lists hold counts as shared."
    )


def near_rows(con: duckdb.DuckDBPyConnection, misses: list[NearMiss], side: str, other: str) -> list[dict[str, Any]]:
    misses = misses[:MAX_ROWS]
    names = _names(con, [m.code for m in misses] + [m.nearest for m in misses])
    return [
        {
            f"only in {side}": m.code,
            "description": names[m.code],
            f"nearest in {other}": m.nearest,
            "its description": names[m.nearest],
            "tree distance": m.distance,
        }
        for m in misses
    ]


def score_metrics(result: CodeListComparison) -> list[tuple[str, str]]:
    score = result.score_text
    return [
        ("shared", f"{len(result.shared) + len(result.unknown_shared):,}"),
        ("only left", f"{len(result.only_first):,}"),
        ("only right", f"{len(result.only_second):,}"),
        ("hierarchical", score(result.hierarchical)),
        ("coverage", score(result.coverage)),
        ("over-inclusion", score(result.over_inclusion)),
        ("exact F1", score(result.exact_f1)),
    ]
