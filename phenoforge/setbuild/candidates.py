"""The candidate table: every billable code a builder may choose, with the evidence for it.

Candidates come from the fused ranking of BM25 and dense: each top hit's billable descendants (a
billable hit is its own only one), and for the best hits, the billable codes of the subcategory and
category above them (the siblings a curated list usually takes along). Each candidate records the
nearest hit at or above it, which is its provenance when a builder keeps it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.hybrid import rrf_fuse
from phenoforge.engine.query import tokenize

RETRIEVAL_DEPTH = 5000
"""How deep a builder wants each retriever's ranking (scores of deep codes are features too).

5,000 of the ~98,000 retrievable codes: deep enough that 94% of the curated codes among the
candidates carry their own cosine (64% of all candidates), and the rankings stay cheap."""
AGREEMENT_DEPTH = 1000
"""The rule builders put cosines on a 0..1 scale between the best and the cosine at this rank: a
deeper floor squeezes every top hit towards 1 (measured: subtree fell from 0.55 to 0.47 on V28)."""
HIT_DEPTH = 100
"""Fused hits whose billable descendants become candidates."""
ROLLUP_DEPTH = 30
"""Fused hits whose subcategory and category siblings become candidates too."""
MAX_ROLLUP_SIZE = 400
"""A node with more billable codes than this is never rolled up wholesale (S72 has thousands)."""
MAX_CANDIDATES = 5000
VOTE_DEPTH = 30
"""Hits that vote for the category, block and parent of a candidate."""


@dataclass
class Retrieval:
    """One query's rankings from both retrievers, best first, with their scores."""

    query: str
    bm25: list[tuple[str, float]]
    dense: list[tuple[str, float]] | None = None
    dense_weight: float = 0.5
    searched_as: str | None = None
    """the query the retrievers actually ran (typo-corrected), when it differs from ``query``"""
    umbrellas: dict[str, str] = field(default_factory=dict)
    """code of a block or category the vocabulary names as an umbrella of the query -> its text"""

    def fused(self, depth: int = 200) -> list[tuple[str, float]]:
        """Weighted RRF of the two rankings cut at ``depth`` each (BM25 alone without dense)."""
        if self.dense is None:
            return rrf_fuse([[c for c, _ in self.bm25[:depth]]], [1.0])
        return rrf_fuse(
            [[c for c, _ in self.bm25[:depth]], [c for c, _ in self.dense[:depth]]],
            [1.0 - self.dense_weight, self.dense_weight],
        )


def billable_below(hierarchy: Hierarchy, concept_id: int) -> list[int]:
    """The billable codes a selected node stands for: itself when billable, else its billable descendants."""
    return list(hierarchy.billable_descendants(concept_id))


def ancestor_of_kind(hierarchy: Hierarchy, concept_id: int, kind: str) -> int | None:
    """The nearest node of ``kind`` at or above ``concept_id`` (``category``, ``block``...)."""
    return hierarchy.ancestor_of_kind(concept_id, kind)


@dataclass
class CandidateTable:
    """Billable candidates of one query with the per-hit evidence the builders and features read."""

    query: str
    query_tokens: list[str]
    fused: list[tuple[str, float]]
    hit_rank: dict[int, int]
    """concept id -> 1-based fused rank, for hits within ``HIT_DEPTH``"""
    fused_score: dict[int, float]
    bm25_rank: dict[int, int]
    bm25_score: dict[int, float]
    dense_rank: dict[int, int]
    dense_score: dict[int, float]
    umbrellas: dict[int, str] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)
    """per candidate: the best-ranked hit at or above it, else the rolled-up node it came from"""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    top_bm25: float = 0.0
    top_dense: float = 0.0
    floor_dense: float = 0.0
    agreement_floor_dense: float = 0.0
    """cosine at rank ``AGREEMENT_DEPTH``: the bottom of the scale the rule builders' agreement uses"""
    top_fused: float = 0.0


def _ranks(
    hierarchy: Hierarchy, ranking: Sequence[tuple[str, float]] | None
) -> tuple[dict[int, int], dict[int, float]]:
    ranks: dict[int, int] = {}
    scores: dict[int, float] = {}
    direct = hierarchy.ids_by_display_code()  # what ``resolve`` answers first, without a call per code
    ranking = ranking or []
    codes, given = (tuple(column) for column in zip(*ranking, strict=True)) if ranking else ((), ())
    if set(map(type, codes)) <= {str}:
        ids = list(map(direct.get, codes))
        if None not in ids and len(set(ids)) == len(ids):
            # the usual case (every code known, each once): the same dicts as the loop below, built in C
            known = cast(list[int], ids)
            ranks = dict(zip(known, range(1, len(known) + 1), strict=True))
            return ranks, dict(zip(known, map(float, given), strict=True))
    for rank, (code, score) in enumerate(ranking, start=1):
        concept_id = direct.get(code) if isinstance(code, str) else None
        if concept_id is None:
            concept_id = hierarchy.resolve(code)
        if concept_id is not None and concept_id not in ranks:
            ranks[concept_id] = rank
            scores[concept_id] = float(score)
    return ranks, scores


