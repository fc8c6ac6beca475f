"""The ONNX tree ensemble attacked: unusual fits must stay bit-exact, models it cannot represent must be
refused, and a stored file that is not a membership tree ensemble must be refused when it is loaded
(whoever can write data/models can re-sign any file: the checksum only says manifest and file agree)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.learned import MATRIX_COLUMNS, MembershipModel, ModelError, ModelManifest
from phenoforge.setbuild.trees import TreeEnsemble, TreeFileError, ensemble_bytes
from tests.setbuild.conftest import resign_model

BUILD = "hostile-build"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """OpenMP fits spin against each other on a busy machine: one thread keeps this file fast."""
    with threadpool_limits(limits=1):
        yield


def _fit(x: np.ndarray, y: np.ndarray, **params: object) -> HistGradientBoostingClassifier:
    settings = {"max_iter": 25, "max_leaf_nodes": 15, "min_samples_leaf": 10, "random_state": 0} | params
    weights = settings.pop("sample_weight", None)
    return HistGradientBoostingClassifier(**settings).fit(x, y, sample_weight=weights)  # type: ignore[arg-type]


def _exact(estimator: HistGradientBoostingClassifier, rows: np.ndarray) -> None:
    got = TreeEnsemble.from_estimator(estimator).probabilities(rows)
    want = estimator.predict_proba(rows)[:, 1]
    assert got.dtype == np.float64 and got.shape == want.shape
    different = np.flatnonzero(got != want)
    examples = f"e.g. {got[different[:3]]} for {want[different[:3]]}"
    assert not len(different), f"{len(different)} of {len(want)} rows differ, {examples}"


# -- bit-exactness under unusual fits ------------------------------------------------------------------


def _imbalanced() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 4))
    y = np.zeros(4000, dtype=int)
    y[np.argsort(-x[:, 0])[:4]] = 1  # 1:1000
    return _fit(x, y), rng.normal(size=(800, 4)) * 3


def _weighted() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1500, 4))
    y = (x[:, 0] + rng.normal(size=1500) > 0).astype(int)
    weights = rng.exponential(size=1500) * 1000.0 / 37  # like the per-cohort weights of _stack
    weights[::17] = 0.0
    return _fit(x, y, sample_weight=weights), rng.normal(size=(800, 4))


def _early_stopped() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1500, 4))
    y = (x[:, 0] + rng.normal(size=1500) > 0).astype(int)
    estimator = _fit(x, y, max_iter=300, early_stopping=True, n_iter_no_change=3, learning_rate=0.5)
    assert estimator.n_iter_ < 300
    return estimator, rng.normal(size=(800, 4))


def _stumps() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1000, 3))
    y = (x[:, 0] * x[:, 1] > 0).astype(int)
    return _fit(x, y, max_depth=1, max_iter=60), rng.normal(size=(800, 3))


def _many_deep_trees() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    """More trees than ONNX Runtime's parallel-over-trees cut-offs, and unbounded leaves."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(600, 3))
    y = rng.integers(0, 2, 600)
    estimator = _fit(x, y, max_iter=200, max_leaf_nodes=None, min_samples_leaf=2, early_stopping=False)
    return estimator, rng.normal(size=(600, 3))


def _infinite() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2000, 3))
    x[rng.random(x.shape) < 0.1] = np.inf
    x[rng.random(x.shape) < 0.1] = -np.inf
    x[rng.random(x.shape) < 0.1] = np.nan
    y = (np.nan_to_num(x[:, 0], posinf=3, neginf=-3) + rng.normal(size=2000) > 0).astype(int)
    probe = rng.normal(size=(800, 3))
    for value, share in ((np.inf, 0.2), (-np.inf, 0.2), (np.nan, 0.1)):
        probe[rng.random(probe.shape) < share] = value
    return _fit(x, y), probe


