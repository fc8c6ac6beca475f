"""Hybrid retrieval: weighted RRF arithmetic, degradation without dense, provenance, dispatch."""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.engine.bm25 import get_bm25_index
from phenoforge.engine.hybrid import RRF_K, fusion_depth, hybrid_search, rrf_fuse, search_concepts
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.schema import RETRIEVABLE_KINDS
from tests.fixture_vocab import FIXTURE_NODES

RETRIEVABLE = [code for code, _n, kind, _p in FIXTURE_NODES if kind in RETRIEVABLE_KINDS]


class FixedDense:
    """A dense retriever stand-in: the same fixed ranking for every query (deterministic)."""

    def __init__(self, order: list[str]) -> None:
        self.order = order
        self.calls: list[tuple[str, int]] = []

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        self.calls.append((query, n))
        return [(code, 1.0 - index / 100) for index, code in enumerate(self.order[:n])]

    def search(self, query: str, k: int = 10) -> SearchResult:
        hits = [
            Hit(
                code=c,
                name=c,
                rank=r,
                score=s,
                provenance=[Provenance(retriever="dense", query=query, rank=r, score=s)],
            )
            for r, (c, s) in enumerate(self.ranking(query, k), start=1)
        ]
        return SearchResult(query=query, method="dense", hits=hits)


# Dense prefers the asthma and femur codes, the opposite of what BM25 finds for a diabetes query.
DENSE_ORDER = ["J45.909", "S72.001A", "E11.21", "I50.9", "E11.9", "E66.9"]


# --- rrf_fuse ------------------------------------------------------------------------------------


def test_rrf_fuse_hand_computed() -> None:
    fused = dict(rrf_fuse([["a", "b", "c"], ["c", "a"]], [0.3, 0.7]))
    assert fused["a"] == pytest.approx(0.3 / 61 + 0.7 / 62)
    assert fused["b"] == pytest.approx(0.3 / 62)
    assert fused["c"] == pytest.approx(0.3 / 63 + 0.7 / 61)
    order = [code for code, _ in rrf_fuse([["a", "b", "c"], ["c", "a"]], [0.3, 0.7])]
    assert order == ["c", "a", "b"]


def test_rrf_constant_is_60() -> None:
    assert RRF_K == 60
    assert rrf_fuse([["x"]], [1.0]) == [("x", pytest.approx(1 / 61))]
    assert rrf_fuse([["x"]], [1.0], rrf_k=0) == [("x", pytest.approx(1.0))]


def test_rrf_equal_weights_symmetric() -> None:
    fused = rrf_fuse([["a", "b"], ["b", "a"]], [0.5, 0.5])
    assert fused[0][1] == pytest.approx(fused[1][1])
    assert [code for code, _ in fused] == ["a", "b"]  # tie broken by first appearance


def test_rrf_zero_weight_ranking_contributes_nothing() -> None:
    assert rrf_fuse([["a", "b"], ["z", "a"]], [1.0, 0.0]) == rrf_fuse([["a", "b"]], [1.0])
    assert [c for c, _ in rrf_fuse([["a", "b"], ["z", "a"]], [0.0, 1.0])] == ["z", "a"]


def test_rrf_needs_one_weight_per_ranking() -> None:
    with pytest.raises(ValueError):
        rrf_fuse([["a"], ["b"]], [1.0])


@given(
    st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10),
    st.lists(st.sampled_from("abcdefghij"), unique=True, max_size=10),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_rrf_matches_the_formula(first: list[str], second: list[str], w: float) -> None:
    fused = rrf_fuse([first, second], [1 - w, w])
    expected: dict[str, float] = {}
    for ranking, weight in ((first, 1 - w), (second, w)):
        if weight <= 0:
            continue
        for rank, code in enumerate(ranking, start=1):
            expected[code] = expected.get(code, 0.0) + weight / (60 + rank)
    assert {c: s for c, s in fused} == pytest.approx(expected)
    scores = [score for _c, score in fused]
    assert scores == sorted(scores, reverse=True)


# --- hybrid_search -------------------------------------------------------------------------------


