"""Candidate features for the membership model, in named families so each can be ablated.

Every feature is computed from the query, the two rankings and the hierarchy only: nothing about
any curated list enters here, so the same features serve training and scoring.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

import numpy as np

from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import tokenize
from phenoforge.setbuild.candidates import (
    HIT_DEPTH,
    RETRIEVAL_DEPTH,
    VOTE_DEPTH,
    CandidateTable,
    ancestor_of_kind,
    billable_below,
    lexical_overlap,
    log_rank,
)

FEATURE_FAMILIES: dict[str, list[str]] = {
    "bm25": ["bm25_rank", "bm25_rel", "anc_best_bm25_rel"],
    "dense": ["dense_rank", "dense_rel", "dense_gap", "anc_best_dense_rel", "cat_dense_rel"],
    "dense_category": [
        "dense_cos",
        "parent_dense_cos",
        "cat_dense_rank",
        "cat_max_cos",
        "cat_max_rank",
        "cat_max_gap",
        "self_minus_cat_max",
    ],
    "fused": ["fused_rank", "is_hit", "fused_rel"],
    "ancestor_hit": ["anc_hit_rank", "anc_hit_levels", "anc_hit_fused_rel"],
    "votes": ["cat_vote", "block_vote", "parent_vote", "cat_rank"],
    "coverage": ["cat_cover", "parent_cover", "block_cover"],
    "lexical": ["lex_self", "lex_path", "lex_cat", "lex_parent", "extra_words"],
    "structure": ["depth", "is_extension", "cat_size", "parent_size"],
    "umbrella": ["under_umbrella"],
    "query": ["query_words", "top_bm25", "top_dense", "n_candidates"],
}
FEATURE_NAMES: list[str] = [name for names in FEATURE_FAMILIES.values() for name in names]
MISSING_RANK = 2 * RETRIEVAL_DEPTH


class _HierarchyStats:
    """Per-build memo of billable counts and name tokens (both cost a subtree walk or a regex)."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        self._billable: dict[int, int] = {}
        self._tokens: dict[int, frozenset[str]] = {}

    def billable_count(self, node: int) -> int:
        count = self._billable.get(node)
        if count is None:
            count = len(billable_below(self.hierarchy, node))
            self._billable[node] = count
        return count

    def tokens(self, node: int) -> frozenset[str]:
        words = self._tokens.get(node)
        if words is None:
            words = frozenset(tokenize(self.hierarchy.name.get(node, "")))
            self._tokens[node] = words
        return words


_STATS: dict[str, _HierarchyStats] = {}
_LOCK = threading.Lock()


def hierarchy_stats(hierarchy: Hierarchy) -> _HierarchyStats:
    with _LOCK:
        stats = _STATS.get(hierarchy.build_id)
        if stats is None or stats.hierarchy is not hierarchy:
            stats = _HierarchyStats(hierarchy)
            _STATS[hierarchy.build_id] = stats
        return stats


def _share(query_tokens: list[str], words: frozenset[str] | set[str]) -> float:
    if not query_tokens:
        return 0.0
    return sum(1 for token in query_tokens if token in words) / len(query_tokens)


