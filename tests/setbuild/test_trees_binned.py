"""Trees fitted on bin numbers (``bin_edges`` + ``bin_rows``) and written with their edges must predict raw
rows exactly as scikit-learn predicts the binned rows: the binning is done once, never guessed twice."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.ensemble import HistGradientBoostingClassifier

from phenoforge.setbuild.trees import MAX_BINS, TreeEnsemble, bin_edges, bin_rows


def _data(seed: int, rows: int, width: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, width))
    x[:, 1] = rng.integers(0, 4, size=rows)  # few distinct values: midpoints
    x[:, 2] = 7.0  # constant: no edge, never split on
    x[rng.random(size=x.shape) < 0.08] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, 1]) + rng.normal(size=rows) > 1).astype(int)
    w = rng.uniform(0.1, 3.0, size=rows)
    return x, y, w


def _fit(binned: np.ndarray, y: np.ndarray, w: np.ndarray) -> HistGradientBoostingClassifier:
    model = HistGradientBoostingClassifier(max_iter=20, max_leaf_nodes=15, min_samples_leaf=5, random_state=0)
    return model.fit(binned, y, sample_weight=w)


def test_edges_split_every_column_into_at_most_max_bins() -> None:
    x, _, w = _data(0, rows=3000)
    edges = bin_edges(x, w)
    assert len(edges[0]) == MAX_BINS - 1  # many distinct values: weighted quantiles
    assert np.array_equal(edges[1], [0.5, 1.5, 2.5])  # midpoints of 0..3
    assert len(edges[2]) == 0
    for column_edges in edges:
        assert np.all(np.diff(column_edges) > 0)
    binned = bin_rows(x, edges)
    assert np.array_equal(np.isnan(binned), np.isnan(x))  # missing stays missing
    assert np.nanmax(binned[:, 0]) <= MAX_BINS - 1


def test_weights_move_the_quantile_edges() -> None:
    x = np.arange(1000, dtype=np.float64).reshape(-1, 1)
    heavy_low = np.where(x[:, 0] < 500, 100.0, 1.0)
    assert np.median(bin_edges(x, heavy_low, max_bins=4)[0]) < np.median(bin_edges(x, np.ones(1000), max_bins=4)[0])


def test_zero_weight_rows_do_not_place_edges() -> None:
    x = np.r_[np.zeros(50), np.ones(50), np.full(50, 9.0)].reshape(-1, 1)
    w = np.r_[np.ones(100), np.zeros(50)]
    assert np.array_equal(bin_edges(x, w)[0], [0.5])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), rows=st.sampled_from([120, 700]))
def test_raw_rows_through_mapped_splits_equal_binned_rows_through_scikit_learn(seed: int, rows: int) -> None:
    x, y, w = _data(seed, rows=rows)
    edges = bin_edges(x, w, max_bins=int(np.clip(rows // 20, 3, MAX_BINS)))
    estimator = _fit(bin_rows(x, edges), y, w)
    probe, _, _ = _data(seed + 1, rows=300)
    probe[0] = np.nan
    probe[1, 0], probe[2, 0] = 1e300, -1e300  # beyond every edge
    probe[3, 0] = edges[0][len(edges[0]) // 2]  # exactly on an edge: x <= edge is the lower bin
    expected = estimator.predict_proba(bin_rows(probe, edges))[:, 1]
    assert np.array_equal(TreeEnsemble.from_estimator(estimator, edges).probabilities(probe), expected)
