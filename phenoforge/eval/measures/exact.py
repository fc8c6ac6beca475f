"""Exact-match precision, recall and F1: plain set overlap, beside the partial-credit measures."""

from __future__ import annotations

from phenoforge.eval.matching import CohortMatches
from phenoforge.eval.measures.base import Measure
from phenoforge.eval.metrics import exact_match_scores


def _exact(matches: CohortMatches) -> tuple[float, float, float]:
    return exact_match_scores(matches.predicted_codes, matches.truth_codes)


class ExactPrecision(Measure):
    """Share of predicted codes that are curated codes (codes normalised on both sides)."""

    name = "exact_precision"
    label = "Exact-match precision"
    description = "|predicted & curated| / |predicted|"
    result_field = "exact_precision"

    def compute(self, matches: CohortMatches) -> float:
        return _exact(matches)[0]


class ExactRecall(Measure):
    """Share of curated codes predicted exactly."""

    name = "exact_recall"
    label = "Exact-match recall"
    description = "|predicted & curated| / |curated|"
    result_field = "exact_recall"

    def compute(self, matches: CohortMatches) -> float:
        return _exact(matches)[1]


class ExactF1(Measure):
    """Harmonic mean of exact precision and recall.

    >>> ExactF1().label
    'Exact-match F1'
    """

    name = "exact_f1"
    label = "Exact-match F1"
    description = "harmonic mean of exact precision and recall"
    result_field = "exact_f1"

    def compute(self, matches: CohortMatches) -> float:
        return _exact(matches)[2]
