"""Benchmark harness: score generated retrieval against curated ground truth.

The database-backed counterpart of the pure functions in :mod:`phenoforge.eval.metrics`. For each
cohort of a library, the curated concept set is the ground truth (free: curated value sets already
are the labels) and each retrieval method's output is scored against it.

Best matches are computed through ancestor tables rather than pair by pair: for a set of target
codes, ``best_up[x]`` is the fewest edges from any target up to ancestor ``x``; a code's best
distance is then ``min_i(i + best_up[chain[i]])`` over its own chain. On a tree (ICD-10-CM is one)
that equals the minimum of :func:`~phenoforge.eval.metrics.tree_distance` over all pairs, at
``O((n + m) * depth)`` instead of ``O(n * m * depth)``; on a DAG it is the minimum over every shared
ancestor, never worse than the first-LCA walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
from pydantic import BaseModel, Field, PrivateAttr

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.bm25 import get_bm25_index
from phenoforge.engine.curated import load_curated_concept_set
from phenoforge.engine.expansion import Hierarchy, expand_descendants, get_hierarchy
from phenoforge.engine.hybrid import fusion_depth, rrf_fuse
from phenoforge.eval.metrics import (
    DEFAULT_MAX_DISTANCE,
    distance_weighted_score,
    exact_match_scores,
    hierarchical_score,
    over_inclusion_penalty,
    set_coverage,
)
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult

DEFAULT_METHODS = ["bm25", "hybrid", "expand_descendants"]
ALL_METHODS = ["bm25", "dense", "hybrid", "expand_descendants"]
NEEDS_DENSE = {"dense"}


def _best_up(hierarchy: Hierarchy, concept_ids: Sequence[int]) -> dict[int, int]:
    best: dict[int, int] = {}
    for concept_id in concept_ids:
        for ancestor, steps in zip(hierarchy.chain(concept_id), hierarchy.chain_levels(concept_id), strict=True):
            if steps < best.get(ancestor, 1 << 30):
                best[ancestor] = steps
    return best


def _best_up_of_codes(hierarchy: Hierarchy, codes: Sequence[str]) -> dict[int, int]:
    """``_best_up`` of the codes the vocabulary knows (unknown ones reach no ancestor)."""
    return _best_up(hierarchy, [cid for cid in _ids(hierarchy, codes) if cid is not None])


def _best_distance(hierarchy: Hierarchy, concept_id: int, best_up: dict[int, int]) -> int | None:
    best: int | None = None
    for ancestor, steps in zip(hierarchy.chain(concept_id), hierarchy.chain_levels(concept_id), strict=True):
        if best is not None and steps >= best:
            break
        up = best_up.get(ancestor)
        if up is not None and (best is None or steps + up < best):
            best = steps + up
    return best


def _ids(hierarchy: Hierarchy, codes: Sequence[str]) -> list[int | None]:
    return [hierarchy.resolve(code) for code in codes]


def _scores_against(
    hierarchy: Hierarchy, from_ids: Sequence[int | None], best_up: dict[int, int], max_distance: int
) -> list[float]:
    return [
        0.0
        if concept_id is None or not best_up
        else distance_weighted_score(_best_distance(hierarchy, concept_id, best_up), max_distance)
        for concept_id in from_ids
    ]


def match_scores(
    con: duckdb.DuckDBPyConnection,
    from_codes: list[str],
    to_codes: list[str],
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> list[float]:
    """Best distance-weighted score from each of ``from_codes`` to any of ``to_codes``.

    The caller picks the direction: ground truth here (matched against predicted) gives coverage;
    predicted here (matched against ground truth) gives over-inclusion. One score per
    ``from_codes`` entry, in order; 0.0 each if ``to_codes`` is empty, and 0.0 for a code the
    vocabulary does not know.
    """
    hierarchy = get_hierarchy(con)
    return _scores_against(hierarchy, _ids(hierarchy, from_codes), _best_up_of_codes(hierarchy, to_codes), max_distance)


def _score(
    hierarchy: Hierarchy,
    cohort_id: str,
    cohort_name: str,
    ground_truth_codes: list[str],
    predicted_codes: list[str],
    method: str,
    truth_best_up: dict[int, int] | None = None,
) -> CohortEvalResult:
    truth_ids = _ids(hierarchy, ground_truth_codes)
    unresolvable = [code for code, cid in zip(ground_truth_codes, truth_ids, strict=True) if cid is None]
    truth = [code for code, cid in zip(ground_truth_codes, truth_ids, strict=True) if cid is not None]
    truth_ids_known = [cid for cid in truth_ids if cid is not None]
    predicted = list(dict.fromkeys(predicted_codes))
    predicted_ids = _ids(hierarchy, predicted)
    if truth_best_up is None:
        truth_best_up = _best_up(hierarchy, truth_ids_known)
    predicted_best_up = _best_up(hierarchy, [cid for cid in predicted_ids if cid is not None])
    coverage = set_coverage(
        _scores_against(hierarchy, truth_ids_known, predicted_best_up, DEFAULT_MAX_DISTANCE), len(truth)
    )
    penalty = over_inclusion_penalty(
        _scores_against(hierarchy, predicted_ids, truth_best_up, DEFAULT_MAX_DISTANCE), len(predicted)
    )
    precision, recall, f1 = exact_match_scores(
        [hierarchy.code[cid] if cid is not None else code for code, cid in zip(predicted, predicted_ids, strict=True)],
        truth,
    )
    return CohortEvalResult(
        cohort_id=cohort_id,
        cohort_name=cohort_name,
        method=method,
        predicted_codes=predicted,
        ground_truth_codes=truth,
        coverage=coverage,
        over_inclusion_penalty=penalty,
        hierarchical_score=hierarchical_score(coverage, penalty),
        unresolvable_ground_truth=unresolvable,
        exact_precision=precision,
        exact_recall=recall,
        exact_f1=f1,
    )


def score_cohort(
    con: duckdb.DuckDBPyConnection,
    cohort_id: str,
    cohort_name: str,
    ground_truth_codes: list[str],
    predicted_codes: list[str],
    method: str,
) -> CohortEvalResult:
    """Score one method's predictions for one cohort against its curated ground truth.

    Coverage runs ground truth -> predicted, over-inclusion predicted -> ground truth; curated
    codes the vocabulary does not know are reported in ``unresolvable_ground_truth`` and left out
    of both directions.
    """
    return _score(get_hierarchy(con), cohort_id, cohort_name, ground_truth_codes, predicted_codes, method)


def _means(results: list[CohortEvalResult], field: str) -> dict[str, float]:
    by_method: dict[str, list[float]] = {}
    for result in results:
        by_method.setdefault(result.method, []).append(float(getattr(result, field)))
    return {method: sum(values) / len(values) for method, values in by_method.items()}


def aggregate(results: list[CohortEvalResult], skipped: list[str] | None = None) -> BenchmarkReport:
    """Means per method over the scored cohorts."""
    return BenchmarkReport(
        results=results,
        mean_coverage_by_method=_means(results, "coverage"),
        mean_over_inclusion_by_method=_means(results, "over_inclusion_penalty"),
        mean_hierarchical_score_by_method=_means(results, "hierarchical_score"),
        mean_exact_f1_by_method=_means(results, "exact_f1"),
        skipped=skipped or [],
    )


def expansion_seed(ground_truth_codes: Sequence[str]) -> str | None:
    """The least specific curated code: where a human would start expanding from."""
    return min(ground_truth_codes, key=lambda code: (len(code.replace(".", "")), code), default=None)


class _CohortQueries:
    """Each retriever is queried once per cohort, deep enough for fusion; methods take prefixes.

    ``bm25`` and ``dense`` rankings are prefix-stable (a deeper ranking never reorders a shallower
    one), so ``bm25``/``dense`` at k and ``hybrid`` fused from the fusion depth give exactly what
    separate ``search_concepts`` calls would, at half the query cost.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, query: str, k: int, dense: object | None) -> None:
        self.con, self.query, self.k, self.dense = con, query, k, dense
        self.depth = fusion_depth(k)
        self._bm25: list[str] | None = None
        self._dense: list[str] | None = None

    def bm25(self) -> list[str]:
        if self._bm25 is None:
            self._bm25 = [code for code, _ in get_bm25_index(self.con).ranking(self.query, self.depth)]
        return self._bm25

    def dense_ranking(self) -> list[str]:
        if self._dense is None:
            self._dense = [code for code, _ in self.dense.ranking(self.query, self.depth)]  # type: ignore[attr-defined]
        return self._dense

    def hybrid(self, dense_weight: float) -> list[str]:
        if self.dense is None:
            return [code for code, _ in rrf_fuse([self.bm25()], [1.0])[: self.k]]
        fused = rrf_fuse([self.bm25(), self.dense_ranking()], [1.0 - dense_weight, dense_weight])
        return [code for code, _ in fused[: self.k]]


