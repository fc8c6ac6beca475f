"""Prefix-stable top-n selection shared by the retrievers."""

from __future__ import annotations

import numpy as np


def top_indices(scores: np.ndarray, n: int, positive_only: bool = False) -> np.ndarray:
    """Indices of the ``n`` best scores, best first, ties broken by index; a NaN score is never ranked.

    Every candidate tied with the n-th score is considered before the cut, so the top ``n`` is
    always a prefix of the top ``n + m``: a deeper ranking never reorders a shallower one, which
    the harness relies on when it takes several methods' results from one deep query.

    >>> top_indices(np.array([0.1, 0.5, 0.5, 0.9]), 2).tolist()
    [3, 1]
    >>> top_indices(np.array([0.0, 0.5, 0.0, 0.9]), 3, positive_only=True).tolist()
    [3, 1]
    """
    if scores.dtype.kind == "f":
        unranked = np.isnan(scores)
        if unranked.any():  # a NaN compares false with everything: it would be the threshold and empty the cut
            kept = np.flatnonzero(~unranked)
            return kept[top_indices(scores[kept], n, positive_only)]
    if positive_only:
        # BM25 scores most of the vocabulary 0: select among the positive ones only (the same indices,
        # since a tie order by index within them is the order by index overall), not over all ~98k
        positive = np.flatnonzero(scores > 0)
        if len(positive) < len(scores):
            return positive[top_indices(scores[positive], n)]
    n = min(n, len(scores))
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    threshold = np.partition(scores, len(scores) - n)[len(scores) - n]
    mask = scores >= threshold
    if positive_only:
        mask &= scores > 0
    candidates = np.flatnonzero(mask)
    return candidates[np.lexsort((candidates, -scores[candidates]))][:n]
