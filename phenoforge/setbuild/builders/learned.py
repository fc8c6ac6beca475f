"""``learned``: a membership model over candidates (:mod:`~phenoforge.setbuild.learned`).

Two models are fitted: one answering a query on its own, and one with the library-context columns
(:mod:`~phenoforge.setbuild.context`) answering a library's cohorts built together. Too little training
data leaves no model, and the adaptive cut-off answers instead (said in the set's ``fallback``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.builders.base import BuildInputs, SetBuilder, StateError, Training
from phenoforge.setbuild.builders.registry import register_builder
from phenoforge.setbuild.context import with_context_features
from phenoforge.setbuild.learned import (
    ALL_FEATURE_NAMES,
    MATRIX_COLUMNS,
    MembershipModel,
    ModelError,
    TrainingDataTooSmall,
    build_learned,
)
from phenoforge.setbuild.model_store import ensure_model, load_model, model_name, models_dir
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.transfer import with_transfer_features

CUTOFF = "adaptive_cutoff"


@register_builder
class Learned(SetBuilder):
    """Gradient-boosted trees giving each candidate a probability of being on the curated list."""

    name = "learned"
    label = "Learned set builder"
    description = "a membership model over candidates, trained leave-one-library-group-out"
    position = 30
    requires = (CUTOFF,)
    stages = 2

    def __init__(self) -> None:
        self.model_: MembershipModel | None = None
        self.context_model_: MembershipModel | None = None
        self.model_directory_: str | None = None
        self.context_model_directory_: str | None = None
        self.notes_: list[str] = []
        self._fitted = False

    def is_fitted(self) -> bool:
        return self._fitted

    def fit(self, training: Training) -> Self:
        """Fit (or reuse) both models, stored under ``data/models`` in folders named by what they learn from."""
        self.notes_ = []
        self.model_ = self.context_model_ = None
        self.model_directory_ = self.context_model_directory_ = None
        with_dense = training.with_dense
        names = training.library_ids
        plain_directory = f"{model_name(names, ALL_FEATURE_NAMES, with_dense)}-{training.key}"
        context_directory = f"{model_name(names, MATRIX_COLUMNS, with_dense)}-{training.key}"
        try:
            training.stage("the membership model")
            # each training cohort sees the curated knowledge without its own group and without the held-out one
            examples = with_transfer_features(
                training.hierarchy, training.examples, training.knowledge, training.held_out
            )
            self.model_, notes = ensure_model(
                training.con,
                training.hierarchy,
                examples,
                ALL_FEATURE_NAMES,
                with_dense=with_dense,
                directory=models_dir() / plain_directory,
                **_given(training, "model"),
            )
            self.model_directory_ = plain_directory
            training.notes.extend(notes)
            try:
                training.stage("the library-context model")
                # each training library's cohorts are each other's context, as a scored library's are
                self.context_model_, notes = ensure_model(
                    training.con,
                    training.hierarchy,
                    with_context_features(training.hierarchy, examples),
                    MATRIX_COLUMNS,
                    with_dense=with_dense,
                    directory=models_dir() / context_directory,
                    **_given(training, "context_model"),
                )
                self.context_model_directory_ = context_directory
                training.notes.extend(f"library context: {note}" for note in notes)
            except TrainingDataTooSmall as error:
                self.notes_.append(f"learned builds a library's cohorts without their context: {error}")
        except TrainingDataTooSmall as error:
            self.notes_.append(f"learned builder falls back to the adaptive cut-off: {error}")
        training.notes.extend(self.notes_)
        self._fitted = True
        return self

    def in_context(self) -> Learned:
        """This builder with the context model answering (itself when there is none)."""
        if self.context_model_ is None:
            return self
        other = Learned()
        other.__dict__.update(self.__dict__)
        other.model_ = self.context_model_
        return other

    def build(self, inputs: BuildInputs) -> BuiltSet:
        if not self._fitted:
            raise self.not_fitted()
        if self.model_ is None:
            cutoff = inputs.peers.get(CUTOFF)
            if cutoff is None:
                raise StateError("learned has no membership model and no fitted adaptive cut-off to fall back to")
            built = cutoff.build(inputs)
            built.method = self.name
            built.fallback = "no membership model (too little training data): adaptive cut-off used instead"
            return built
        return build_learned(
            inputs.hierarchy,
            inputs.table,
            self.model_,
            inputs.scored_library_id,
            inputs.scored_group,
            knowledge=inputs.knowledge,
            probabilities=inputs.probabilities,
        )

    def degraded(self) -> str | None:
        if self.model_ is None:
            return "no membership model (too little training data): the adaptive cut-off answers instead"
        return None

    def training_notes(self) -> list[str]:
        return list(self.notes_)

    def state(self) -> dict[str, Any]:
        if not self._fitted:
            raise self.not_fitted()
        return {
            "model_directory": self.model_directory_ if self.model_ is not None else None,
            "context_model_directory": self.context_model_directory_ if self.context_model_ is not None else None,
            "notes": list(self.notes_),
        }

    def stored_files(self) -> list[str]:
        return [d for d in (self.model_directory_, self.context_model_directory_) if d is not None]

    @classmethod
    def from_state(cls, state: Mapping[str, Any], hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        builder = cls()
        notes = state.get("notes", [])
        if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
            raise StateError("notes are not a list of text")
        builder.notes_ = list(notes)
        for key in ("model_directory", "context_model_directory"):
            directory = state.get(key)
            if directory is None:
                continue
            if not isinstance(directory, str) or Path(directory).name != directory:
                raise StateError("names a model outside data/models")
            try:
                model = load_model(models_dir() / directory, hierarchy.build_id)
            except ModelError as error:
                raise StateError(f"membership model is unusable ({error})") from None
            if model.manifest.training_libraries != library_ids:
                raise StateError("membership model was trained on other libraries")
            if key == "model_directory":
                builder.model_, builder.model_directory_ = model, directory
            else:
                builder.context_model_, builder.context_model_directory_ = model, directory
        builder._fitted = True
        return builder


def _given(training: Training, part: str) -> dict[str, Any]:
    """``ensure_model``'s rule, variant and their origin for one model from ``training.choices`` (made out of fold
    on the same training groups when the shipped fits were made); nothing, so both are chosen here, without."""
    choice = training.choices.get(Learned.name, {}).get(part)
    if not isinstance(choice, dict):
        return {}
    return {
        "rule": (str(choice["rule"]), float(choice["threshold"])),
        "variant": str(choice["variant"]),
        "given_by": str(choice["chosen_on"]),
    }
