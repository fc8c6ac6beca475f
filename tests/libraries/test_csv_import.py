"""Importing a user's CSV: good files, every kind of bad row, and what is left on disk."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import Citation, load_curated_concept_set, load_library
from phenoforge.errors import ImportRowError, LibraryError
from phenoforge.libraries import csv_import
from phenoforge.libraries.csv_import import CsvImportError, LibraryImportWarning, import_library_csv

GOOD_CSV = (
    "\ufeffcohort_id,cohort_name,code,description\n"
    't2dm-kidney,"Type 2 diabetes, kidney",E11.21,Diabetic kidney disease\n'
    't2dm-kidney,"Type 2 diabetes, kidney",e1122,\n'
    't2dm-kidney,"Type 2 diabetes, kidney", E11.29 ,\n'
    't2dm-kidney,"Type 2 diabetes, kidney",E1121,\n'
    "\n"
    "asthma,Asthma,J45.909,\n"
    "asthma,Asthma,J45.99,\n"
)


def test_import_good_csv(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "my cohorts.csv"
    path.write_text(GOOD_CSV, encoding="utf-8")
    dest = tmp_path / "out" / "mine"
    with pytest.warns(LibraryImportWarning) as caught:
        manifest = import_library_csv(fixture_con, path, dest, library_id="mine", name="Mine")
    messages = [str(warning.message) for warning in caught]
    assert any("J45.99" in m for m in messages) and any("repeated" in m for m in messages)
    assert manifest.library_id == "mine" and manifest.name == "Mine"
    assert manifest.stats.n_cohorts == 2
    assert manifest.stats.n_listed_codes == 5
    assert manifest.stats.codes_not_in_vocabulary == ["J45.99"]
    assert manifest.report["codes_not_in_vocabulary_by_cohort"] == {"asthma": ["J45.99"]}
    assert any("repeated" in w for w in manifest.report["warnings"])
    library = load_library(dest)
    assert library.cohort("t2dm-kidney").cohort_name == "Type 2 diabetes, kidney"
    assert library.cohort("t2dm-kidney").description == "Diabetic kidney disease"
    kidney = load_curated_concept_set(fixture_con, dest, "t2dm-kidney")
    assert sorted(kidney.codes) == ["E11.21", "E11.22", "E11.29"]
    asthma = load_curated_concept_set(fixture_con, dest, "asthma")
    assert asthma.codes == ["J45.909"] and asthma.unresolvable == ["J45.99"]
    assert manifest.citation.version.startswith("sha256:")


def test_import_default_dest_and_id(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "My Cohorts!.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n", encoding="utf-8")
    citation = Citation(source="our registry", version="3", licence="CC-BY-4.0")
    manifest = import_library_csv(fixture_con, path, citation=citation)
    from phenoforge.config import libraries_dir

    assert manifest.library_id == "My-Cohorts"
    assert load_library(libraries_dir() / "My-Cohorts").manifest.citation == citation
    assert manifest.report["warnings"] == []


BAD_CASES = [
    ("cohort_id,cohort_name\nx,X\n", 1, "missing column(s) code"),
    ("cohort_id,name,code\nx,X,E11.9\n", 1, "missing column(s) cohort_name"),
    ("cohort_id,cohort_name,code\n,Heart failure,I50.9\n", 2, "empty cohort_id"),
    ("cohort_id,cohort_name,code\nhf,,I50.9\n", 2, "empty cohort_name"),
    ("cohort_id,cohort_name,code\nhf,Heart failure,\n", 2, "empty code"),
    (
        "cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Heart failure,heart failure\n",
        3,
        "'heart failure' is not an ICD-10-CM code",
    ),
    ("cohort_id,cohort_name,code\nhf,Heart failure,12345\n", 2, "is not an ICD-10-CM code"),
    ("cohort_id,cohort_name,code\nhf,Heart failure,I5.09\n", 2, "dot in the wrong place"),
    (
        "cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Cardiac failure,I50.21\n",
        3,
        "named 'Cardiac failure' here but 'Heart failure' on line 2",
    ),
    (
        "cohort_id,cohort_name,code,description\nhf,HF,I50.9,a\nhf,HF,I50.21,b\n",
        3,
        "has description 'b' here but 'a' on line 2",
    ),
    ("cohort_id,cohort_name,code\nhf,Heart, failure,I50.9\n", 2, "4 fields but the header has 3"),
    ("cohort_id,cohort_name,code\nhf\x07,Evil,I50.9\n", 2, "must be printable text"),
    ("cohort_id,cohort_name,code\nHF,Heart failure,I50.9\nhf,Heart failure,I50.21\n", 3, "only in letter case"),
    ("", 1, "the file is empty"),
    ("cohort_id,cohort_name,code\n\n", 2, "no data rows"),
    ("cohort_id,cohort_id,cohort_name,code\nx,x,X,E11.9\n", 1, "more than once"),
    # issue 12 item 12: reported as the open quote, not as the "empty cohort_name" it caused
    ('cohort_id,cohort_name,code\nhf,"Heart failure,I50.9\nasthma,Asthma,J45.909\n', 2, "never closed"),
]


@pytest.mark.parametrize(("content", "line", "message"), BAD_CASES)
def test_import_bad_rows(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path, content: str, line: int, message: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    dest = tmp_path / "dest"
    with pytest.raises(ImportRowError) as caught:
        import_library_csv(fixture_con, path, dest)
    error = caught.value
    assert isinstance(error, CsvImportError)
    assert [p.line for p in error.problems] == [line]
    assert message in error.problems[0].message
    assert f"line {line}: " in str(error) and str(path) in str(error)
    assert not dest.exists()
    # no temporary leftovers ("data" is the test's data directory)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "data"]
    assert [p.name for p in (tmp_path / "data").rglob("*")] == []


def test_import_semicolon_and_quoted_header(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "semi.csv"
    path.write_text(
        '"Cohort_ID";"Cohort_Name";"Code";"extra"\r\nhf;Heart failure;I50.9;x\r\nhf;Heart failure;I5021;y\r\n',
        encoding="utf-8",
    )
    with pytest.warns(LibraryImportWarning, match="ignored column"):
        manifest = import_library_csv(fixture_con, path, tmp_path / "lib")
    assert manifest.stats.n_listed_codes == 2
    assert sorted(load_curated_concept_set(fixture_con, tmp_path / "lib", "hf").codes) == ["I50.21", "I50.9"]


def test_import_name_conflict_after_bad_row(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A row with a bad code still fixes its cohort's name, so a later rename is caught too."""
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,nope\nhf,Cardiac,I50.9\n", encoding="utf-8")
    with pytest.raises(CsvImportError) as caught:
        import_library_csv(fixture_con, path, tmp_path / "lib")
    assert [(p.line, "named 'Cardiac'" in p.message) for p in caught.value.problems] == [(2, False), (3, True)]


