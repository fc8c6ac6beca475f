"""Candidate features for the membership model, in named families so each can be ablated.

Every feature is computed from the query, the two rankings and the hierarchy only: nothing about
any curated list enters here, so the same features serve training and scoring.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.candidates import (
    HIT_DEPTH,
    RETRIEVAL_DEPTH,
    VOTE_DEPTH,
    CandidateTable,
    lexical_overlap,
)
from phenoforge.setbuild.nodes import hierarchy_stats, scratch_array

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

log = logging.getLogger(__name__)


def _share(query_tokens: list[str], words: frozenset[str] | set[str]) -> float:
    if not query_tokens:
        return 0.0
    return sum(1 for token in query_tokens if token in words) / len(query_tokens)


_LOG1P = np.zeros(0)


def _log1p_of(values: np.ndarray) -> np.ndarray:
    """``math.log1p`` of non-negative integers, by table: bit-identical to the per-row ``log_rank``."""
    global _LOG1P
    top = int(values.max(initial=0))
    if top >= len(_LOG1P):
        _LOG1P = np.array([math.log1p(value) for value in range(max(top + 1, 2 * MISSING_RANK + 1))])
    return _LOG1P[values]


def _popcount(bits: np.ndarray) -> np.ndarray:
    return np.bitwise_count(bits).sum(axis=-1).astype(np.int64)


def _ranks_by(rows: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """1-based rank of each row by ``values`` descending, ties in the order given (``sorted`` is
    stable); ``MISSING_RANK`` for every other row."""
    ranks = scratch_array("ranks_by", size, MISSING_RANK, np.int64)
    order = np.lexsort((np.arange(len(rows)), -values))
    ranks[rows[order]] = np.arange(1, len(rows) + 1)
    return ranks


def candidate_features(hierarchy: Hierarchy, table: CandidateTable) -> np.ndarray:
    """One row of ``FEATURE_NAMES`` per candidate of ``table`` (shape ``(len(table), n_features)``).

    Vectorised over the candidates (numpy gathers over each node's chain); the values equal the
    per-candidate definitions, which ``tests/setbuild/test_features.py`` keeps as a reference.
    """
    stats = hierarchy_stats(hierarchy)
    rows = np.zeros((len(table), len(FEATURE_NAMES)), dtype=np.float64)
    if not len(table):
        return rows
    nodes = stats.node_table()
    size = len(nodes.ids)
    q = table.query_tokens
    top_bm25 = table.top_bm25 or 1.0
    top_dense, floor_dense = table.top_dense, table.floor_dense
    dense_span = max(top_dense - floor_dense, 1e-6)
    top_fused = table.top_fused or 1.0

    # the query's evidence, one entry per row of the node table
    bm25_score = scratch_array("bm25_score", size, 0.0)
    bm25_rank = scratch_array("bm25_rank", size, MISSING_RANK, np.int64)
    if len(table.bm25):
        at = nodes.rows(table.bm25.ids)
        bm25_score[at] = table.bm25.scores
        bm25_rank[at] = table.bm25.ranks
    dense_score = scratch_array("dense_score", size, floor_dense)
    dense_rank = scratch_array("dense_rank", size, MISSING_RANK, np.int64)
    dense_at = nodes.rows(table.dense.ids)
    dense_values = table.dense.scores
    if len(dense_at):
        dense_score[dense_at] = dense_values
        dense_rank[dense_at] = table.dense.ranks
    no_hit = np.iinfo(np.int64).max
    hit_rank = scratch_array("hit_rank", size, no_hit, np.int64)
    fused_score = scratch_array("fused_score", size, 0.0)
    hit_rows = nodes.rows(table.hit_rank)
    if len(hit_rows):
        hit_rank[hit_rows] = list(table.hit_rank.values())
        fused_score[nodes.rows(table.fused_score)] = list(table.fused_score.values())
    umbrella = scratch_array("umbrella", size, False, np.bool_)
    if table.umbrellas:
        umbrella[nodes.rows(table.umbrellas)] = True

    def bm25_rel(at: np.ndarray) -> np.ndarray:
        return bm25_score[at] / top_bm25

    def dense_rel(at: np.ndarray) -> np.ndarray:
        if not len(table.dense):
            return np.zeros(at.shape)
        return (dense_score[at] - floor_dense) / dense_span

    # votes and coverage: how many of the best hits, and of the covered billable codes, sit under a node
    voting = sorted(table.hit_rank, key=table.hit_rank.__getitem__)[:VOTE_DEPTH]
    voting_rows = nodes.rows(voting)
    covered_nodes: set[int] = set()
    for hit, rank in table.hit_rank.items():
        if rank <= HIT_DEPTH:
            covered_nodes.update(stats.billable_nodes(hit))
    covered_rows = nodes.rows(covered_nodes)
    candidates = nodes.rows(table.ids)
    nodes.fill(np.concatenate([candidates, voting_rows, covered_rows, hit_rows, dense_at]))

    def under(name: str, members: np.ndarray) -> np.ndarray:
        """Per row, how many of ``members`` have it on their chain (a chain holds a node once)."""
        chains = nodes.chain[members]
        counts = scratch_array(name, size, 0, np.int64)
        np.add.at(counts, chains[chains >= 0], 1)
        return counts

    under_votes = under("under_votes", voting_rows)
    under_covered = under("under_covered", covered_rows)
    # each hit's category, ranked by its best hit (hit ranks are distinct: no ties)
    category_order = scratch_array("category_order", size, MISSING_RANK, np.int64)
    if len(hit_rows):
        hit_categories = nodes.own_category[hit_rows]
        ranked = hit_categories[np.argsort(np.fromiter(table.hit_rank.values(), np.int64, len(hit_rows)))]
        ranked = ranked[ranked >= 0]
        _categories, first = np.unique(ranked, return_index=True)
        ordered = ranked[np.sort(first)]
        category_order[ordered] = np.arange(1, len(ordered) + 1)
    n_votes = max(len(voting), 1)
    # dense evidence per category: its own cosine and its best-matching member's, each ranked
    # among the categories of the dense ranking (a curated list is mostly whole categories)
    dense_category = nodes.own_category[dense_at]
    in_category = dense_category >= 0
    own = in_category & (dense_category == dense_at)
    cat_own_rank = _ranks_by(dense_category[own], dense_values[own], size)
    member_category, member_cosine = dense_category[in_category], dense_values[in_category]
    cat_max = scratch_array("cat_max", size, floor_dense)
    categories, first_seen = np.unique(member_category, return_index=True)
    if len(categories):
        best = scratch_array("best", size, -np.inf)
        np.maximum.at(best, member_category, member_cosine)
        cat_max[categories] = best[categories]
        # ties keep the order in which the dense ranking first reached each category
        order = np.lexsort((first_seen, -best[categories]))
        cat_max_rank = scratch_array("cat_max_rank", size, MISSING_RANK, np.int64)
        cat_max_rank[categories[order]] = np.arange(1, len(categories) + 1)
    else:
        cat_max_rank = scratch_array("cat_max_rank", size, MISSING_RANK, np.int64)

    chain = nodes.chain[candidates]
    on_chain = chain >= 0
    levels = nodes.levels[candidates]
    upper = nodes.upper[candidates]
    has_upper = upper.any(axis=1)
    parent = nodes.parent[candidates]
    category = nodes.category[candidates]
    block = nodes.block[candidates]

    def best_upper(values: np.ndarray) -> np.ndarray:
        return np.where(has_upper, np.where(upper, values, -np.inf).max(axis=1), 0.0)

    # the best-ranked hit strictly above each candidate, and its distance in edges
    above_rank = np.where(on_chain[:, 1:], hit_rank[chain[:, 1:]], no_hit)
    anc_rank = above_rank.min(axis=1, initial=no_hit)
    has_anc = anc_rank != no_hit
    is_best = (above_rank == anc_rank[:, None]) & has_anc[:, None]
    anc_levels = np.where(has_anc, np.where(is_best, levels[:, 1:], no_hit).min(axis=1, initial=no_hit), 9)
    anc_node = chain[:, 1:][np.arange(len(candidates)), is_best.argmax(axis=1)] if chain.shape[1] > 1 else candidates
    anc_fused_rel = np.where(has_anc, fused_score[anc_node] / top_fused, 0.0)

    bits, first = nodes.query_bits(q)
    path_bits = np.bitwise_or.reduce(np.where((upper | (np.arange(chain.shape[1]) == 0))[..., None], bits[chain], 0), 1)

    def share(at_bits: np.ndarray) -> np.ndarray:
        return _popcount(at_bits) / len(q) if q else np.zeros(len(at_bits))

    self_cos = dense_score[candidates]
    best_in_cat = cat_max[category]
    category_billable = nodes.billable_counts(category)
    parent_billable = nodes.billable_counts(parent)
    block_billable = nodes.billable_counts(block)
    values = {
        "bm25_rank": _log1p_of(bm25_rank[candidates]),
        "bm25_rel": bm25_rel(candidates),
        "anc_best_bm25_rel": best_upper(bm25_rel(chain)),
        "dense_rank": _log1p_of(dense_rank[candidates]),
        "dense_rel": dense_rel(candidates),
        "dense_gap": top_dense - self_cos,
        "anc_best_dense_rel": best_upper(dense_rel(chain)),
        "cat_dense_rel": dense_rel(category),
        "dense_cos": self_cos,
        "parent_dense_cos": dense_score[parent],
        "cat_dense_rank": _log1p_of(cat_own_rank[category]),
        "cat_max_cos": best_in_cat,
        "cat_max_rank": _log1p_of(cat_max_rank[category]),
        "cat_max_gap": top_dense - best_in_cat,
        "self_minus_cat_max": self_cos - best_in_cat,
        "fused_rank": _log1p_of(np.where(hit_rank[candidates] == no_hit, MISSING_RANK, hit_rank[candidates])),
        "is_hit": (hit_rank[candidates] != no_hit).astype(np.float64),
        "fused_rel": fused_score[candidates] / top_fused,
        "anc_hit_rank": _log1p_of(np.where(has_anc, anc_rank, MISSING_RANK)),
        "anc_hit_levels": anc_levels.astype(np.float64),
        "anc_hit_fused_rel": anc_fused_rel,
        "cat_vote": under_votes[category] / n_votes,
        "block_vote": under_votes[block] / n_votes,
        "parent_vote": under_votes[parent] / n_votes,
        "cat_rank": _log1p_of(category_order[category]),
        "cat_cover": under_covered[category] / np.maximum(category_billable, 1),
        "parent_cover": under_covered[parent] / np.maximum(parent_billable, 1),
        "block_cover": under_covered[block] / np.maximum(block_billable, 1),
        "lex_self": share(bits[candidates]),
        "lex_path": share(path_bits),
        "lex_cat": share(bits[category]),
        "lex_parent": share(bits[parent]),
        "extra_words": _log1p_of(nodes.n_tokens[candidates] - _popcount(bits[candidates] & first)),
        "depth": nodes.depth[candidates],
        "is_extension": nodes.is_extension[candidates],
        "cat_size": _log1p_of(category_billable),
        "parent_size": _log1p_of(parent_billable),
        "under_umbrella": (umbrella[chain] & on_chain).any(axis=1).astype(np.float64),
    }
    query_row = [len(q), math.log1p(table.top_bm25), top_dense, math.log1p(len(table))]
    per_candidate = FEATURE_NAMES[: -len(query_row)]
    rows[:, : len(per_candidate)] = np.column_stack([values[name] for name in per_candidate])
    rows[:, -len(query_row) :] = query_row
    return rows


__all__ = ["FEATURE_FAMILIES", "FEATURE_NAMES", "candidate_features", "lexical_overlap", "scratch_array"]
