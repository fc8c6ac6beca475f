"""The distinct-text layout of a composed dense index: written with it, checked like it, and giving
the exact scan's rankings while the int8 scan reads only the distinct rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from phenoforge.engine.dense import DenseRetriever, dense_index_status, ensure_dense_index, load_dense_if_ready
from phenoforge.engine.dense import retriever as dense_retriever
from phenoforge.engine.dense import store as dense_store
from phenoforge.engine.dense import texts as dense_texts
from phenoforge.storage import sha256_file
from tests.engine.dense.conftest import QUERIES, SITES, SUFFIXES, SYNONYM_SITES
from tests.engine.fake_embedder import FakeEmbedder


def _manifest(index_dir: Path) -> dict:
    return json.loads((index_dir / "manifest.json").read_text())


def _write_manifest(index_dir: Path, manifest: dict) -> None:
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


def _layout(retriever: DenseRetriever) -> dense_texts.DistinctLayout:
    assert retriever._distinct is not None
    return retriever._distinct.layout


def test_build_writes_the_layout(built: DenseRetriever, index_dir: Path) -> None:
    manifest = _manifest(index_dir)
    assert manifest["format_version"] == dense_store.FORMAT_VERSION == 3
    assert manifest["distinct_kind"] == dense_store.DISTINCT_KIND and manifest["distinct_max_error"] < 1e-6
    # one distinct row per embedded text: "Asthma" twice is one row, the two synonym stems are extras
    assert manifest["distinct_count"] == manifest["n_texts_embedded"]
    layout = _layout(built)
    assert len(layout.stems) == len(SYNONYM_SITES)
    asthma = [built._codes.index("J45"), built._codes.index("J46")]
    assert layout.row_distinct[asthma[0]] == layout.row_distinct[asthma[1]]
    composed = np.flatnonzero(layout.row_offset >= 0)
    assert len(composed) == len(SITES) * len(SUFFIXES) - 4 * len(SUFFIXES)
    assert len(layout.offsets) == len(SUFFIXES)
    assert layout.max_error(np.asarray(built._vectors)) < 1e-6
    assert built.status.search == "distinct-int8+rescore"


def test_composed_scores_equal_the_stored_vectors_cosines(built: DenseRetriever) -> None:
    layout = _layout(built)
    vectors = np.asarray(built._vectors)
    distinct = layout.distinct_vectors(vectors)
    queries = built._query_vectors(QUERIES)
    composed = np.flatnonzero(layout.row_offset >= 0)
    for query in queries:
        from_layout = (
            distinct[layout.row_distinct[composed]] @ query + layout.offsets[layout.row_offset[composed]] @ query
        ) / (layout.row_norm[composed])
        assert np.allclose(from_layout, vectors[composed] @ query, atol=1e-6)
    # the int8 scan of the distinct rows gives every row's cosine up to the int8 error
    assert built._distinct is not None
    scan = dense_retriever._DistinctScan(built._distinct)
    assert sorted(scan.rows.tolist()) == list(range(len(vectors)))  # every row scored once
    approximate = scan.scores(queries)
    assert approximate.shape == (len(QUERIES), len(vectors))
    assert np.abs(approximate - (queries @ vectors.T)[:, scan.rows]).max() < 0.05


def test_rankings_equal_the_exact_scan(built: DenseRetriever) -> None:
    queries = built._query_vectors(QUERIES)
    assert len(built._codes) > dense_retriever.COARSE_CANDIDATES  # so candidates are proposed, not all rows
    built._top_many(queries[:1], 5)  # a process's first search scans exactly
    through_layout = built._top_many(queries, 8)
    assert built._distinct_scan is not None and built._coarse_scan is None
    exact = built._top_many(queries, 8, exact=True)
    assert sum(len(rows) for rows, _s in exact) == 8 * len(QUERIES)
    for query, (rows, scores), (exact_rows, exact_scores) in zip(queries, through_layout, exact, strict=True):
        assert np.allclose(scores, exact_scores, atol=1e-6)  # re-scored in fp32: the exact cosines
        # the same rows in the same order, except among rows tied with the last one (the bag-of-words
        # fake gives exact ties; which of them is cut depends on the candidates, as in any top-n)
        above = exact_scores > exact_scores[-1] + 1e-6
        assert rows[above].tolist() == exact_rows[above].tolist()
        assert np.allclose(built._vectors[rows] @ query, exact_scores, atol=1e-6)
    deep = built.ranking(QUERIES[0], 10)
    for n in (1, 4, 9):
        assert built.ranking(QUERIES[0], n) == deep[:n]


def test_a_large_block_of_queries_scans_all_rows_with_the_same_rankings(built: DenseRetriever) -> None:
    queries = built._query_vectors(QUERIES * 2)
    assert len(queries) > dense_retriever.DISTINCT_MAX_QUERIES
    built._top_many(queries[:1], 5)  # a process's first search scans exactly
    block = built._top_many(queries, 6)
    assert built._coarse_scan is not None and built._distinct_scan is None
    one_by_one = [built._top_many(query[None, :], 6)[0] for query in queries]
    assert built._distinct_scan is not None
    for (rows, scores), (single_rows, single_scores) in zip(block, one_by_one, strict=True):
        assert np.allclose(scores, single_scores, atol=1e-6)
        above = single_scores > single_scores[-1] + 1e-6
        assert rows[above].tolist() == single_rows[above].tolist()


@pytest.mark.parametrize("size", [30, 5_000, 98_186])
def test_largest_finds_the_argpartition_set(size: int) -> None:
    rng = np.random.default_rng(size)
    for spread in (1.0, 1e-3):
        scores = (rng.standard_normal(size) * spread).astype(np.float32)
        k = min(60, size - 1)
        assert set(dense_retriever._largest(scores, k).tolist()) == set(np.argsort(-scores)[:k].tolist())
    ones = np.ones(98_186, np.float32)  # all tied: any k of them, but k and distinct
    chosen = dense_retriever._largest(ones, 1000)
    assert len(set(chosen.tolist())) == 1000


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-200])


def _flip(path: Path) -> None:
    """One bit of the int8 copy's values, past its zip and array headers."""
    data = bytearray(path.read_bytes())
    data[data.index(b"coarse.npy") + 300] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "cause"), [(_truncate, "truncated"), (_flip, "checksum"), (Path.unlink, "missing_file")]
)
def test_damaged_layout_is_corrupt_and_rebuilt(built: DenseRetriever, index_dir: Path, damage, cause: str) -> None:
    damage(index_dir / _manifest(index_dir)["distinct_file"])
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == [cause]
    assert "rebuild it with `python -m phenoforge build`" in status.message()
    assert load_dense_if_ready(built.con, index_dir, FakeEmbedder()) is None
    fake = FakeEmbedder()
    rebuilt = ensure_dense_index(built.con, fake, index_dir)
    assert rebuilt.is_ready and fake.calls > 0 and rebuilt.status.search == "distinct-int8+rescore"
    assert len(list(index_dir.glob("distinct-*.npz"))) == 1


