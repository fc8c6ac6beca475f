"""Coverage: did the whole curated set get assembled (ground truth -> predicted)."""

from __future__ import annotations

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.measures.base import PartialCreditMeasure
from phenoforge.eval.metrics import set_coverage


class Coverage(PartialCreditMeasure):
    """Mean best partial credit of each curated code against the predicted codes.

    >>> Coverage().info().higher_is_better
    True
    """

    name = "coverage"
    label = "Coverage"
    description = "curated -> predicted: mean partial credit of each curated code's nearest prediction"
    result_field = "coverage"

    def compute(self, matches: CohortMatches) -> float:
        return set_coverage(self.credits("truth", matches), len(matches.truth))