def _split_on_nan() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    """Missing values alone decide: scikit-learn stores a threshold of +inf with missing going right."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(1500, 3))
    missing = rng.random(1500) < 0.3
    x[missing, 0] = np.nan
    y = (missing | (x[:, 1] > 1)).astype(int)
    estimator = _fit(x, y)
    thresholds = np.concatenate([tree.nodes["num_threshold"] for (tree,) in estimator._predictors])
    assert np.isinf(thresholds).any()
    edges = [np.inf, -np.inf, np.nan, 1e300, np.nextafter(1e300, np.inf), 0.0, -0.0]
    probe = np.array([[a, b, 0.0] for a in edges for b in edges])
    return estimator, probe


def _nan_only_at_predict_time() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    """No feature was missing in training: scikit-learn sends NaN to the child with more samples."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(1500, 4))
    y = (x[:, 0] + 0.3 * x[:, 1] + rng.normal(size=1500) > 0.7).astype(int)
    estimator = _fit(x, y)
    nodes = np.concatenate([tree.nodes for (tree,) in estimator._predictors])
    interior = nodes[nodes["is_leaf"] == 0]
    assert interior["missing_go_to_left"].any() and not interior["missing_go_to_left"].all()
    probe = rng.normal(size=(800, 4))
    probe[rng.random(probe.shape) < 0.4] = np.nan
    return estimator, probe


def _scaled(scale: float) -> Callable[[], tuple[HistGradientBoostingClassifier, np.ndarray]]:
    def make() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
        rng = np.random.default_rng(9)
        x = rng.normal(size=(1500, 3))
        y = (x[:, 0] + rng.normal(size=1500) > 0).astype(int)
        return _fit(x * scale, y), rng.normal(size=(800, 3)) * scale

    return make


def _integer_features_probed_at_their_thresholds() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    rng = np.random.default_rng(10)
    x = rng.integers(0, 6, size=(1500, 3)).astype(float)
    y = (x[:, 0] + x[:, 1] + rng.normal(size=1500) > 5).astype(int)
    estimator = _fit(x, y)
    thresholds = np.unique(np.concatenate([tree.nodes["num_threshold"] for (tree,) in estimator._predictors]))
    values = np.unique(np.r_[thresholds, np.nextafter(thresholds, np.inf), np.nextafter(thresholds, -np.inf)])
    values = values[np.isfinite(values)]
    grid = np.array(np.meshgrid(values, values)).reshape(2, -1).T
    return estimator, np.c_[grid, grid[:, :1]]


