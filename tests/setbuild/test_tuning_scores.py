"""Tuning scores share each truth's index across the grid: the scores must be the ones scored afresh."""

from __future__ import annotations

import duckdb

from phenoforge.eval.scoring import score_cohort
from phenoforge.setbuild import assemble


def test_scores_with_a_shared_truth_index_equal_fresh_ones(fixture_con: duckdb.DuckDBPyConnection) -> None:
    truth = ("J45.20", "j4520", "S72.001A", "NOPE.1")  # a duplicate spelling and a code the vocabulary lacks
    predictions = [("J45.20",), ("S72", "J45"), ("E10", "S72.001A", "X99"), (), ("J45.20", "S72.001A")]
    for predicted in predictions:
        shared = assemble._cached_score(fixture_con, "c1", "cohort", truth, predicted)
        fresh = score_cohort(fixture_con, "c1", "cohort", list(truth), list(predicted), "tuning")
        assert shared == (fresh.hierarchical_score, fresh.exact_f1), predicted
