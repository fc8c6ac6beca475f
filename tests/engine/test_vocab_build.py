"""The vocabulary build: every node of the real release goes in, and the write is atomic.

The atomicity and up-to-date tests run the real ``ensure_vocabulary`` code path with the tree
reader swapped for the fixture rows (labelled as the embedded default), so they take milliseconds;
the counts are checked once against the real build (the session ``real_con``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import simple_icd_10_cm as icd

from phenoforge.config import REPO_ROOT
from phenoforge.engine import vocab_build
from phenoforge.engine.db import build_id, database_state, ensure_vocabulary, read_metadata, vocabulary_info
from phenoforge.engine.vocab_build import (
    ICD_PACKAGE,
    ICD_PACKAGE_VERSION,
    ICD_RELEASE,
    VocabularyRows,
    write_vocabulary,
)
from phenoforge.errors import VocabularyError
from tests.fixture_vocab import FIXTURE_NODES, build_fixture_vocab, fixture_rows


class Interrupted(RuntimeError):
    """Stands in for a crash half-way through a build."""


def _default_rows(version: str = ICD_PACKAGE_VERSION) -> VocabularyRows:
    """The fixture rows labelled as the embedded default, so ensure_vocabulary treats them as its own."""
    rows = fixture_rows()
    rows.metadata = {"source": ICD_PACKAGE, "source_version": version, "vocabulary_release": ICD_RELEASE}
    return rows


@pytest.fixture
def fake_reader(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Replace the 3 s simple-icd-10-cm read with the fixture rows; counts how often a build ran."""
    calls: list[int] = []

    def rows(progress=None) -> VocabularyRows:  # noqa: ANN001
        calls.append(1)
        return _default_rows()

    monkeypatch.setattr(vocab_build, "icd10cm_rows", rows)
    return calls


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".tmp", ".tmp.wal", ".wal")))


