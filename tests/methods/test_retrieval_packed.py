"""A run's memoised rankings are kept in half the bytes where that loses nothing, and read back unchanged."""

from __future__ import annotations

import numpy as np

from phenoforge.methods.retrieval import _Packed


def test_float32_scores_and_rows_are_kept_narrow_and_read_back_as_the_same_values() -> None:
    rng = np.random.default_rng(0)
    rows = rng.permutation(5000).astype(np.int64)
    scores = np.sort(rng.random(5000, dtype=np.float32))[::-1]  # a dense scan's cosines: float32 values
    source = [f"C{i}" for i in range(5000)]
    packed = _Packed.of_rows(5000, rows, scores, source)
    assert packed.rows is not None and packed.rows.dtype == np.int32
    assert packed.scores is not None and packed.scores.dtype == np.float32
    assert packed.rows.nbytes + packed.scores.nbytes == (rows.nbytes + scores.astype(np.float64).nbytes) // 2
    codes = [source[r] for r in rows[:100].tolist()]
    expected = list(zip(codes, scores[:100].astype(np.float64).tolist(), strict=True))
    assert packed.ranking(100) == expected
    assert all(type(score) is float for _code, score in packed.ranking(3))


def test_float64_scores_that_float32_would_round_stay_float64() -> None:
    scores = np.array([0.1, 1 / 3, 2.0], dtype=np.float64)  # 0.1 and 1/3 are not float32 values
    packed = _Packed.of_rows(3, np.array([2, 0, 1]), scores, ["a", "b", "c"])
    assert packed.scores is not None and packed.scores.dtype == np.float64
    assert packed.ranking(3) == [("c", 0.1), ("a", 1 / 3), ("b", 2.0)]