def _many_distinct_values_probed_at_their_thresholds() -> tuple[HistGradientBoostingClassifier, np.ndarray]:
    """More distinct values than bins: thresholds are percentiles and can equal a training value."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(3000, 2)).round(2)
    y = (x[:, 0] + rng.normal(size=3000) > 0).astype(int)
    estimator = _fit(x, y, max_bins=31)
    thresholds = np.unique(np.concatenate([tree.nodes["num_threshold"] for (tree,) in estimator._predictors]))
    thresholds = thresholds[np.isfinite(thresholds)]
    assert np.isin(thresholds, x).any()
    return estimator, np.c_[thresholds, thresholds[::-1]]


UNUSUAL_FITS = {
    "imbalance-1-to-1000": _imbalanced,
    "sample-weights-with-zeros": _weighted,
    "early-stopping": _early_stopped,
    "max-depth-1": _stumps,
    "many-unbounded-trees": _many_deep_trees,
    "inf-and-nan-in-training-and-rows": _infinite,
    "split-on-nan-with-infinite-threshold": _split_on_nan,
    "nan-only-at-predict-time": _nan_only_at_predict_time,
    "huge-magnitudes": _scaled(1e300),
    "tiny-magnitudes": _scaled(1e-300),
    "subnormal-magnitudes": _scaled(1e-315),
    "integer-features-at-thresholds": _integer_features_probed_at_their_thresholds,
    "percentile-thresholds-equal-to-values": _many_distinct_values_probed_at_their_thresholds,
}


@pytest.mark.parametrize("make", UNUSUAL_FITS.values(), ids=UNUSUAL_FITS.keys())
def test_unusual_fits_are_reproduced_bit_for_bit(
    make: Callable[[], tuple[HistGradientBoostingClassifier, np.ndarray]],
) -> None:
    estimator, rows = make()
    _exact(estimator, rows)


def test_single_rows_and_large_batches_give_the_same_bits_as_scikit_learn() -> None:
    """ONNX Runtime takes another code path for one row (and for many trees or rows) than for a few rows."""
    estimator, rows = _many_deep_trees()
    trees = TreeEnsemble.from_estimator(estimator)
    want = estimator.predict_proba(rows)[:, 1]
    one_by_one = np.array([trees.probabilities(row[None, :])[0] for row in rows[:150]])
    assert np.array_equal(one_by_one, want[:150])
    big = np.random.default_rng(12).normal(size=(20_000, 3))
    assert np.array_equal(trees.probabilities(big), estimator.predict_proba(big)[:, 1])


def test_row_layout_and_dtype_do_not_change_the_bits() -> None:
    estimator, _rows = _integer_features_probed_at_their_thresholds()
    rng = np.random.default_rng(13)
    rows = rng.integers(-1, 7, size=(600, 3))
    want = estimator.predict_proba(rows.astype(np.float64))[:, 1]
    trees = TreeEnsemble.from_estimator(estimator)
    wide = np.repeat(rows.astype(np.float64), 2, axis=1)
    for variant in (
        rows,  # int64
        rows.astype(np.float32),
        rows.astype(np.int8),
        np.asfortranarray(rows.astype(np.float64)),
        wide[:, ::2],  # a strided view
    ):
        assert np.array_equal(trees.probabilities(variant), want)
    assert np.array_equal(trees.probabilities(np.repeat(rows, 2, axis=0)[::2]), want)  # a row-strided view


@pytest.mark.parametrize(
    "labels",
    [
        lambda y: y.astype(bool),
        lambda y: np.where(y == 1, "yes", "no"),
        lambda y: np.where(y == 1, "a-positive", "b-negative"),  # the listed class sorts first
        lambda y: np.where(y == 1, -1, 1),
        lambda y: np.where(y == 1, 2.0, 3.0),  # the listed class sorts first
    ],
    ids=["bool", "strings", "positive-sorts-first", "minus-one-plus-one", "floats"],
)
def test_the_ensemble_predicts_scikit_learns_second_class_whatever_the_labels(
    labels: Callable[[np.ndarray], np.ndarray],
) -> None:
    """``predict_proba(...)[:, 1]`` is ``classes_[1]``: the trees must give that column, not 'the 1s'."""
    rng = np.random.default_rng(14)
    x = rng.normal(size=(800, 3))
    y = (x[:, 0] + rng.normal(size=800) > 0.5).astype(int)
    estimator = _fit(x, labels(y))
    probe = rng.normal(size=(300, 3))
    _exact(estimator, probe)
    second = estimator.classes_[1]
    share = float(np.mean(labels(y) == second))
    assert abs(float(TreeEnsemble.from_estimator(estimator).probabilities(x).mean()) - share) < 0.1


def test_concurrent_calls_on_one_session_each_get_their_own_rows_bits() -> None:
    estimator, _rows = _many_deep_trees()
    trees = TreeEnsemble.from_estimator(estimator)
    rng = np.random.default_rng(15)
    batches = [rng.normal(size=(int(n), 3)) for n in rng.integers(1, 900, size=8)]
    wants = [estimator.predict_proba(batch)[:, 1] for batch in batches]
    errors: list[str] = []
    start = threading.Barrier(len(batches))

    def call(i: int) -> None:
        start.wait()
        for _ in range(15):
            got = trees.probabilities(batches[i])
            if not np.array_equal(got, wants[i]):
                errors.append(f"batch {i}: {int(np.sum(got != wants[i]))} rows differ")

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


# -- models it cannot represent ------------------------------------------------------------------------


def test_a_regressor_is_refused() -> None:
    """The trees would answer expit(regression output), which no estimator of this one computes."""
    rng = np.random.default_rng(16)
    x = rng.normal(size=(300, 3))
    regressor = HistGradientBoostingRegressor(max_iter=5).fit(x, x[:, 0] + rng.normal(size=300))
    with pytest.raises(TreeFileError, match="binary"):
        ensemble_bytes(regressor)  # type: ignore[arg-type]


def test_a_model_declaring_categorical_features_is_refused_or_exact() -> None:
    """With ``categorical_features`` scikit-learn reorders the columns (categorical first) before the trees
    read them, so the trees' feature indices are not input columns even when no tree split on a category."""
    rng = np.random.default_rng(17)
    x = np.c_[rng.normal(size=(1000, 3)), np.zeros(1000)]  # the categorical column is constant: never split on
    y = (x[:, 0] + rng.normal(size=1000) > 0).astype(int)
    estimator = _fit(x, y, categorical_features=[3])
    assert not any(tree.nodes["is_categorical"].any() for (tree,) in estimator._predictors)
    probe = np.c_[rng.normal(size=(300, 3)), np.zeros(300)]
    try:
        trees = TreeEnsemble.from_estimator(estimator)
    except TreeFileError:
        return
    got, want = trees.probabilities(probe), estimator.predict_proba(probe)[:, 1]
    assert np.array_equal(got, want), f"{int(np.sum(got != want))} of {len(want)} probabilities differ"


