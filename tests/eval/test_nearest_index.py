"""``NearestIndex`` against the definition: the nearest target by the shortest path through a shared
ancestor, ties to the target listed first, on random trees (where it skips the rest of a chain once
an earlier target is as near) and on the fixture's diamond (where it must not)."""

from __future__ import annotations

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.eval.matching import Nearest, NearestIndex


def _brute_nearest(hierarchy: Hierarchy, targets: list[int], node: int) -> Nearest:
    mine = dict(zip(hierarchy.chain(node), hierarchy.chain_levels(node), strict=True))
    best: tuple[int, int] | None = None
    for order, target in enumerate(dict.fromkeys(targets)):
        up = dict(zip(hierarchy.chain(target), hierarchy.chain_levels(target), strict=True))
        shared = [mine[a] + up[a] for a in mine if a in up]
        if shared and (best is None or (min(shared), order) < best):
            best = (min(shared), order)
    if best is None:
        return Nearest(None, None)
    return Nearest(list(dict.fromkeys(targets))[best[1]], best[0])


def _tree(parent_of: list[int]) -> Hierarchy:
    """Node i+1's parent is ``parent_of[i]`` (a smaller node, so no cycle); node 0 is the root."""
    parents = {child: (parent,) for child, parent in enumerate(parent_of, start=1)}
    children: dict[int, tuple[int, ...]] = {}
    for child, (parent,) in parents.items():
        children[parent] = (*children.get(parent, ()), child)
    nodes = range(len(parent_of) + 1)
    return Hierarchy(
        build_id="tree",
        id_by_key={f"N{n}": n for n in nodes},
        code={n: f"N{n}" for n in nodes},
        name={n: f"node {n}" for n in nodes},
        kind={n: "code" for n in nodes},
        billable={n: True for n in nodes},
        parents=parents,
        children=children,
    )


@st.composite
def trees_and_targets(draw: st.DrawFn) -> tuple[Hierarchy, list[int], list[int]]:
    size = draw(st.integers(1, 25))
    parent_of = [draw(st.integers(0, child - 1)) for child in range(1, size + 1)]
    nodes = st.integers(0, size)
    return _tree(parent_of), draw(st.lists(nodes, max_size=8)), draw(st.lists(nodes, min_size=1, max_size=8))


@settings(max_examples=300)
@given(case=trees_and_targets())
def test_nearest_on_a_tree_equals_the_definition(case: tuple[Hierarchy, list[int], list[int]]) -> None:
    hierarchy, targets, queries = case
    assert hierarchy.is_tree
    index = NearestIndex(hierarchy, targets)
    for node in queries:
        assert index.nearest(node) == _brute_nearest(hierarchy, targets, node)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_nearest_through_the_diamond_equals_the_definition(
    fixture_con: duckdb.DuckDBPyConnection, data: st.DataObject
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    assert not hierarchy.is_tree  # E11.51 has two parents
    nodes = sorted(hierarchy.code)
    targets = data.draw(st.lists(st.sampled_from(nodes), max_size=8))
    index = NearestIndex(hierarchy, targets)
    for node in data.draw(st.lists(st.sampled_from(nodes), min_size=1, max_size=8)):
        assert index.nearest(node) == _brute_nearest(hierarchy, targets, node)


def test_a_second_parent_is_still_reached_after_the_first_is_taken(fixture_con: duckdb.DuckDBPyConnection) -> None:
    """E11.51's first parent E11.5 is nearer to an earlier target; its second, I73.9, is reached only
    through E11.51: stopping the chain at E11.5 (right on a tree) would lose it."""
    hierarchy = get_hierarchy(fixture_con)
    targets = [hierarchy.resolve("E11.5"), hierarchy.resolve("E11.51")]
    nearest = NearestIndex(hierarchy, [t for t in targets if t is not None]).nearest(hierarchy.resolve("I73.9"))
    assert (hierarchy.code.get(nearest.target or -1), nearest.distance) == ("E11.51", 1)
