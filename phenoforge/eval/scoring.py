"""Scoring one cohort's list against its curated codes, on a database connection.

Kept apart from :mod:`~phenoforge.eval.harness` so the set builders, which tune on these scores, need
not import the harness that runs them (which would make an import circle).
"""

from __future__ import annotations

import duckdb

from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.evaluate import score_matches
from phenoforge.eval.matching import NearestIndex, match_cohort
from phenoforge.eval.models import CohortEvalResult


def score_cohort(
    con: duckdb.DuckDBPyConnection,
    cohort_id: str,
    cohort_name: str,
    ground_truth_codes: list[str],
    predicted_codes: list[str],
    method: str,
    truth_index: NearestIndex | None = None,
) -> CohortEvalResult:
    """Score one method's predictions for one cohort against its curated ground truth.

    Coverage runs ground truth -> predicted, over-inclusion predicted -> ground truth; curated
    codes the vocabulary does not know are reported in ``unresolvable_ground_truth`` and left out
    of both directions. Codes are normalised and de-duplicated on both sides. ``truth_index`` (the ground
    truth's ``NearestIndex``) may be passed in when the same truth is scored many times.
    """
    matches = match_cohort(get_hierarchy(con), ground_truth_codes, predicted_codes, truth_index)
    return score_matches(matches, cohort_id, cohort_name, method)
