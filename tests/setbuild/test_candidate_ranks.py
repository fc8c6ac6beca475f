"""The candidate table's rank and score tables: the fast path (every code known, each once) gives
exactly what the per-code loop gives, and odd rankings still take the loop."""

from __future__ import annotations

import duckdb
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.setbuild.candidates import _provenance, _ranks, ranked_rows
from tests.fixture_vocab import FIXTURE_NODES

CODES = [code for code, *_ in FIXTURE_NODES]


def _loop(hierarchy: Hierarchy, ranking: list[tuple[str, float]]) -> tuple[dict[int, int], dict[int, float]]:
    """The reference: first occurrence of each resolvable code keeps its rank and score."""
    ranks: dict[int, int] = {}
    scores: dict[int, float] = {}
    for rank, (code, score) in enumerate(ranking, start=1):
        node = hierarchy.resolve(code)
        if node is not None and node not in ranks:
            ranks[node], scores[node] = rank, float(score)
    return ranks, scores


rankings = st.lists(
    st.tuples(st.sampled_from([*CODES, "Q98.111", "e11.9", "E119"]), st.floats(-1, 1, allow_nan=False)), max_size=40
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranking=rankings, distinct=st.booleans())
def test_ranks_equal_the_per_code_loop(
    fixture_con: duckdb.DuckDBPyConnection, ranking: list[tuple[str, float]], distinct: bool
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    if distinct:  # the fast path's case: known codes, each once
        ranking = list({code: (code, score) for code, score in ranking if code in CODES}.values())
    ranked = _ranks(hierarchy, ranking)
    ranks, scores = ranked.rank_dict(), ranked.score_dict()
    expected_ranks, expected_scores = _loop(hierarchy, ranking)
    assert ranks == expected_ranks and list(ranks) == list(expected_ranks)  # same order too
    assert scores == expected_scores and all(type(value) is float for value in scores.values())
    assert ranked.ids.dtype == np.int64 and ranked.ranks.dtype == np.int64 and ranked.scores.dtype == np.float64
    for node in {*expected_ranks, *(hierarchy.resolve(code) for code in CODES)}:  # single lookups agree
        assert ranked.rank_of(node) == expected_ranks.get(node)
        assert ranked.score_of(node, -9.0) == expected_scores.get(node, -9.0)


def test_ranks_of_nothing(fixture_con: duckdb.DuckDBPyConnection) -> None:
    for nothing in (None, [], [("ZZZ.9", 1.0)]):
        ranked = _ranks(get_hierarchy(fixture_con), nothing)
        assert len(ranked) == 0 and ranked.rank_dict() == {} and ranked.score_of(1, 0.5) == 0.5


def _provenance_loop(hierarchy: Hierarchy, ids: list[int], origin: list[int], hit_rank: dict[int, int]) -> list[int]:
    """The reference: the best-ranked hit on each candidate's chain, else the origin as given."""
    out = []
    for node, given_origin in zip(ids, origin, strict=True):
        best = min((hit_rank[a] for a in hierarchy.chain(node) if a in hit_rank), default=None)
        out.append(given_origin if best is None else next(a for a in hierarchy.chain(node) if hit_rank.get(a) == best))
    return out


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    candidates=st.lists(st.sampled_from(CODES), unique=True, max_size=30),
    hits=st.lists(st.sampled_from(CODES), unique=True, max_size=12),
)
def test_provenance_equals_the_per_candidate_loop(
    fixture_con: duckdb.DuckDBPyConnection, candidates: list[str], hits: list[str]
) -> None:
    hierarchy = get_hierarchy(fixture_con)
    ids = [node for node in map(hierarchy.resolve, candidates) if node is not None]
    hit_rank = {node: rank for rank, node in enumerate(map(hierarchy.resolve, hits), start=1) if node is not None}
    origin = [ids[-1]] * len(ids) if ids else []  # what the roll-up gave: kept where no hit is above
    found = _provenance(hierarchy, ids, origin, hit_rank)
    assert found == _provenance_loop(hierarchy, ids, origin, hit_rank)
    assert all(type(node) is int for node in found)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(st.sampled_from(["diabetes", "heart", "failure", "kidney", "asthma", "type", "2"]), max_size=3),
    depth=st.integers(0, 60),
)
def test_rows_of_a_retrievers_code_list_give_the_same_ranking_as_its_codes(
    fixture_con: duckdb.DuckDBPyConnection, words: list[str], depth: int
) -> None:
    """A set builder maps BM25's rows to concept ids in one gather: exactly what ``_ranks`` makes of
    the (code, score) list the same query gives."""
    from phenoforge.engine.bm25 import get_bm25_index

    hierarchy = get_hierarchy(fixture_con)
    index = get_bm25_index(fixture_con)
    query = " ".join(words)
    rows, scores = index.ranking_rows(query, depth)
    via_rows = ranked_rows(hierarchy, rows, scores, index.codes)
    via_codes = _ranks(hierarchy, index.ranking(query, depth))
    assert via_rows is not None
    for name in ("ids", "ranks", "scores"):
        assert np.array_equal(getattr(via_rows, name), getattr(via_codes, name)), name


def test_a_code_list_with_an_unknown_or_repeated_code_is_not_mapped_by_rows(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Then rows are not concept ids one to one: the caller reads the (code, score) list instead."""
    hierarchy = get_hierarchy(fixture_con)
    rows, scores = np.array([0, 1]), np.array([2.0, 1.0])
    assert ranked_rows(hierarchy, rows, scores, ["E11.9", "NOT.A.CODE"]) is None
    assert ranked_rows(hierarchy, rows, scores, ["E11.9", "E11.9"]) is None
    mapped = ranked_rows(hierarchy, rows, scores, ["E11.9", "I50.9"])
    assert mapped is not None and mapped.ids.tolist() == [hierarchy.resolve("E11.9"), hierarchy.resolve("I50.9")]
    assert mapped.ranks.tolist() == [1, 2] and mapped.scores.tolist() == [2.0, 1.0]


def test_a_nan_score_below_the_top_does_not_become_the_tables_top_or_floor(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    """Rankings handed to ``build_set``/``candidate_table`` by a caller may carry a NaN score: it is kept
    for its own code, but the scale every candidate is read on (best and floor of each retriever) comes
    from the scores that are numbers, as it did when the table took max/min of its score dictionaries.
    A NaN top or floor made every agreement NaN, and the rule builders' sets collapsed to one code."""
    from phenoforge.setbuild.assemble import agreement
    from phenoforge.setbuild.candidates import Retrieval, build_candidates

    hierarchy = get_hierarchy(fixture_con)
    nan = float("nan")
    retrieval = Retrieval(
        query="heart failure",
        bm25=[("I50.9", 5.0), ("I50.21", nan), ("I48.0", 1.0)],
        dense=[("I50.21", 0.9), ("I48", nan), ("I50", 0.7), ("J45.909", 0.1)],
    )
    table = build_candidates(hierarchy, retrieval)
    assert (table.top_bm25, table.top_dense, table.floor_dense) == (5.0, 0.9, 0.1)
    assert np.isnan(table.dense.score_of(hierarchy.resolve("I48"), 0.0))  # the code keeps its own score
    for code in ("I50.9", "I48.0"):  # numbers in both rankings (or absent): agreement on the scale
        assert 0.0 < agreement(table, hierarchy.resolve(code)) <= 1.0