def candidate_features(hierarchy: Hierarchy, table: CandidateTable) -> np.ndarray:
    """One row of ``FEATURE_NAMES`` per candidate of ``table`` (shape ``(len(table), n_features)``)."""
    stats = hierarchy_stats(hierarchy)
    rows = np.zeros((len(table), len(FEATURE_NAMES)), dtype=np.float64)
    if not len(table):
        return rows
    q = table.query_tokens
    top_bm25 = table.top_bm25 or 1.0
    top_dense, floor_dense = table.top_dense, table.floor_dense
    dense_span = max(top_dense - floor_dense, 1e-6)
    top_fused = table.top_fused or 1.0

    def bm25_rel(node: int) -> float:
        return table.bm25_score.get(node, 0.0) / top_bm25

    def dense_rel(node: int) -> float:
        return (table.dense_score.get(node, floor_dense) - floor_dense) / dense_span if table.dense_score else 0.0

    # votes and coverage: how many of the best hits, and of the covered billable codes, sit under a node
    voting = sorted(table.hit_rank, key=table.hit_rank.__getitem__)[:VOTE_DEPTH]
    under_votes: Counter[int] = Counter()
    for hit in voting:
        under_votes.update(hierarchy.chain(hit))
    covered: set[int] = set()
    for hit, rank in table.hit_rank.items():
        if rank <= HIT_DEPTH:
            covered.update(billable_below(hierarchy, hit))
    under_covered: Counter[int] = Counter()
    for node in covered:
        under_covered.update(hierarchy.chain(node))
    category_best: dict[int, int] = {}
    for hit, rank in table.hit_rank.items():
        category = ancestor_of_kind(hierarchy, hit, "category")
        if category is not None and rank < category_best.get(category, 1 << 30):
            category_best[category] = rank
    category_order = {cat: i for i, cat in enumerate(sorted(category_best, key=category_best.__getitem__), start=1)}
    n_votes = max(len(voting), 1)
    # dense evidence per category: its own cosine and its best-matching member's, each ranked
    # among the categories of the dense ranking (a curated list is mostly whole categories)
    cat_own: dict[int, float] = {}
    cat_max: dict[int, float] = {}
    for code_id, cosine in table.dense_score.items():
        cat = ancestor_of_kind(hierarchy, code_id, "category")
        if cat is None:
            continue
        if code_id == cat:
            cat_own[cat] = cosine
        if cosine > cat_max.get(cat, -2.0):
            cat_max[cat] = cosine
    cat_own_rank = {c: r for r, c in enumerate(sorted(cat_own, key=lambda c: -cat_own[c]), start=1)}
    cat_max_rank = {c: r for r, c in enumerate(sorted(cat_max, key=lambda c: -cat_max[c]), start=1)}
    query_row = [len(q), math.log1p(table.top_bm25), top_dense, math.log1p(len(table))]

    for i, node in enumerate(table.ids):
        chain = hierarchy.chain(node)
        levels = hierarchy.chain_levels(node)
        parent = chain[1] if len(chain) > 1 else node
        category = ancestor_of_kind(hierarchy, node, "category") or parent
        block = ancestor_of_kind(hierarchy, node, "block") or category
        upper = [a for a in chain[1:] if hierarchy.kind.get(a) in ("subcategory", "category")]
        anc_hits = [
            (table.hit_rank[a], lvl) for a, lvl in zip(chain[1:], levels[1:], strict=True) if a in table.hit_rank
        ]
        anc_rank, anc_levels = min(anc_hits) if anc_hits else (None, 9)
        anc_node = next((a for a in chain[1:] if table.hit_rank.get(a) == anc_rank), None) if anc_hits else None
        path_words: set[str] = set(stats.tokens(node))
        for a in upper:
            path_words |= stats.tokens(a)
        own = stats.tokens(node)
        self_cos = table.dense_score.get(node, floor_dense)
        best_in_cat = cat_max.get(category, floor_dense)
        values = {
            "bm25_rank": log_rank(table.bm25_rank.get(node), MISSING_RANK),
            "bm25_rel": bm25_rel(node),
            "anc_best_bm25_rel": max((bm25_rel(a) for a in upper), default=0.0),
            "dense_rank": log_rank(table.dense_rank.get(node), MISSING_RANK),
            "dense_rel": dense_rel(node),
            "dense_gap": top_dense - table.dense_score.get(node, floor_dense),
            "anc_best_dense_rel": max((dense_rel(a) for a in upper), default=0.0),
            "cat_dense_rel": dense_rel(category),
            "dense_cos": self_cos,
            "parent_dense_cos": table.dense_score.get(parent, floor_dense),
            "cat_dense_rank": log_rank(cat_own_rank.get(category), MISSING_RANK),
            "cat_max_cos": best_in_cat,
            "cat_max_rank": log_rank(cat_max_rank.get(category), MISSING_RANK),
            "cat_max_gap": top_dense - best_in_cat,
            "self_minus_cat_max": self_cos - best_in_cat,
            "fused_rank": log_rank(table.hit_rank.get(node), MISSING_RANK),
            "is_hit": float(node in table.hit_rank),
            "fused_rel": table.fused_score.get(node, 0.0) / top_fused,
            "anc_hit_rank": log_rank(anc_rank, MISSING_RANK),
            "anc_hit_levels": float(anc_levels),
            "anc_hit_fused_rel": table.fused_score.get(anc_node, 0.0) / top_fused if anc_node is not None else 0.0,
            "cat_vote": under_votes[category] / n_votes,
            "block_vote": under_votes[block] / n_votes,
            "parent_vote": under_votes[parent] / n_votes,
            "cat_rank": log_rank(category_order.get(category), MISSING_RANK),
            "cat_cover": under_covered[category] / max(stats.billable_count(category), 1),
            "parent_cover": under_covered[parent] / max(stats.billable_count(parent), 1),
            "block_cover": under_covered[block] / max(stats.billable_count(block), 1),
            "lex_self": _share(q, own),
            "lex_path": _share(q, path_words),
            "lex_cat": _share(q, stats.tokens(category)),
            "lex_parent": _share(q, stats.tokens(parent)),
            "extra_words": math.log1p(len(own - set(q))),
            "depth": float(len(chain)),
            "is_extension": float(hierarchy.kind.get(node) == "extension"),
            "cat_size": math.log1p(stats.billable_count(category)),
            "parent_size": math.log1p(stats.billable_count(parent)),
            "under_umbrella": float(any(a in table.umbrellas for a in chain)),
        }
        rows[i, : len(FEATURE_NAMES) - len(query_row)] = [values[name] for name in FEATURE_NAMES[: -len(query_row)]]
        rows[i, -len(query_row) :] = query_row
    return rows


__all__ = ["FEATURE_FAMILIES", "FEATURE_NAMES", "candidate_features", "lexical_overlap"]
