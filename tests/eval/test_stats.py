"""Property and example tests for the paired tests, Holm correction and bootstrap intervals."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from phenoforge.eval.stats import (
    bootstrap_ci,
    compare_methods,
    holm_adjust,
    paired_permutation_test,
)

scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def paired(draw: st.DrawFn, max_size: int = 12) -> tuple[list[float], list[float]]:
    n = draw(st.integers(min_value=1, max_value=max_size))
    a = draw(st.lists(scores, min_size=n, max_size=n))
    b = draw(st.lists(scores, min_size=n, max_size=n))
    return a, b


@given(paired())
def test_p_value_is_a_probability_not_below_its_floor(pair: tuple[list[float], list[float]]) -> None:
    a, b = pair
    result = paired_permutation_test(a, b)
    assert 0.0 < result.p_value <= 1.0
    assert result.p_value >= result.min_p_value - 1e-12


@given(paired())
def test_swapping_the_methods_keeps_p_and_negates_the_difference(
    pair: tuple[list[float], list[float]],
) -> None:
    a, b = pair
    forward = paired_permutation_test(a, b)
    backward = paired_permutation_test(b, a)
    assert math.isclose(forward.p_value, backward.p_value, abs_tol=1e-12)
    assert math.isclose(forward.mean_diff, -backward.mean_diff, abs_tol=1e-12)


@given(st.lists(scores, min_size=1, max_size=10))
def test_identical_methods_are_never_different(a: list[float]) -> None:
    result = paired_permutation_test(a, list(a))
    assert result.p_value == 1.0
    assert result.n_nonzero == 0


def test_consistent_improvement_over_ten_cohorts_is_detected_exactly() -> None:
    a = [0.1 * i for i in range(10)]
    b = [x + 0.05 for x in a]
    result = paired_permutation_test(a, b)
    assert result.exact
    assert math.isclose(result.p_value, 2 / 2**10)
    assert math.isclose(result.mean_diff, 0.05)


def test_monte_carlo_path_for_many_cohorts() -> None:
    a = [0.5] * 40
    b = [0.5 + (0.1 if i % 4 else -0.02) for i in range(40)]
    result = paired_permutation_test(a, b, n_resamples=5000)
    assert not result.exact
    assert result.p_value < 0.001


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=12))
def test_holm_is_monotone_bounded_and_not_below_raw(p: list[float]) -> None:
    adjusted = holm_adjust(p)
    assert all(0.0 <= q <= 1.0 for q in adjusted)
    assert all(q >= raw - 1e-12 for q, raw in zip(adjusted, p, strict=True))
    order = sorted(range(len(p)), key=lambda i: p[i])
    ordered = [adjusted[i] for i in order]
    assert ordered == sorted(ordered)


def test_holm_known_values() -> None:
    assert holm_adjust([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]


@settings(max_examples=50)
@given(st.lists(scores, min_size=1, max_size=30))
def test_bootstrap_interval_brackets_the_mean_within_the_data(values: list[float]) -> None:
    ci = bootstrap_ci(values, n_resamples=500)
    assert min(values) - 1e-12 <= ci.low <= ci.mean + 1e-12
    assert ci.mean - 1e-12 <= ci.high <= max(values) + 1e-12
    assert math.isclose(ci.mean, sum(values) / len(values), rel_tol=1e-9, abs_tol=1e-12)


def test_bootstrap_interval_narrows_with_more_data() -> None:
    small = bootstrap_ci([0.0, 1.0] * 5)
    large = bootstrap_ci([0.0, 1.0] * 200)
    assert (large.high - large.low) < (small.high - small.low)


def test_bootstrap_of_nothing_is_nan() -> None:
    ci = bootstrap_ci([])
    assert ci.n == 0 and math.isnan(ci.mean)


def test_compare_methods_notes_too_few_cohorts() -> None:
    scores_by_method = {
        "bm25": {"c1": 0.2, "c2": 0.3, "c3": 0.1},
        "hybrid": {"c1": 0.5, "c2": 0.6, "c3": 0.4},
    }
    (comparison,) = compare_methods(scores_by_method, baseline="bm25")
    assert comparison.method_a == "bm25" and comparison.method_b == "hybrid"
    assert math.isclose(comparison.mean_diff, 0.3)
    assert comparison.note is not None and "too few cohorts" in comparison.note
    assert not comparison.significant


def test_compare_methods_holm_over_the_family() -> None:
    cohorts = [f"c{i}" for i in range(12)]
    base = {c: 0.2 + 0.01 * i for i, c in enumerate(cohorts)}
    better = {c: v + 0.2 for c, v in base.items()}
    same = dict(base)
    result = compare_methods({"bm25": base, "hybrid": better, "dense": same}, baseline="bm25")
    by_method = {c.method_b: c for c in result}
    assert by_method["hybrid"].significant
    assert math.isclose(by_method["hybrid"].p_holm, 2 * 2 / 2**12)
    assert not by_method["dense"].significant
    assert by_method["dense"].note == "the two methods score identically on every shared cohort"


def test_compare_methods_all_pairs_and_shared_cohorts_only() -> None:
    result = compare_methods({"a": {"x": 0.1, "y": 0.2}, "b": {"y": 0.4}, "c": {"z": 0.3}})
    assert [(c.method_a, c.method_b) for c in result] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert result[0].n_cohorts == 1 and math.isclose(result[0].mean_diff, 0.2)
    assert result[1].n_cohorts == 0 and result[1].note == "no cohort was scored by both methods"