def _build_id_at(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return build_id(con)
    finally:
        con.close()


def _interrupt_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(con, extra):  # noqa: ANN001, ANN202
        raise Interrupted("killed while writing metadata")

    monkeypatch.setattr(vocab_build, "write_metadata", boom)


# --- atomic writes ------------------------------------------------------------------------------


def test_interrupted_build_leaves_no_file_and_no_temporaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "vocab.duckdb"
    _interrupt_metadata(monkeypatch)
    with pytest.raises(Interrupted):
        write_vocabulary(target, fixture_rows())
    assert not target.exists()
    assert _leftovers(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_interrupted_insert_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash in the middle of the bulk inserts (after the concept table went in)."""
    real_insert = vocab_build._insert

    def insert(con, table, rows, width):  # noqa: ANN001, ANN202
        if table == "concept_note":
            raise Interrupted("killed while inserting notes")
        return real_insert(con, table, rows, width)

    monkeypatch.setattr(vocab_build, "_insert", insert)
    target = tmp_path / "vocab.duckdb"
    with pytest.raises(Interrupted):
        write_vocabulary(target, fixture_rows())
    assert not target.exists()
    assert _leftovers(tmp_path) == []


def test_existing_good_database_survives_a_failed_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_reader: list[int]
) -> None:
    target = tmp_path / "vocab.duckdb"
    ensure_vocabulary(target)
    before = _build_id_at(target)
    _interrupt_metadata(monkeypatch)
    with pytest.raises(Interrupted):
        ensure_vocabulary(target, force=True)
    assert _build_id_at(target) == before
    assert database_state(target) == "current"
    assert _leftovers(tmp_path) == []
    con = duckdb.connect(str(target), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM concept").fetchall()[0][0] == len(FIXTURE_NODES)
    finally:
        con.close()


def test_write_replaces_an_existing_file_in_one_step(tmp_path: Path) -> None:
    target = tmp_path / "vocab.duckdb"
    write_vocabulary(target, fixture_rows())
    first = _build_id_at(target)
    write_vocabulary(target, fixture_rows())
    assert _build_id_at(target) != first
    assert _leftovers(tmp_path) == []


# --- build on first use, skip when up to date, rebuild when broken ---------------------------------


def test_missing_database_is_built(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "sub" / "vocab.duckdb"
    assert database_state(target) == "missing"
    assert ensure_vocabulary(target) == target
    assert fake_reader == [1]
    assert database_state(target) == "current"


def test_up_to_date_database_is_not_rebuilt(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "vocab.duckdb"
    ensure_vocabulary(target)
    first = _build_id_at(target)
    ensure_vocabulary(target)
    ensure_vocabulary(target)
    assert _build_id_at(target) == first
    assert fake_reader == [1]


def test_force_rebuilds(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "vocab.duckdb"
    ensure_vocabulary(target)
    first = _build_id_at(target)
    ensure_vocabulary(target, force=True)
    assert _build_id_at(target) != first
    assert fake_reader == [1, 1]


@pytest.mark.parametrize(
    "garbage",
    [b"this is not a database\n" * 100, b"\x00" * 4096, bytes(range(256)) * 64, b""],
    ids=["text", "zeros", "bytes", "empty"],
)
def test_corrupt_database_is_rebuilt(tmp_path: Path, fake_reader: list[int], garbage: bytes) -> None:
    target = tmp_path / "vocab.duckdb"
    target.write_bytes(garbage)
    assert database_state(target) == "corrupt"
    ensure_vocabulary(target)
    assert fake_reader == [1]
    assert database_state(target) == "current"
    assert len(_build_id_at(target)) == 32


def test_outdated_default_is_rebuilt(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "vocab.duckdb"
    write_vocabulary(target, _default_rows(version="0.0.1"))
    assert database_state(target) == "outdated"
    old = _build_id_at(target)
    ensure_vocabulary(target)
    assert fake_reader == [1]
    assert _build_id_at(target) != old


def test_fixture_or_athena_source_database_is_never_replaced(tmp_path: Path, fake_reader: list[int]) -> None:
    target = build_fixture_vocab(tmp_path / "vocab.duckdb")
    before = _build_id_at(target)
    for _ in range(2):
        ensure_vocabulary(target)
    assert fake_reader == []
    assert _build_id_at(target) == before
    athena = tmp_path / "athena.duckdb"
    rows = fixture_rows()
    rows.metadata = {"source": "athena", "vocabulary_release": "v5.0 01-MAR-26"}
    write_vocabulary(athena, rows)
    athena_id = _build_id_at(athena)
    ensure_vocabulary(athena)
    assert fake_reader == []
    assert _build_id_at(athena) == athena_id


def test_foreign_database_of_an_older_schema_is_refused_not_replaced(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "vocab.duckdb"
    rows = fixture_rows()
    rows.metadata = {"source": "athena", "schema_version": "0"}
    write_vocabulary(target, rows)
    before = _build_id_at(target)
    assert database_state(target) == "foreign-outdated"
    with pytest.raises(VocabularyError, match="older schema"):
        ensure_vocabulary(target)
    assert _build_id_at(target) == before
    assert fake_reader == []


_HOLD_OPEN = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])  # read-write: holds DuckDB's file lock
print("open", flush=True)
time.sleep(60)
"""


def test_database_in_use_by_a_writer_is_not_replaced(tmp_path: Path, fake_reader: list[int]) -> None:
    target = tmp_path / "vocab.duckdb"
    rows = fixture_rows()
    rows.metadata = {"source": "athena", "vocabulary_release": "v5.0 01-MAR-26"}
    write_vocabulary(target, rows)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_OPEN, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        with contextlib.suppress(VocabularyError):  # refusing with a clear message is fine
            ensure_vocabulary(target)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    con = duckdb.connect(str(target), read_only=True)
    try:
        assert read_metadata(con)["source"] == "athena"
    finally:
        con.close()
    assert fake_reader == []


_BUILDER = """
import sys, time
from pathlib import Path
from phenoforge.engine import vocab_build
from phenoforge.engine.db import connect, build_id
from tests.fixture_vocab import fixture_rows

def rows(progress=None):
    time.sleep(0.5)  # widen the window in which a second builder could start
    built = fixture_rows()
    built.metadata = {"source": vocab_build.ICD_PACKAGE, "source_version": vocab_build.ICD_PACKAGE_VERSION,
                      "vocabulary_release": vocab_build.ICD_RELEASE}
    print("built", flush=True)
    return built

vocab_build.icd10cm_rows = rows
from phenoforge.engine.db import ensure_vocabulary
ensure_vocabulary(Path(sys.argv[1]))
con = connect(Path(sys.argv[1]))
print("id", build_id(con), flush=True)
"""


def test_two_processes_building_at_once_build_once(tmp_path: Path) -> None:
    target = tmp_path / "vocab.duckdb"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILDER, str(target)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    lines = [line for out, _err in outputs for line in out.splitlines()]
    assert lines.count("built") == 1
    ids = {line.split()[1] for line in lines if line.startswith("id ")}
    assert ids == {_build_id_at(target)}
    assert _leftovers(tmp_path) == []


def test_progress_is_reported(tmp_path: Path, fake_reader: list[int]) -> None:
    seen: list[tuple[int, int, str]] = []
    ensure_vocabulary(tmp_path / "vocab.duckdb", progress=lambda d, t, m: seen.append((d, t, m)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert any("vocab.duckdb" in message for _d, _t, message in seen)


# --- the real release ------------------------------------------------------------------------------


def test_real_build_counts(real_con: duckdb.DuckDBPyConnection) -> None:
    info = vocabulary_info(real_con)
    assert info.n_icd10cm == 98_466
    assert info.n_concepts == 98_466
    assert info.n_billable == 74_719
    assert info.counts_by_kind["chapter"] == 22
    merged = [code for code in dict.fromkeys(icd.get_all_codes(True)) if icd.is_block(code) and icd.is_category(code)]
    assert len(merged) == 39
    assert info.counts_by_kind["block"] + len(merged) == 297
    assert sum(info.counts_by_kind.values()) == 98_466
    assert len(set(real_con.execute("SELECT code FROM concept").fetchall())) == 98_466
    assert real_con.execute("SELECT count(DISTINCT concept_id) FROM concept").fetchall()[0][0] == 98_466


def test_real_build_merged_block_categories_hang_off_their_chapter(real_con: duckdb.DuckDBPyConnection) -> None:
    rows = real_con.execute(
        "SELECT c.kind, p.code, p.kind FROM concept c JOIN concept_parent e ON e.child_id = c.concept_id "
        "JOIN concept p ON p.concept_id = e.parent_id WHERE c.code = ?",
        ["B20"],
    ).fetchall()
    assert rows == [("category", "1", "chapter")]
    assert real_con.execute("SELECT count(*) FROM concept WHERE code = 'B20'").fetchall()[0][0] == 1


def test_real_build_tree_shape(real_con: duckdb.DuckDBPyConnection) -> None:
    """Exactly the chapters are roots; every other node has one parent (ICD-10-CM is a tree)."""
    roots = real_con.execute(
        "SELECT kind, count(*) FROM concept c WHERE NOT EXISTS "
        "(SELECT 1 FROM concept_parent p WHERE p.child_id = c.concept_id) GROUP BY kind"
    ).fetchall()
    assert roots == [("chapter", 22)]
    multi = real_con.execute(
        "SELECT count(*) FROM (SELECT child_id FROM concept_parent GROUP BY child_id HAVING count(*) > 1)"
    ).fetchall()[0][0]
    assert multi == 0


def test_real_build_billable_matches_the_package(real_con: duckdb.DuckDBPyConnection) -> None:
    for code in ["E11.9", "E11.21", "I10", "S72.001A", "B20", "J45.909"]:
        rows = real_con.execute("SELECT billable FROM concept WHERE code = ?", [code]).fetchall()
        assert rows == [(True,)], code
    for code in ["E11", "E11.2", "S72.001", "4", "E08-E13"]:
        rows = real_con.execute("SELECT billable FROM concept WHERE code = ?", [code]).fetchall()
        assert rows == [(False,)], code


def test_real_build_keeps_searchable_notes(real_con: duckdb.DuckDBPyConnection) -> None:
    notes = real_con.execute(
        "SELECT n.note_type, n.text FROM concept_note n JOIN concept c USING (concept_id) WHERE c.code = ?",
        ["E11.21"],
    ).fetchall()
    assert any(kind == "inclusion_term" and "Kimmelstiel-Wilson" in text for kind, text in notes)
    kinds = {row[0] for row in real_con.execute("SELECT DISTINCT note_type FROM concept_note").fetchall()}
    assert {"inclusion_term", "includes", "excludes1", "excludes2"} <= kinds


def test_real_build_metadata(real_con: duckdb.DuckDBPyConnection) -> None:
    metadata = read_metadata(real_con)
    assert metadata["vocabulary_release"] == "ICD-10-CM FY2026 (April 2026)"
    assert metadata["source"] == "simple-icd-10-cm"
    assert metadata["source_version"] == "1.5.0"
    assert metadata["built_at"].endswith("+00:00") and metadata["built_at"][:4].isdigit()
    assert len(metadata["build_id"]) == 32 and int(metadata["build_id"], 16) >= 0


def test_real_build_is_current_and_not_rebuilt(real_db_path: Path, real_con: duckdb.DuckDBPyConnection) -> None:
    before = build_id(real_con)
    assert database_state(real_db_path) == "current"
    ensure_vocabulary(real_db_path)
    assert _build_id_at(real_db_path) == before
