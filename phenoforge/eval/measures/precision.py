"""Partial-credit precision: one minus over-inclusion, for readers who think in precision."""

from __future__ import annotations

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.measures.over_inclusion import OverInclusion
from phenoforge.eval.models import CohortEvalResult


class Precision(OverInclusion):
    """``1 - over_inclusion``.

    >>> Precision().label
    'Precision (1 - over-inclusion)'
    """

    name = "precision"
    label = "Precision (1 - over-inclusion)"
    higher_is_better = True
    description = "1 - over-inclusion"
    result_field = None

    def compute(self, matches: CohortMatches) -> float:
        return 1.0 - super().compute(matches)

    def value(self, result: CohortEvalResult) -> float:
        if self.key in result.scores:
            return float(result.scores[self.key])
        return 1.0 - OverInclusion(**self.parameters).value(result)