def _rewrite_layout(index_dir: Path, **changes: np.ndarray) -> None:
    """Replace arrays of the layout file and re-sign it, so only the shape checks can object."""
    manifest = _manifest(index_dir)
    path = index_dir / manifest["distinct_file"]
    with np.load(path) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays.update(changes)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    manifest["distinct_sha256"] = sha256_file(path)
    _write_manifest(index_dir, manifest)


def test_layout_of_another_shape_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    count = _manifest(index_dir)["count"]
    _rewrite_layout(index_dir, row_norm=np.ones(count - 1, np.float32))
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["shape"] and "row_norm" in (status.reason or "")


def test_layout_pointing_outside_itself_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    layout = _layout(built)
    broken = layout.row_distinct.copy()
    broken[0] = len(layout.distinct_row) + 5
    _rewrite_layout(index_dir, row_distinct=broken)
    retriever = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert not retriever.is_ready and retriever.status.causes == ["shape"]
    assert "outside the distinct rows" in (retriever.status.reason or "")


@pytest.mark.parametrize("version", [1, 4])
def test_manifest_of_another_format_is_stale(built: DenseRetriever, index_dir: Path, version: int) -> None:
    manifest = _manifest(index_dir)
    manifest["format_version"] = version
    _write_manifest(index_dir, manifest)
    status = dense_index_status(built.con, index_dir)
    assert status.state == "stale" and status.causes == ["format"]
    assert f"format {version} (this version reads 2-3)" in status.message()
    assert "python -m phenoforge build" in status.message()


