"""A fitted gradient-boosted membership model as a plain tree ensemble, predicted by ONNX Runtime.

Why not keep scikit-learn's estimator: reading it back imports scikit-learn (with pandas and
scipy.stats, about a second) and walks 250 trees one Python call at a time. Each stored model is
therefore written once, when it is fitted, as an ONNX ``TreeEnsemble`` (``ai.onnx.ml`` opset 5, in
float64). ONNX Runtime, already loaded for the dense index, predicts it in about a third of the time,
and a stored file holds numbers only: reading it cannot run code the way unpickling can.

The ensemble gives scikit-learn's probabilities bit for bit, which the tests check. Three things make
that exact:
- the baseline is added to the first tree's leaves, so the sum runs in scikit-learn's order;
- prediction uses one thread, so the trees are summed in order and never as partial sums;
- the logistic link uses C's ``exp``, as ``scipy.special.expit`` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from phenoforge.errors import PhenoforgeError

if TYPE_CHECKING:
    from onnxruntime import InferenceSession
    from sklearn.ensemble import HistGradientBoostingClassifier

ONNX_IR_VERSION = 10
"""The ONNX IR version written: one the pinned ONNX Runtime reads (the onnx package writes newer ones)."""
ML_OPSET = 5
"""``ai.onnx.ml`` opset of the unified ``TreeEnsemble`` (float64 thresholds, leaves and output)."""
_BRANCH_LEQ = 0
_MAX_EXP_ARGUMENT = 709.782712893384
"""``log`` of the largest float64: above it ``exp`` overflows and the probability is 0.0, as ``expit`` gives."""


class TreeFileError(PhenoforgeError):
    """A stored tree ensemble cannot be read, or does not fit the features it should read."""


def ensemble_bytes(estimator: HistGradientBoostingClassifier, edges: Sequence[np.ndarray] | None = None) -> bytes:
    """The fitted binary classifier as serialised ONNX: its raw score (baseline included) per row.

    ``edges`` is given when the estimator was fitted on bin numbers (:func:`bin_rows`): a split
    ``bin <= t`` becomes ``x <= edges[feature][floor(t)]``, the same partition of raw values.
    """
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.ensemble import HistGradientBoostingClassifier

    if not isinstance(estimator, HistGradientBoostingClassifier):
        raise TreeFileError("only a fitted binary HistGradientBoostingClassifier can be written as trees")
    if getattr(estimator, "is_categorical_", None) is not None:  # columns are reordered before the trees
        raise TreeFileError("the model declares categorical features, which membership models never use")
    predictors = getattr(estimator, "_predictors", None)
    baseline = np.asarray(getattr(estimator, "_baseline_prediction", np.zeros(1))).ravel()
    if not predictors or len(baseline) != 1 or any(len(step) != 1 for step in predictors):
        raise TreeFileError("only a fitted binary HistGradientBoostingClassifier can be written as trees")
    features: list[int] = []
    splits: list[float] = []
    missing_true: list[int] = []
    true_ids: list[int] = []
    true_leaf: list[int] = []
    false_ids: list[int] = []
    false_leaf: list[int] = []
    roots: list[int] = []
    leaf_weights: list[float] = []
    for number, (predictor,) in enumerate(predictors):
        nodes = predictor.nodes
        if nodes["is_categorical"].any():
            raise TreeFileError("the model splits on a categorical feature, which membership models never use")
        leaf_index: dict[int, int] = {}
        for i in np.flatnonzero(nodes["is_leaf"]).tolist():
            value = float(nodes["value"][i])
            # the baseline is folded into the first tree: scikit-learn adds each tree to it in turn
            leaf_index[i] = len(leaf_weights)
            leaf_weights.append(float(baseline[0]) + value if number == 0 else value)
        interior = np.flatnonzero(nodes["is_leaf"] == 0).tolist()
        node_index = {i: len(features) + k for k, i in enumerate(interior)}
        roots.append(len(features))
        if not interior:  # a single leaf: one split whose branches both reach it
            features.append(0)
            splits.append(0.0)
            missing_true.append(1)
            for ids, leaf in ((true_ids, true_leaf), (false_ids, false_leaf)):
                ids.append(leaf_index[0])
                leaf.append(1)
            continue
        for i in interior:
            node = nodes[i]
            feature = int(node["feature_idx"])
            features.append(feature)
            splits.append(
                _raw_split(float(node["num_threshold"]), edges[feature])
                if edges is not None
                else float(node["num_threshold"])
            )
            missing_true.append(int(node["missing_go_to_left"]))  # left is scikit-learn's x <= threshold
            for child, ids, leaf in (
                (int(node["left"]), true_ids, true_leaf),
                (int(node["right"]), false_ids, false_leaf),
            ):
                is_leaf = bool(nodes["is_leaf"][child])
                ids.append(leaf_index[child] if is_leaf else node_index[child])
                leaf.append(int(is_leaf))
    width = int(estimator.n_features_in_)
    node = helper.make_node(
        "TreeEnsemble",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        aggregate_function=1,  # sum
        post_transform=0,  # none: the link is applied in float64 by ``TreeEnsemble.probabilities``
        n_targets=1,
        tree_roots=roots,
        nodes_featureids=features,
        nodes_splits=numpy_helper.from_array(np.asarray(splits, dtype=np.float64)),
        nodes_modes=numpy_helper.from_array(np.full(len(features), _BRANCH_LEQ, dtype=np.uint8)),
        nodes_truenodeids=true_ids,
        nodes_trueleafs=true_leaf,
        nodes_falsenodeids=false_ids,
        nodes_falseleafs=false_leaf,
        nodes_missing_value_tracks_true=missing_true,
        leaf_targetids=[0] * len(leaf_weights),
        leaf_weights=numpy_helper.from_array(np.asarray(leaf_weights, dtype=np.float64)),
    )
    graph = helper.make_graph(
        [node],
        "membership",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, width])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [None, 1])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    )
    model.ir_version = ONNX_IR_VERSION
    return bytes(model.SerializeToString())


MAX_BINS = 255
"""scikit-learn's default (and largest) number of bins for non-missing values."""