def test_dense_weight_zero_equals_bm25_order(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(DENSE_ORDER)
    for query in ("type 2 diabetes", "heart failure", "asthma", "fracture of femur"):
        bm25 = [code for code, _ in get_bm25_index(fixture_con).ranking(query, 10)]
        assert hybrid_search(fixture_con, query, k=10, dense=dense, dense_weight=0.0).codes == bm25
        assert hybrid_search(fixture_con, query, k=10, dense=None).codes == bm25


def test_dense_weight_one_equals_dense_order(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(DENSE_ORDER)
    assert hybrid_search(fixture_con, "type 2 diabetes", k=4, dense=dense, dense_weight=1.0).codes == DENSE_ORDER[:4]


def test_hybrid_scores_are_the_weighted_rrf(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(DENSE_ORDER)
    query, w = "type 2 diabetes kidney", 0.3
    bm25 = [code for code, _ in get_bm25_index(fixture_con).ranking(query, fusion_depth(10))]
    expected = rrf_fuse([bm25, DENSE_ORDER], [1 - w, w])[:10]
    result = hybrid_search(fixture_con, query, k=10, dense=dense, dense_weight=w)
    assert [(hit.code, hit.score) for hit in result.hits] == [(c, pytest.approx(s)) for c, s in expected]
    assert dense.calls == [(query, fusion_depth(10))]
    assert not result.degraded


def test_without_dense_it_degrades_and_says_so(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = hybrid_search(fixture_con, "heart failure", k=5)
    assert result.degraded is True
    assert result.notes and "BM25" in result.notes[0]
    assert result.method == "hybrid"
    assert result.hits


def test_every_hit_carries_its_provenance(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(DENSE_ORDER)
    query = "type 2 diabetes kidney"
    bm25 = [code for code, _ in get_bm25_index(fixture_con).ranking(query, fusion_depth(10))]
    result = hybrid_search(fixture_con, query, k=10, dense=dense, dense_weight=0.5)
    assert result.hits
    seen_dense_only = False
    for hit in result.hits:
        by_retriever = {p.retriever: p for p in hit.provenance}
        assert by_retriever["hybrid"].rank == hit.rank and by_retriever["hybrid"].score == hit.score
        assert all(p.query == query for p in hit.provenance)
        assert "bm25" in by_retriever or "dense" in by_retriever
        if hit.code in bm25:
            assert by_retriever["bm25"].rank == bm25.index(hit.code) + 1
        else:
            assert "bm25" not in by_retriever
        if hit.code in DENSE_ORDER:
            assert by_retriever["dense"].rank == DENSE_ORDER.index(hit.code) + 1
            seen_dense_only |= hit.code not in bm25
        else:
            assert "dense" not in by_retriever
    assert seen_dense_only  # a code only dense found still gets there, and says so
    assert [hit.rank for hit in result.hits] == list(range(1, len(result.hits) + 1))
    assert all(hit.name for hit in result.hits)


@pytest.mark.parametrize("weight", [-0.1, 1.01, 2.0, math.nan])
def test_invalid_weight_is_a_value_error(fixture_con: duckdb.DuckDBPyConnection, weight: float) -> None:
    with pytest.raises(ValueError):
        hybrid_search(fixture_con, "asthma", dense=FixedDense(DENSE_ORDER), dense_weight=weight)


@pytest.mark.parametrize("query", ["", "   ", "x" * 10_000, "糖尿病", "'; DROP TABLE concept; --", None])
def test_bad_queries_give_a_reason(fixture_con: duckdb.DuckDBPyConnection, query: object) -> None:
    for dense in (None, FixedDense(DENSE_ORDER)):
        result = hybrid_search(fixture_con, query, dense=dense)  # type: ignore[arg-type]
        assert result.hits == [] and result.reason
        assert result.degraded is (dense is None)


def test_k_is_respected(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(RETRIEVABLE)
    for k in (1, 5, 12):
        assert len(hybrid_search(fixture_con, "diabetes", k=k, dense=dense).hits) == k


# --- search_concepts -----------------------------------------------------------------------------


def test_search_concepts_dispatch(fixture_con: duckdb.DuckDBPyConnection) -> None:
    dense = FixedDense(DENSE_ORDER)
    bm25 = search_concepts(fixture_con, "asthma", method="bm25", k=5)
    assert bm25.method == "bm25" and bm25.codes == [c for c, _ in get_bm25_index(fixture_con).ranking("asthma", 5)]
    dense_result = search_concepts(fixture_con, "asthma", method="dense", k=3, dense=dense)
    assert dense_result.method == "dense" and dense_result.codes == DENSE_ORDER[:3]
    hybrid = search_concepts(fixture_con, "asthma", method="hybrid", k=5, dense=dense, dense_weight=0.25)
    assert hybrid.codes == hybrid_search(fixture_con, "asthma", k=5, dense=dense, dense_weight=0.25).codes
    assert search_concepts(fixture_con, "asthma").method == "hybrid"


def test_dense_without_retriever_is_empty_with_a_reason(fixture_con: duckdb.DuckDBPyConnection) -> None:
    result = search_concepts(fixture_con, "asthma", method="dense")
    assert result.hits == [] and result.degraded
    assert "dense index" in result.reason and "phenoforge build" in result.reason


def test_unknown_method_is_a_value_error(fixture_con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(ValueError, match="unknown method"):
        search_concepts(fixture_con, "asthma", method="tfidf")


def test_zero_k_returns_no_hits_with_a_reason(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert bm25_search_result(fixture_con, 0).hits == []
    result = hybrid_search(fixture_con, "diabetes", k=0)
    assert result.hits == [] and result.reason


def bm25_search_result(con: duckdb.DuckDBPyConnection, k: int) -> SearchResult:
    return get_bm25_index(con).search("diabetes", k=k)


@pytest.mark.parametrize("k", [-1, -5])
def test_negative_k_returns_no_hits_or_refuses(fixture_con: duckdb.DuckDBPyConnection, k: int) -> None:
    assert bm25_search_result(fixture_con, k).hits == []
    try:
        result = hybrid_search(fixture_con, "diabetes", k=k)
    except ValueError:
        return
    assert result.hits == [] and result.reason


@pytest.mark.parametrize("query", ["\x00", "\x00\x00 \x01", "\x1b\x7f", " \x00\t"])
def test_control_characters_only_get_one_clear_reason_from_every_method(
    fixture_con: duckdb.DuckDBPyConnection, query: str
) -> None:
    """Issue 12 item 13: a NUL-only query gave no hits and no reason; every method now says why, alike."""
    dense = FixedDense(DENSE_ORDER)
    results = {
        method: search_concepts(fixture_con, query, method=method, k=5, dense=dense)
        for method in ("bm25", "dense", "hybrid")
    }
    assert all(result.hits == [] for result in results.values())
    reasons = {result.reason for result in results.values()}
    assert len(reasons) == 1 and "control characters" in reasons.pop()
    assert dense.calls == []  # the stand-in would have returned hits: nothing bad reaches a retriever
