"""``subtree``: select whole categories the hits agree on (:mod:`~phenoforge.setbuild.subtree`)."""

from __future__ import annotations

from phenoforge.setbuild.builders.base import BuildInputs, Training, TunedRule
from phenoforge.setbuild.builders.registry import register_builder
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.subtree import SubtreeParams, build_subtree, tune_subtree


@register_builder
class Subtree(TunedRule[SubtreeParams]):
    """The subtree rule's shares and depths, chosen by coordinate ascent on the training cohorts' mean score."""

    name = "subtree"
    label = "Subtree builder"
    description = "decides node by node whether to take a subtree, expanded to its billable codes"
    position = 20
    params_model = SubtreeParams

    def __init__(self, rounds: int = 1) -> None:
        super().__init__()
        self.rounds = rounds

    def tune(self, training: Training) -> SubtreeParams:
        cases = [(ex.cohort_id, ex.cohort_name, ex.truth, ex.table) for ex in training.examples]
        return tune_subtree(training.con, training.hierarchy, cases, training.library_ids, rounds=self.rounds)

    def build(self, inputs: BuildInputs) -> BuiltSet:
        return build_subtree(inputs.hierarchy, inputs.table, self.fitted_params())
