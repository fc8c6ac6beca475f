"""The fast bin thresholds must be scikit-learn's, bit for bit: other thresholds grow other trees and move every
set builder's scores (pre-binning did, by up to 0.024)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.ensemble._hist_gradient_boosting import binning

from phenoforge.setbuild import binning as fast
from phenoforge.setbuild.binning import find_binning_thresholds, use_fast_binning

ORIGINAL = binning._find_binning_thresholds


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    rows=st.integers(2, 900),
    distinct=st.sampled_from([2, 5, 40, 300, 10_000]),
    missing=st.floats(0.0, 0.5),
    weighted=st.sampled_from(["none", "unequal", "some zero"]),
    max_bins=st.sampled_from([4, 32, 255]),
)
def test_thresholds_equal_scikit_learns(
    seed: int, rows: int, distinct: int, missing: float, weighted: str, max_bins: int
) -> None:
    rng = np.random.default_rng(seed)
    column = rng.integers(0, distinct, size=rows) / 7.0
    column[rng.random(rows) < missing] = np.nan
    weights = None
    if weighted == "unequal":
        weights = rng.uniform(0.01, 50.0, size=rows)
    elif weighted == "some zero":
        weights = np.where(rng.random(rows) < 0.3, 0.0, rng.uniform(0.5, 2.0, size=rows))
        weights[0] = 1.0
    if np.isnan(column).all() or (weights is not None and not weights[~np.isnan(column)].any()):
        return  # scikit-learn never bins a column with nothing to bin
    expected = ORIGINAL(column.copy(), max_bins, None if weights is None else weights.copy())
    got = find_binning_thresholds(column.copy(), max_bins, None if weights is None else weights.copy())
    assert got.shape == expected.shape and np.array_equal(got, expected)


def test_a_fit_with_fast_binning_predicts_as_scikit_learns_own(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12_000, 6))
    x[:, 1] = np.round(x[:, 1], 1)
    x[rng.random(x.shape) < 0.05] = np.nan
    y = (np.nan_to_num(x[:, 0]) + rng.normal(size=len(x)) > 0.5).astype(int)
    w = rng.uniform(0.1, 10.0, size=len(x))  # weighted: the slow path scikit-learn takes for membership models

    def fit() -> np.ndarray:
        model = HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(x, y, sample_weight=w)
        return model.predict_proba(x)[:, 1]

    monkeypatch.setattr(binning, "_find_binning_thresholds", ORIGINAL)
    own = fit()
    monkeypatch.setattr(fast, "_STATE", {})
    assert use_fast_binning()
    assert binning._find_binning_thresholds is find_binning_thresholds
    assert np.array_equal(fit(), own)


def test_a_scikit_learn_whose_binning_differs_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    def different(col_data: np.ndarray, max_bins: int, sample_weight: np.ndarray | None = None) -> np.ndarray:
        return ORIGINAL(col_data, max_bins, sample_weight) + 1e-12

    monkeypatch.setattr(binning, "_find_binning_thresholds", different)
    monkeypatch.setattr(fast, "_STATE", {})
    assert not use_fast_binning()
    assert binning._find_binning_thresholds is different
