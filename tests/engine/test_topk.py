"""Top-n selection: the positive-only shortcut picks exactly what a selection over every score picks."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.engine.topk import top_indices


def _over_every_score(scores: np.ndarray, n: int) -> list[int]:
    """The definition: positive scores, best first, ties by index, at most n."""
    order = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: (-scores[i], i))
    return order[:n]


@given(
    st.lists(st.sampled_from([0.0, 0.0, 0.0, 0.5, 1.0, 1.5, 2.25, -1.0]), min_size=0, max_size=60),
    st.integers(min_value=0, max_value=70),
)
def test_positive_only_is_the_top_of_the_positive_scores(values: list[float], n: int) -> None:
    scores = np.array(values, dtype=np.float32)
    assert top_indices(scores, n, positive_only=True).tolist() == _over_every_score(scores, n)


@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=1, max_size=40), st.integers(1, 40))
def test_a_deeper_positive_ranking_extends_a_shallower_one(values: list[float], n: int) -> None:
    scores = np.array(values, dtype=np.float32)
    shallow = top_indices(scores, n, positive_only=True).tolist()
    deep = top_indices(scores, n + 5, positive_only=True).tolist()
    assert deep[: len(shallow)] == shallow


@given(
    st.lists(st.one_of(st.floats(-2, 2), st.just(float("nan"))), max_size=30),
    st.integers(0, 35),
    st.booleans(),
)
def test_a_nan_score_is_left_out_not_the_whole_ranking(values: list[float], n: int, positive_only: bool) -> None:
    # a NaN was the partition's threshold when it fell at the cut, and ``scores >= nan`` emptied the result:
    # [nan, 0.5, 0.9] gave [] for n=1 and [2, 1] for n=5
    scores = np.array(values, dtype=np.float64)
    kept = np.flatnonzero(~np.isnan(scores))
    assert top_indices(scores, n, positive_only).tolist() == kept[top_indices(scores[kept], n, positive_only)].tolist()
    expected = [i for i in sorted(kept.tolist(), key=lambda i: (-scores[i], i)) if not positive_only or scores[i] > 0]
    assert top_indices(scores, n, positive_only).tolist() == expected[:n]
