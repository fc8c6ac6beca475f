"""Opening the vocabulary: read-only readers, clear errors, and several processes at once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from phenoforge.config import REPO_ROOT, vocab_db_path
from phenoforge.engine import vocab_build
from phenoforge.engine.db import build_id, connect, database_state, ensure_vocabulary, read_metadata, vocabulary_info
from phenoforge.engine.vocab_build import ICD_PACKAGE, ICD_PACKAGE_VERSION, ICD_RELEASE, VocabularyRows
from phenoforge.errors import VocabularyError
from tests.fixture_vocab import FIXTURE_NODES, build_fixture_vocab, fixture_rows


def test_readers_open_read_only(fixture_db_path: Path) -> None:
    con = connect(fixture_db_path)
    try:
        assert con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)
        for statement in (
            "CREATE TABLE scratch (a INTEGER)",
            "DELETE FROM concept",
            "INSERT INTO metadata VALUES ('x', 'y')",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(statement)
        assert con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)
    finally:
        con.close()


def test_connect_to_the_default_path_uses_a_fixture_there_without_rebuilding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(vocab_build, "icd10cm_rows", lambda progress=None: calls.append(1) or fixture_rows())
    path = build_fixture_vocab(vocab_db_path())
    before = duckdb.connect(str(path), read_only=True)
    expected = build_id(before)
    before.close()
    con = connect()
    try:
        assert build_id(con) == expected
        assert read_metadata(con)["source"] == "fixture"
    finally:
        con.close()
    assert calls == []


def test_connect_builds_the_default_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    def rows(progress=None) -> VocabularyRows:  # noqa: ANN001
        built = fixture_rows()
        built.metadata = {
            "source": ICD_PACKAGE,
            "source_version": ICD_PACKAGE_VERSION,
            "vocabulary_release": ICD_RELEASE,
        }
        return built

    monkeypatch.setattr(vocab_build, "icd10cm_rows", rows)
    assert not vocab_db_path().exists()
    con = connect()
    try:
        assert read_metadata(con)["source"] == ICD_PACKAGE
    finally:
        con.close()
    assert database_state(vocab_db_path()) == "current"


def test_corrupt_default_database_is_reported_not_rebuilt_on_connect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 12 item 6: a silent rebuild changed the build id and quietly made the dense index unusable."""
    calls: list[int] = []

    def rows(progress=None) -> VocabularyRows:  # noqa: ANN001
        calls.append(1)
        built = fixture_rows()
        built.metadata = {
            "source": ICD_PACKAGE,
            "source_version": ICD_PACKAGE_VERSION,
            "vocabulary_release": ICD_RELEASE,
        }
        return built

    monkeypatch.setattr(vocab_build, "icd10cm_rows", rows)
    garbage = b"\x00garbage" * 1000
    vocab_db_path().write_bytes(garbage)
    with pytest.raises(VocabularyError) as caught:
        connect()
    message = str(caught.value)
    assert "is corrupt" in message and "dense index must be rebuilt" in message and "build --force" in message
    assert vocab_db_path().read_bytes() == garbage and calls == []
    # `build` is what repairs it
    ensure_vocabulary()
    con = connect()
    try:
        assert con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)
    finally:
        con.close()
    assert calls == [1]


def test_missing_database_elsewhere_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "vocab.duckdb"
    with pytest.raises(VocabularyError, match="python -m phenoforge build"):
        connect(missing)
    assert not missing.exists()


def test_corrupt_database_elsewhere_is_a_clear_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "vocab.duckdb"
    corrupt.write_bytes(b"definitely not duckdb" * 500)
    with pytest.raises(VocabularyError, match="--force"):
        connect(corrupt)


def test_database_without_metadata_is_refused(tmp_path: Path) -> None:
    bare = tmp_path / "bare.duckdb"
    con = duckdb.connect(str(bare))
    con.execute("CREATE TABLE concept (a INTEGER)")
    con.close()
    with pytest.raises(VocabularyError):
        connect(bare)


def test_build_id_missing_is_a_vocabulary_error(tmp_path: Path) -> None:
    path = tmp_path / "no_id.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE metadata (key VARCHAR, value VARCHAR)")
    with pytest.raises(VocabularyError, match="build id"):
        build_id(con)
    con.close()


def test_vocabulary_info_on_the_fixture(fixture_con: duckdb.DuckDBPyConnection, fixture_db_path: Path) -> None:
    info = vocabulary_info(fixture_con)
    kinds = [kind for _c, _n, kind, _p in FIXTURE_NODES]
    assert info.n_icd10cm == len(FIXTURE_NODES)
    assert info.counts_by_kind == {kind: kinds.count(kind) for kind in set(kinds)}
    assert info.source == "fixture"
    assert info.vocabulary_release == "phenoforge test fixture"
    assert info.build_id == build_id(fixture_con)
    assert Path(info.path).resolve() == fixture_db_path.resolve()
    parents = {parent for *_rest, ps in FIXTURE_NODES for parent in ps}
    assert info.n_billable == sum(
        1 for code, _n, kind, _p in FIXTURE_NODES if code not in parents and kind not in ("chapter", "block")
    )


_READER = """
import json, sys
from pathlib import Path
from phenoforge.engine.db import connect
from phenoforge.engine.expansion import ancestor_chain_ids, lookup
con = connect(Path(sys.argv[1]))
total = 0
for _ in range(50):
    total += con.execute("SELECT count(*) FROM concept").fetchall()[0][0]
print(json.dumps({"total": total, "chain": ancestor_chain_ids(con, "S72.001A"),
                  "name": lookup(con, "e11.21").name}))
"""


def test_two_processes_read_at_once(fixture_db_path: Path, fixture_con: duckdb.DuckDBPyConnection) -> None:
    """Two reader processes and this one hold the same file open read-only at the same time."""
    from phenoforge.engine.expansion import ancestor_chain_ids

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _READER, str(fixture_db_path)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    assert fixture_con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)
    outputs = [proc.communicate(timeout=120) for proc in procs]
    expected_chain = ancestor_chain_ids(fixture_con, "S72.001A")
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["total"] == 50 * len(FIXTURE_NODES)
        assert result["chain"] == expected_chain
        assert result["name"] == "Type 2 diabetes mellitus with diabetic nephropathy"
