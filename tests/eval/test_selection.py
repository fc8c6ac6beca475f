"""Cross-validated parameter choice: never scored on the cohorts it was chosen on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.eval.selection import assign_folds, cross_validate_choice


def test_a_parameter_that_wins_only_by_luck_is_exposed() -> None:
    cohorts = [f"c{i}" for i in range(10)]
    steady = {c: 0.5 for c in cohorts}
    lucky = {c: 0.0 for c in cohorts}
    lucky["c3"] = 10.0  # one cohort carries the in-sample mean
    result = cross_validate_choice({0.5: steady, 0.9: lucky}, n_folds=5)
    assert result.in_sample_choice == 0.9 and result.in_sample_score == pytest.approx(1.0)
    # wherever c3 is held out, 0.9 was chosen without it... and c3 is only one cohort of ten
    assert result.out_of_sample_score < result.in_sample_score
    assert len(result.choices_per_fold) == 5


def test_held_out_cohorts_never_choose_their_own_parameter() -> None:
    # each cohort prefers a different weight; a choice made on the others never sees its own
    scores = {0.0: {"a": 1.0, "b": 0.0}, 1.0: {"a": 0.0, "b": 1.0}}
    result = cross_validate_choice(scores, n_folds=2)
    assert result.out_of_sample_score == 0.0


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        cross_validate_choice({})
    with pytest.raises(ValueError, match="same cohorts"):
        cross_validate_choice({0.0: {"a": 1.0, "b": 1.0}, 1.0: {"a": 1.0}})
    with pytest.raises(ValueError, match="two cohorts"):
        cross_validate_choice({0.0: {"a": 1.0}})


@given(st.lists(st.text(min_size=1, max_size=5), min_size=2, max_size=40, unique=True), st.integers(2, 7))
def test_folds_are_balanced_and_order_free(cohorts: list[str], n_folds: int) -> None:
    folds = assign_folds(cohorts, n_folds)
    assert folds == assign_folds(list(reversed(cohorts)), n_folds)
    sizes = [list(folds.values()).count(f) for f in range(n_folds)]
    assert max(sizes) - min(sizes) <= 1