def test_unfitted_and_multiclass_models_are_refused_with_a_reason() -> None:
    rng = np.random.default_rng(18)
    x = rng.normal(size=(200, 3))
    for estimator in (
        HistGradientBoostingClassifier(),
        HistGradientBoostingClassifier(max_iter=2).fit(x, np.arange(200) % 4),
        HistGradientBoostingRegressor(),
    ):
        with pytest.raises(TreeFileError, match="only a fitted binary HistGradientBoostingClassifier"):
            ensemble_bytes(estimator)  # type: ignore[arg-type]


# -- stored files: load_model and the per-process cache ------------------------------------------------


def _model(width: int = 4, seed: int = 19) -> tuple[MembershipModel, HistGradientBoostingClassifier]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(600, width))
    y = (x[:, width - 1] + rng.normal(size=600) > 0).astype(int)
    estimator = _fit(x, y, max_iter=8)
    manifest = ModelManifest(
        vocabulary_build_id=BUILD,
        with_dense=False,
        training_libraries=["hostile"],
        training_groups=["hostile"],
        training_cohorts=["hostile/one"],
        features=MATRIX_COLUMNS[:width],
        rule="threshold",
        threshold=0.5,
        threshold_chosen_on="given by the caller",
        n_rows=len(y),
        n_positive=int(y.sum()),
        estimator="HistGradientBoostingClassifier",
        sklearn_version="test",
        trained_at="2026-01-01T00:00:00+00:00",
    )
    return MembershipModel(manifest, TreeEnsemble.from_estimator(estimator)), estimator


def _matrix(rows: np.ndarray) -> np.ndarray:
    """Rows of the model's columns laid out as a full feature matrix (the model reads its prefix)."""
    matrix = np.zeros((len(rows), len(MATRIX_COLUMNS)))
    matrix[:, : rows.shape[1]] = rows
    return matrix


