"""Candidate features on hand-made rankings over the fixture vocabulary."""

from __future__ import annotations

import math

import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.candidates import Retrieval, build_candidates
from phenoforge.setbuild.features import FEATURE_FAMILIES, FEATURE_NAMES, MISSING_RANK, candidate_features


def _column(name: str) -> int:
    return FEATURE_NAMES.index(name)


def test_dense_category_features_read_each_category_and_its_best_member(hierarchy: Hierarchy) -> None:
    retrieval = Retrieval(
        query="heart failure",
        bm25=[("I50.9", 5.0), ("I48.0", 1.0)],
        dense=[("I50.21", 0.9), ("I48", 0.8), ("I50", 0.7), ("I48.0", 0.6), ("J45.909", 0.1)],
    )
    table = build_candidates(hierarchy, retrieval)
    rows = candidate_features(hierarchy, table)
    row = {hierarchy.code[node]: rows[i] for i, node in enumerate(table.ids)}
    # I50.9 was not in the dense ranking: its own cosine is the floor, its category's best member is I50.21
    assert row["I50.9"][_column("dense_cos")] == pytest.approx(0.1)
    assert row["I50.9"][_column("cat_max_cos")] == pytest.approx(0.9)
    assert row["I50.9"][_column("self_minus_cat_max")] == pytest.approx(0.1 - 0.9)
    assert row["I50.9"][_column("cat_max_rank")] == pytest.approx(math.log1p(1))  # I50 has the best member
    assert row["I48.0"][_column("cat_max_rank")] == pytest.approx(math.log1p(2))
    # by the categories' own cosines I48 (0.8) comes before I50 (0.7)
    assert row["I48.0"][_column("cat_dense_rank")] == pytest.approx(math.log1p(1))
    assert row["I50.9"][_column("cat_dense_rank")] == pytest.approx(math.log1p(2))
    assert row["I50.21"][_column("parent_dense_cos")] == pytest.approx(0.1)  # I50.2 is not ranked: floor
    assert row["I50.21"][_column("cat_max_gap")] == pytest.approx(0.0)


def test_without_dense_the_dense_families_are_constant(hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, Retrieval(query="heart failure", bm25=[("I50", 5.0), ("I48.0", 1.0)]))
    rows = candidate_features(hierarchy, table)
    for name in FEATURE_FAMILIES["dense_category"]:
        column = rows[:, _column(name)]
        assert (column == column[0]).all(), name
    assert rows[0, _column("cat_max_rank")] == pytest.approx(math.log1p(MISSING_RANK))
