"""Property-based tests of the pure metrics: bounds, monotonicity, symmetry, vacuous cases."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from phenoforge.config import REPO_ROOT
from phenoforge.eval import metrics
from phenoforge.eval.metrics import (
    DEFAULT_MAX_DISTANCE,
    distance_weighted_score,
    exact_match_scores,
    hierarchical_score,
    over_inclusion_penalty,
    set_coverage,
    tree_distance,
)

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
distances = st.one_of(st.none(), st.integers(min_value=0, max_value=50))
max_distances = st.integers(min_value=1, max_value=20)


@st.composite
def random_tree(draw: st.DrawFn, max_nodes: int = 40) -> dict[int, int | None]:
    """A random forest as child -> parent (None for a root); ids shuffled so order carries no hint."""
    n = draw(st.integers(min_value=1, max_value=max_nodes))
    parents: dict[int, int | None] = {0: None}
    for node in range(1, n):
        parents[node] = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=node - 1)))
    labels = draw(st.permutations(list(range(100, 100 + n))))
    return {labels[child]: (labels[parent] if parent is not None else None) for child, parent in parents.items()}


def chain_of(tree: dict[int, int | None], node: int) -> list[int]:
    chain = [node]
    while tree[chain[-1]] is not None:
        chain.append(tree[chain[-1]])  # type: ignore[arg-type]
    return chain


def brute_distance(tree: dict[int, int | None], a: int, b: int) -> int | None:
    """Edges on the path between a and b, by breadth-first search over the undirected tree."""
    neighbours: dict[int, set[int]] = {node: set() for node in tree}
    for child, parent in tree.items():
        if parent is not None:
            neighbours[child].add(parent)
            neighbours[parent].add(child)
    frontier, seen, steps = {a}, {a}, 0
    while frontier:
        if b in frontier:
            return steps
        frontier = {n for node in frontier for n in neighbours[node]} - seen
        seen |= frontier
        steps += 1
    return None


@st.composite
def tree_and_two_nodes(draw: st.DrawFn) -> tuple[dict[int, int | None], int, int]:
    tree = draw(random_tree())
    nodes = sorted(tree)
    return tree, draw(st.sampled_from(nodes)), draw(st.sampled_from(nodes))


# --- tree_distance -------------------------------------------------------------------------------------


@given(tree_and_two_nodes())
def test_tree_distance_is_symmetric_and_exact_on_random_trees(case: tuple[dict[int, int | None], int, int]) -> None:
    tree, a, b = case
    chain_a, chain_b = chain_of(tree, a), chain_of(tree, b)
    forward, backward = tree_distance(chain_a, chain_b), tree_distance(chain_b, chain_a)
    assert forward == backward
    assert forward == brute_distance(tree, a, b)


@given(tree_and_two_nodes())
def test_tree_distance_zero_only_for_identical_chains(case: tuple[dict[int, int | None], int, int]) -> None:
    tree, a, b = case
    assert tree_distance(chain_of(tree, a), chain_of(tree, a)) == 0
    if a != b:
        assert tree_distance(chain_of(tree, a), chain_of(tree, b)) != 0


@given(tree_and_two_nodes())
def test_tree_distance_none_iff_different_roots(case: tuple[dict[int, int | None], int, int]) -> None:
    tree, a, b = case
    chain_a, chain_b = chain_of(tree, a), chain_of(tree, b)
    assert (tree_distance(chain_a, chain_b) is None) == (chain_a[-1] != chain_b[-1])


@given(st.lists(st.integers(0, 100), unique=True, min_size=1), st.lists(st.integers(101, 200), unique=True, min_size=1))
def test_tree_distance_none_for_disjoint_chains(chain_a: list[int], chain_b: list[int]) -> None:
    assert tree_distance(chain_a, chain_b) is None
    assert tree_distance(chain_b, chain_a) is None


@given(tree_and_two_nodes())
def test_tree_distance_ancestor_is_its_depth_difference(case: tuple[dict[int, int | None], int, int]) -> None:
    tree, a, _b = case
    chain = chain_of(tree, a)
    for steps, ancestor in enumerate(chain):
        assert tree_distance(chain, chain_of(tree, ancestor)) == steps


def test_tree_distance_examples() -> None:
    assert tree_distance([3, 2, 1], [4, 2, 1]) == 2
    assert tree_distance([3, 2, 1], [1]) == 2
    assert tree_distance([], [1]) is None
    assert tree_distance([], []) is None


# --- distance_weighted_score ----------------------------------------------------------------------------


@given(distances, max_distances)
def test_distance_score_is_in_unit_interval(distance: int | None, max_distance: int) -> None:
    assert 0.0 <= distance_weighted_score(distance, max_distance) <= 1.0


@given(st.integers(0, 50), st.integers(0, 50), max_distances)
def test_distance_score_is_monotone_non_increasing(d1: int, d2: int, max_distance: int) -> None:
    near, far = min(d1, d2), max(d1, d2)
    assert distance_weighted_score(near, max_distance) >= distance_weighted_score(far, max_distance)


@given(max_distances)
def test_distance_score_endpoints(max_distance: int) -> None:
    assert distance_weighted_score(0, max_distance) == 1.0
    assert distance_weighted_score(None, max_distance) == 0.0
    for distance in range(max_distance, max_distance + 5):
        assert distance_weighted_score(distance, max_distance) == 0.0
    for distance in range(1, max_distance):
        assert 0.0 < distance_weighted_score(distance, max_distance) < 1.0


def test_distance_score_defaults_and_linearity() -> None:
    assert DEFAULT_MAX_DISTANCE == 6
    assert distance_weighted_score(3) == 0.5
    assert distance_weighted_score(2) == pytest.approx(2 / 3)  # E11.21 vs E11.9: a near miss
    assert distance_weighted_score(6) == 0.0
    assert [distance_weighted_score(d, 4) for d in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]


# --- set_coverage / over_inclusion_penalty -------------------------------------------------------------------


@given(st.lists(unit, max_size=30))
def test_coverage_and_penalty_bounds(scores: list[float]) -> None:
    coverage = set_coverage(scores, len(scores))
    penalty = over_inclusion_penalty(scores, len(scores))
    assert 0.0 <= coverage <= 1.0
    assert 0.0 <= penalty <= 1.0
    if scores:
        assert coverage == pytest.approx(sum(scores) / len(scores))
        assert penalty == pytest.approx(1.0 - coverage)


def test_vacuous_cases() -> None:
    assert set_coverage([], 0) == 1.0
    assert over_inclusion_penalty([], 0) == 0.0


@given(st.lists(unit, max_size=10), st.integers(0, 12))
def test_length_mismatch_is_a_value_error(scores: list[float], n: int) -> None:
    assume(n != len(scores))
    with pytest.raises(ValueError):
        set_coverage(scores, n)
    with pytest.raises(ValueError):
        over_inclusion_penalty(scores, n)


def test_examples() -> None:
    assert set_coverage([1.0, 0.5], 2) == 0.75
    assert over_inclusion_penalty([1.0, 0.5], 2) == 0.25
    assert over_inclusion_penalty([0.0, 0.0, 0.0], 3) == 1.0


# --- hierarchical_score -------------------------------------------------------------------------------------


@given(unit, unit)
def test_hierarchical_score_is_a_harmonic_mean(coverage: float, penalty: float) -> None:
    precision = 1.0 - penalty
    score = hierarchical_score(coverage, penalty)
    assert 0.0 <= score <= 1.0
    low, high = min(coverage, precision), max(coverage, precision)
    assert score <= 2 * low + 1e-12
    assert low - 1e-12 <= score <= high + 1e-12
    assert score <= (coverage + precision) / 2 + 1e-12  # harmonic <= arithmetic
    if coverage + precision > 0:
        assert score == pytest.approx(2 * coverage * precision / (coverage + precision))
    assert score == pytest.approx(hierarchical_score(precision, 1.0 - coverage))  # symmetric in the two axes


@given(unit)
def test_hierarchical_score_equals_the_value_when_both_equal(value: float) -> None:
    assert hierarchical_score(value, 1.0 - value) == pytest.approx(value)


@given(unit)
def test_hierarchical_score_is_zero_when_either_axis_is_zero(value: float) -> None:
    assert hierarchical_score(0.0, 1.0 - value) == 0.0
    assert hierarchical_score(value, 1.0) == 0.0


def test_hierarchical_score_examples() -> None:
    assert hierarchical_score(1.0, 0.0) == 1.0
    assert hierarchical_score(0.0, 1.0) == 0.0
    assert hierarchical_score(1.0, 0.5) == pytest.approx(2 / 3)


# --- exact_match_scores -------------------------------------------------------------------------------------

codes = st.lists(st.sampled_from([f"C{i}" for i in range(12)]), max_size=12)


@given(codes, codes)
def test_exact_match_scores_are_set_overlap(predicted: list[str], truth: list[str]) -> None:
    precision, recall, f1 = exact_match_scores(predicted, truth)
    for value in (precision, recall, f1):
        assert 0.0 <= value <= 1.0
    hits = len(set(predicted) & set(truth))
    if predicted:
        assert precision == pytest.approx(hits / len(set(predicted)))
    if truth:
        assert recall == pytest.approx(hits / len(set(truth)))
    if precision + recall > 0:
        assert f1 == pytest.approx(2 * precision * recall / (precision + recall))
    else:
        assert f1 == 0.0
    assert exact_match_scores(truth, predicted) == pytest.approx((recall, precision, f1))


def test_exact_match_examples() -> None:
    assert exact_match_scores(["A", "B"], ["B", "C"]) == (0.5, 0.5, 0.5)
    assert exact_match_scores(["A"], ["A"]) == (1.0, 1.0, 1.0)
    assert exact_match_scores(["A"], ["B"]) == (0.0, 0.0, 0.0)
    assert exact_match_scores([], []) == (1.0, 1.0, 1.0)
    assert exact_match_scores([], ["A"]) == (1.0, 0.0, 0.0)
    assert exact_match_scores(["A"], []) == (0.0, 1.0, 0.0)
    assert exact_match_scores(["A", "A", "B"], ["A"]) == (0.5, 1.0, pytest.approx(2 / 3))


# --- purity ------------------------------------------------------------------------------------------------


def test_metrics_module_imports_no_database() -> None:
    tree = ast.parse(inspect.getsource(metrics))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert imported <= {"__future__", "collections.abc", "math", "typing", "dataclasses", "statistics"}, imported


def test_importing_metrics_loads_no_database_module() -> None:
    code = "import sys, phenoforge.eval.metrics; print(sorted(m for m in sys.modules if m.startswith(('duckdb', 'sqlite3', 'phenoforge.engine'))))"  # noqa: E501
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
