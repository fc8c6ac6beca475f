"""Lookup, ancestor chains and descendant expansion: exact on the fixture and on the real tree."""

from __future__ import annotations

import duckdb
import pytest
import simple_icd_10_cm as icd

from phenoforge.engine.expansion import (
    ancestor_chain_ids,
    expand_ancestors,
    expand_descendants,
    get_hierarchy,
    lookup,
)
from tests.fixture_vocab import FIXTURE_NODES

PARENTS = {code: parents for code, _name, _kind, parents in FIXTURE_NODES}
ORDER = [code for code, *_ in FIXTURE_NODES]


def _codes(con: duckdb.DuckDBPyConnection, ids: list[int]) -> list[str]:
    hierarchy = get_hierarchy(con)
    return [hierarchy.code[i] for i in ids]


def _fixture_ancestors(code: str) -> set[str]:
    found: set[str] = set()
    stack = list(PARENTS[code])
    while stack:
        node = stack.pop()
        if node not in found:
            found.add(node)
            stack.extend(PARENTS[node])
    return found


def _fixture_depths(code: str) -> dict[str, int]:
    """Fewest edges from ``code`` up to each ancestor (breadth-first)."""
    depth = {code: 0}
    frontier = [code]
    while frontier:
        nxt = []
        for node in frontier:
            for parent in PARENTS[node]:
                if parent not in depth:
                    depth[parent] = depth[node] + 1
                    nxt.append(parent)
        frontier = nxt
    return depth


# --- lookup ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("typed", ["E11.22", "E1122", "e11.22", " E11.22 ", "e1122\n"])
def test_lookup_accepts_codes_as_typed(fixture_con: duckdb.DuckDBPyConnection, typed: str) -> None:
    concept = lookup(fixture_con, typed)
    assert concept is not None
    assert concept.code == "E11.22"
    assert concept.name == "Type 2 diabetes mellitus with diabetic chronic kidney disease"
    assert concept.kind == "subcategory" and concept.billable


@pytest.mark.parametrize("unknown", ["E11.99", "Z99", "", "   ", "not a code", "E11.22; DROP TABLE concept"])
def test_lookup_unknown_is_none(fixture_con: duckdb.DuckDBPyConnection, unknown: str) -> None:
    assert lookup(fixture_con, unknown) is None
    assert ancestor_chain_ids(fixture_con, unknown) == []
    assert expand_descendants(fixture_con, unknown) == []
    assert expand_ancestors(fixture_con, unknown) == []


