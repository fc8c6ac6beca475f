"""``match_cohort`` builds its ``CodeMatch`` rows without validating them again: they must equal
what validation would make (plain ``str``/``int``/``None``, never a numpy or other type)."""

from __future__ import annotations

import duckdb

from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.matching import CodeMatch, match_cohort


def test_matches_equal_validated_ones(fixture_con: duckdb.DuckDBPyConnection) -> None:
    matches = match_cohort(
        get_hierarchy(fixture_con), ["E11.21", "I50.9", "Q98.111"], ["e1121", "E11.9", "J45", "ZZZ.9", "E11.21"]
    )
    rows = [*matches.truth, *matches.predicted]
    assert [row.code for row in matches.predicted] == ["E11.21", "E11.9", "J45", "ZZZ.9"]  # normalised, de-duplicated
    assert [CodeMatch.model_validate(row.model_dump()) for row in rows] == rows
    for row in rows:
        assert type(row.code) is str and type(row.concept_id) in (int, type(None))
        assert type(row.distance) in (int, type(None)) and type(row.nearest_code) in (str, type(None))
    assert matches.predicted[3].concept_id is None and matches.predicted[3].distance is None  # unknown code
