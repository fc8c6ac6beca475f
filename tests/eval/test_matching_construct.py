"""``match_cohort`` builds its rows and its ``CohortMatches`` without validating them again: they
must equal what validation would make (plain ``str``/``int``/``None``, never a numpy or other type),
and the measures' memo (a private attribute) must exist as on a validated model."""

from __future__ import annotations

import duckdb

from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.matching import CodeMatch, CohortMatches, match_cohort
from phenoforge.eval.measures import Hierarchical


def test_matches_equal_validated_ones(fixture_con: duckdb.DuckDBPyConnection) -> None:
    matches = match_cohort(
        get_hierarchy(fixture_con), ["E11.21", "I50.9", "Q98.111"], ["e1121", "E11.9", "J45", "ZZZ.9", "E11.21"]
    )
    rows = [*matches.truth, *matches.predicted]
    assert [row.code for row in matches.predicted] == ["E11.21", "E11.9", "J45", "ZZZ.9"]  # normalised, de-duplicated
    assert all(type(row) is CodeMatch for row in rows)
    assert [CodeMatch(*row) for row in rows] == rows
    for row in rows:
        assert type(row.code) is str and type(row.concept_id) in (int, type(None))
        assert type(row.distance) in (int, type(None)) and type(row.nearest_code) in (str, type(None))
    assert matches.predicted[3].concept_id is None and matches.predicted[3].distance is None  # unknown code
    validated = CohortMatches.model_validate(
        {"truth": matches.truth, "predicted": matches.predicted, "unresolvable_truth": matches.unresolvable_truth}
    )
    assert validated == matches


def test_constructed_matches_keep_their_own_credit_memo(fixture_con: duckdb.DuckDBPyConnection) -> None:
    hierarchy = get_hierarchy(fixture_con)
    first = match_cohort(hierarchy, ["E11.21"], ["E11.21"])
    second = match_cohort(hierarchy, ["E11.21"], ["I50.9"])
    assert Hierarchical().compute(first) > Hierarchical().compute(second)
    assert first._credits is not second._credits and first._credits  # memo filled, not shared
