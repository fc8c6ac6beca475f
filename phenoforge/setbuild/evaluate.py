"""Leave-one-library-group-out evaluation of the set builders.

To score library L, every fitted piece (cut-off and subtree parameters, the membership model) is
fitted on training libraries (the bundled ones) of *other* groups only, and the result records what it was fitted
on. ``check_no_leakage`` is run on every fitted piece before it scores anything.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import duckdb

from phenoforge.engine.expansion import Hierarchy
from phenoforge.eval.scoring import score_cohort
from phenoforge.setbuild.context import CONTEXT_FEATURES, with_context_features
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.cutoff import build_cutoff, tune_cutoff
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.learned import LeakageError, MembershipModel, TrainingDataTooSmall, build_learned
from phenoforge.setbuild.model_store import ensure_model, model_name, models_dir
from phenoforge.setbuild.subtree import build_subtree, tune_subtree
from phenoforge.setbuild.transfer import (
    TRANSFER_METHOD,
    CuratedKnowledge,
    KnowledgeView,
    build_transfer,
    tune_transfer,
    with_transfer_features,
)

HYBRID_K = 25


def training_examples(examples: Sequence[Example], target_group: str, training: set[str]) -> list[Example]:
    """Examples a builder scoring ``target_group`` may be fitted on: training libraries of other groups."""
    return [ex for ex in examples if ex.library_id in training and ex.group != target_group]


def check_no_leakage(trained_on: Sequence[str], training_groups: Sequence[str], scored: Sequence[Example]) -> None:
    """Raise ``LeakageError`` if any scored cohort's library or group was used for fitting."""
    for ex in scored:
        if ex.library_id in trained_on or ex.group in training_groups:
            raise LeakageError(f"{ex.key} would be scored by a builder fitted on {', '.join(trained_on)}: refused")


@dataclass
class LibraryScores:
    library_id: str
    group: str
    n_cohorts: int
    hierarchical: dict[str, float] = field(default_factory=dict)
    exact_f1: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    trained_on: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    learned_rule: tuple[str, float] | None = None
    learned_variant: str | None = None
    fit_seconds: dict[str, float] = field(default_factory=dict)
    """time to fit (or load, when a stored model was reused) each fitted piece"""


def hybrid_at_k(hierarchy: Hierarchy, ex: Example, k: int = HYBRID_K) -> list[str]:
    """The reference hybrid: RRF of both rankings at fusion depth max(100, 4k), cut at k."""
    depth = max(100, 4 * k)
    return [code for code, _ in ex.retrieval.fused(depth)[:k]]


def _score(
    con: duckdb.DuckDBPyConnection,
    scored: Sequence[Example],
    predict: Callable[[Example], list[str]],
    method: str,
    out: LibraryScores,
) -> None:
    started = time.perf_counter()
    hier = f1 = 0.0
    for ex in scored:
        result = score_cohort(con, ex.cohort_id, ex.cohort_name, ex.truth, predict(ex), method)
        hier += result.hierarchical_score
        f1 += result.exact_f1
    out.hierarchical[method] = hier / max(len(scored), 1)
    out.exact_f1[method] = f1 / max(len(scored), 1)
    out.seconds[method] = time.perf_counter() - started


