"""One entry point per builder for the method registry: fit once per held-out group, then build.

``fit_builders`` fits (or reuses) everything a builder needs on the installed *development*
libraries outside ``held_out_group``: the cut-off and subtree parameters and the membership model,
stored under ``data/models/`` keyed by vocabulary build and training cohorts. ``build_set`` then
answers one query from the rankings the harness already has, refusing to score a library whose
group the fitted pieces saw.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import duckdb
from pydantic import BaseModel, ValidationError

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.curated import Library, list_libraries
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.setbuild.candidates import Retrieval, build_candidates
from phenoforge.setbuild.corpus import Example, library_examples
from phenoforge.setbuild.cutoff import CutoffParams, build_cutoff, tune_cutoff
from phenoforge.setbuild.groups import is_development_library, library_group
from phenoforge.setbuild.learned import (
    LeakageError,
    MembershipModel,
    TrainingDataTooSmall,
    build_learned,
    ensure_model,
    models_dir,
)
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.robust import get_typo_corrector, umbrella_nodes
from phenoforge.setbuild.subtree import SubtreeParams, build_subtree, tune_subtree

METHODS = ("adaptive_cutoff", "subtree", "learned")
PARAMS_RECIPE = "2"
"""Bumped when the rule builders' scales change (agreement floor at ``AGREEMENT_DEPTH``): stored
tuned parameters of an older recipe are retuned, not reused."""


class _StoredParams(BaseModel):
    vocabulary_build_id: str
    training_cohorts: list[str]
    cutoff: CutoffParams
    subtree: SubtreeParams


@dataclass
class FittedBuilders:
    """Everything fitted for scoring libraries outside ``training_groups``."""

    training_libraries: list[str]
    training_groups: list[str]
    cutoff: CutoffParams
    subtree: SubtreeParams
    model: MembershipModel | None
    notes: list[str] = field(default_factory=list)

    def check_may_score(self, library_id: str | None, group: str | None) -> None:
        if library_id in self.training_libraries or group in self.training_groups:
            raise LeakageError(
                f"builders fitted on {', '.join(self.training_libraries)} may not score {library_id or group!r}: "
                "fit them with that library's group held out"
            )


def fit_builders(
    con: duckdb.DuckDBPyConnection,
    dense: object | None,
    held_out_group: str | None = None,
    libraries: Sequence[Library] | None = None,
    progress: ProgressCallback | None = None,
) -> FittedBuilders:
    """Fit or reuse the builders on development libraries outside ``held_out_group``.

    ``held_out_group=None`` trains on every development library (for a user's imported library or
    a free query). A too-small training set leaves ``model=None`` and says so in ``notes``.
    """
    progress = progress or no_progress
    hierarchy = get_hierarchy(con)
    libraries = list(libraries) if libraries is not None else list_libraries()
    train_libraries = [
        lib
        for lib in libraries
        if is_development_library(lib.manifest) and library_group(lib.manifest) != held_out_group
    ]
    examples: list[Example] = []
    for lib in train_libraries:
        examples += library_examples(con, lib, dense, progress)
    names = sorted(lib.library_id for lib in train_libraries)
    groups = sorted({library_group(lib.manifest) for lib in train_libraries})
    notes: list[str] = []
    cutoff, subtree = _fit_params(con, hierarchy, examples, names, dense is not None, notes)
    model: MembershipModel | None = None
    try:
        model, model_notes = ensure_model(con, hierarchy, examples, with_dense=dense is not None)
        notes += model_notes
    except TrainingDataTooSmall as error:
        notes.append(f"learned builder falls back to the adaptive cut-off: {error}")
    return FittedBuilders(names, groups, cutoff, subtree, model, notes)


def _fit_params(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: list[Example],
    names: list[str],
    with_dense: bool,
    notes: list[str],
) -> tuple[CutoffParams, SubtreeParams]:
    keys = sorted(ex.key for ex in examples)
    digest = hashlib.sha1(json.dumps([keys, with_dense, PARAMS_RECIPE]).encode()).hexdigest()[:12]
    path = models_dir() / f"builder-params-{digest}.json"
    try:
        stored = _StoredParams.model_validate_json(path.read_text(encoding="utf-8"))
        if stored.vocabulary_build_id == hierarchy.build_id and stored.training_cohorts == keys:
            notes.append(f"reused tuned parameters {path.name}")
            return stored.cutoff, stored.subtree
        notes.append(f"{path.name} is stale (other vocabulary build or cohorts): retuned")
    except FileNotFoundError:
        pass
    except (ValidationError, ValueError, UnicodeDecodeError):
        notes.append(f"{path.name} is corrupt: retuned")
    if not examples:
        notes.append("no development library to tune on: default parameters (untuned)")
        return CutoffParams(), SubtreeParams()
    cases = [(ex.cohort_id, ex.cohort_name, ex.truth, ex.table) for ex in examples]
    cutoff = tune_cutoff(con, hierarchy, cases, names)
    subtree = tune_subtree(con, hierarchy, cases, names)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        _StoredParams(
            vocabulary_build_id=hierarchy.build_id, training_cohorts=keys, cutoff=cutoff, subtree=subtree
        ).model_dump_json(indent=1),
        encoding="utf-8",
    )
    tmp.replace(path)
    notes.append(f"tuned parameters on {', '.join(names)}")
    return cutoff, subtree


def robust_query(con: duckdb.DuckDBPyConnection, query: str) -> tuple[str, dict[str, str]]:
    """The typo-corrected query to run the retrievers with, and the umbrella nodes of it (code -> text)."""
    searched = get_typo_corrector(con).correct(query).corrected
    hierarchy = get_hierarchy(con)
    return searched, {hierarchy.code[n]: text for n, text in umbrella_nodes(con, hierarchy, searched).items()}


def build_set(
    hierarchy: Hierarchy,
    method: str,
    query: str,
    bm25: list[tuple[str, float]],
    dense: list[tuple[str, float]] | None,
    fitted: FittedBuilders,
    scored_library_id: str | None = None,
    scored_group: str | None = None,
    searched_as: str | None = None,
    umbrellas: dict[str, str] | None = None,
    dense_weight: float = 0.5,
) -> BuiltSet:
    """One builder's code list for one query from rankings ``RETRIEVAL_DEPTH`` deep (with scores)."""
    if method not in METHODS:
        raise ValueError(f"unknown set builder {method!r}; choose one of {', '.join(METHODS)}")
    fitted.check_may_score(scored_library_id, scored_group)
    retrieval = Retrieval(
        query=query,
        bm25=bm25,
        dense=dense,
        dense_weight=dense_weight,
        searched_as=searched_as,
        umbrellas=umbrellas or {},
    )
    table = build_candidates(hierarchy, retrieval)
    if method == "adaptive_cutoff":
        return build_cutoff(hierarchy, table, fitted.cutoff)
    if method == "subtree":
        return build_subtree(hierarchy, table, fitted.subtree)
    if fitted.model is None:
        built = build_cutoff(hierarchy, table, fitted.cutoff)
        built.method = "learned"
        built.fallback = "no membership model (too little training data): adaptive cut-off used instead"
        return built
    return build_learned(hierarchy, table, fitted.model, scored_library_id, scored_group)
