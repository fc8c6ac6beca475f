"""The on-disk BM25 index attacked: odd build ids, truncated files, foreign manifests, read-only or racing writers."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb
import pytest

from phenoforge.config import data_dir
from phenoforge.engine import bm25
from phenoforge.engine.bm25 import BM25Index, document_texts, index_cache_dir, load_index, save_index
from phenoforge.engine.db import build_id

Built = tuple[BM25Index, list[tuple[str, str, str]]]


@pytest.fixture
def built(fixture_con: duckdb.DuckDBPyConnection) -> Built:
    documents = document_texts(fixture_con)
    return BM25Index(documents, build_id(fixture_con)), documents


def _neighbours() -> list[Path]:
    """Folders a careless cache clean-up could take with it."""
    folders = [data_dir() / name for name in ("libraries", "models", "dense")]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "keep.txt").write_text("user data")
    return folders


@pytest.mark.parametrize("build", ["", ".", "..", "../models", "a/b", "/abs/path", "x" * 300])
def test_a_foreign_build_id_never_escapes_the_cache_folder(built: Built, build: str) -> None:
    """A vocabulary database whose build id is empty or a path must not put (or clean) anything outside data/bm25."""
    index, documents = built
    neighbours = _neighbours()
    index.build_id = build
    folder = save_index(index, documents)
    assert all((folder / "keep.txt").is_file() for folder in neighbours), build
    cache_root = (data_dir() / "bm25").resolve()
    assert index_cache_dir(build).resolve().parent == cache_root
    assert folder is not None and folder.resolve().parent == cache_root
    loaded = load_index(build, documents)
    assert loaded is not None and loaded.ranking("heart failure", 5) == index.ranking("heart failure", 5)


@pytest.mark.parametrize("member", ["data.csc.index.npy", "vocab.index.json", "params.index.json"])
def test_a_truncated_member_is_rebuilt_not_used(built: Built, member: str) -> None:
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None and (folder / member).is_file()
    raw = (folder / member).read_bytes()
    (folder / member).write_bytes(raw[: len(raw) // 2])
    assert load_index(index.build_id, documents) is None


def test_a_deleted_member_or_an_extra_file_is_not_used(built: Built) -> None:
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None
    (folder / "stray.npy").write_bytes(b"\x93NUMPY")
    assert load_index(index.build_id, documents) is None
    (folder / "stray.npy").unlink()
    assert load_index(index.build_id, documents) is not None
    (folder / "data.csc.index.npy").unlink()
    assert load_index(index.build_id, documents) is None


@pytest.mark.parametrize("manifest", ["[]", '"text"', "null", "{}", '{"files": 3}', ""])
def test_a_manifest_of_the_wrong_shape_is_not_used(built: Built, manifest: str) -> None:
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None
    (folder / "manifest.json").write_text(manifest)
    assert load_index(index.build_id, documents) is None


def test_a_manifest_copied_from_another_build_is_not_used(fixture_con: duckdb.DuckDBPyConnection, built: Built) -> None:
    """The files and the manifest of build A placed under build B's folder: B's documents differ, so no."""
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None
    other = index_cache_dir("other-build")
    other.mkdir(parents=True)
    for path in folder.iterdir():
        (other / path.name).write_bytes(path.read_bytes())
    assert load_index("other-build", documents) is None
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["vocabulary_build_id"] = "other-build"
    (other / "manifest.json").write_text(json.dumps(manifest))
    changed = documents[:-1]
    assert load_index("other-build", changed) is None


def test_a_read_only_cache_with_a_stale_copy_still_answers(built: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stale copy cannot be removed (read-only folder, simulated: the tests may run as root)."""
    index, documents = built
    folder = save_index(index, documents)
    assert folder is not None
    (folder / "manifest.json").write_text("{}")
    real_rmtree = bm25.shutil.rmtree

    def refuse(path, ignore_errors=False, **kwargs):  # noqa: ANN001, ANN202, FBT002
        if not ignore_errors:
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, ignore_errors=True, **kwargs)

    monkeypatch.setattr(bm25.shutil, "rmtree", refuse)
    assert load_index(index.build_id, documents) is None
    assert save_index(index, documents) is None
    assert (folder / "manifest.json").read_text() == "{}"
    assert [p.name for p in folder.parent.iterdir()] == [folder.name], "the writer's temporary copy was left behind"
    assert index.ranking("asthma", 3)


def test_two_writers_at_once_leave_one_valid_copy(built: Built) -> None:
    index, documents = built
    results: list[Path | None] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            results.append(save_index(index, documents))
        except BaseException as error:  # noqa: BLE001 - the test reports any escape
            errors.append(error)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 4
    loaded = load_index(index.build_id, documents)
    assert loaded is not None and loaded.ranking("diabetes", 5) == index.ranking("diabetes", 5)
    leftovers = [p.name for p in index_cache_dir(index.build_id).parent.iterdir()]
    assert leftovers == [index.build_id]


def test_a_vocabulary_rebuilt_under_the_cache_is_not_served_the_old_index(built: Built) -> None:
    """Same build id, other documents (a database replaced by hand): the digest refuses the old copy."""
    index, documents = built
    assert save_index(index, documents) is not None
    rebuilt = [(code, name, text + " renamed") for code, name, text in documents]
    assert load_index(index.build_id, rebuilt) is None
    fresh = BM25Index(rebuilt, index.build_id)
    assert save_index(fresh, rebuilt) is not None
    loaded = load_index(index.build_id, rebuilt)
    assert loaded is not None and loaded.ranking("renamed", 3) == fresh.ranking("renamed", 3)
