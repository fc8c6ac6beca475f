"""Comparing two code lists: what they share, what only one holds, and near misses through the hierarchy.

Either list can be the other's ground truth: the comparison carries the scores of the second as answer
to the first (coverage of the first, over-inclusion of the second, their harmonic mean, exact F1), the
same scoring path every benchmark uses. A near miss pairs a code of one side with its nearest code on the
other by tree distance through their lowest common ancestor (at most ``max_distance`` edges apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from phenoforge.eval.evaluate import score_matches
from phenoforge.eval.matching import CodeMatch, match_cohort
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy


class NearMiss(BaseModel):
    code: str
    nearest: str
    distance: int


class ListComparison(BaseModel):
    """Two lists side by side (``first`` taken as the reference the ``second`` is scored against)."""

    first: str
    second: str
    shared: list[str] = Field(default_factory=list)
    only_first: list[str] = Field(default_factory=list)
    only_second: list[str] = Field(default_factory=list)
    near_first: list[NearMiss] = Field(default_factory=list, description="codes only in the first, nearest second")
    near_second: list[NearMiss] = Field(default_factory=list, description="codes only in the second, nearest first")
    unknown: list[str] = Field(default_factory=list, description="codes of either list the vocabulary does not know")
    coverage: float = 0.0
    over_inclusion: float = 0.0
    hierarchical: float = 0.0
    exact_f1: float = 0.0


def compare_lists(
    hierarchy: Hierarchy,
    first: Sequence[str],
    second: Sequence[str],
    first_name: str = "first",
    second_name: str = "second",
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> ListComparison:
    """The comparison of two code lists (codes normalised as the benchmark does; unknown ones listed apart)."""
    matches = match_cohort(hierarchy, list(first), list(second))
    truth = {match.code for match in matches.truth}
    predicted = {match.code for match in matches.predicted if match.concept_id is not None}
    unknown = sorted({*matches.unresolvable_truth, *(m.code for m in matches.predicted if m.concept_id is None)})

    def near(side: list[CodeMatch], others: set[str]) -> list[NearMiss]:
        return [
            NearMiss(code=m.code, nearest=m.nearest_code, distance=m.distance)
            for m in side
            if m.concept_id is not None
            and m.code not in others
            and m.nearest_code is not None
            and m.distance is not None
            and m.distance <= max_distance
        ]

    out = ListComparison(
        first=first_name,
        second=second_name,
        shared=[m.code for m in matches.truth if m.code in predicted],
        only_first=[m.code for m in matches.truth if m.code not in predicted],
        only_second=[m.code for m in matches.predicted if m.concept_id is not None and m.code not in truth],
        near_first=near(matches.truth, predicted),
        near_second=near(matches.predicted, truth),
        unknown=unknown,
    )
    if truth or predicted:
        scored = score_matches(matches, first_name, first_name, second_name)
        out.coverage, out.over_inclusion = scored.coverage, scored.over_inclusion_penalty
        out.hierarchical, out.exact_f1 = scored.hierarchical_score, scored.exact_f1
    return out
