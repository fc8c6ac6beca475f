"""The BM25 index kept on disk between processes: the same rankings, never a stale or damaged copy."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.engine import bm25
from phenoforge.engine.bm25 import BM25Index, document_texts, get_bm25_index, index_cache_dir, load_index, save_index
from phenoforge.engine.db import build_id

QUERIES = ["diabetes", "heart failure", "asthma uncomplicated", "fracture femur", "kimmelstiel wilson", "zzz"]


@pytest.fixture
def built(fixture_con: duckdb.DuckDBPyConnection) -> tuple[BM25Index, list[tuple[str, str, str]]]:
    documents = document_texts(fixture_con)
    return BM25Index(documents, build_id(fixture_con)), documents


def test_a_stored_index_ranks_exactly_as_a_fresh_one(built: tuple[BM25Index, list[tuple[str, str, str]]]) -> None:
    index, documents = built
    folder = save_index(index, documents)
    assert folder == index_cache_dir(index.build_id) and (folder / "manifest.json").is_file()
    loaded = load_index(index.build_id, documents)
    assert loaded is not None and loaded is not index
    for query in QUERIES:
        assert loaded.ranking(query, len(index)) == index.ranking(query, len(index))
    assert loaded.tokens == index.tokens and loaded.codes == index.codes and loaded.names == index.names


def test_other_documents_or_a_damaged_file_are_not_used(built: tuple[BM25Index, list[tuple[str, str, str]]]) -> None:
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None
    changed = [*documents[:-1], (documents[-1][0], documents[-1][1], documents[-1][2] + " extra words")]
    assert load_index(index.build_id, changed) is None
    assert load_index("another-build", documents) is None
    data = folder / "data.csc.index.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert load_index(index.build_id, documents) is None
    (folder / "manifest.json").write_text("{not json")
    assert load_index(index.build_id, documents) is None


def test_saving_replaces_the_copy_of_an_older_build(built: tuple[BM25Index, list[tuple[str, str, str]]]) -> None:
    index, documents = built
    older = index_cache_dir("an-older-build")
    older.mkdir(parents=True)
    (older / "manifest.json").write_text(json.dumps({"format": 1}))
    assert save_index(index, documents) is not None
    assert not older.exists()
    assert [p.name for p in index_cache_dir(index.build_id).parent.iterdir()] == [index.build_id]


def test_get_index_stores_then_reads_it_back(fixture_con: duckdb.DuckDBPyConnection, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(bm25, "_INDEXES", {})
    first = get_bm25_index(fixture_con)
    assert (index_cache_dir(first.build_id) / "manifest.json").is_file()
    monkeypatch.setattr(bm25, "_INDEXES", {})
    built_again: list[object] = []
    original = BM25Index.__init__

    def spy(self, documents, build="", scorer=None):  # noqa: ANN001, ANN202
        built_again.append(scorer is None)
        original(self, documents, build, scorer)

    monkeypatch.setattr(BM25Index, "__init__", spy)
    second = get_bm25_index(fixture_con)
    assert built_again == [False]  # read back, not tokenised and scored again
    assert second.ranking("heart failure", 10) == first.ranking("heart failure", 10)


def test_an_unwritable_data_dir_still_gives_an_index(
    built: tuple[BM25Index, list[tuple[str, str, str]]],
    monkeypatch,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    index, documents = built
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the folder should be")
    monkeypatch.setattr(bm25, "index_cache_dir", lambda build: blocker / "bm25" / build)
    assert save_index(index, documents) is None
    assert index.ranking("diabetes", 3)