def _with_other_leaves(data: bytes) -> bytes:
    """The same trees with every leaf moved: another model, serialised to exactly as many bytes."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(data)
    for attribute in model.graph.node[0].attribute:
        if attribute.name == "leaf_weights":
            weights = numpy_helper.to_array(attribute.t) + 0.75
            attribute.t.CopyFrom(numpy_helper.from_array(weights))
    other = model.SerializeToString()
    assert len(other) == len(data) and other != data
    return other


def test_a_stored_model_predicts_the_estimators_bits_after_a_round_trip(tmp_path: Path) -> None:
    model, estimator = _model()
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    loaded = model_store.load_model(directory, BUILD)
    rows = np.random.default_rng(20).normal(size=(500, 4))
    rows[::7, 1] = np.nan
    assert np.array_equal(loaded.probabilities(_matrix(rows)), estimator.predict_proba(rows)[:, 1])
    assert hashlib.sha256(loaded.trees.data).hexdigest() == loaded.manifest.sha256


def test_a_model_rewritten_with_the_same_size_and_mtime_is_not_served_from_the_cache(tmp_path: Path) -> None:
    """Coarse file clocks give two writes within a few milliseconds one mtime: the cache must still see
    that the manifest now vouches for other bytes."""
    model, estimator = _model()
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    rows = np.random.default_rng(21).normal(size=(200, 4))
    first = model_store.load_model(directory, BUILD).probabilities(_matrix(rows))
    path = directory / learned.MODEL_FILE
    stat = path.stat()
    other = _with_other_leaves(model.trees.data)
    resign_model(directory, other)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    second = model_store.load_model(directory, BUILD)
    assert second.trees.data == other
    assert not np.array_equal(second.probabilities(_matrix(rows)), first)
    # the same bytes edited in place without re-signing: refused once the file visibly changed
    path.write_bytes(model.trees.data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(ModelError, match="checksum does not match"):
        model_store.load_model(directory, BUILD)


def test_the_cache_never_serves_trees_the_manifest_does_not_vouch_for(tmp_path: Path) -> None:
    """A file corrupted in place with its size and mtime kept: the cached trees are the ones whose
    checksum the manifest holds (the answer is the stored model's, never the corrupt bytes')."""
    model, _estimator = _model()
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    model_store.load_model(directory, BUILD)
    path = directory / learned.MODEL_FILE
    stat = path.stat()
    path.write_bytes(_with_other_leaves(model.trees.data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = model_store.load_model(directory, BUILD)
    assert hashlib.sha256(again.trees.data).hexdigest() == again.manifest.sha256


def _onnx(node_type: str, input_shape: list[int | None], output_shape: list[int | None]) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(node_type, ["X"], ["Y"])],
        "not-trees",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, input_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, output_shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return bytes(model.SerializeToString())


def test_a_stored_file_that_is_not_one_probability_per_row_is_refused_on_load(tmp_path: Path) -> None:
    """A re-signed graph reading float64 rows of the right width passed every check, and answered
    four numbers per row: predict_many then handed each query the numbers of other rows."""
    model, _estimator = _model()
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    resign_model(directory, _onnx("Identity", [None, 4], [None, 4]))
    rows = _matrix(np.random.default_rng(22).normal(size=(10, 4)))
    try:
        loaded = model_store.load_model(directory, BUILD)
    except ModelError:
        return
    answer = loaded.probabilities(rows)
    assert answer.shape == (10,), f"a loaded model answered {answer.shape} for 10 rows"


def test_a_stored_file_with_a_scalar_input_is_refused_as_a_model_error(tmp_path: Path) -> None:
    """ensure_model retrains on ModelError; an IndexError from the shape check ends the whole run instead."""
    model, _estimator = _model()
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    resign_model(directory, _onnx("Identity", [], []))
    with pytest.raises(ModelError):
        model_store.load_model(directory, BUILD)


def test_stored_trees_that_read_beyond_the_declared_width_are_refused_on_load(tmp_path: Path) -> None:
    """Trees splitting on feature 5 with their input relabelled as 4 wide passed the width check on load,
    then every prediction raised ONNX Runtime's own error (not ModelError) out of the benchmark."""
    import onnx

    _model_, wide = _model(width=6, seed=23)
    used = {int(i) for (tree,) in wide._predictors for i in tree.nodes["feature_idx"][tree.nodes["is_leaf"] == 0]}
    assert max(used) >= 4
    relabelled = onnx.load_from_string(ensemble_bytes(wide))
    relabelled.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 4
    model, _estimator = _model(width=4)
    directory = model_store.save_model(model, tmp_path / "models" / "membership-x")
    resign_model(directory, relabelled.SerializeToString())
    rows = _matrix(np.random.default_rng(24).normal(size=(10, 4)))
    try:
        loaded = model_store.load_model(directory, BUILD)
    except ModelError:
        return
    loaded.probabilities(rows)  # must not raise: a loaded model predicts
