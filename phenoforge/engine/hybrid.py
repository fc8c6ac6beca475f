"""Hybrid retrieval: BM25 and dense rankings fused by weighted reciprocal rank fusion.

RRF (constant 60) needs no score calibration between retrievers, which matters here: BM25 scores
are unbounded and cosine similarities are not. ``dense_weight`` w gives the two rankings weights
``[1 - w, w]``; without a dense retriever the search degrades to BM25 alone and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from phenoforge.engine.bm25 import get_bm25_index
from phenoforge.engine.models import Hit, Provenance, RetrieverName, SearchResult
from phenoforge.engine.query import query_problem

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

RRF_K = 60
METHODS = ("bm25", "dense", "hybrid")


def fusion_depth(k: int) -> int:
    """How deep each retriever's ranking goes before fusion: deep enough that rank k is stable."""
    return max(100, 4 * k)


def rrf_fuse(
    rankings: Sequence[Sequence[str]], weights: Sequence[float], rrf_k: int = RRF_K
) -> list[tuple[str, float]]:
    """Weighted RRF: ``score(c) = sum_i w_i / (rrf_k + rank_i(c))`` with 1-based ranks.

    Codes only a zero-weight ranking holds are dropped. Ties break by first appearance (earlier
    rankings first), so the order is deterministic.

    >>> rrf_fuse([["a", "b"], ["b", "c"]], [0.5, 0.5])[0][0]
    'b'
    """
    if len(rankings) != len(weights):
        raise ValueError("one weight per ranking")
    scores: dict[str, float] = {}
    first_seen: dict[str, int] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        if weight <= 0:
            continue
        for rank, code in enumerate(ranking, start=1):
            first_seen.setdefault(code, len(first_seen))
            scores[code] = scores.get(code, 0.0) + weight / (rrf_k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], first_seen[item[0]]))


def fuse(
    bm25_codes: Sequence[str], dense_codes: Sequence[str] | None, dense_weight: float = 0.5
) -> list[tuple[str, float]]:
    """The one hybrid fusion: BM25 and dense rankings at weights ``[1 - w, w]``; BM25 alone without dense.

    ``hybrid_search``, the benchmark's ``hybrid`` method and the slider's re-scoring all call this,
    so they cannot drift apart.

    >>> [code for code, _ in fuse(["a", "b"], ["b", "c"], 0.5)]
    ['b', 'a', 'c']
    >>> [code for code, _ in fuse(["a", "b"], None)]
    ['a', 'b']
    """
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")
    if dense_codes is None:
        return rrf_fuse([bm25_codes], [1.0])
    return rrf_fuse([bm25_codes, dense_codes], [1.0 - dense_weight, dense_weight])


def _provenance(query: str, retriever: RetrieverName, ranked: list[tuple[str, float]]) -> dict[str, Provenance]:
    return {
        code: Provenance(retriever=retriever, query=query, rank=rank, score=score)
        for rank, (code, score) in enumerate(ranked, start=1)
    }


def hybrid_search(
    con: duckdb.DuckDBPyConnection,
    query: str,
    k: int = 10,
    dense: DenseRetriever | None = None,
    dense_weight: float = 0.5,
) -> SearchResult:
    """BM25 and dense fused by RRF; every hit says which retriever ranked it where."""
    problem = query_problem(query)
    if problem is not None:
        return SearchResult(query=str(query)[:200], method="hybrid", reason=problem, degraded=dense is None)
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")
    if k <= 0:
        return SearchResult(query=query, method="hybrid", reason=f"k must be positive, got {k}", degraded=dense is None)
    bm25 = get_bm25_index(con)
    depth = fusion_depth(k)
    bm25_ranked = bm25.ranking(query, depth)
    notes: list[str] = []
    if dense is None:
        dense_ranked: list[tuple[str, float]] = []
        notes.append("no dense index: BM25 alone")
    else:
        dense_ranked = dense.ranking(query, depth)
    fused = fuse(
        [c for c, _ in bm25_ranked], [c for c, _ in dense_ranked] if dense is not None else None, dense_weight
    )[:k]
    if not fused:
        return SearchResult(
            query=query,
            method="hybrid",
            reason="no ICD-10-CM description matches this query",
            degraded=dense is None,
            notes=notes,
        )
    from_bm25 = _provenance(query, "bm25", bm25_ranked)
    from_dense = _provenance(query, "dense", dense_ranked)
    hits = []
    for rank, (code, score) in enumerate(fused, start=1):
        provenance = [Provenance(retriever="hybrid", query=query, rank=rank, score=score)]
        provenance += [source[code] for source in (from_bm25, from_dense) if code in source]
        hits.append(Hit(code=code, name=bm25.names[code], rank=rank, score=score, provenance=provenance))
    return SearchResult(query=query, method="hybrid", hits=hits, degraded=dense is None, notes=notes)


def search_concepts(
    con: duckdb.DuckDBPyConnection,
    query: str,
    method: str = "hybrid",
    k: int = 10,
    dense: DenseRetriever | None = None,
    dense_weight: float = 0.5,
    dense_unavailable: str | None = None,
) -> SearchResult:
    """One entry point for every retriever; a dense search without an index says why it is empty
    (``dense_unavailable``: the caller's words for why, e.g. a corrupt index, which is not a missing one)."""
    problem = query_problem(query)
    if problem is not None and method in METHODS:  # every method gives the same answer to the same bad query
        return SearchResult(
            query=str(query)[:200], method=method, reason=problem, degraded=method != "bm25" and dense is None
        )
    if method == "bm25":
        return get_bm25_index(con).search(query, k)
    if method == "dense":
        if dense is None:
            return SearchResult(
                query=str(query)[:200],
                method="dense",
                reason=dense_unavailable or "the dense index is not built yet: run `python -m phenoforge build`",
                degraded=True,
            )
        return dense.search(query, k)
    if method == "hybrid":
        return hybrid_search(con, query, k=k, dense=dense, dense_weight=dense_weight)
    raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
