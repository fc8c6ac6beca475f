"""The benchmark harness on the fixture vocabulary and a fixture library written for these tests."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phenoforge.engine.bm25 import get_bm25_index
from phenoforge.engine.expansion import ancestor_chain_ids, expand_descendants
from phenoforge.engine.hybrid import hybrid_search
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.schema import RETRIEVABLE_KINDS
from phenoforge.eval import metrics
from phenoforge.eval.harness import (
    ALL_METHODS,
    DEFAULT_METHODS,
    collect_rankings,
    expansion_seed,
    match_scores,
    rescore_hybrid,
    run_benchmark,
    score_cohort,
)
from tests.engine import conftest as engine_fixtures
from tests.fixture_library import write_icd_library
from tests.fixture_vocab import FIXTURE_NODES

ALL_CODES = [code for code, *_ in FIXTURE_NODES]
TREE_CODES = [code for code in ALL_CODES if code != "E11.51"]  # everything but the diamond
RETRIEVABLE = [code for code, _n, kind, _p in FIXTURE_NODES if kind in RETRIEVABLE_KINDS]

# cohort id -> (display name, codes, include descendants)
COHORTS: dict[str, tuple[str, list[str], bool]] = {
    "dm2": ("Type 2 diabetes mellitus", ["E11"], True),
    "hf": ("Heart failure", ["I50.9", "I50.21", "I50.22"], False),
    "asthma": ("Asthma", ["J45", "J45.909"], False),
    "obesity": ("Obesity", ["E66.9", "Q99.999"], False),  # one curated code the vocabulary lacks
    "empty": ("Unknown condition", ["Q98.111"], False),  # nothing resolvable at all
}
SCORED = ["dm2", "hf", "asthma", "obesity"]

real_db_path = engine_fixtures.real_db_path  # the session's real vocabulary, built once (same path)
real_con = engine_fixtures.real_con


class FakeDense:
    """A dense retriever stand-in: a query-dependent, deterministic ranking of every retrievable code."""

    def __init__(self) -> None:
        self.calls = 0

    def _order(self, query: str) -> list[tuple[str, float]]:
        scored = [
            (
                code,
                int.from_bytes(hashlib.blake2b(f"{query}|{code}".encode(), digest_size=4).digest(), "little") / 2**32,
            )
            for code in RETRIEVABLE
        ]
        # codes sharing a word with the query first, so dense is not pure noise
        words = set(query.lower().split())
        return sorted(scored, key=lambda cs: (-(bool(words & set(_name(cs[0]).lower().split()))), -cs[1], cs[0]))

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        self.calls += 1
        return self._order(query)[:n]

    def search(self, query: str, k: int = 10) -> SearchResult:
        ranked = self.ranking(query, k)
        return SearchResult(
            query=query,
            method="dense",
            hits=[
                Hit(
                    code=c,
                    name=_name(c),
                    rank=r,
                    score=s,
                    provenance=[Provenance(retriever="dense", query=query, rank=r, score=s)],
                )
                for r, (c, s) in enumerate(ranked, start=1)
            ],
        )


def _name(code: str) -> str:
    return next(name for c, name, *_ in FIXTURE_NODES if c == code)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_icd_library(tmp_path_factory.mktemp("libs") / "fixture-lib", COHORTS, "fixture-lib")


def brute_force_scores(con: duckdb.DuckDBPyConnection, from_codes: list[str], to_codes: list[str]) -> list[float]:
    """The reference definition: min over every pair of tree_distance, then the distance score."""
    scores = []
    for source in from_codes:
        chain = ancestor_chain_ids(con, source)
        distances = [metrics.tree_distance(chain, ancestor_chain_ids(con, target)) for target in to_codes]
        known = [d for d in distances if d is not None] if chain else []
        scores.append(metrics.distance_weighted_score(min(known)) if known else 0.0)
    return scores


# --- match_scores -------------------------------------------------------------------------------------

subsets = st.lists(st.sampled_from(TREE_CODES), max_size=8)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(subsets, subsets)
def test_match_scores_equal_brute_force_on_the_tree(
    fixture_con: duckdb.DuckDBPyConnection, from_codes: list[str], to_codes: list[str]
) -> None:
    assert match_scores(fixture_con, from_codes, to_codes) == pytest.approx(
        brute_force_scores(fixture_con, from_codes, to_codes)
    )


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(ALL_CODES), max_size=8), st.lists(st.sampled_from(ALL_CODES), max_size=8))
def test_match_scores_never_worse_than_brute_force_through_the_diamond(
    fixture_con: duckdb.DuckDBPyConnection, from_codes: list[str], to_codes: list[str]
) -> None:
    fast = match_scores(fixture_con, from_codes, to_codes)
    brute = brute_force_scores(fixture_con, from_codes, to_codes)
    assert len(fast) == len(from_codes)
    for f, b in zip(fast, brute, strict=True):
        assert f >= b - 1e-12
        assert 0.0 <= f <= 1.0


def test_match_scores_examples(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert match_scores(fixture_con, ["E11.21"], ["E11.21"]) == [1.0]
    assert match_scores(fixture_con, ["E11.21"], ["E11.9"]) == [pytest.approx(1 - 3 / 6)]  # E11.21-E11.2-E11-E11.9
    assert match_scores(fixture_con, ["E11.21"], ["E11.22", "J45"]) == [pytest.approx(1 - 2 / 6)]
    assert match_scores(fixture_con, ["E11.21"], ["J45"]) == [0.0]  # different chapter: no common ancestor
    assert match_scores(fixture_con, ["E11.21", "J45"], []) == [0.0, 0.0]
    assert match_scores(fixture_con, ["E11.99"], ["E11.9"]) == [0.0]  # unknown code
    assert match_scores(fixture_con, [], ["E11.9"]) == []
    assert match_scores(fixture_con, ["E11.51"], ["E11.5"]) == [pytest.approx(1 - 1 / 6)]


def test_match_scores_through_the_diamond_count_edges(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """E11.51's second parent I73.9 is one edge away, but sits at position 2 of the breadth-first chain."""
    assert match_scores(fixture_con, ["E11.51"], ["I73.9"]) == [pytest.approx(1 - 1 / 6)]
    assert match_scores(fixture_con, ["I73"], ["E11.51"]) == [pytest.approx(1 - 2 / 6)]


