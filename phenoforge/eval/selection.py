"""Choosing a parameter honestly: cross-validated over cohorts, never scored where it was chosen.

A weight picked as the best on the same cohorts it is then reported on flatters itself. Here the
cohorts are split into folds; for each fold the parameter is chosen on the other folds and scored
on the held-out one, and the out-of-sample figure is the mean over every held-out cohort. The
in-sample best is reported beside it so the optimism is visible.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence

from pydantic import BaseModel


class CrossValidatedChoice(BaseModel):
    """In-sample best and its score beside the cross-validated (out-of-sample) score."""

    in_sample_choice: float
    in_sample_score: float
    out_of_sample_score: float
    choices_per_fold: list[float]
    n_folds: int
    n_cohorts: int


def assign_folds(cohort_ids: Sequence[str], n_folds: int) -> dict[str, int]:
    """Balanced folds, stable under re-ordering: ids sorted by their hash, dealt round-robin.

    >>> assign_folds(["a", "b"], 2) == assign_folds(["b", "a"], 2)
    True
    >>> sorted(assign_folds(["a", "b", "c", "d"], 2).values())
    [0, 0, 1, 1]
    """
    ordered = sorted(dict.fromkeys(cohort_ids), key=lambda cid: hashlib.sha256(cid.encode()).hexdigest())
    return {cid: position % n_folds for position, cid in enumerate(ordered)}


def _best(scores: Mapping[float, Mapping[str, float]], cohorts: Sequence[str]) -> tuple[float, float]:
    ranked = sorted(
        (
            (sum(by_cohort[c] for c in cohorts) / len(cohorts), -abs(param - 0.5), param)
            for param, by_cohort in scores.items()
        ),
        reverse=True,
    )
    mean, _tie, param = ranked[0]
    return param, mean


def cross_validate_choice(scores: Mapping[float, Mapping[str, float]], n_folds: int = 5) -> CrossValidatedChoice:
    """Choose the parameter maximising the mean per-cohort score, by ``n_folds``-fold cross-validation.

    ``scores`` maps each candidate parameter to its per-cohort scores (the same cohorts for every
    candidate). Ties prefer the candidate nearest 0.5, then the larger.

    >>> result = cross_validate_choice({0.0: {"a": 0.2, "b": 0.4}, 1.0: {"a": 0.6, "b": 0.5}}, n_folds=2)
    >>> result.in_sample_choice, result.out_of_sample_score
    (1.0, 0.55)
    """
    if not scores:
        raise ValueError("no candidate parameters to choose from")
    cohorts = sorted(next(iter(scores.values())))
    if any(sorted(by_cohort) != cohorts for by_cohort in scores.values()):
        raise ValueError("every candidate must be scored on the same cohorts")
    if len(cohorts) < 2:
        raise ValueError("cross-validation needs at least two cohorts")
    n_folds = max(2, min(n_folds, len(cohorts)))
    fold_of = assign_folds(cohorts, n_folds)
    held_out_scores: list[float] = []
    choices: list[float] = []
    for fold in range(n_folds):
        test = [c for c in cohorts if fold_of[c] == fold]
        train = [c for c in cohorts if fold_of[c] != fold]
        if not test or not train:
            continue
        choice, _ = _best(scores, train)
        choices.append(choice)
        held_out_scores += [scores[choice][c] for c in test]
    in_choice, in_score = _best(scores, cohorts)
    return CrossValidatedChoice(
        in_sample_choice=in_choice,
        in_sample_score=in_score,
        out_of_sample_score=sum(held_out_scores) / len(held_out_scores),
        choices_per_fold=choices,
        n_folds=n_folds,
        n_cohorts=len(cohorts),
    )


def per_cohort(results: Sequence[object], key: Hashable = "hierarchical_score") -> dict[str, float]:
    """``{cohort_id: value}`` of one method's results (a helper for building ``scores``)."""
    return {str(getattr(r, "cohort_id")): float(getattr(r, str(key))) for r in results}  # noqa: B009


def weights_problem(weights: Sequence[float]) -> str | None:
    """Why ``weights`` cannot be swept, or None. Two weights shown alike (``0.501``, ``0.504``) would
    print two rows that look the same and give a set builder two runs of one name, scored as one."""
    if not weights:
        return "no weights given: list them comma-separated, e.g. 0,0.25,0.5"
    seen: dict[str, float] = {}
    for weight in weights:
        shown = f"{weight:.2f}"  # as the sweep prints and labels it
        if shown in seen:
            return (
                f"weight {shown} is listed twice ({seen[shown]:g} and {weight:g}): "
                "give each weight once, at least 0.01 apart"
            )
        seen[shown] = weight
    return None
