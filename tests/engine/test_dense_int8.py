"""The dense index's int8 search copy: written with the index, checked like it, equal to the exact scan."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.dense import DenseRetriever, dense_index_status, ensure_dense_index, load_dense_if_ready
from phenoforge.engine.dense import retriever as dense_retriever
from phenoforge.engine.dense import store as dense_store
from tests.engine.fake_embedder import FakeEmbedder
from tests.fixture_vocab import build_fixture_vocab

QUERIES = ["heart failure", "type 2 diabetes with kidney complications", "asthma", "fracture of femur", "sepsis"]


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "dense"


@pytest.fixture
def built(fixture_con: duckdb.DuckDBPyConnection, index_dir: Path) -> DenseRetriever:
    return ensure_dense_index(fixture_con, FakeEmbedder(), index_dir)


def _manifest(index_dir: Path) -> dict:
    return json.loads((index_dir / "manifest.json").read_text())


def _write_manifest(index_dir: Path, manifest: dict) -> None:
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


def test_build_writes_an_int8_copy_that_matches_the_vectors(built: DenseRetriever, index_dir: Path) -> None:
    manifest = _manifest(index_dir)
    coarse = np.load(index_dir / manifest["coarse_file"])
    vectors = np.load(index_dir / manifest["vectors_file"])
    scales = np.asarray(manifest["coarse_scales"], dtype=np.float32)
    assert coarse.dtype == np.int8 and coarse.shape == (manifest["dim"], manifest["count"])
    assert manifest["coarse_kind"] == dense_store.COARSE_KIND
    # each entry is the vector's value rounded to a 127th of its dimension's scale
    assert np.abs(coarse.T * scales / 127 - vectors).max() <= scales.max() / 127 / 2 + 1e-6
    assert built.status.search == "int8+rescore"


def test_int8_scan_gives_the_exact_rankings(built: DenseRetriever, monkeypatch: pytest.MonkeyPatch) -> None:
    assert built._vectors is not None
    monkeypatch.setattr(dense_retriever, "COARSE_CANDIDATES", 12)
    assert len(built._vectors) > 12  # so the int8 scan, not the exact one, proposes the candidates
    queries = built._query_vectors(QUERIES)
    built._top_many(queries[:1], 5)  # a process's first search scans exactly (no session to open)
    assert built._coarse_scan is None
    through_int8 = built._top_many(queries, 5)
    assert built._coarse_scan is not None
    exact = built._top_many(queries, 5, exact=True)
    for (rows, scores), (exact_rows, exact_scores) in zip(through_int8, exact, strict=True):
        assert rows.tolist() == exact_rows.tolist()
        assert np.allclose(scores, exact_scores)  # re-scored in fp32: the exact cosines
    assert built.rankings(QUERIES, 5) == [built.ranking(query, 5) for query in QUERIES]


def test_int8_scan_is_prefix_stable(built: DenseRetriever, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense_retriever, "COARSE_CANDIDATES", 12)
    deep = built.ranking("heart failure", 12)
    for n in (1, 3, 7):
        assert built.ranking("heart failure", n) == deep[:n]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-50])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "cause"), [(_truncate, "truncated"), (_flip, "checksum"), (Path.unlink, "missing_file")]
)
def test_damaged_int8_copy_is_corrupt_and_rebuilt(built: DenseRetriever, index_dir: Path, damage, cause: str) -> None:
    damage(index_dir / _manifest(index_dir)["coarse_file"])
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == [cause]
    assert load_dense_if_ready(built.con, index_dir, FakeEmbedder()) is None
    fake = FakeEmbedder()
    assert ensure_dense_index(built.con, fake, index_dir).is_ready and fake.calls > 0
    assert len(list(index_dir.glob("coarse-*.npy"))) == 1


def test_int8_copy_of_another_shape_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    manifest = _manifest(index_dir)
    path = index_dir / manifest["coarse_file"]
    np.save(path, np.zeros((manifest["dim"], manifest["count"] - 1), np.int8))
    manifest["coarse_sha256"] = dense_store._sha256(path)
    _write_manifest(index_dir, manifest)
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["shape"]


@pytest.mark.parametrize("scales", [None, [1.0, 2.0], "zeros"])
def test_bad_int8_scales_are_corrupt(built: DenseRetriever, index_dir: Path, scales: object) -> None:
    manifest = _manifest(index_dir)
    manifest["coarse_scales"] = [0.0] * manifest["dim"] if scales == "zeros" else scales
    _write_manifest(index_dir, manifest)
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["manifest"]


def test_index_without_int8_copy_is_ready_and_gains_one_without_re_embedding(
    built: DenseRetriever, index_dir: Path
) -> None:
    manifest = _manifest(index_dir)
    (index_dir / manifest["coarse_file"]).unlink()
    for field in ("coarse_file", "coarse_sha256", "coarse_kind", "coarse_scales"):
        manifest.pop(field)
    _write_manifest(index_dir, manifest)
    older = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert older.is_ready and older.status.search == "exact" and older._coarse is None
    expected = older.rankings(QUERIES, 5)
    fake = FakeEmbedder()
    upgraded = ensure_dense_index(built.con, fake, index_dir)
    assert fake.calls == 0  # the copy comes from the stored vectors, not from the model
    after = _manifest(index_dir)
    assert after["coarse_file"] and (index_dir / after["coarse_file"]).is_file()
    assert after["vectors_file"] == manifest["vectors_file"] and after["built_at"] == manifest["built_at"]
    assert upgraded.status.search == "int8+rescore" and upgraded._coarse is not None
    assert upgraded.rankings(QUERIES, 5) == expected


def test_stale_index_is_rebuilt_not_given_an_int8_copy(built: DenseRetriever, index_dir: Path, tmp_path: Path) -> None:
    other = duckdb.connect(str(build_fixture_vocab(tmp_path / "other.duckdb")), read_only=True)
    try:
        assert dense_index_status(other, index_dir).causes == ["vocabulary_build"]
        stale = DenseRetriever(other, FakeEmbedder(), index_dir)
        assert not stale.add_int8_copy() and not stale.is_ready
        fake = FakeEmbedder()
        rebuilt = ensure_dense_index(other, fake, index_dir)
        assert fake.calls > 0 and rebuilt.status.search == "int8+rescore"
    finally:
        other.close()