def test_match_scores_max_distance(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert match_scores(fixture_con, ["E11.21"], ["E11.9"], max_distance=3) == [0.0]
    assert match_scores(fixture_con, ["E11.21"], ["E11.9"], max_distance=12) == [pytest.approx(0.75)]


# --- score_cohort -------------------------------------------------------------------------------------


def test_score_cohort_directions(fixture_con: duckdb.DuckDBPyConnection) -> None:
    over = score_cohort(fixture_con, "c", "C", ["E11.21"], ["E11.21", "I50.9"], "m")
    assert over.coverage == 1.0  # every curated code was found
    assert over.over_inclusion_penalty == pytest.approx(0.5)  # half of what was predicted is unrelated
    under = score_cohort(fixture_con, "c", "C", ["E11.21", "I50.9"], ["E11.21"], "m")
    assert under.coverage == pytest.approx(0.5)
    assert under.over_inclusion_penalty == 0.0
    assert over.hierarchical_score == pytest.approx(metrics.hierarchical_score(1.0, 0.5))


def test_score_cohort_partial_credit(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "dkd", "Diabetic kidney disease", ["E11.21", "E11.22"], ["E11.2"], "m")
    assert result.coverage == pytest.approx(5 / 6)
    assert result.over_inclusion_penalty == pytest.approx(1 / 6)
    assert result.hierarchical_score == pytest.approx(5 / 6)
    assert (result.exact_precision, result.exact_recall, result.exact_f1) == (0.0, 0.0, 0.0)
    assert result.cohort_id == "dkd" and result.cohort_name == "Diabetic kidney disease" and result.method == "m"


def test_score_cohort_exact_prf(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "c", "C", ["E11.21", "E11.22", "E11.29"], ["E11.21", "E11.22", "J45"], "m")
    assert result.exact_precision == pytest.approx(2 / 3)
    assert result.exact_recall == pytest.approx(2 / 3)
    assert result.exact_f1 == pytest.approx(2 / 3)
    typed = score_cohort(fixture_con, "c", "C", ["E11.21"], ["e1121"], "m")
    assert (typed.exact_precision, typed.exact_recall, typed.coverage) == (1.0, 1.0, 1.0)


def test_unknown_predicted_codes_count_against_exact_precision(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "c", "C", ["E11.21"], ["E11.21", "E11.99"], "m")
    assert result.over_inclusion_penalty == pytest.approx(0.5)  # the unknown code is penalised here...
    assert result.exact_precision == pytest.approx(0.5)  # ...and should be here too (it is not in the truth)


def test_unresolvable_ground_truth_is_reported_and_excluded(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = score_cohort(fixture_con, "c", "C", ["E66.9", "Q99.999"], ["E66.9"], "m")
    assert result.unresolvable_ground_truth == ["Q99.999"]
    assert result.ground_truth_codes == ["E66.9"]
    assert result.coverage == 1.0 and result.exact_recall == 1.0


def test_score_cohort_vacuous(fixture_con: duckdb.DuckDBPyConnection) -> None:
    nothing = score_cohort(fixture_con, "c", "C", ["E11.21"], [], "m")
    assert nothing.coverage == 0.0 and nothing.over_inclusion_penalty == 0.0 and nothing.hierarchical_score == 0.0


# --- run_benchmark -------------------------------------------------------------------------------------


def test_expansion_seed_is_the_shortest_code() -> None:
    assert expansion_seed(["E11.21", "E11", "E11.9"]) == "E11"
    assert expansion_seed(["I50.21", "I50.9", "I50.22"]) == "I50.9"
    assert expansion_seed([]) is None


def test_default_methods_and_skips(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, list(COHORTS))
    assert DEFAULT_METHODS == ["bm25", "hybrid", "expand_descendants"]
    assert sorted({r.method for r in report.results}) == sorted(DEFAULT_METHODS)
    assert sorted((r.cohort_id, r.method) for r in report.results) == sorted(
        (cid, m) for cid in SCORED for m in DEFAULT_METHODS
    )
    assert report.skipped == ["empty/*: no resolvable ground-truth codes"]
    assert set(report.mean_coverage_by_method) == set(DEFAULT_METHODS)


def test_dense_is_skipped_not_errored_without_a_retriever(
    fixture_con: duckdb.DuckDBPyConnection, library: Path
) -> None:
    report = run_benchmark(fixture_con, library, SCORED, methods=ALL_METHODS)
    assert "dense" not in {r.method for r in report.results}
    expected = sorted(f"{c}/dense: no dense retriever" for c in SCORED)
    assert sorted(s for s in report.skipped if "/dense" in s) == expected
    assert "dense" not in report.mean_hierarchical_score_by_method
    assert {r.method for r in report.results} == {"bm25", "hybrid", "expand_descendants"}


def test_expand_descendants_seeds_from_the_shortest_code(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, ["dm2", "hf", "asthma"], methods=["expand_descendants"])
    by_cohort = {r.cohort_id: r for r in report.results}
    assert by_cohort["dm2"].predicted_codes == expand_descendants(fixture_con, "E11")
    assert by_cohort["dm2"].coverage == 1.0 and by_cohort["dm2"].over_inclusion_penalty == 0.0
    assert by_cohort["hf"].predicted_codes == ["I50.9"]
    assert by_cohort["asthma"].predicted_codes == expand_descendants(fixture_con, "J45")


def test_queries_are_the_cohort_names(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, SCORED, methods=["bm25", "hybrid"], k=5)
    index = get_bm25_index(fixture_con)
    for result in report.results:
        name = COHORTS[result.cohort_id][0]
        if result.method == "bm25":
            assert result.predicted_codes == [c for c, _ in index.ranking(name, 5)]
        else:
            assert result.predicted_codes == hybrid_search(fixture_con, name, k=5).codes


def test_results_equal_score_cohort(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, SCORED)
    for result in report.results:
        again = score_cohort(
            fixture_con,
            result.cohort_id,
            result.cohort_name,
            result.ground_truth_codes,
            result.predicted_codes,
            result.method,
        )
        for field in (
            "coverage",
            "over_inclusion_penalty",
            "hierarchical_score",
            "exact_precision",
            "exact_recall",
            "exact_f1",
        ):
            assert getattr(result, field) == pytest.approx(getattr(again, field)), field


def test_means_per_method_are_means_of_the_results(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, list(COHORTS), methods=ALL_METHODS, dense=FakeDense())
    for method in ALL_METHODS:
        rows = [r for r in report.results if r.method == method]
        assert len(rows) == len(SCORED)
        for mean, field in (
            (report.mean_coverage_by_method, "coverage"),
            (report.mean_over_inclusion_by_method, "over_inclusion_penalty"),
            (report.mean_hierarchical_score_by_method, "hierarchical_score"),
            (report.mean_exact_f1_by_method, "exact_f1"),
        ):
            assert mean[method] == pytest.approx(sum(getattr(r, field) for r in rows) / len(rows))
    for result in report.results:
        for value in (result.coverage, result.over_inclusion_penalty, result.hierarchical_score, result.exact_f1):
            assert 0.0 <= value <= 1.0


def test_unresolvable_ground_truth_in_a_library(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    report = run_benchmark(fixture_con, library, ["obesity"], methods=["bm25"])
    (result,) = report.results
    assert result.unresolvable_ground_truth == ["Q99.999"]
    assert result.ground_truth_codes == ["E66.9"]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_k_is_respected(fixture_con: duckdb.DuckDBPyConnection, library: Path, k: int) -> None:
    report = run_benchmark(fixture_con, library, SCORED, methods=["bm25", "dense", "hybrid"], dense=FakeDense(), k=k)
    assert report.results
    for result in report.results:
        assert len(result.predicted_codes) <= k
    assert any(len(r.predicted_codes) == k for r in report.results)


def test_unknown_method_is_a_value_error(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    with pytest.raises(ValueError, match="tfidf"):
        run_benchmark(fixture_con, library, SCORED, methods=["bm25", "tfidf"])


def test_progress_is_reported(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Every stage that takes minutes on a large library says so: the curated sets, the rankings, the methods."""
    library = write_icd_library(tmp_path / "progress-lib", COHORTS, "progress-lib")  # its curated sets not cached
    seen: list[tuple[int, int, str]] = []
    run_benchmark(
        fixture_con,
        library,
        SCORED,
        methods=["bm25", "hybrid"],
        dense=FakeDense(),
        progress=lambda d, t, m: seen.append((d, t, m)),
    )
    # the curated sets of the scored cohorts (not the whole library) are resolved (and cached) first
    assert seen[0] == (0, len(SCORED), f"curated sets: {SCORED[0]}")
    assert (len(SCORED), len(SCORED), "curated sets loaded") in seen
    # then each retriever ranks every query once: silent before
    bm25 = [(d, t) for d, t, m in seen if m.startswith("BM25 rankings")]
    dense = [(d, t) for d, t, m in seen if m.startswith("dense rankings")]
    assert bm25[0] == (0, len(SCORED)) and bm25[-1] == (len(SCORED), len(SCORED))
    assert dense == [(0, len(SCORED)), (len(SCORED), len(SCORED))]
    assert seen.index(next(s for s in seen if s[2] == "curated sets loaded")) < seen.index(
        next(s for s in seen if s[2].startswith("BM25 rankings"))
    )
    assert seen[-1][:2] == (len(SCORED), len(SCORED))


# --- dense, and the slider path ------------------------------------------------------------------------


def test_dense_runs_with_a_retriever(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    dense = FakeDense()
    report = run_benchmark(fixture_con, library, SCORED, methods=["dense"], dense=dense, k=4)
    assert [r.method for r in report.results] == ["dense"] * len(SCORED)
    for result in report.results:
        assert result.predicted_codes == [c for c, _ in dense.ranking(result.cohort_name, 4)]
    assert report.skipped == []


@pytest.mark.parametrize("k", [5, 25])
def test_rescore_hybrid_equals_run_benchmark(fixture_con: duckdb.DuckDBPyConnection, library: Path, k: int) -> None:
    dense = FakeDense()
    cache = collect_rankings(fixture_con, library, list(COHORTS), dense=dense)
    assert cache.has_dense and cache.depth == 200
    calls = dense.calls
    for weight in (0.0, 0.2, 0.5, 0.8, 1.0):
        fast = rescore_hybrid(fixture_con, cache, weight, k=k)
        slow = run_benchmark(
            fixture_con, library, list(COHORTS), methods=["hybrid"], dense=dense, k=k, dense_weight=weight
        )
        assert [(r.cohort_id, r.predicted_codes) for r in fast.results] == [
            (r.cohort_id, r.predicted_codes) for r in slow.results
        ]
        assert [r.unresolvable_ground_truth for r in fast.results] == [
            r.unresolvable_ground_truth for r in slow.results
        ]
        assert fast.mean_coverage_by_method == pytest.approx(slow.mean_coverage_by_method)
        assert fast.mean_over_inclusion_by_method == pytest.approx(slow.mean_over_inclusion_by_method)
        assert fast.mean_hierarchical_score_by_method == pytest.approx(slow.mean_hierarchical_score_by_method)
        assert fast.mean_exact_f1_by_method == pytest.approx(slow.mean_exact_f1_by_method)
        # the cohort with nothing resolvable is named as skipped by both paths, not dropped silently
        assert fast.skipped == slow.skipped == ["empty/*: no resolvable ground-truth codes"]
    # rescoring itself queried nothing: every dense call since the cache came from run_benchmark
    assert dense.calls - calls == 5 * len(SCORED)


def test_weights_change_the_fused_predictions(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    cache = collect_rankings(fixture_con, library, SCORED, dense=FakeDense())
    bm25_only = rescore_hybrid(fixture_con, cache, 0.0, k=5)
    dense_only = rescore_hybrid(fixture_con, cache, 1.0, k=5)
    assert [r.predicted_codes for r in bm25_only.results] != [r.predicted_codes for r in dense_only.results]


def test_rescore_without_dense_equals_degraded_hybrid(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    cache = collect_rankings(fixture_con, library, SCORED)
    assert not cache.has_dense
    fast = rescore_hybrid(fixture_con, cache, 0.7, k=10)
    slow = run_benchmark(fixture_con, library, SCORED, methods=["hybrid"], k=10, dense_weight=0.7)
    assert [r.predicted_codes for r in fast.results] == [r.predicted_codes for r in slow.results]
    assert fast.mean_hierarchical_score_by_method == pytest.approx(slow.mean_hierarchical_score_by_method)


def test_rescore_refuses_bad_arguments(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    cache = collect_rankings(fixture_con, library, SCORED, depth=50)
    with pytest.raises(ValueError):
        rescore_hybrid(fixture_con, cache, 1.5)
    with pytest.raises(ValueError, match="deep"):
        rescore_hybrid(fixture_con, cache, 0.5, k=25)


# --- the real tree ------------------------------------------------------------------------------------


def test_match_scores_equal_brute_force_on_the_real_tree(real_con: duckdb.DuckDBPyConnection) -> None:
    """ICD-10-CM is a tree, so the ancestor-table shortcut must equal the pairwise minimum exactly."""
    rng = random.Random(20261202)
    codes = [
        code
        for (code,) in real_con.execute(
            "SELECT code FROM concept WHERE code LIKE 'E1%' OR code LIKE 'I5%' OR code LIKE 'S72%' ORDER BY concept_id"
        ).fetchall()
    ]
    for _ in range(25):
        truth = rng.sample(codes, 6)
        predicted = rng.sample(codes, 12) + [truth[0]]
        assert match_scores(real_con, truth, predicted) == pytest.approx(brute_force_scores(real_con, truth, predicted))
        assert match_scores(real_con, predicted, truth) == pytest.approx(brute_force_scores(real_con, predicted, truth))
    near = match_scores(real_con, ["E11.21"], ["E11.9"])
    assert near == [pytest.approx(0.5)]  # E11.21 - E11.2 - E11 - E11.9: three edges


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_benchmark_predictions_equal_the_search_functions(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, weight: float
) -> None:
    """Each retriever is queried once per cohort; the predictions still equal separate searches."""

    dense = FakeDense()
    report = run_benchmark(
        fixture_con, library, SCORED, methods=["bm25", "dense", "hybrid"], dense=dense, k=5, dense_weight=weight
    )
    assert dense.calls == len(SCORED)  # one dense query per cohort, shared by dense and hybrid
    for result in report.results:
        if result.method == "hybrid":
            expected = hybrid_search(fixture_con, result.cohort_name, k=5, dense=dense, dense_weight=weight).codes
        elif result.method == "dense":
            expected = [code for code, _ in dense.ranking(result.cohort_name, 5)]
        else:
            expected = [code for code, _ in get_bm25_index(fixture_con).ranking(result.cohort_name, 5)]
        assert result.predicted_codes == expected, result.method