def _predict(
    con: duckdb.DuckDBPyConnection,
    method: str,
    queries: _CohortQueries,
    ground_truth: list[str],
    dense_weight: float,
) -> list[str]:
    if method == "bm25":
        return queries.bm25()[: queries.k]
    if method == "dense":
        return queries.dense_ranking()[: queries.k]
    if method == "hybrid":
        return queries.hybrid(dense_weight)
    if method == "expand_descendants":
        seed = expansion_seed(ground_truth)
        return expand_descendants(con, seed) if seed else []
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(ALL_METHODS)}")


def run_benchmark(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    cohort_ids: list[str],
    methods: list[str] | None = None,
    dense: object | None = None,
    k: int = 25,
    fanout_threshold: int = 100,
    dense_weight: float = 0.5,
    progress: ProgressCallback | None = None,
) -> BenchmarkReport:
    """Run every requested method against every cohort and aggregate the results.

    The cohort's own display name is the query for ``bm25``, ``dense`` and ``hybrid``;
    ``expand_descendants`` seeds from the shortest curated code, a deliberately weak baseline.
    ``dense`` runs only with a dense retriever (otherwise it is skipped and listed in
    ``skipped``, not an error); ``hybrid`` without one degrades to BM25 alone.
    """
    methods = list(methods) if methods is not None else list(DEFAULT_METHODS)
    unknown = [method for method in methods if method not in ALL_METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {', '.join(ALL_METHODS)}")
    progress = progress or no_progress
    hierarchy = get_hierarchy(con)
    results: list[CohortEvalResult] = []
    skipped: list[str] = []
    for position, cohort_id in enumerate(cohort_ids):
        progress(position, len(cohort_ids), f"cohort {cohort_id}")
        curated = load_curated_concept_set(con, library_dir, cohort_id, fanout_threshold)
        truth = curated.codes
        if not truth:
            skipped.append(f"{cohort_id}/*: no resolvable ground-truth codes")
            continue
        truth_best_up = _best_up_of_codes(hierarchy, truth)
        queries = _CohortQueries(con, curated.cohort_name, k, dense)
        for method in methods:
            if method in NEEDS_DENSE and dense is None:
                skipped.append(f"{cohort_id}/{method}: no dense retriever")
                continue
            predicted = _predict(con, method, queries, truth, dense_weight)
            result = _score(
                hierarchy, curated.cohort_id, curated.cohort_name, truth, predicted, method, truth_best_up
            )
            result.unresolvable_ground_truth = list(curated.unresolvable)
            results.append(result)
    progress(len(cohort_ids), len(cohort_ids), "done")
    return aggregate(results, skipped)


class CohortRankings(BaseModel):
    cohort_id: str
    cohort_name: str
    ground_truth_codes: list[str]
    unresolvable_ground_truth: list[str] = Field(default_factory=list)
    bm25: list[str]
    dense: list[str] | None = None


class RankingCache(BaseModel):
    """Per-retriever rankings of every cohort, queried once: the hybrid-weight slider's input."""

    library_dir: str
    depth: int
    cohorts: list[CohortRankings]
    # ground-truth ancestor tables per (vocabulary build, cohort): fixed for the cache's lifetime,
    # so every slider move after the first only scores the re-fused predictions
    _truth_best_up: dict[tuple[str, str], dict[int, int]] = PrivateAttr(default_factory=dict)

    def truth_best_up(self, hierarchy: Hierarchy, cohort: CohortRankings) -> dict[int, int]:
        key = (hierarchy.build_id, cohort.cohort_id)
        if key not in self._truth_best_up:
            self._truth_best_up[key] = _best_up_of_codes(hierarchy, cohort.ground_truth_codes)
        return self._truth_best_up[key]

    @property
    def has_dense(self) -> bool:
        return any(cohort.dense is not None for cohort in self.cohorts)


def collect_rankings(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    cohort_ids: list[str],
    dense: object | None = None,
    depth: int = 200,
    fanout_threshold: int = 100,
    progress: ProgressCallback | None = None,
) -> RankingCache:
    """Query BM25 (and dense, when given) once per cohort, deep enough to re-fuse at any weight."""
    progress = progress or no_progress
    bm25 = get_bm25_index(con)
    cohorts = []
    for position, cohort_id in enumerate(cohort_ids):
        progress(position, len(cohort_ids), f"cohort {cohort_id}")
        curated = load_curated_concept_set(con, library_dir, cohort_id, fanout_threshold)
        cohorts.append(
            CohortRankings(
                cohort_id=curated.cohort_id,
                cohort_name=curated.cohort_name,
                ground_truth_codes=curated.codes,
                unresolvable_ground_truth=curated.unresolvable,
                bm25=[code for code, _ in bm25.ranking(curated.cohort_name, depth)],
                dense=[code for code, _ in dense.ranking(curated.cohort_name, depth)]  # type: ignore[attr-defined]
                if dense is not None
                else None,
            )
        )
    progress(len(cohort_ids), len(cohort_ids), "done")
    return RankingCache(library_dir=str(library_dir), depth=depth, cohorts=cohorts)


def rescore_hybrid(
    con: duckdb.DuckDBPyConnection, cache: RankingCache, dense_weight: float, k: int = 25
) -> BenchmarkReport:
    """Re-fuse cached rankings at ``dense_weight`` and re-score every cohort: no retrieval at all.

    Produces exactly what ``run_benchmark(methods=["hybrid"])`` would for the same weight and
    ``k`` (provided ``cache.depth >= fusion_depth(k)``), in a fraction of the time.
    """
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")
    if cache.depth < fusion_depth(k):
        raise ValueError(f"rankings are {cache.depth} deep; k={k} needs {fusion_depth(k)}")
    hierarchy = get_hierarchy(con)
    depth = fusion_depth(k)
    results = []
    for cohort in cache.cohorts:
        if not cohort.ground_truth_codes:
            continue
        if cohort.dense is None:
            rankings, weights = [cohort.bm25[:depth], []], [1.0, 0.0]
        else:
            rankings, weights = [cohort.bm25[:depth], cohort.dense[:depth]], [1.0 - dense_weight, dense_weight]
        predicted = [code for code, _ in rrf_fuse(rankings, weights)[:k]]
        result = _score(
            hierarchy,
            cohort.cohort_id,
            cohort.cohort_name,
            cohort.ground_truth_codes,
            predicted,
            "hybrid",
            cache.truth_best_up(hierarchy, cohort),
        )
        result.unresolvable_ground_truth = list(cohort.unresolvable_ground_truth)
        results.append(result)
    return aggregate(results)
