"""Ontology-aware scoring: tree distance, partial credit, coverage, over-inclusion.

Pure functions with no database import: everything takes already-computed ancestor chains or scores
as plain ``list[int]`` / ``float`` inputs, so the property-based tests never touch a database. Chains
come from :func:`phenoforge.engine.expansion.ancestor_chain_ids`; database-backed orchestration lives
in :mod:`phenoforge.eval.harness`.

Exact-match recall is the wrong metric here: retrieving E11.21 when the target is E11.9 is a near
miss under the same parent, while retrieving a circulatory-chapter code is a total miss, yet both
score zero under exact match. Every score here derives from :func:`tree_distance` instead, so near
misses earn partial credit and total misses do not.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_MAX_DISTANCE = 6


def tree_distance(chain_a: Sequence[int], chain_b: Sequence[int]) -> int | None:
    """Edges between two concepts through their lowest common ancestor.

    Each chain is ``[self_id, parent_id, ..., root_id]``, self-inclusive and nearest first. Walking
    ``chain_a`` outward from self, the first id also in ``chain_b`` is the lowest common ancestor.
    Returns None when the chains share no ancestor (different chapters or vocabularies: a true miss).

    >>> tree_distance([3, 2, 1], [4, 2, 1])
    2
    >>> tree_distance([3, 2, 1], [3, 2, 1])
    0
    >>> tree_distance([3, 2], [5, 4]) is None
    True
    """
    position_in_b = {node: index for index, node in reversed(list(enumerate(chain_b)))}
    for index_a, node in enumerate(chain_a):
        index_b = position_in_b.get(node)
        if index_b is not None:
            return index_a + index_b
    return None


def distance_weighted_score(distance: int | None, max_distance: int = DEFAULT_MAX_DISTANCE) -> float:
    """Partial credit in [0, 1]: 1.0 at distance 0, linear down to 0.0 at ``max_distance``.

    None (no common ancestor) scores 0.0. Linear rather than exponential decay keeps a near miss
    such as E11.21 vs. E11.9 (distance 2) clearly above zero and clearly below 1.0.

    >>> distance_weighted_score(0), distance_weighted_score(3), distance_weighted_score(None)
    (1.0, 0.5, 0.0)
    """
    if distance is None:
        return 0.0
    if max_distance <= 0:
        return 1.0 if distance <= 0 else 0.0
    return max(0.0, 1.0 - max(distance, 0) / max_distance)


def set_coverage(predicted_scores: Sequence[float], n_ground_truth: int) -> float:
    """Mean over ground-truth codes of each one's best-match score against the predicted codes.

    Vacuously 1.0 with no ground truth. Raises ValueError if the lengths disagree.

    >>> set_coverage([1.0, 0.5], 2)
    0.75
    """
    if len(predicted_scores) != n_ground_truth:
        raise ValueError(f"got {len(predicted_scores)} scores for {n_ground_truth} ground-truth codes")
    if n_ground_truth == 0:
        return 1.0
    return float(sum(predicted_scores) / n_ground_truth)


def over_inclusion_penalty(predicted_scores: Sequence[float], n_predicted: int) -> float:
    """Mean of ``1 - best match score`` over predicted codes: how much has no good match.

    A predicted code close to something curated (a legitimately missing sibling, since the curated
    set is a lower bound) earns partial credit instead of counting as a flat false positive.
    Vacuously 0.0 with nothing predicted. Raises ValueError if the lengths disagree.

    >>> over_inclusion_penalty([1.0, 0.5], 2)
    0.25
    """
    if len(predicted_scores) != n_predicted:
        raise ValueError(f"got {len(predicted_scores)} scores for {n_predicted} predicted codes")
    if n_predicted == 0:
        return 0.0
    return float(sum(1.0 - score for score in predicted_scores) / n_predicted)


def hierarchical_score(coverage: float, over_inclusion_penalty: float) -> float:
    """Harmonic mean of coverage and precision (``1 - over_inclusion_penalty``).

    Harmonic, not arithmetic, so a method cannot hide a bad score on one axis behind a good one on
    the other: cohort definitions fail on false positives too, not only on missed codes.

    >>> hierarchical_score(1.0, 0.0), hierarchical_score(0.0, 1.0)
    (1.0, 0.0)
    """
    precision = 1.0 - over_inclusion_penalty
    if coverage + precision <= 0.0:
        return 0.0
    return 2.0 * coverage * precision / (coverage + precision)


def exact_match_scores(predicted: Sequence[str], ground_truth: Sequence[str]) -> tuple[float, float, float]:
    """Plain set-overlap precision, recall and F1, beside the partial-credit scores.

    Vacuous cases follow the same convention as the partial-credit scores: recall 1.0 with no
    ground truth, precision 1.0 with nothing predicted.

    >>> exact_match_scores(["A", "B"], ["B", "C"])
    (0.5, 0.5, 0.5)
    """
    predicted_set, truth_set = set(predicted), set(ground_truth)
    hits = len(predicted_set & truth_set)
    precision = hits / len(predicted_set) if predicted_set else 1.0
    recall = hits / len(truth_set) if truth_set else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1