@pytest.mark.parametrize(
    ("field", "value", "cause", "words"),
    [
        ("model", "another-model", "model", "model 'another-model'"),
        ("vocabulary_build_id", "0" * 32, "vocabulary_build", "vocabulary build 00000000"),
    ],
)
def test_layout_of_another_model_or_vocabulary_build_is_stale(
    built: DenseRetriever, index_dir: Path, field: str, value: str, cause: str, words: str
) -> None:
    manifest = _manifest(index_dir)
    manifest[field] = value
    _write_manifest(index_dir, manifest)
    stale = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert not stale.is_ready and stale.status.causes == [cause] and words in stale.status.message()
    assert not stale.add_distinct_layout()  # a stale index is rebuilt, never given a layout
    assert _manifest(index_dir)[field] == value


def _as_format_2(index_dir: Path) -> dict:
    """The index as the previous version wrote it: no layout, format 2."""
    manifest = _manifest(index_dir)
    (index_dir / manifest["distinct_file"]).unlink()
    for field in ("distinct_file", "distinct_sha256", "distinct_kind", "distinct_count", "distinct_max_error"):
        manifest.pop(field)
    manifest["format_version"] = 2
    _write_manifest(index_dir, manifest)
    return manifest


def test_format_2_index_is_ready_and_gains_the_layout_embedding_only_extra_stems(
    built: DenseRetriever, index_dir: Path
) -> None:
    expected = built.rankings(QUERIES, 8)
    before = _as_format_2(index_dir)
    older = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert older.is_ready and older.status.search == "int8+rescore" and older._distinct is None
    assert older.rankings(QUERIES, 8) == expected
    fake = FakeEmbedder()
    upgraded = ensure_dense_index(built.con, fake, index_dir)
    assert sorted(fake.texts_seen) == sorted(f"Fracture of {site}" for site in SYNONYM_SITES)
    after = _manifest(index_dir)
    assert after["format_version"] == 3 and after["distinct_max_error"] < 1e-6
    assert after["vectors_file"] == before["vectors_file"] and after["built_at"] == before["built_at"]
    assert upgraded.status.search == "distinct-int8+rescore"
    assert upgraded.rankings(QUERIES, 8) == expected


class _OtherRuntime(FakeEmbedder):
    """Embeds like the index's model but not bit for bit (another runtime or precision)."""

    def __call__(self, texts: list[str]) -> np.ndarray:
        vectors = super().__call__(texts)
        vectors[:, 0] += 0.01
        return vectors


def test_layout_that_misses_the_stored_vectors_is_not_added(built: DenseRetriever, index_dir: Path) -> None:
    before = _as_format_2(index_dir)
    upgraded = ensure_dense_index(built.con, _OtherRuntime(), index_dir)
    assert upgraded.is_ready and upgraded.status.search == "int8+rescore"
    assert _manifest(index_dir) == before and not list(index_dir.glob("distinct-*.npz"))
    with pytest.raises(ValueError, match="misses the stored vectors"):
        layout = _layout(built)
        layout.row_norm[np.flatnonzero(layout.row_offset >= 0)[0]] *= 1.1
        dense_store.add_distinct(index_dir, upgraded.manifest, np.asarray(upgraded._vectors), layout)  # type: ignore[arg-type]
