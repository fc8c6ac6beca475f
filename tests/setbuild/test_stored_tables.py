"""The per-build tables the set builders keep in ``data/models`` instead of recomputing per process:
the features' node table and the typo corrector's word counts. Read back, they give the same values
as computed ones; a corrupt, stale or unwritable file is recomputed (with a logged message), never used."""

from __future__ import annotations

import json
import logging
from collections import Counter

import duckdb
import numpy as np
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import features as features_module
from phenoforge.setbuild import robust
from phenoforge.setbuild.candidates import build_candidates
from phenoforge.setbuild.features import candidate_features
from phenoforge.setbuild.nodes import (
    _TABLE_ARRAYS,
    NodeTableError,
    _HierarchyStats,
    _NodeTable,
    complete_node_table,
    load_node_table,
    node_table_path,
    save_node_table,
    stored_node_table,
)
from tests.setbuild.npz_files import rewrite_npz
from tests.setbuild.test_features_vectorised import CASES


def _same_table(one: _NodeTable, other: _NodeTable) -> None:
    for name in _TABLE_ARRAYS:
        assert getattr(one, name).dtype == getattr(other, name).dtype, name
        assert np.array_equal(getattr(one, name), getattr(other, name)), name
    assert {w: sorted(rows) for w, rows in one.rows_with_word.items()} == {
        w: sorted(rows) for w, rows in other.rows_with_word.items()
    }


def test_the_node_table_is_written_once_and_read_back_equal(hierarchy: Hierarchy) -> None:
    path = node_table_path(hierarchy.build_id)
    assert not path.exists()
    built = stored_node_table(hierarchy, _HierarchyStats(hierarchy))
    assert path.is_file() and built.filled.all()
    read = load_node_table(path, hierarchy, _HierarchyStats(hierarchy))
    assert read.filled.all() and read.worded.all()
    _same_table(built, read)


@pytest.mark.parametrize("case", sorted(CASES))
def test_features_from_a_stored_table_equal_those_filled_on_demand(
    hierarchy: Hierarchy, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lazily filled table (what every process did before) and the stored complete one agree bit for bit."""
    table = build_candidates(hierarchy, CASES[case])
    on_demand = _HierarchyStats(hierarchy)
    on_demand._nodes = _NodeTable(hierarchy, on_demand)
    stored = _HierarchyStats(hierarchy)
    stored._nodes = stored_node_table(hierarchy, stored)
    features = {}
    for name, stats in (("on demand", on_demand), ("stored", stored)):
        monkeypatch.setattr(features_module, "hierarchy_stats", lambda _h, chosen=stats: chosen)
        features[name] = candidate_features(hierarchy, table)
    assert not on_demand._nodes.filled.all()  # filled only where this table reached
    assert features["on demand"].tobytes() == features["stored"].tobytes()


def test_a_corrupt_node_table_is_logged_and_built_again(hierarchy: Hierarchy, caplog: pytest.LogCaptureFixture) -> None:
    path = node_table_path(hierarchy.build_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a numpy archive")
    with pytest.raises(NodeTableError, match="cannot be read"):
        load_node_table(path, hierarchy, _HierarchyStats(hierarchy))
    with caplog.at_level(logging.WARNING, logger="phenoforge.setbuild.features"):
        table = stored_node_table(hierarchy, _HierarchyStats(hierarchy))
    assert "node table unusable, built again" in caplog.text
    _same_table(table, load_node_table(path, hierarchy, _HierarchyStats(hierarchy)))  # replaced by a good one


def test_a_node_table_of_another_build_or_with_bad_rows_is_refused(hierarchy: Hierarchy) -> None:
    path = node_table_path(hierarchy.build_id)
    save_node_table(complete_node_table(hierarchy, _HierarchyStats(hierarchy)), path)
    size = len(_NodeTable(hierarchy, _HierarchyStats(hierarchy)).ids)
    rewrite_npz(path, build_id=np.array("another-build"))
    with pytest.raises(NodeTableError, match="made for vocabulary build another-build"):
        load_node_table(path, hierarchy, _HierarchyStats(hierarchy))
    rewrite_npz(path, build_id=np.array(hierarchy.build_id), parent=np.full(size, size + 5, dtype=np.int64))
    with pytest.raises(NodeTableError, match="row index outside the table"):
        load_node_table(path, hierarchy, _HierarchyStats(hierarchy))
    rewrite_npz(path, parent=np.zeros(size, dtype=np.int64), billable=np.full(size, -1, dtype=np.int64))
    with pytest.raises(NodeTableError, match="incomplete"):
        load_node_table(path, hierarchy, _HierarchyStats(hierarchy))
    rewrite_npz(path, billable=np.zeros(size - 1, dtype=np.int64))
    with pytest.raises(NodeTableError, match="billable is int64"):
        load_node_table(path, hierarchy, _HierarchyStats(hierarchy))


def test_the_node_table_lives_beside_other_builds_tables(hierarchy: Hierarchy) -> None:
    assert hierarchy.build_id in node_table_path(hierarchy.build_id).name
    assert node_table_path("a") != node_table_path("b")


def test_word_counts_are_stored_and_read_back_in_order(fixture_con: duckdb.DuckDBPyConnection) -> None:
    build = "fixture-build"
    counted = robust.count_words(fixture_con)
    first = robust._stored_frequency(fixture_con, build)
    assert first == counted and robust.word_counts_path(build).is_file()
    again = robust._stored_frequency(fixture_con, build)
    # the corrector's tie-break reads the words in this order: the file keeps it
    assert list(again.items()) == list(counted.items())


@pytest.mark.parametrize(
    "content",
    ["{not json", json.dumps({"format": 1, "build_id": "other", "counts": {"x": 1}}), json.dumps([1, 2])],
)
def test_corrupt_or_stale_word_counts_are_counted_again(
    fixture_con: duckdb.DuckDBPyConnection, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    build = "fixture-build"
    path = robust.word_counts_path(build)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="phenoforge.setbuild.robust"):
        frequency = robust._stored_frequency(fixture_con, build)
    assert frequency == robust.count_words(fixture_con)
    assert "counted again" in caplog.text
    assert json.loads(path.read_text(encoding="utf-8"))["counts"] == dict(frequency)


def test_the_trigram_index_is_built_only_for_an_unknown_word() -> None:
    corrector = robust.TypoCorrector(Counter({"diabetes": 50, "heart": 40, "failure": 40}))
    assert corrector.correct("heart failure").corrected == "heart failure"
    assert corrector._trigram_index is None  # every word known: nothing to look up
    assert corrector.correct("haert failure").corrected == "heart failure"
    assert corrector._trigram_index is not None
