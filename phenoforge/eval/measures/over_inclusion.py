"""Over-inclusion: how much of what was predicted has no good match in the curated set."""

from __future__ import annotations

from typing import ClassVar

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.measures.base import PartialCreditMeasure
from phenoforge.eval.metrics import over_inclusion_penalty


class OverInclusion(PartialCreditMeasure):
    """Mean of ``1 - credit`` over predicted codes against the curated set (lower is better).

    >>> OverInclusion().info().higher_is_better
    False
    """

    name = "over_inclusion"
    label = "Over-inclusion"
    higher_is_better = False
    description = "predicted -> curated: mean (1 - partial credit) of each prediction's nearest curated code"
    result_field: ClassVar[str | None] = "over_inclusion_penalty"

    def compute(self, matches: CohortMatches) -> float:
        return over_inclusion_penalty(self.credits("predicted", matches), len(matches.predicted))