@pytest.mark.parametrize(
    ("typed", "ok"),
    [
        ("E11.22", True),
        ("e1122", True),
        (" E11.22 ", True),
        ("QA0.0101", True),
        ("S72.001A", True),
        ("U07.1", True),
        ("nope", False),
        ("XYZ", False),
        ("12345", False),
        ("E11.", False),
        ("E1.122", False),
        ("E11..2", False),
        ("E11-22", False),
        ("E11.2234567", False),
    ],
)
def test_code_problem(typed: str, ok: bool) -> None:
    assert (csv_import._code_problem(typed) is None) is ok


def test_import_not_utf8(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("cohort_id,cohort_name,code\nx,Ménière,H81.0\n".encode("latin-1"))
    with pytest.raises(CsvImportError) as caught:
        import_library_csv(fixture_con, path, tmp_path / "dest")
    assert caught.value.problems[0].line == 2 and "UTF-8" in caught.value.problems[0].message


def test_import_collects_every_problem(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "many.csv"
    path.write_text(
        "cohort_id,cohort_name,code\n"
        "hf,Heart failure,I50.9\n"
        ",Heart failure,I50.21\n"  # 3: empty id
        'hf,"Heart\nfailure",nope\n'  # 4-5: not a code (multi-line field)
        "ok,Fine,E11.9\n"  # 6: fine
        "hf,Cardiac failure,I50.22\n"  # 7: second name
        "bad\x07id,Bad,XYZ\n",  # 8: bad id (a control character) and bad code
        encoding="utf-8",
    )
    with pytest.raises(CsvImportError) as caught:
        import_library_csv(fixture_con, path, tmp_path / "dest")
    assert [p.line for p in caught.value.problems] == [3, 4, 7, 8, 8]
    text = str(caught.value)
    assert "5 problem(s)" in text and "nothing was written" in text


def test_import_failure_leaves_existing_library_untouched(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    good = tmp_path / "good.csv"
    good.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n", encoding="utf-8")
    dest = tmp_path / "libs" / "mine"
    import_library_csv(fixture_con, good, dest)
    snapshot = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    bad = tmp_path / "bad.csv"
    bad.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n,x,E11.9\n", encoding="utf-8")
    with pytest.raises(CsvImportError):
        import_library_csv(fixture_con, bad, dest, overwrite=True)
    assert {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == snapshot
    assert [p.name for p in dest.parent.iterdir() if not p.name.startswith(".libraries")] == ["mine"]


def test_import_refuses_to_overwrite_without_force(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    first = tmp_path / "a.csv"
    first.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n", encoding="utf-8")
    dest = tmp_path / "lib"
    import_library_csv(fixture_con, first, dest)
    second = tmp_path / "b.csv"
    second.write_text("cohort_id,cohort_name,code\nasthma,Asthma,J45.909\n", encoding="utf-8")
    with pytest.raises(LibraryError, match="--force"):
        import_library_csv(fixture_con, second, dest)
    assert load_library(dest).cohort_ids == ["hf"]
    import_library_csv(fixture_con, second, dest, overwrite=True)
    assert load_library(dest).cohort_ids == ["asthma"]


def test_force_keeps_a_library_whose_cohort_file_the_user_rewrote(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """The marker proved only the manifest: a cohort file edited by hand was deleted by ``--force``."""
    first = tmp_path / "a.csv"
    first.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n", encoding="utf-8")
    dest = tmp_path / "lib"
    import_library_csv(fixture_con, first, dest)
    cohort_file = dest / load_library(dest).manifest.cohorts[0].file
    edited = cohort_file.read_text(encoding="utf-8").replace("I50.9", "I50.21")
    cohort_file.write_text(edited, encoding="utf-8")
    second = tmp_path / "b.csv"
    second.write_text("cohort_id,cohort_name,code\nasthma,Asthma,J45.909\n", encoding="utf-8")
    with pytest.raises(LibraryError, match="not as phenoforge wrote them"):
        import_library_csv(fixture_con, second, dest, overwrite=True)
    assert cohort_file.read_text(encoding="utf-8") == edited  # the user's edit is kept
    cohort_file.unlink()  # a removed cohort file is not as written either
    with pytest.raises(LibraryError, match="not as phenoforge wrote them"):
        import_library_csv(fixture_con, second, dest, overwrite=True)


def test_import_refuses_bundled_folders(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n", encoding="utf-8")
    for library_id in ("elixhauser", "cms-hcc-v28", "ohdsi"):
        with pytest.raises(LibraryError, match="bundled library"):
            import_library_csv(fixture_con, path, library_id=library_id, overwrite=True)
    from phenoforge.config import libraries_dir

    assert not libraries_dir().exists() or list(libraries_dir().iterdir()) == []


def test_import_missing_file(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    with pytest.raises(LibraryError, match="no such file"):
        import_library_csv(fixture_con, tmp_path / "nope.csv", tmp_path / "dest")


def test_cohort_ids_from_other_tools_are_accepted(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Issue 8: 'phecode:250.2' was refused although cohort file names are already made safe."""
    path = tmp_path / "phecodes.csv"
    path.write_text("cohort_id,cohort_name,code\nphecode:250.2,Type 2 diabetes,E11.9\n../up,Up,I50.9\n")
    manifest = import_library_csv(fixture_con, path, tmp_path / "lib", library_id="phe", name="Phecodes")
    assert [entry.cohort_id for entry in manifest.cohorts] == ["phecode:250.2", "../up"]
    files = [entry.file for entry in manifest.cohorts]
    assert all(f.startswith("cohorts/") and "/" not in f.removeprefix("cohorts/") and ":" not in f for f in files)
    assert load_curated_concept_set(fixture_con, tmp_path / "lib", "phecode:250.2").codes == ["E11.9"]


def test_a_cohort_name_shared_by_two_ids_is_warned_about_with_its_lines(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """Two ids under one name (say, the same cohort pasted twice under new ids) import, but not silently:
    the benchmark queries both with the same text."""
    path = tmp_path / "twice.csv"
    path.write_text(
        "cohort_id,cohort_name,code\n"
        "hf-1,Heart failure,I50.9\n"
        "asthma,Asthma,J45.909\n"
        "hf-2,heart failure,I50.21\n"
        "hf-1,Heart failure,I50.22\n",
        encoding="utf-8",
    )
    with pytest.warns(LibraryImportWarning) as caught:
        manifest = import_library_csv(fixture_con, path, tmp_path / "lib")
    expected = (
        "cohort name 'Heart failure' is used by 2 cohorts ('hf-1' on line 2, 'hf-2' on line 4): "
        "a benchmark queries each by its name, so they get the same predicted list"
    )
    assert [str(w.message) for w in caught] == [f"twice.csv: {expected}"]
    assert manifest.report["warnings"] == [expected]
    assert manifest.stats.n_cohorts == 3  # kept: a warning, not a refusal


def test_distinct_cohort_names_import_without_a_warning(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "fine.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Heart failure,I50.21\n", encoding="utf-8")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", LibraryImportWarning)
        manifest = import_library_csv(fixture_con, path, tmp_path / "lib")
    assert manifest.report["warnings"] == []


def test_many_cohorts_under_one_name_make_one_short_warning(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    path = tmp_path / "many.csv"
    path.write_text(
        "cohort_id,cohort_name,code\n" + "".join(f"hf-{i},Heart failure,I50.9\n" for i in range(40)), encoding="utf-8"
    )
    with pytest.warns(LibraryImportWarning) as caught:
        manifest = import_library_csv(fixture_con, path, tmp_path / "lib")
    (message,) = manifest.report["warnings"]
    assert message.startswith("cohort name 'Heart failure' is used by 40 cohorts ('hf-0' on line 2, ")
    assert "'hf-4' on line 6, and 35 more)" in message and "hf-5'" not in message
    assert len(caught) == 1
