"""``adaptive_cutoff``: keep fused hits while both retrievers still back them (:mod:`~phenoforge.setbuild.cutoff`)."""

from __future__ import annotations

from collections.abc import Sequence

from phenoforge.setbuild.builders.base import BuildInputs, Training, TunedRule
from phenoforge.setbuild.builders.registry import register_builder
from phenoforge.setbuild.cutoff import CutoffParams, build_cutoff, tune_cutoff
from phenoforge.setbuild.models import BuiltSet


@register_builder
class AdaptiveCutoff(TunedRule[CutoffParams]):
    """The agreement cut-off and the hit depth, chosen on a grid by the training cohorts' mean score."""

    name = "adaptive_cutoff"
    label = "Adaptive cut-off"
    description = "the fused ranking cut where the score falls away (fitted on other libraries), no fixed k"
    position = 10
    params_model = CutoffParams

    def __init__(
        self, agreements: Sequence[float] = (0.3, 0.45, 0.6, 0.7, 0.8, 0.9), max_hits: Sequence[int] = (20, 60)
    ) -> None:
        super().__init__()
        self.agreements = tuple(agreements)
        self.max_hits = tuple(max_hits)

    def tune(self, training: Training) -> CutoffParams:
        cases = [(ex.cohort_id, ex.cohort_name, ex.truth, ex.table) for ex in training.examples]
        return tune_cutoff(
            training.con, training.hierarchy, cases, training.library_ids, self.agreements, self.max_hits
        )

    def build(self, inputs: BuildInputs) -> BuiltSet:
        return build_cutoff(inputs.hierarchy, inputs.table, self.fitted_params())
