"""The Athena loader: what lands in which table, and how bad input fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from phenoforge.athena.loader import AthenaLoadReport, load_athena, read_header
from phenoforge.config import vocab_db_path
from phenoforge.engine.codes import code_key, dotted
from phenoforge.engine.db import connect, ensure_vocabulary, read_metadata, vocabulary_info
from phenoforge.engine.expansion import ancestor_chain_ids, expand_descendants, lookup
from phenoforge.errors import VocabularyError
from tests.athena.athena_fixture import (
    ICD_CONCEPTS,
    N_GROUPER_CODES,
    SNOMED_CONCEPTS,
    write_athena_fixture,
)


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple:
    rows = con.execute(sql, params or []).fetchall()
    assert len(rows) == 1, rows
    return rows[0]


def _id(con: duckdb.DuckDBPyConnection, code: str) -> int:
    return int(_one(con, "SELECT concept_id FROM concept WHERE vocabulary_id = 'ICD10CM' AND code = ?", [code])[0])


def test_report_counts(athena_load: tuple[Path, AthenaLoadReport]) -> None:
    _path, report = athena_load
    valid_icd = sum(1 for row in ICD_CONCEPTS if not row[4]) + N_GROUPER_CODES
    valid_snomed = sum(1 for row in SNOMED_CONCEPTS if not row[6])
    assert report.n_icd10cm_concepts == valid_icd
    assert report.n_snomed_concepts == valid_snomed
    assert report.n_invalid_skipped == 2  # E11.1 and the SNOMED 'type 2 in obese'
    assert report.n_concept_rows_considered == len(ICD_CONCEPTS) + N_GROUPER_CODES + len(SNOMED_CONCEPTS)
    assert report.n_maps_to_dropped == 1  # Z13.1 -> a LOINC concept, not loaded
    assert report.n_is_a_edges == sum(1 for row in ICD_CONCEPTS if row[5] and not row[4]) + N_GROUPER_CODES
    assert report.counts_by_kind["chapter"] == 1 and report.counts_by_kind["block"] == 1
    assert report.counts_by_kind["extension"] == 1
    assert report.vocabulary_release.startswith("Athena v5.0 30-AUG-24")
    assert "ICD10CM FY2024" in report.vocabulary_release
    assert not report.warnings
    assert "ICD-10-CM concepts: 148" in report.summary()


def test_icd_codes_are_dotted_with_code_keys_kinds_and_billable(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    rows = athena_con.execute(
        "SELECT code, code_key, kind, billable FROM concept WHERE vocabulary_id = 'ICD10CM'"
    ).fetchall()
    by_code = {code: (key, kind, billable) for code, key, kind, billable in rows}
    for code, (key, _kind, _billable) in by_code.items():
        assert key == code_key(code)
        if "-" not in code:
            assert code == dotted(key)
    assert by_code["E00-E89"][1:] == ("chapter", False)
    assert by_code["E08-E13"][1:] == ("block", False)
    assert by_code["E11"][1:] == ("category", False)
    assert by_code["E11.2"][1:] == ("subcategory", False)
    assert by_code["E11.21"][1:] == ("subcategory", True)
    assert by_code["E11.9"][1:] == ("subcategory", True)
    assert by_code["J45.909"][1:] == ("subcategory", True)
    assert by_code["S72.001A"] == ("S72001A", "extension", True)


def test_only_valid_icd10cm_and_snomed_concepts(athena_con: duckdb.DuckDBPyConnection) -> None:
    vocabularies = {row[0] for row in athena_con.execute("SELECT DISTINCT vocabulary_id FROM concept").fetchall()}
    assert vocabularies == {"ICD10CM", "SNOMED"}
    ids = {row[0] for row in athena_con.execute("SELECT concept_id FROM concept").fetchall()}
    assert 1040 not in ids  # deprecated SNOMED
    assert 2005 not in ids  # deprecated ICD10CM E11.1
    assert 3000 not in ids and 21600712 not in ids  # LOINC, ATC
    name, standard = _one(athena_con, "SELECT name, standard_concept FROM concept WHERE concept_id = 1090")
    assert name == 'Injury of head "NOS"'  # quotes are data, not quoting
    assert standard == "S"
    assert _one(athena_con, "SELECT standard_concept FROM concept WHERE concept_id = 1060")[0] is None


def test_icd_hierarchy_comes_from_is_a_edges(athena_con: duckdb.DuckDBPyConnection) -> None:
    parents = {
        (child, parent)
        for child, parent in athena_con.execute(
            "SELECT c.code, p.code FROM concept_parent e JOIN concept c ON c.concept_id = "
            "e.child_id JOIN concept p ON p.concept_id = e.parent_id"
        ).fetchall()
    }
    assert ("E11.21", "E11.2") in parents
    assert ("E11", "E08-E13") in parents
    assert ("E08-E13", "E00-E89") in parents
    assert ("S01.05", "S01") in parents
    # SNOMED 'Is a' edges are not ICD-10-CM hierarchy; 'Subsumes' edges are not read at all
    assert not any(parent.isdigit() and len(parent) > 3 for _child, parent in parents)
    assert ("E11", "E11.2") not in parents


def test_expansion_works_unchanged_on_the_load(athena_con: duckdb.DuckDBPyConnection) -> None:
    assert expand_descendants(athena_con, "E11") == ["E11", "E11.2", "E11.21", "E11.22", "E11.9"]
    concept = lookup(athena_con, "e1121")
    assert concept is not None and concept.code == "E11.21" and concept.billable
    assert ancestor_chain_ids(athena_con, "E11.21") == [
        _id(athena_con, code) for code in ("E11.21", "E11.2", "E11", "E08-E13", "E00-E89")
    ]
    info = vocabulary_info(athena_con)
    assert info.source == "athena" and info.n_icd10cm == 148


def test_snomed_descendants_from_concept_ancestor(athena_con: duckdb.DuckDBPyConnection) -> None:
    below = {
        row[0]
        for row in athena_con.execute("SELECT descendant_id FROM concept_ancestor WHERE ancestor_id = 1002").fetchall()
    }
    assert below == {1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1011}
    # the diamond: 1006 is reached through 1003 and 1005, one row
    assert _one(
        athena_con,
        "SELECT min_levels, max_levels FROM concept_ancestor WHERE ancestor_id = 1002 AND descendant_id = 1006",
    ) == (2, 2)
    assert _one(
        athena_con,
        "SELECT min_levels, max_levels FROM concept_ancestor WHERE ancestor_id = 1000 AND descendant_id = 1006",
    ) == (3, 4)
    vocabularies = {
        row[0]
        for row in athena_con.execute(
            "SELECT DISTINCT c.vocabulary_id FROM concept_ancestor a JOIN concept c ON c.concept_id = a.descendant_id"
        ).fetchall()
    }
    assert vocabularies == {"SNOMED"}
    assert (
        _one(athena_con, "SELECT count(*) FROM concept_ancestor WHERE ancestor_id = 21600712 OR descendant_id = 1040")[
            0
        ]
        == 0
    )


def test_maps_to_edges(athena_con: duckdb.DuckDBPyConnection) -> None:
    edges = set(
        athena_con.execute(
            "SELECT s.code, m.target_id FROM concept_map m JOIN concept s ON s.concept_id = m.source_id"
        ).fetchall()
    )
    assert {("E11", 1003), ("E11.9", 1003)} <= edges  # many-to-one
    assert {("E11.22", 1006), ("E11.22", 1012)} <= edges  # one-to-many
    assert ("E11.9", 1004) not in edges  # a deprecated edge
    assert not any(code == "Z13.1" for code, _target in edges)  # target not loaded
    assert all(target >= 1000 and target < 2000 for _code, target in edges)


def test_metadata(athena_con: duckdb.DuckDBPyConnection, athena_dir: Path) -> None:
    metadata = read_metadata(athena_con)
    assert metadata["source"] == "athena"
    assert metadata["schema_version"] == "1"
    assert len(metadata["build_id"]) == 32
    assert metadata["athena_dir"] == str(athena_dir.resolve())
    assert metadata["athena_snomed_version"].startswith("2024-03-01")


def test_release_from_concept_dates_without_vocabulary_file(tmp_path: Path) -> None:
    folder = write_athena_fixture(tmp_path / "athena", vocabulary_file=False)
    report = load_athena(folder, tmp_path / "vocab.duckdb")
    assert report.vocabulary_release == ("Athena download (concepts valid from 2024-04-01 at the latest)")


def test_a_load_is_kept_by_ensure_vocabulary(athena_dir: Path) -> None:
    report = load_athena(athena_dir, vocab_db_path())
    assert ensure_vocabulary() == vocab_db_path()
    con = connect()
    try:
        assert read_metadata(con)["build_id"] == report.build_id
    finally:
        con.close()


def test_reordered_extra_columns_crlf_and_lower_case_names(tmp_path: Path, athena_dir: Path) -> None:
    folder = tmp_path / "athena"
    folder.mkdir()
    lines = (athena_dir / "CONCEPT.csv").read_text().splitlines()
    table = [line.split("\t") for line in lines]
    order = [6, 0, 3, 1, 2, 4, 5, 7, 8, 9]
    rewritten = ["\t".join([row[i] for i in order] + ["extra" if n == 0 else "x"]) for n, row in enumerate(table)]
    (folder / "concept.csv").write_text("\r\n".join(rewritten) + "\r\n")
    for name in ("CONCEPT_RELATIONSHIP.csv", "CONCEPT_ANCESTOR.csv"):
        shutil.copy(athena_dir / name, folder / name.lower())
    report = load_athena(folder, tmp_path / "vocab.duckdb")
    assert report.n_icd10cm_concepts == 148 and report.n_maps_to > 100
    con = duckdb.connect(str(tmp_path / "vocab.duckdb"), read_only=True)
    try:
        assert _one(con, "SELECT name FROM concept WHERE code = 'E11.21'")[0] == (
            "Type 2 diabetes mellitus with diabetic nephropathy"
        )
    finally:
        con.close()


def test_roman_chapter_codes_become_numbers(tmp_path: Path, athena_dir: Path) -> None:
    folder = tmp_path / "athena"
    shutil.copytree(athena_dir, folder)
    concept = folder / "CONCEPT.csv"
    concept.write_text(concept.read_text().replace("\tE00-E89\t", "\tIV\t"))
    load_athena(folder, tmp_path / "vocab.duckdb")
    con = duckdb.connect(str(tmp_path / "vocab.duckdb"), read_only=True)
    try:
        assert _one(con, "SELECT code, code_key, kind FROM concept WHERE concept_id = 2900") == ("4", "4", "chapter")
    finally:
        con.close()


# --- failures: clear messages naming the file; never a half-written database ---


def _broken_copy(tmp_path: Path, athena_dir: Path) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(athena_dir, folder)
    return folder


@pytest.mark.parametrize("table", ["CONCEPT", "CONCEPT_RELATIONSHIP", "CONCEPT_ANCESTOR"])
def test_missing_table_file(tmp_path: Path, athena_dir: Path, table: str) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    (folder / f"{table}.csv").unlink()
    with pytest.raises(VocabularyError, match=f"missing {table}.csv"):
        load_athena(folder, tmp_path / "vocab.duckdb")
    assert not (tmp_path / "vocab.duckdb").exists()


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="not a directory"):
        load_athena(tmp_path / "nowhere", tmp_path / "vocab.duckdb")


def test_comma_delimited_file(tmp_path: Path, athena_dir: Path) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    path = folder / "CONCEPT_ANCESTOR.csv"
    path.write_text(path.read_text().replace("\t", ","))
    with pytest.raises(
        VocabularyError,
        match=r"CONCEPT_ANCESTOR\.csv: Athena files are "
        r"tab-delimited, but it looks ','-delimited",
    ):
        load_athena(folder, tmp_path / "vocab.duckdb")


def test_missing_column(tmp_path: Path, athena_dir: Path) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    path = folder / "CONCEPT_RELATIONSHIP.csv"
    path.write_text(path.read_text().replace("relationship_id", "rel_id", 1))
    with pytest.raises(VocabularyError, match=r"CONCEPT_RELATIONSHIP\.csv: missing column\(s\) relationship_id"):
        load_athena(folder, tmp_path / "vocab.duckdb")


def test_empty_file(tmp_path: Path, athena_dir: Path) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    (folder / "CONCEPT.csv").write_text("")
    with pytest.raises(VocabularyError, match=r"CONCEPT\.csv: empty file"):
        load_athena(folder, tmp_path / "vocab.duckdb")


@pytest.mark.parametrize("bad_row", ["notanumber\t1000\t1\t1", "1002\t1003\t1"])
def test_malformed_row_fails_and_keeps_the_old_database(tmp_path: Path, athena_dir: Path, bad_row: str) -> None:
    db_path = tmp_path / "vocab.duckdb"
    old = load_athena(athena_dir, db_path)
    folder = _broken_copy(tmp_path, athena_dir)
    path = folder / "CONCEPT_ANCESTOR.csv"
    path.write_text(path.read_text() + bad_row + "\n")
    with pytest.raises(VocabularyError, match=r"CONCEPT_ANCESTOR\.csv: malformed Athena file"):
        load_athena(folder, db_path)
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        assert read_metadata(con)["build_id"] == old.build_id
    finally:
        con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "vocab.duckdb"]


def test_out_of_memory_is_not_called_malformed(tmp_path: Path, athena_dir: Path) -> None:
    with pytest.raises(
        VocabularyError,
        match=r"CONCEPT\.csv: ran out of memory loading it "
        r"with memory_limit=1MB.*PHENOFORGE_ATHENA",
    ):
        load_athena(athena_dir, tmp_path / "vocab.duckdb", memory_limit="1MB")
    assert list(tmp_path.iterdir()) == []


def test_memory_limit_from_the_environment(tmp_path: Path, athena_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHENOFORGE_ATHENA_MEMORY_LIMIT", "lots")
    with pytest.raises(VocabularyError, match="memory limit 'lots' is not a size"):
        load_athena(athena_dir, tmp_path / "vocab.duckdb")
    monkeypatch.setenv("PHENOFORGE_ATHENA_MEMORY_LIMIT", "1MB")
    with pytest.raises(VocabularyError, match="ran out of memory"):
        load_athena(athena_dir, tmp_path / "vocab.duckdb")


def test_no_icd10cm_concepts(tmp_path: Path, athena_dir: Path) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    path = folder / "CONCEPT.csv"
    path.write_text(path.read_text().replace("\tICD10CM\t", "\tICD9CM\t"))
    with pytest.raises(VocabularyError, match="no valid ICD10CM concepts"):
        load_athena(folder, tmp_path / "vocab.duckdb")
    assert not (tmp_path / "vocab.duckdb").exists()


def test_no_snomed_is_a_warning(tmp_path: Path, athena_dir: Path) -> None:
    folder = _broken_copy(tmp_path, athena_dir)
    path = folder / "CONCEPT.csv"
    path.write_text(path.read_text().replace("\tSNOMED\t", "\tSNOMED-old\t"))
    report = load_athena(folder, tmp_path / "vocab.duckdb")
    assert report.n_snomed_concepts == 0 and report.n_ancestor_rows == 0
    assert any("no valid SNOMED concepts" in warning for warning in report.warnings)


def test_header_check_reads_names_case_insensitively(tmp_path: Path) -> None:
    path = tmp_path / "CONCEPT_ANCESTOR.csv"
    path.write_text(
        "\ufeffANCESTOR_CONCEPT_ID\tDESCENDANT_CONCEPT_ID\tMIN_LEVELS_OF_SEPARATION\t"
        "MAX_LEVELS_OF_SEPARATION\r\n1\t1\t0\t0\r\n"
    )
    assert read_header(path, "CONCEPT_ANCESTOR")[0] == "ancestor_concept_id"


def test_cli_build_athena(athena_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from phenoforge.cli import main

    code = main(["build", "--athena", str(athena_dir), "--no-dense", "--skip-libraries", "--quiet"])
    assert code == 0
    out = capsys.readouterr().out
    assert "148" in out
    con = duckdb.connect(str(vocab_db_path()), read_only=True)
    try:
        assert read_metadata(con)["source"] == "athena"
    finally:
        con.close()


def test_table_files_are_never_read_whole_into_python(
    tmp_path: Path, athena_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the header line goes through Python; the rows go through DuckDB's reader."""
    folder = athena_dir.resolve()
    real_open = Path.open
    reads: list[str] = []

    def guarded_open(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        handle = real_open(self, *args, **kwargs)
        if self.resolve().parent != folder:
            return handle
        original_readline = handle.readline

        def readline(limit: int = -1) -> str:
            assert 0 < limit <= 65536, "an unbounded readline could read a whole file"
            reads.append(self.name)
            return original_readline(limit)

        def refuse(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
            raise AssertionError(f"{self.name} read whole into Python")

        handle.readline = readline  # type: ignore[method-assign]
        handle.read = refuse  # type: ignore[method-assign]
        handle.readlines = refuse  # type: ignore[method-assign]
        return handle

    def refuse_whole(self: Path, *_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        if self.resolve().parent == folder:
            raise AssertionError(f"{self.name} read whole into Python")
        return original_read_text(self, *_args, **_kwargs)

    original_read_text = Path.read_text
    monkeypatch.setattr(Path, "open", guarded_open)
    monkeypatch.setattr(Path, "read_text", refuse_whole)
    monkeypatch.setattr(Path, "read_bytes", refuse_whole)
    report = load_athena(athena_dir, tmp_path / "vocab.duckdb")
    assert report.n_icd10cm_concepts == 148
    assert sorted(reads) == ["CONCEPT.csv", "CONCEPT_ANCESTOR.csv", "CONCEPT_RELATIONSHIP.csv", "VOCABULARY.csv"]