def build_candidates(
    hierarchy: Hierarchy,
    retrieval: Retrieval,
    hit_depth: int = HIT_DEPTH,
    rollup_depth: int = ROLLUP_DEPTH,
) -> CandidateTable:
    """The candidate table of one query: hits' billable descendants plus the best hits' siblings."""
    bm25_rank, bm25_score = _ranks(hierarchy, retrieval.bm25)
    dense_rank, dense_score = _ranks(hierarchy, retrieval.dense)
    fused = retrieval.fused()
    hit_rank: dict[int, int] = {}
    fused_score: dict[int, float] = {}
    for rank, (code, score) in enumerate(fused[:hit_depth], start=1):
        concept_id = hierarchy.resolve(code)
        if concept_id is not None and concept_id not in hit_rank:
            hit_rank[concept_id] = rank
            fused_score[concept_id] = score
    table = CandidateTable(
        query=retrieval.query,
        query_tokens=list(dict.fromkeys(tokenize(retrieval.searched_as or retrieval.query))),
        fused=fused,
        hit_rank=hit_rank,
        fused_score=fused_score,
        bm25_rank=bm25_rank,
        bm25_score=bm25_score,
        dense_rank=dense_rank,
        dense_score=dense_score,
    )
    table.top_bm25 = max(bm25_score.values(), default=0.0)
    table.top_dense = max(dense_score.values(), default=0.0)
    table.floor_dense = min(dense_score.values(), default=0.0)
    shallow = [score for _code, score in (retrieval.dense or [])[:AGREEMENT_DEPTH]]
    table.agreement_floor_dense = min(shallow, default=0.0)
    table.top_fused = fused[0][1] if fused else 0.0
    for code, text in retrieval.umbrellas.items():
        concept_id = hierarchy.resolve(code)
        if concept_id is not None:
            table.umbrellas[concept_id] = text
    if not hit_rank and not table.umbrellas:
        table.notes.append("no retriever returned a code for this query")
        return table
    origin: dict[int, int] = {}

    def add(nodes: list[int], source: int) -> None:
        for node in nodes:
            if node not in origin and len(origin) < MAX_CANDIDATES:
                origin[node] = source

    ordered_hits = sorted(hit_rank, key=hit_rank.__getitem__)
    for hit in ordered_hits:
        add(billable_below(hierarchy, hit), hit)
    for hit in ordered_hits[:rollup_depth]:
        for node in hierarchy.chain(hit)[1:]:
            if hierarchy.kind.get(node) not in ("subcategory", "category"):
                break
            below = billable_below(hierarchy, node)
            if len(below) <= MAX_ROLLUP_SIZE:
                add(below, node)
    for node in table.umbrellas:
        below = billable_below(hierarchy, node)
        if len(below) <= 2 * MAX_ROLLUP_SIZE:
            add(below, node)
    if len(origin) >= MAX_CANDIDATES:
        table.notes.append(f"candidates capped at {MAX_CANDIDATES}")
    table.ids = list(origin)
    table.origin = _provenance(hierarchy, table.ids, [origin[node] for node in table.ids], hit_rank)
    return table


def _provenance(hierarchy: Hierarchy, ids: list[int], origin: list[int], hit_rank: dict[int, int]) -> list[int]:
    """Per candidate, the best-ranked hit at or above it (its chain holds each node once and every hit has
    its own rank, so that hit is unique), else its ``origin`` as given: read from the node table's chains."""
    from phenoforge.setbuild.features import hierarchy_stats  # features builds on this module

    if not ids or not hit_rank:
        return origin
    nodes = hierarchy_stats(hierarchy).node_table()
    chain = nodes.chain[nodes.rows(ids)]
    no_hit = np.iinfo(np.int64).max
    rank_of_row = np.full(len(nodes.ids) + 1, no_hit, dtype=np.int64)  # the last entry answers the -1 padding
    rank_of_row[nodes.rows(hit_rank)] = list(hit_rank.values())
    ranks = rank_of_row[chain]
    at = ranks.argmin(axis=1)
    every = np.arange(len(ids))
    best = nodes.ids[chain[every, at]]
    return np.where(ranks[every, at] != no_hit, best, np.asarray(origin, dtype=np.int64)).tolist()


def lexical_overlap(query_tokens: Sequence[str], text: str) -> float:
    """Share of the query's words found in ``text`` (0 when the query has none)."""
    if not query_tokens:
        return 0.0
    words = set(tokenize(text))
    return sum(1 for token in query_tokens if token in words) / len(query_tokens)


def log_rank(rank: int | None, missing: int) -> float:
    return math.log1p(rank if rank is not None else missing)