def test_lookup_non_text_is_none(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert lookup(fixture_con, None) is None  # type: ignore[arg-type]


def test_lookup_reports_kind_and_billable(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert lookup(fixture_con, "E11").kind == "category" and not lookup(fixture_con, "E11").billable
    assert lookup(fixture_con, "E08-E13").kind == "block"
    assert lookup(fixture_con, "4").kind == "chapter"
    s72 = lookup(fixture_con, "s72001a")
    assert s72.code == "S72.001A" and s72.kind == "extension" and s72.billable


# --- ancestor chains --------------------------------------------------------------------------------


def test_chain_of_a_7th_character_code_is_exact(fixture_con: duckdb.DuckDBPyConnection) -> None:
    chain = _codes(fixture_con, ancestor_chain_ids(fixture_con, "S72.001A"))
    assert chain == ["S72.001A", "S72.001", "S72.00", "S72.0", "S72", "S70-S79", "19"]
    assert expand_ancestors(fixture_con, "S72.001A") == chain[1:]
    assert expand_ancestors(fixture_con, "S72.001A", include_self=True) == chain


@pytest.mark.parametrize("code", ORDER)
def test_chain_is_self_first_nearest_first_and_complete(fixture_con: duckdb.DuckDBPyConnection, code: str) -> None:
    chain = _codes(fixture_con, ancestor_chain_ids(fixture_con, code))
    assert chain[0] == code
    assert len(chain) == len(set(chain))
    assert set(chain[1:]) == _fixture_ancestors(code)
    depths = _fixture_depths(code)
    assert [depths[node] for node in chain] == sorted(depths[node] for node in chain)
    if chain[1:]:
        assert chain[1] in PARENTS[code]


def test_diamond_chain_reaches_both_roots(fixture_con: duckdb.DuckDBPyConnection) -> None:
    chain = _codes(fixture_con, ancestor_chain_ids(fixture_con, "E11.51"))
    assert set(chain[1:3]) == {"E11.5", "I73.9"}
    assert {"4", "9"} <= set(chain)
    assert chain.index("E11") < chain.index("E08-E13") < chain.index("4")
    assert chain.index("I73") < chain.index("I70-I79") < chain.index("9")


def test_hierarchy_is_shared_per_build(fixture_con: duckdb.DuckDBPyConnection, fixture_db_path) -> None:  # noqa: ANN001
    """A second connection to the same build reuses the in-memory hierarchy: no reload per call."""
    other = duckdb.connect(str(fixture_db_path), read_only=True)
    try:
        assert get_hierarchy(other) is get_hierarchy(fixture_con)
        assert get_hierarchy(fixture_con) is get_hierarchy(fixture_con)
    finally:
        other.close()


# --- descendants -------------------------------------------------------------------------------------


def test_descendants_of_a_category_on_the_fixture(fixture_con: duckdb.DuckDBPyConnection) -> None:
    below = expand_descendants(fixture_con, "E11")
    expected = [c for c in ORDER if c == "E11" or "E11" in _fixture_ancestors(c)]
    assert below == expected
    assert below.count("E11.51") == 1
    assert expand_descendants(fixture_con, "E11", include_self=False) == expected[1:]


def test_descendants_through_the_diamond(fixture_con: duckdb.DuckDBPyConnection) -> None:
    below = expand_descendants(fixture_con, "I73.9")
    assert below[0] == "I73.9" and sorted(below) == ["E11.51", "I73.9"]
    assert "E11.51" in expand_descendants(fixture_con, "9")
    assert "E11.51" in expand_descendants(fixture_con, "4")


def test_descendants_of_a_leaf_is_itself(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert expand_descendants(fixture_con, "e11.21") == ["E11.21"]
    assert expand_descendants(fixture_con, "E11.21", include_self=False) == []


@pytest.mark.parametrize("code", ORDER)
def test_descendants_agree_with_ancestors(fixture_con: duckdb.DuckDBPyConnection, code: str) -> None:
    below = set(expand_descendants(fixture_con, code, include_self=False))
    assert below == {c for c in ORDER if code in _fixture_ancestors(c)}


# --- the real tree --------------------------------------------------------------------------------


def test_real_chain_of_s72_001a(real_con: duckdb.DuckDBPyConnection) -> None:
    chain = _codes(real_con, ancestor_chain_ids(real_con, "S72.001A"))
    assert chain == ["S72.001A", "S72.001", "S72.00", "S72.0", "S72", "S70-S79", "19"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("E11.21", ["E11.21", "E11.2", "E11", "E08-E13", "4"]),
        ("B20", ["B20", "1"]),
        ("I10", ["I10", "I10-I1A", "9"]),
        ("J45.909", ["J45.909", "J45.90", "J45.9", "J45", "J40-J4A", "10"]),
        ("19", ["19"]),
        ("E08-E13", ["E08-E13", "4"]),
    ],
)
def test_real_chains_are_exact(real_con: duckdb.DuckDBPyConnection, code: str, expected: list[str]) -> None:
    assert _codes(real_con, ancestor_chain_ids(real_con, code)) == expected


@pytest.mark.parametrize("code", ["S72.001A", "E11.21", "B20", "C84.1A", "T36.0X1A", "O09.213", "Z00.00"])
def test_real_chains_match_the_package(real_con: duckdb.DuckDBPyConnection, code: str) -> None:
    chain = _codes(real_con, ancestor_chain_ids(real_con, code))
    package = [node for node in icd.get_ancestors(code) if node != code]
    package = list(dict.fromkeys(package))
    assert chain[1:] == package


@pytest.mark.parametrize("code", ["E11", "I50", "S72.0", "C84.1", "A00-A09", "4", "J45", "T36", "B20"])
def test_real_descendants_match_the_package(real_con: duckdb.DuckDBPyConnection, code: str) -> None:
    ours = expand_descendants(real_con, code, include_self=False)
    theirs = set(icd.get_descendants(code))
    assert len(ours) == len(set(ours))
    assert set(ours) == theirs


@pytest.mark.parametrize("typed", ["E1122", "e11.22", " E11.22 "])
def test_real_lookup(real_con: duckdb.DuckDBPyConnection, typed: str) -> None:
    concept = lookup(real_con, typed)
    assert concept is not None and concept.code == "E11.22" and concept.billable


@pytest.mark.parametrize("unknown", ["E11.99", "U99", "XYZ", "E11.2222"])
def test_real_lookup_unknown(real_con: duckdb.DuckDBPyConnection, unknown: str) -> None:
    assert lookup(real_con, unknown) is None


def test_ancestor_of_kind_is_the_nearest_node_of_that_kind_on_the_chain(fixture_con) -> None:  # noqa: ANN001
    """The memoised lookup the set builders call ~500k times per library agrees with a walk up the chain."""
    from phenoforge.engine.expansion import get_hierarchy

    hierarchy = get_hierarchy(fixture_con)
    kinds = set(hierarchy.kind.values())
    assert {"category", "block", "chapter"} <= kinds
    for node in hierarchy.code:
        for kind in kinds:
            walked = next((n for n in hierarchy.chain(node) if hierarchy.kind.get(n) == kind), None)
            assert hierarchy.ancestor_of_kind(node, kind) == walked
            assert hierarchy.ancestor_of_kind(node, kind) == walked  # the memoised answer is the same
    seventh = hierarchy.resolve("S72.001A")
    assert seventh is not None and hierarchy.code[hierarchy.ancestor_of_kind(seventh, "category")] == "S72"
