"""``curated_transfer``: a matched curated list from another library group (:mod:`phenoforge.setbuild.transfer`).

The similarity threshold is tuned on the training cohorts against the adaptive cut-off's sets (the
learned model's own predictions on its training cohorts would be in-sample); below it the learned set
answers.
"""

from __future__ import annotations

from typing import Self

from phenoforge.setbuild.builders.base import BuildInputs, ParamsBuilder, StateError, Training
from phenoforge.setbuild.builders.registry import register_builder
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.transfer import TRANSFER_THRESHOLDS, TransferParams, build_transfer, tune_transfer

CUTOFF = "adaptive_cutoff"
LEARNED = "learned"


@register_builder
class CuratedTransfer(ParamsBuilder[TransferParams]):
    """The name-similarity threshold above which a matched curated list beats the fallback."""

    name = "curated_transfer"
    label = "Curated transfer"
    description = (
        "the list of another library group's curated cohort whose name matches the query (threshold tuned "
        "leave-one-group-out), else the learned set"
    )
    position = 40
    requires = (CUTOFF, LEARNED)

    params_model = TransferParams

    def __init__(self, thresholds: tuple[float, ...] = TRANSFER_THRESHOLDS) -> None:
        super().__init__()
        self.thresholds = thresholds

    def fit(self, training: Training) -> Self:
        cutoff = training.fitted.get(CUTOFF)
        if cutoff is None:
            raise StateError("curated_transfer is tuned against the adaptive cut-off: fit that first")
        hierarchy = training.hierarchy
        training.stage("the curated-transfer threshold")
        self.params_ = tune_transfer(
            training.con,
            hierarchy,
            training.examples,
            training.knowledge,
            training.held_out,
            lambda ex: cutoff.build(BuildInputs(hierarchy, ex.table)).code_list,
            self.thresholds,
        )
        training.notes.extend(self.training_notes())
        return self

    def training_notes(self) -> list[str]:
        params = self.fitted_params()
        return [f"curated_transfer: min name similarity {params.min_similarity:.2f} ({params.chosen_on})"]

    def build(self, inputs: BuildInputs) -> BuiltSet:
        fallback = inputs.set_of(LEARNED)
        return build_transfer(inputs.hierarchy, inputs.query, inputs.knowledge, self.fitted_params(), fallback)
