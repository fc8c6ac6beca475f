"""Sweeping a set builder's fusion weight against curated ground truth, cohort by cohort.

The set builders (``adaptive_cutoff``, ``subtree``, ``learned``, ``curated_transfer``) start from
the fused BM25 + dense ranking, which the benchmark runs at the weight they were fitted at. That
weight is the one parameter they do not fit themselves, so it is the one swept here. Everything a
builder fits leave-one-library-group-out (the cut-off's agreement and depth, the subtree shares,
the membership model and its threshold, the transfer similarity) stays exactly as fitted on the
other libraries: re-choosing it on the scored cohorts would undo the held-out fit.

Rankings are queried once per cohort (in one batch) and the fitted builders are reused; each
weight only rebuilds the candidate table and the set, then every weight is scored in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
from pydantic import BaseModel

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.engine.query import query_problem
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.harness import collect_rankings, rescore_hybrid, score_runs
from phenoforge.eval.models import BenchmarkReport, MethodRecord
from phenoforge.eval.qrels import Qrels, load_qrels
from phenoforge.eval.runs import Run
from phenoforge.eval.selection import CrossValidatedChoice, cross_validate_choice, weights_problem
from phenoforge.memory import collections_paused
from phenoforge.methods import MethodContext, SkipMethod
from phenoforge.methods.retrieval import Retrieval
from phenoforge.methods.set_building import (
    FITTED_DENSE_WEIGHT,
    LEARNED,
    SetBuildingRun,
    build_for,
    code_typed_as_query,
    learned_inputs,
    library_context_of,
    make_setup,
    scored_group,
    searched_as_of,
    to_entries,
)
from phenoforge.setbuild.api import FittedBuilders, build_set, candidate_table, robust_query
from phenoforge.setbuild.builders import builder_names, with_requirements
from phenoforge.setbuild.candidates import RETRIEVAL_DEPTH
from phenoforge.setbuild.context import LibraryContext
from phenoforge.setbuild.models import BuiltSet

SWEPT_PARAMETER = "dense_weight"


def sweepable() -> dict[str, str]:
    """Methods ``sweep`` can sweep, and what their swept ``dense_weight`` means."""
    return {
        "hybrid": "dense's share of the fused RRF ranking, cut at k",
        **{
            builder: "dense's share of the fused ranking the builder starts from (its own parameters stay as "
            "fitted leave-one-library-group-out)"
            for builder in builder_names()
        },
    }


class SweepError(PhenoforgeError):
    """A method the sweep cannot sweep."""


def check_sweepable(method: str) -> None:
    """Raise ``SweepError`` (one line naming the sweepable methods) unless ``method`` can be swept."""
    if method not in sweepable():
        raise SweepError(
            f"cannot sweep {method!r}: it has no parameter to sweep here; methods that can be swept: "
            f"{', '.join(sweepable())}"
        )


def sweep_label(method: str, weight: float) -> str:
    """The run name of ``method`` at one weight, e.g. ``subtree@0.30``."""
    return f"{method}@{weight:.2f}"


class SetBuilderSweep(BaseModel):
    """One set builder at every swept weight on one library: the report (one run per weight) and its fit."""

    method: str
    weights: list[float]
    report: BenchmarkReport
    trained_on: list[str]
    notes: list[str]

    def per_cohort(self, weight: float) -> dict[str, float]:
        """``{cohort_id: hierarchical score}`` at ``weight`` (the input of ``cross_validate_choice``)."""
        label = sweep_label(self.method, weight)
        return {r.cohort_id: r.hierarchical_score for r in self.report.results if r.method == label}

    def mean(self, weight: float, measure: str) -> float:
        """A per-weight mean: ``coverage``, ``over_inclusion`` or ``hierarchical``."""
        by_method = {
            "coverage": self.report.mean_coverage_by_method,
            "over_inclusion": self.report.mean_over_inclusion_by_method,
            "hierarchical": self.report.mean_hierarchical_score_by_method,
        }[measure]
        return by_method[sweep_label(self.method, weight)]


def _builds_from_rankings(context: MethodContext, query: str) -> bool:
    """Whether ``query`` is built from its own rankings (not refused, not a code or code-shaped token)."""
    if query_problem(query) is not None or code_typed_as_query(context.hierarchy, query) is not None:
        return False
    token = query.strip()
    return any(ch.isspace() for ch in token) or not any(ch.isdigit() for ch in token)


def _build_at(
    context: MethodContext,
    method: str,
    query: str,
    fitted: FittedBuilders,
    weight: float,
    prepared: tuple[str, dict[str, str], list[tuple[str, float]], list[tuple[str, float]] | None],
    library_context: LibraryContext | None = None,
) -> BuiltSet:
    """``method``'s set for ``query`` with the candidate table fused at ``weight`` (all else as fitted; a
    library's cohorts in each other's context, as the benchmark builds them)."""
    searched, umbrellas, bm25, dense = prepared
    table = candidate_table(context.hierarchy, query, bm25, dense, searched_as_of(query, searched), umbrellas, weight)
    probabilities = None
    chosen = fitted
    if fitted.model is not None and len(table):
        chosen, matrix = learned_inputs(context.hierarchy, table, fitted, library_context)
        assert chosen.model is not None
        probabilities = chosen.model.probabilities(matrix)

    # curated_transfer falls back to the learned set of the same table (with these probabilities), as in the benchmark
    built: dict[str, BuiltSet] = {}
    if method != LEARNED and LEARNED in with_requirements([method]):
        built[LEARNED] = build_set(
            context.hierarchy,
            chosen,
            LEARNED,
            table,
            context.library_id or None,
            scored_group(context),
            {},
            probabilities,
        )
    return build_set(
        context.hierarchy,
        chosen,
        method,
        table,
        context.library_id or None,
        scored_group(context),
        built,
        probabilities if method == LEARNED else None,
    )


@collections_paused()
def sweep_set_builder(
    con: duckdb.DuckDBPyConnection,
    qrels: Qrels,
    method: str,
    weights: Sequence[float],
    dense: object | None,
    progress: ProgressCallback | None = None,
) -> SetBuilderSweep:
    """Build ``method``'s set for every cohort of ``qrels`` at every weight, and score them all.

    The builders are fitted (or reused) without the scored library's group, exactly as the
    benchmark fits them, and refuse to score a library they were fitted on. At the fitted weight
    (0.5) the sets are the benchmark's own.
    """
    if method not in builder_names():
        raise SweepError(f"{method!r} is not a set builder; set builders: {', '.join(builder_names())}")
    problem = weights_problem(weights)
    if problem is not None:
        raise SweepError(problem)
    progress = progress or no_progress
    hierarchy = get_hierarchy(con)
    context = MethodContext(
        con=con,
        hierarchy=hierarchy,
        retrieval=Retrieval(con, dense, RETRIEVAL_DEPTH),
        dense_weight=FITTED_DENSE_WEIGHT,
        library_id=qrels.library_id,
        library_group=qrels.group,
        library_path=qrels.library_path,
        progress=progress,
    )
    try:
        setup = make_setup(method)(context)
    except SkipMethod as error:
        raise SweepError(f"{method} cannot score {qrels.library_id or qrels.library_path}: {error}") from None
    fitted = setup.state
    assert isinstance(fitted, FittedBuilders)
    notes = [note for note in setup.notes if "not this run's" not in note]
    if setup.degraded:
        notes.append(f"degraded: {setup.degraded}")
    cohorts = list(qrels.cohorts.values())
    searched_queries: dict[str, tuple[str, dict[str, str]]] = {}
    plain: dict[str, str] = {}  # cohort id -> the query its candidate table is built from
    for cohort in cohorts:
        query = cohort.cohort_name
        if not _builds_from_rankings(context, query):
            continue  # refused, or a code: the benchmark's own path answers it, the same at every weight
        plain[cohort.cohort_id] = query
        searched_queries[query] = robust_query(con, query)
    context.retrieval.prefetch([searched for searched, _ in searched_queries.values()], depth=RETRIEVAL_DEPTH)
    library_context = None
    if LEARNED in with_requirements([method]):
        context.shared.get(SetBuildingRun).searched.update(searched_queries)
        library_context = library_context_of(context, [cohort.cohort_name for cohort in cohorts], fitted)
    runs = {weight: Run(name=sweep_label(method, weight)) for weight in weights}
    for position, cohort in enumerate(cohorts):
        progress(position, len(cohorts), f"sweep {method}: {cohort.cohort_id}")
        table_query = plain.get(cohort.cohort_id)
        answering = fitted.for_query(cohort.cohort_name)  # a near copy of a bundled list: fitted without it
        if table_query is None:
            built = build_for(context, method, cohort.cohort_name, fitted)
            for weight in weights:
                runs[weight].cohorts[cohort.cohort_id] = to_entries(built)
            continue
        searched, umbrellas = searched_queries[table_query]
        prepared = (
            searched,
            umbrellas,
            context.retrieval.bm25(searched, RETRIEVAL_DEPTH),
            context.retrieval.dense_ranking(searched, RETRIEVAL_DEPTH),
        )
        for weight in weights:
            routed_context = library_context if answering is fitted else None
            built = _build_at(context, method, table_query, answering, weight, prepared, routed_context)
            runs[weight].cohorts[cohort.cohort_id] = to_entries(built)
    progress(len(cohorts), len(cohorts), f"sweep {method}: scoring")
    records = {
        run.name: MethodRecord(
            name=run.name, label=run.name, trained_on=list(setup.trained_on), degraded=setup.degraded
        )
        for run in runs.values()
    }
    report = score_runs(hierarchy, qrels, list(runs.values()), methods=records)
    return SetBuilderSweep(
        method=method, weights=list(weights), report=report, trained_on=list(setup.trained_on), notes=notes
    )


class SweepRow(BaseModel):
    """One swept weight's means over the library's scored cohorts."""

    dense_weight: float
    coverage: float
    over_inclusion: float
    hierarchical_score: float


class LibrarySweep(BaseModel):
    """One method swept over one library, as ``sweep`` prints it: per-weight means, then the in-sample
    best beside the cross-validated choice (``None`` with a single weight or fewer than two cohorts)."""

    method: str
    library_id: str
    rows: list[SweepRow]
    per_cohort: dict[float, dict[str, float]]
    choice: CrossValidatedChoice | None
    trained_on: list[str] | None = None
    """What a set builder was fitted on (empty: untuned defaults); ``None`` for hybrid, which fits nothing."""
    notes: list[str] = []
    skipped: list[str] = []
    """The cohorts left out (no ground-truth codes to score against), one line each, as the benchmark lists them."""


@collections_paused()
def sweep_library(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    method: str,
    weights: Sequence[float],
    dense: object | None,
    cohort_ids: Sequence[str] | None = None,
    k: int = 25,
    fanout_threshold: int = 100,
    n_folds: int = 5,
    progress: ProgressCallback | None = None,
) -> LibrarySweep:
    """Sweep ``method`` (hybrid or a set builder) over one library's cohorts (all when ``None``).

    Hybrid re-fuses rankings queried once; a set builder is swept by ``sweep_set_builder``. The
    cross-validated figure chooses the weight on the other folds of cohorts and scores the held-out one.
    """
    check_sweepable(method)
    library = load_library(library_dir)
    cohorts = list(cohort_ids or library.cohort_ids)
    per_cohort: dict[float, dict[str, float]] = {}
    rows: list[SweepRow] = []
    trained_on: list[str] | None = None
    notes: list[str] = []
    qrels = load_qrels(con, library_dir, cohorts, fanout_threshold)
    skipped = qrels.skipped_lines() if qrels.skipped else []
    if not qrels.cohorts:  # nothing to score: no row, and the skipped lines say why
        return LibrarySweep(
            method=method, library_id=library.library_id, rows=[], per_cohort={}, choice=None, skipped=skipped
        )
    if method == "hybrid":
        cache = collect_rankings(
            con, library_dir, cohorts, dense=dense, fanout_threshold=fanout_threshold, progress=progress
        )
        for weight in weights:
            report = rescore_hybrid(con, cache, weight, k=k)
            per_cohort[weight] = {r.cohort_id: r.hierarchical_score for r in report.results}
            rows.append(
                SweepRow(
                    dense_weight=weight,
                    coverage=report.mean_coverage_by_method["hybrid"],
                    over_inclusion=report.mean_over_inclusion_by_method["hybrid"],
                    hierarchical_score=report.mean_hierarchical_score_by_method["hybrid"],
                )
            )
    else:
        swept = sweep_set_builder(con, qrels, method, weights, dense, progress)
        trained_on, notes = swept.trained_on, swept.notes
        for weight in weights:
            per_cohort[weight] = swept.per_cohort(weight)
            rows.append(
                SweepRow(
                    dense_weight=weight,
                    coverage=swept.mean(weight, "coverage"),
                    over_inclusion=swept.mean(weight, "over_inclusion"),
                    hierarchical_score=swept.mean(weight, "hierarchical"),
                )
            )
    choice = None
    if len(weights) > 1 and len(per_cohort[weights[0]]) >= 2:
        choice = cross_validate_choice(per_cohort, n_folds=n_folds)
    return LibrarySweep(
        method=method,
        library_id=library.library_id,
        rows=rows,
        per_cohort=per_cohort,
        choice=choice,
        trained_on=trained_on,
        notes=notes,
        skipped=skipped,
    )
