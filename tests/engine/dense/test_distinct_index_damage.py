"""The distinct-text dense index attacked: damaged npz members, a deleted layout, an upgrade cut short, odd queries."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from phenoforge.engine.dense import DenseRetriever, dense_index_status, ensure_dense_index
from phenoforge.engine.dense import store as dense_store
from phenoforge.storage import sha256_file
from tests.engine.dense.conftest import QUERIES
from tests.engine.dense.test_distinct import _as_format_2, _manifest
from tests.engine.fake_embedder import FakeEmbedder


def _replace_member(path: Path, member: str, payload: bytes) -> None:
    """Rewrite one member of the layout ``.npz`` (the others kept byte for byte)."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    members[member] = payload
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _resign(index_dir: Path) -> None:
    """Make the manifest's checksum agree with a damaged layout file: only the content checks remain."""
    manifest = _manifest(index_dir)
    path = index_dir / manifest["distinct_file"]
    manifest["distinct_sha256"] = sha256_file(path)
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("member", "payload"),
    [
        ("row_norm.npy", b"not an npy file at all"),
        ("row_norm.npy", _npy(np.zeros(1, np.float32))[:-2]),
        ("scales.npy", _npy(np.array(["a"]))),
        ("coarse.npy", b""),
    ],
)
def test_a_garbled_npz_member_even_re_signed_is_corrupt(
    built: DenseRetriever, index_dir: Path, member: str, payload: bytes
) -> None:
    _replace_member(index_dir / _manifest(index_dir)["distinct_file"], member, payload)
    _resign(index_dir)
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt", (member, status)
    assert not DenseRetriever(built.con, FakeEmbedder(), index_dir).is_ready


def test_a_nan_norm_in_a_re_signed_layout_is_corrupt(built: DenseRetriever, index_dir: Path) -> None:
    path = index_dir / _manifest(index_dir)["distinct_file"]
    with np.load(path) as archive:
        norms = np.asarray(archive["row_norm"]).copy()
    norms[3] = np.nan
    _replace_member(path, "row_norm.npy", _npy(norms))
    _resign(index_dir)
    retriever = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert not retriever.is_ready and "norm" in retriever.status.message()


def test_a_deleted_layout_file_the_manifest_still_names_is_rebuilt_to_a_working_index(
    built: DenseRetriever, index_dir: Path
) -> None:
    expected = built.rankings(QUERIES, 8)
    (index_dir / _manifest(index_dir)["distinct_file"]).unlink()
    status = dense_index_status(built.con, index_dir)
    assert status.state == "corrupt" and status.causes == ["missing_file"]
    repaired = ensure_dense_index(built.con, FakeEmbedder(), index_dir)
    assert repaired.is_ready and repaired.status.search == "distinct-int8+rescore"
    assert (index_dir / _manifest(index_dir)["distinct_file"]).is_file()
    assert repaired.rankings(QUERIES, 8) == expected


def test_an_upgrade_cut_between_the_layout_file_and_the_manifest_leaves_the_old_index_working(
    built: DenseRetriever, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash lands after the layout is renamed into place, before the manifest is: the format-2
    manifest stays valid, the half-done layout is removed, and the next start upgrades cleanly."""
    expected = built.rankings(QUERIES, 8)
    before = _as_format_2(index_dir)
    real_replace = os.replace

    def crash_on_manifest(src, dst):  # noqa: ANN001, ANN202
        if Path(dst).name == "manifest.json":
            raise KeyboardInterrupt("killed mid-upgrade")
        return real_replace(src, dst)

    monkeypatch.setattr(dense_store.os, "replace", crash_on_manifest)
    with pytest.raises(KeyboardInterrupt):
        ensure_dense_index(built.con, FakeEmbedder(), index_dir)
    monkeypatch.setattr(dense_store.os, "replace", real_replace)
    assert _manifest(index_dir) == before
    assert not list(index_dir.glob("distinct-*.npz")) and not list(index_dir.glob(".*.tmp"))
    older = DenseRetriever(built.con, FakeEmbedder(), index_dir)
    assert older.is_ready and older.rankings(QUERIES, 8) == expected
    upgraded = ensure_dense_index(built.con, FakeEmbedder(), index_dir)
    assert upgraded.status.search == "distinct-int8+rescore" and upgraded.rankings(QUERIES, 8) == expected


def test_leftovers_of_a_killed_upgrade_are_removed_by_the_next_one(built: DenseRetriever, index_dir: Path) -> None:
    """SIGKILL skips every ``finally``: an orphan layout and a half-written temporary stay on disk."""
    _as_format_2(index_dir)
    (index_dir / "distinct-0123456789ab.npz").write_bytes(b"orphan from a killed upgrade")
    (index_dir / ".distinct-ba9876543210.npz.tmp").write_bytes(b"half-written")
    upgraded = ensure_dense_index(built.con, FakeEmbedder(), index_dir)
    assert upgraded.status.search == "distinct-int8+rescore"
    assert [p.name for p in index_dir.glob("distinct-*.npz")] == [_manifest(index_dir)["distinct_file"]]
    assert not list(index_dir.glob(".distinct-*.tmp"))


@pytest.mark.parametrize("query", ["", "   ", "\t\n", "x" * 20000, "fracture " * 2000, "骨折 du fémur", "\x00"])
def test_odd_queries_answer_a_list_without_raising(built: DenseRetriever, query: str) -> None:
    ranked = built.ranking(query, 5)
    assert isinstance(ranked, list) and len(ranked) <= 5
    assert all(np.isfinite(score) for _code, score in ranked)
    assert built.rankings([query, "fracture of femur sequela"], 5)[1] == built.ranking("fracture of femur sequela", 5)


def test_n_beyond_the_rows_gives_every_row_once_and_n_zero_gives_nothing(built: DenseRetriever) -> None:
    rows = len(built._codes)
    everything = built.ranking("fracture of femur", rows + 50)
    assert len(everything) == rows and len({code for code, _s in everything}) == rows
    assert built.ranking("fracture of femur", 0) == []
    assert built.rankings(["fracture of femur", "asthma"], 0) == [[], []]
    scores = [score for _code, score in everything]
    assert scores == sorted(scores, reverse=True)
