"""The one shape every set builder has, in the manner of a scikit-learn estimator.

A builder's parameters are given to ``__init__``; ``fit(training)`` learns what it needs from the
training cohorts (bundled libraries outside the scored group) and returns the builder; the fitted state
lives in attributes ending in ``_``; ``build(inputs)`` turns one query's candidate table into a list of
billable codes, each with its provenance. Persistence is apart from the object: ``state()`` gives the
fitted state as JSON-ready data and ``from_state`` makes a fitted builder from it again
(:mod:`phenoforge.setbuild.api` keeps those states on disk, keyed by what they were fitted on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

import duckdb
import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import PhenoforgeError
from phenoforge.setbuild.candidates import CandidateTable
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.transfer import CuratedKnowledge, KnowledgeView

P = TypeVar("P", bound=BaseModel)


class StateError(PhenoforgeError):
    """A stored fitted state that cannot be used (the fit is then made again; the message says why)."""


@dataclass
class Training:
    """What every builder's ``fit`` reads: the training cohorts and what they may see."""

    con: duckdb.DuckDBPyConnection
    hierarchy: Hierarchy
    examples: list[Example]
    library_ids: list[str]
    """the training libraries (travels with every fitted parameter as ``trained_on``)"""
    with_dense: bool
    knowledge: CuratedKnowledge | None = None
    """the curated cohorts of every bundled library; each training cohort sees them without its own group"""
    held_out: list[str] = field(default_factory=list)
    """the groups the fit leaves out (the scored library's)"""
    key: str = ""
    """what the examples and the knowledge hold, as a name part for stored models"""
    fitted: dict[str, SetBuilder] = field(default_factory=dict)
    """the builders fitted before this one in the same fit (a builder's ``requires``)"""
    notes: list[str] = field(default_factory=list)
    stage: Callable[[str], None] = lambda _message: None
    """says which fit step runs (each takes from seconds to minutes)"""
    choices: dict[str, Any] = field(default_factory=dict)
    """choices made out of fold on the same training groups when the shipped fits were made, by builder and
    part (``learned``: ``model`` and ``context_model``, each its rule, threshold, variant and where it was chosen):
    a builder that finds its own fits once with them instead of choosing again (``PHENOFORGE_FIT_CHOICES``)"""


@dataclass
class BuildInputs:
    """What every builder's ``build`` reads for one query."""

    hierarchy: Hierarchy
    table: CandidateTable
    knowledge: KnowledgeView | None = None
    scored_library_id: str | None = None
    scored_group: str | None = None
    peers: Mapping[str, SetBuilder] = field(default_factory=dict)
    """the other fitted builders of the same fit (a builder may build on a peer's set or fall back to it)"""
    built: dict[str, BuiltSet] = field(default_factory=dict)
    """sets already built for this query by the builders this one ``requires`` (built on demand otherwise)"""
    probabilities: np.ndarray | None = None
    """a model's probabilities for ``table``, predicted with other queries' in one call"""

    @property
    def query(self) -> str:
        return self.table.query

    def set_of(self, name: str) -> BuiltSet:
        """The set builder ``name`` built for this query (built now, once, when no caller gave it)."""
        if name not in self.built:
            peer = self.peers.get(name)
            if peer is None:
                raise StateError(f"no fitted {name!r} builder to build on")
            self.built[name] = peer.build(self.without_probabilities())
        return self.built[name]

    def without_probabilities(self) -> BuildInputs:
        return replace(self, probabilities=None)


class SetBuilder:
    """A set builder: parameters in ``__init__``, ``fit`` -> self, fitted state in ``*_`` attributes, ``build``."""

    name: ClassVar[str]
    label: ClassVar[str]
    description: ClassVar[str]
    position: ClassVar[int] = 100
    """where the builder stands in listings and reports (after the builders it requires)"""
    requires: ClassVar[tuple[str, ...]] = ()
    """builders fitted (and built) before this one, whose fitted state or sets it reads"""
    examples_only: ClassVar[bool] = False
    """True when the fitted state depends on the training examples alone (not on the curated knowledge
    or the held-out groups): it is then kept apart and reused by every fit on the same examples"""
    stages: ClassVar[int] = 1
    """how many progress steps its ``fit`` reports through ``Training.stage``"""

    def fit(self, training: Training) -> Self:
        raise NotImplementedError

    def build(self, inputs: BuildInputs) -> BuiltSet:
        raise NotImplementedError

    def is_fitted(self) -> bool:
        return all(getattr(self, name, None) is not None for name in self.fitted_attributes())

    def fitted_attributes(self) -> tuple[str, ...]:
        """The attributes ``fit`` sets (ending in ``_``)."""
        return ()

    def state(self) -> dict[str, Any]:
        """The fitted state as JSON-ready data (see ``from_state``)."""
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: Mapping[str, Any], hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        """A fitted builder from ``state()``'s data; ``StateError`` when it cannot be used."""
        raise NotImplementedError

    def stored_files(self) -> list[str]:
        """Names under ``data/models`` this fitted builder reads besides the fitted bundle (model folders)."""
        return []

    def training_notes(self) -> list[str]:
        """Notes about the fit worth keeping with the stored state (shown when it is reused)."""
        return []

    def degraded(self) -> str | None:
        """Why this fitted builder answers less well than it should (None: it does not)."""
        return None

    def not_fitted(self) -> StateError:
        return StateError(f"the {self.name} builder is not fitted: call fit(training) first")


def check_trained_on(name: str, trained_on: object, library_ids: list[str]) -> None:
    """Refuse a stored state that says it was fitted on a library the fit it is loaded for did not train on
    (the library scored, say): its sets would carry that library as ``trained_on``."""
    if not isinstance(trained_on, list) or not all(isinstance(lib, str) for lib in trained_on):
        raise StateError(f"stored {name} state names its training libraries wrongly")
    outside = sorted(set(trained_on) - set(library_ids))
    if outside:
        raise StateError(
            f"stored {name} state says it was fitted on {', '.join(outside)}, outside this fit's libraries"
        )


class ParamsBuilder(SetBuilder, Generic[P]):
    """A builder whose fitted state is one parameter model (``params_``), stored as that model's JSON."""

    params_model: ClassVar[type[BaseModel]]

    def __init__(self) -> None:
        self.params_: P | None = None

    def fitted_attributes(self) -> tuple[str, ...]:
        return ("params_",)

    def fitted_params(self) -> P:
        if self.params_ is None:
            raise self.not_fitted()
        return self.params_

    def state(self) -> dict[str, Any]:
        return self.fitted_params().model_dump(mode="json")

    @classmethod
    def from_state(cls, state: Mapping[str, Any], hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        builder = cls()
        try:
            builder.params_ = cast(P, cls.params_model.model_validate(state))
        except ValidationError as error:
            raise StateError(f"stored {cls.name} parameters are not valid ({error.error_count()} problems)") from None
        check_trained_on(cls.name, getattr(builder.params_, "trained_on", []), library_ids)
        return builder


class TunedRule(ParamsBuilder[P]):
    """A builder whose parameters are tuned on the training examples alone (shared by fits on the same ones)."""

    examples_only = True

    def fit(self, training: Training) -> Self:
        if not training.examples:  # nothing to tune on: the rule's defaults, untuned (trained_on stays empty)
            self.params_ = cast(P, self.params_model())
            return self
        self.params_ = self.tune(training)
        return self

    def tune(self, training: Training) -> P:
        raise NotImplementedError
