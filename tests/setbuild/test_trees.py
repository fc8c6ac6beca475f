"""The ONNX tree ensemble must give scikit-learn's probabilities bit for bit: a last-bit difference
reorders near-tied candidates and changes a built code list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.ensemble import HistGradientBoostingClassifier

from phenoforge.setbuild.trees import TreeEnsemble, TreeFileError, _expit, ensemble_bytes


def _data(seed: int, rows: int = 400, width: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, width))
    x[rng.random(size=x.shape) < 0.1] = np.nan  # missing values take the learned side
    x[:, -1] = 3.0  # a constant column is never split on
    y = (np.nan_to_num(x[:, 0]) + 0.5 * np.nan_to_num(x[:, 1]) + rng.normal(size=rows) > 0).astype(int)
    return x, y


def _fit(x: np.ndarray, y: np.ndarray, **params: object) -> HistGradientBoostingClassifier:
    settings_ = {"max_iter": 40, "max_leaf_nodes": 15, "min_samples_leaf": 10, "random_state": 0} | params
    return HistGradientBoostingClassifier(**settings_).fit(x, y)  # type: ignore[arg-type]


def test_probabilities_equal_scikit_learn_bit_for_bit_with_missing_values() -> None:
    x, y = _data(0)
    estimator = _fit(x, y)
    fresh, _ = _data(1, rows=500)
    fresh[0] = np.nan  # a row with nothing known
    fresh[1, :2] = [1e300, -1e300]  # far outside every threshold
    trees = TreeEnsemble.from_estimator(estimator)
    assert np.array_equal(trees.probabilities(fresh), estimator.predict_proba(fresh)[:, 1])


def test_a_model_of_single_leaf_trees_predicts_its_baseline() -> None:
    """A tree that found no split (constant features) has no interior node; ONNX needs one per tree."""
    x = np.full((100, 3), 1.0)
    y = np.r_[np.zeros(70, dtype=int), np.ones(30, dtype=int)]
    estimator = _fit(x, y, max_iter=5)
    trees = TreeEnsemble.from_estimator(estimator)
    probabilities = trees.probabilities(np.array([[1.0, 1.0, 1.0], [np.nan, 0.0, 9.0]]))
    assert np.array_equal(probabilities, estimator.predict_proba(np.array([[1.0, 1.0, 1.0], [np.nan, 0.0, 9.0]]))[:, 1])
    assert probabilities[0] == pytest.approx(0.3, abs=0.01)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), leaves=st.integers(2, 31), rate=st.floats(0.01, 1.0))
def test_any_fitted_binary_model_is_reproduced_exactly(seed: int, leaves: int, rate: float) -> None:
    x, y = _data(seed, rows=200, width=4)
    estimator = _fit(x, y, max_iter=15, max_leaf_nodes=leaves, learning_rate=rate, min_samples_leaf=5)
    probe, _ = _data(seed + 1, rows=150, width=4)
    assert np.array_equal(
        TreeEnsemble.from_estimator(estimator).probabilities(probe), estimator.predict_proba(probe)[:, 1]
    )


def test_the_link_matches_scipy_expit_including_overflow() -> None:
    from scipy.special import expit

    edge = 709.782712893384  # log of the largest float64
    near = [np.nextafter(edge, -np.inf), edge, np.nextafter(edge, np.inf)]
    raw = np.r_[np.linspace(-800, 800, 4001), -np.array(near), np.random.default_rng(0).normal(scale=5, size=5000)]
    assert np.array_equal(_expit(raw), expit(raw))


def test_stored_bytes_round_trip_and_refuse_another_width() -> None:
    x, y = _data(2)
    estimator = _fit(x, y)
    data = ensemble_bytes(estimator)
    again = TreeEnsemble(data, x.shape[1])
    assert np.array_equal(again.probabilities(x), estimator.predict_proba(x)[:, 1])
    with pytest.raises(TreeFileError, match="read 6 features, the manifest lists 5"):
        TreeEnsemble(data, 5)
    with pytest.raises(ValueError, match="rows of 4 features"):
        again.probabilities(x[:, :4])
    assert again.probabilities(np.zeros((0, 6))).shape == (0,)


def test_garbage_and_unsupported_models_are_refused() -> None:
    with pytest.raises(TreeFileError, match="not a readable tree ensemble"):
        TreeEnsemble(b"\x80\x04not onnx at all", 3)
    x, _ = _data(3)
    multiclass = HistGradientBoostingClassifier(max_iter=3).fit(x, np.arange(len(x)) % 3)
    with pytest.raises(TreeFileError, match="binary"):
        ensemble_bytes(multiclass)
    with pytest.raises(TreeFileError, match="binary"):
        ensemble_bytes(HistGradientBoostingClassifier())  # not fitted


def test_reading_and_predicting_stored_trees_imports_neither_scikit_learn_nor_onnx(tmp_path: Path) -> None:
    """Importing scikit-learn (with scipy and pandas) cost a benchmark ~1 s; only fitting needs it."""
    x, y = _data(4)
    (tmp_path / "model.onnx").write_bytes(ensemble_bytes(_fit(x, y)))
    script = (
        "import sys; import numpy as np; from pathlib import Path\n"
        "from phenoforge.setbuild.trees import TreeEnsemble\n"
        f"trees = TreeEnsemble(Path({str(tmp_path / 'model.onnx')!r}).read_bytes(), 6)\n"
        "print(len(trees.probabilities(np.zeros((3, 6)))))\n"
        "print(sorted(m for m in ('sklearn', 'scipy', 'pandas', 'onnx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["3", "[]"], out
