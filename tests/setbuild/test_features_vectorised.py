"""The vectorised ``candidate_features`` against a plain per-candidate reference implementation.

The reference below is the loop the learned builder shipped with; the vectorised version must give
the same values bit for bit, so a model fitted before the change scores the same afterwards.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.candidates import (
    HIT_DEPTH,
    VOTE_DEPTH,
    CandidateTable,
    RankedIds,
    Retrieval,
    build_candidates,
    log_rank,
)
from phenoforge.setbuild.features import FEATURE_NAMES, MISSING_RANK, _share, candidate_features
from phenoforge.setbuild.nodes import ancestor_of_kind, billable_below, hierarchy_stats


def reference_candidate_features(hierarchy: Hierarchy, table: CandidateTable) -> np.ndarray:
    """The per-candidate definitions, row by row (features.py before it was vectorised)."""
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


def _every_code(hierarchy: Hierarchy) -> list[str]:
    return [hierarchy.code[node] for node in sorted(hierarchy.code)]


def _assert_same(hierarchy: Hierarchy, table: CandidateTable) -> np.ndarray:
    expected = reference_candidate_features(hierarchy, table)
    got = candidate_features(hierarchy, table)
    assert got.shape == expected.shape == (len(table), len(FEATURE_NAMES))
    for column, name in enumerate(FEATURE_NAMES):
        assert np.array_equal(got[:, column], expected[:, column]), name
    return got


CASES = {
    "two retrievers": Retrieval(
        query="heart failure",
        bm25=[("I50.9", 5.0), ("I48.0", 1.0)],
        dense=[("I50.21", 0.9), ("I48", 0.8), ("I50", 0.7), ("I48.0", 0.6), ("J45.909", 0.1)],
    ),
    "bm25 only": Retrieval(query="heart failure", bm25=[("I50", 5.0), ("I48.0", 1.0)]),
    "the diamond": Retrieval(
        query="diabetic peripheral angiopathy",
        bm25=[("E11.51", 7.0), ("I73.9", 3.0), ("E11.5", 2.0), ("E11", 1.0)],
        dense=[("I73.9", 0.8), ("E11.51", 0.79), ("E11.5", 0.5), ("I73", 0.4), ("E11.9", 0.2)],
    ),
    "7th characters": Retrieval(
        query="fracture of neck of femur initial encounter",
        bm25=[("S72.001A", 4.0), ("S72.001", 3.0), ("S72.0", 1.5)],
        dense=[("S72.001D", 0.7), ("S72.001A", 0.7), ("S72", 0.6), ("S72.00", 0.3)],
    ),
    "one candidate": Retrieval(query="peripheral vascular disease", bm25=[("I73.9", 2.0)]),
    "repeated words and ties": Retrieval(
        query="asthma asthma unspecified",
        bm25=[("J45.90", 2.0), ("J45.20", 2.0), ("J45", 2.0)],
        dense=[("J45", 0.5), ("J45.909", 0.5), ("J45.2", 0.5), ("E66.9", 0.5)],
        umbrellas={"J40-J4A": "Chronic lower respiratory diseases"},
    ),
    "umbrella only": Retrieval(query="obesity", bm25=[], umbrellas={"E66": "Overweight and obesity"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_vectorised_features_equal_the_reference(hierarchy: Hierarchy, case: str) -> None:
    table = build_candidates(hierarchy, CASES[case])
    assert len(table) > 0
    _assert_same(hierarchy, table)


def test_one_candidate_and_no_candidates(hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, CASES["one candidate"])
    assert [hierarchy.code[node] for node in table.ids] == ["E11.51"]
    empty = build_candidates(hierarchy, Retrieval(query="zzz", bm25=[]))
    assert len(empty) == 0
    assert candidate_features(hierarchy, empty).shape == (0, len(FEATURE_NAMES))


def test_every_code_ranked_by_both_retrievers(hierarchy: Hierarchy) -> None:
    """Every node of the fixture in both rankings (chapters, blocks, the diamond, extensions)."""
    codes = _every_code(hierarchy)
    retrieval = Retrieval(
        query="type 2 diabetes mellitus with kidney complications and heart failure",
        bm25=[(code, 10.0 / (rank + 1)) for rank, code in enumerate(codes)],
        dense=[(code, 0.9 - 0.01 * (rank % 7)) for rank, code in enumerate(reversed(codes))],
    )
    table = build_candidates(hierarchy, retrieval)
    rows = _assert_same(hierarchy, table)
    assert rows[:, FEATURE_NAMES.index("under_umbrella")].sum() == 0.0


def test_a_hand_made_table_with_a_hit_that_is_not_a_candidate(hierarchy: Hierarchy) -> None:
    """The features read the table only: a table built by hand, with the diamond's two parents as
    hits and duplicate query words, gives the same values as the reference too."""
    node = hierarchy.resolve
    table = CandidateTable(
        query="x",
        query_tokens=["diabetes", "peripheral", "diabetes"],
        fused=[],
        hit_rank={node("I73.9"): 1, node("E11.5"): 2, node("E11"): 3},
        fused_score={node("I73.9"): 0.03, node("E11.5"): 0.02, node("E11"): 0.01},
        dense=RankedIds.of({node("E11.51"): 1}, {node("E11.51"): 0.4}),
        ids=[node("E11.51"), node("E11.9"), node("E11.65")],
    )
    table.top_fused, table.top_dense, table.floor_dense = 0.03, 0.4, 0.4
    rows = _assert_same(hierarchy, table)
    # the diamond's nearest hit is I73.9 (rank 1), one edge up through its second parent
    assert rows[0, FEATURE_NAMES.index("anc_hit_rank")] == math.log1p(1)
    assert rows[0, FEATURE_NAMES.index("anc_hit_levels")] == 1.0


def test_hierarchy_stats_are_shared_per_build(hierarchy: Hierarchy) -> None:
    assert hierarchy_stats(hierarchy) is hierarchy_stats(hierarchy)
    assert hierarchy_stats(hierarchy).billable_nodes(hierarchy.resolve("E11.2")) == tuple(
        billable_below(hierarchy, hierarchy.resolve("E11.2"))
    )
    assert MISSING_RANK > 0 and HIT_DEPTH > 0 and VOTE_DEPTH > 0 and log_rank(None, 3) == math.log1p(3)
    assert ancestor_of_kind(hierarchy, hierarchy.resolve("E11.51"), "category") == hierarchy.resolve("E11")
    assert isinstance(Counter(), Counter) and _share([], set()) == 0.0


def test_reused_scratch_arrays_carry_nothing_from_one_query_to_the_next(hierarchy: Hierarchy) -> None:
    """The features fill arrays kept between calls: every case after every other case, in both
    orders, must still equal the reference (a value left from the query before would differ)."""
    tables = {name: build_candidates(hierarchy, CASES[name]) for name in sorted(CASES)}
    for first in tables.values():
        for second in tables.values():
            candidate_features(hierarchy, first)
            _assert_same(hierarchy, second)


def test_threads_computing_features_at_once_get_the_reference_values(hierarchy: Hierarchy) -> None:
    """Two dashboard sessions build sets at the same time: each thread has its own scratch arrays."""
    from concurrent.futures import ThreadPoolExecutor

    tables = [build_candidates(hierarchy, CASES[name]) for name in sorted(CASES)] * 20
    expected = [reference_candidate_features(hierarchy, table) for table in tables]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda table: candidate_features(hierarchy, table), tables))
    assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("lookup", ["gather", "search"])
def test_node_rows_by_gather_and_by_search_agree_and_refuse_unknown_ids(
    hierarchy: Hierarchy, lookup: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows come from one gather where the ids span a small range, else a binary search (Athena's
    sparse ids): the same rows, and an id the hierarchy lacks is a ``KeyError`` either way."""
    nodes = hierarchy_stats(hierarchy).node_table()
    if lookup == "search":
        monkeypatch.setattr(nodes, "_row_of_offset", lambda: None)
    else:
        assert nodes._row_of_offset() is not None  # the fixture numbers its concepts densely
    ids = nodes.ids[::-1].copy()
    assert np.array_equal(nodes.rows(ids), np.searchsorted(nodes.ids, ids))
    assert nodes.rows(iter(ids.tolist())).tolist() == [nodes.row[i] for i in ids.tolist()]
    assert nodes.rows([]).tolist() == []
    for unknown in (int(nodes.ids.max()) + 1, int(nodes.ids.min()) - 1, 10**12):
        with pytest.raises(KeyError, match="not in the hierarchy"):
            nodes.rows([int(nodes.ids[0]), unknown])