def evaluate_library(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    library_id: str,
    training: set[str],
    methods: Sequence[str] = ("hybrid@25", "adaptive_cutoff", "subtree", "learned"),
    features: Sequence[str] = FEATURE_NAMES,
    with_dense: bool = True,
    rule: tuple[str, float] | None = None,
    knowledge: CuratedKnowledge | None = None,
    variant: str | None = None,
) -> LibraryScores:
    """Out-of-sample scores of each method on one library (fitted on ``training`` libraries of other groups).

    ``rule`` and ``variant`` fix the learned model's selection rule and model variant instead of choosing
    them out of fold (ablations).
    ``knowledge`` adds the cross-library curated evidence: the scored cohorts see it without their
    own group; each training cohort without its own group and without the scored group.
    """
    scored = [ex for ex in examples if ex.library_id == library_id]
    group = scored[0].group if scored else library_id
    out = LibraryScores(library_id=library_id, group=group, n_cohorts=len(scored))
    train = training_examples(examples, group, training)
    trained_on = sorted({ex.library_id for ex in train})
    train_groups = sorted({ex.group for ex in train})
    check_no_leakage(trained_on, train_groups, scored)
    cases = [(ex.cohort_id, ex.cohort_name, ex.truth, ex.table) for ex in train]
    if "hybrid@25" in methods:
        _score(con, scored, lambda ex: hybrid_at_k(hierarchy, ex), "hybrid@25", out)
    if "adaptive_cutoff" in methods:
        started = time.perf_counter()
        params = tune_cutoff(con, hierarchy, cases, trained_on)
        out.fit_seconds["adaptive_cutoff"] = time.perf_counter() - started
        out.trained_on["adaptive_cutoff"] = params.trained_on
        out.notes.append(f"adaptive_cutoff: {params.model_dump(exclude={'trained_on'})}")
        _score(con, scored, lambda ex: build_cutoff(hierarchy, ex.table, params).code_list, "adaptive_cutoff", out)
    if "subtree" in methods:
        started = time.perf_counter()
        sparams = tune_subtree(con, hierarchy, cases, trained_on)
        out.fit_seconds["subtree"] = time.perf_counter() - started
        out.trained_on["subtree"] = sparams.trained_on
        out.notes.append(f"subtree: {sparams.model_dump(exclude={'trained_on'})}")
        _score(con, scored, lambda ex: build_subtree(hierarchy, ex.table, sparams).code_list, "subtree", out)
    if "learned" in methods:
        started = time.perf_counter()
        directory = None
        if knowledge is not None:
            train = with_transfer_features(hierarchy, train, knowledge, [group])
            scored = with_transfer_features(hierarchy, scored, knowledge, [group])
        if set(CONTEXT_FEATURES) & set(features):
            # the library context, as the benchmark builds a library: each library's names are its cohorts' context
            # (its columns follow the transfer columns: without the knowledge there is no context either)
            in_context = with_context_features(hierarchy, scored) if knowledge is not None else []
            if len(in_context) == len(scored):
                train, scored = with_context_features(hierarchy, train), in_context
            else:
                features = [name for name in features if name not in CONTEXT_FEATURES]
                out.notes.append("learned: built without library context (one name, or no curated knowledge)")
        if knowledge is not None:
            key = f"{knowledge.digest}-{group}".encode()
            directory = models_dir() / (
                f"{model_name(trained_on, features, with_dense, rule, variant)}-k{hashlib.sha1(key).hexdigest()[:10]}"
            )
        try:
            model, notes = ensure_model(
                con, hierarchy, train, features, with_dense, directory, rule=rule, variant=variant
            )
        except TrainingDataTooSmall as error:
            out.notes.append(f"learned: not scored, {error}")
            return out
        out.fit_seconds["learned"] = time.perf_counter() - started
        out.notes += [f"learned: {note}" for note in notes]
        out.notes.append(
            f"learned: rule {model.manifest.rule} {model.manifest.threshold}, {model.manifest.variant} trees "
            f"({model.manifest.threshold_chosen_on})"
        )
        out.trained_on["learned"] = list(model.manifest.training_libraries)
        out.learned_rule = (model.manifest.rule, model.manifest.threshold)
        out.learned_variant = model.manifest.variant
        view = knowledge.view([group]) if knowledge is not None else None
        if view is not None:
            out.notes.append(f"learned: curated knowledge from groups {', '.join(view.groups) or 'none'}")
        _score(con, scored, lambda ex: _learned_codes(hierarchy, ex, model, view), "learned", out)
        if TRANSFER_METHOD in methods and view is not None:
            started = time.perf_counter()
            params = tune_cutoff(con, hierarchy, cases, trained_on)
            base_train = training_examples(examples, group, training)
            transfer = tune_transfer(
                con,
                hierarchy,
                base_train,
                knowledge,
                [group],
                lambda ex: build_cutoff(hierarchy, ex.table, params).code_list,
            )
            out.fit_seconds[TRANSFER_METHOD] = time.perf_counter() - started
            out.trained_on[TRANSFER_METHOD] = transfer.trained_on
            out.notes.append(f"{TRANSFER_METHOD}: min similarity {transfer.min_similarity} ({transfer.chosen_on})")

            def transferred(ex: Example) -> list[str]:
                fallback = build_learned(
                    hierarchy, ex.table, model, ex.library_id, ex.group, features=ex.features, knowledge=view
                )
                return build_transfer(hierarchy, ex.table.query, view, transfer, fallback).code_list

            _score(con, scored, transferred, TRANSFER_METHOD, out)
    return out


def _learned_codes(
    hierarchy: Hierarchy, ex: Example, model: MembershipModel, view: KnowledgeView | None = None
) -> list[str]:
    built = build_learned(hierarchy, ex.table, model, ex.library_id, ex.group, features=ex.features, knowledge=view)
    return built.code_list
