"""The hierarchical score: harmonic mean of coverage and partial-credit precision."""

from __future__ import annotations

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.measures.base import PartialCreditMeasure
from phenoforge.eval.measures.coverage import Coverage
from phenoforge.eval.measures.over_inclusion import OverInclusion
from phenoforge.eval.metrics import hierarchical_score


class Hierarchical(PartialCreditMeasure):
    """F1-style: neither coverage nor precision can hide a bad score on the other.

    >>> Hierarchical(max_distance=4).key
    'hierarchical(max_distance=4)'
    """

    name = "hierarchical"
    label = "Hierarchical score"
    description = "harmonic mean of coverage and 1 - over-inclusion"
    result_field = "hierarchical_score"

    def compute(self, matches: CohortMatches) -> float:
        coverage = Coverage(**self.parameters).compute(matches)
        penalty = OverInclusion(**self.parameters).compute(matches)
        return hierarchical_score(coverage, penalty)