def bin_edges(rows: np.ndarray, weights: np.ndarray, max_bins: int = MAX_BINS) -> list[np.ndarray]:
    """Per column, increasing edges ``e`` such that bin ``b`` holds ``e[b-1] < x <= e[b]``.

    What scikit-learn's gradient boosting computes itself on every fit (midpoints of the distinct values
    when there are few, weighted quantiles otherwise), done once with one sort per column: with sample
    weights scikit-learn computes each of the 254 quantiles with a sort of its own, which was a third
    of a membership model's fit. NaN and zero-weight rows are left out, as scikit-learn leaves them out.
    """
    edges: list[np.ndarray] = []
    for column in np.asarray(rows, dtype=np.float64).T:
        kept = ~np.isnan(column) & (weights != 0)
        values, kept_weights = column[kept], weights[kept]
        order = np.argsort(values, kind="stable")
        values, kept_weights = values[order], kept_weights[order]
        distinct = np.unique(values)
        if len(distinct) <= 1:
            edges.append(np.zeros(0))
        elif len(distinct) <= max_bins:
            edges.append((distinct[:-1] + distinct[1:]) / 2)
        else:
            cumulative = np.cumsum(kept_weights)
            targets = cumulative[-1] * np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
            at = np.minimum(np.searchsorted(cumulative, targets, side="left"), len(values) - 1)
            chosen = np.unique(values[at])
            edges.append(chosen[chosen < distinct[-1]])  # the largest value closes the last bin itself
    return edges


def bin_rows(rows: np.ndarray, edges: Sequence[np.ndarray]) -> np.ndarray:
    """Each value's bin number under ``edges`` (as float64; NaN stays NaN, so missing values keep their
    own branch)."""
    rows = np.asarray(rows, dtype=np.float64)
    binned = np.empty_like(rows)
    for feature, column_edges in enumerate(edges):
        column = rows[:, feature]
        binned[:, feature] = np.searchsorted(column_edges, column, side="left")
        binned[np.isnan(column), feature] = np.nan
    return binned


def _raw_split(threshold: float, column_edges: np.ndarray) -> float:
    """``bin <= threshold`` as ``x <= edge``: bin numbers are integers, so ``bin <= floor(threshold)``."""
    if not math.isfinite(threshold):  # scikit-learn's "missing or not" split: every value goes left
        return threshold
    bin_number = int(np.floor(threshold))
    if bin_number >= len(column_edges):  # every bin goes left: every finite value does
        return float(np.inf)
    if bin_number < 0:
        return float(-np.inf)
    return float(column_edges[bin_number])


def _expit(raw: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` with C's ``exp``, as ``scipy.special.expit`` computes it (numpy's vectorised
    ``exp`` differs in the last bit now and then, which would reorder near-tied candidates)."""
    return np.array(
        [1.0 / (1.0 + math.exp(-x)) if -x <= _MAX_EXP_ARGUMENT else 0.0 for x in raw.tolist()], dtype=np.float64
    )


class TreeEnsemble:
    """Serialised ONNX trees and the session that predicts them; ``probabilities`` is the positive
    class's probability per row."""

    def __init__(self, data: bytes, width: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # trees summed in order: bit-exact, and no spinning threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # ONNX Runtime raises its own exception types for unreadable bytes
            raise TreeFileError(f"not a readable tree ensemble ({type(error).__name__})") from None
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if (
            len(inputs) != 1
            or len(outputs) != 1
            or inputs[0].type != "tensor(double)"
            or len(inputs[0].shape) != 2
            or len(outputs[0].shape) != 2
            or outputs[0].shape[-1] != 1
        ):
            raise TreeFileError("not a membership tree ensemble (one float64 input of rows, one score per row)")
        if inputs[0].shape[-1] != width:
            raise TreeFileError(f"the trees read {inputs[0].shape[-1]} features, the manifest lists {width}")
        self.data = data
        self.width = width
        self._session: InferenceSession = session
        self._input = inputs[0].name
        try:  # the declared width is only a label: trees that split on a column beyond it fail here, not later
            self.probabilities(np.zeros((1, width)))
        except Exception as error:  # ONNX Runtime's own exception types, or a wrong number of scores
            raise TreeFileError(f"the trees do not predict rows of {width} features ({type(error).__name__})") from None

    @classmethod
    def from_estimator(
        cls, estimator: HistGradientBoostingClassifier, edges: Sequence[np.ndarray] | None = None
    ) -> TreeEnsemble:
        """The estimator's trees; ``edges`` when it was fitted on :func:`bin_rows` output (splits mapped back)."""
        return cls(ensemble_bytes(estimator, edges), int(estimator.n_features_in_))

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0)
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"rows of {rows.shape[-1]} features for trees reading {self.width}")
        raw = np.asarray(self._session.run(None, {self._input: np.ascontiguousarray(rows, dtype=np.float64)})[0])
        if raw.size != len(rows):
            raise TreeFileError(f"the trees gave {raw.size} scores for {len(rows)} rows")
        return _expit(raw.astype(np.float64).reshape(-1))
