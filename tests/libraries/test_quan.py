"""The Quan 2005 Charlson and Elixhauser libraries: reading the prefix lists and expanding them."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import duckdb
import pytest

from phenoforge.engine.curated import library_group, load_curated_concept_set
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.errors import LibraryError
from phenoforge.libraries import build_bundled_libraries, bundled
from phenoforge.libraries import elixhauser as elixhauser_source
from phenoforge.libraries.quan import (
    QUAN_CHARLSON,
    QUAN_ELIXHAUSER,
    QUAN_VARIANTS,
    PrefixIndex,
    build_quan_source,
    expand_prefix_library,
    read_quan,
    read_quan_charlson,
    read_quan_elixhauser,
)
from tests.engine.conftest import real_con, real_db_path  # noqa: F401 - session fixtures

HEADER = ("index", "category", "icd9_codes", "icd10_codes")
CHARLSON_ROWS = [
    HEADER,
    ("0", "Age", "XXXX|XXXX", "YYYY|YYYY"),
    ("1", "Congestive heart failure", "428", "I50|I43"),
    ("2", "Peripheral vascular disease", "4439", "I739"),
    ("3", "Diabetes without chronic complication", "2500", "E109|E119|E14"),
    ("4", "AIDS/HIV", "042", "B20"),
    ("5", "Any diabetes", "250", "E1"),
]


def write_csv(path: Path, rows: list[tuple[str, ...]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


@pytest.fixture()
def charlson_csv(tmp_path: Path) -> Path:
    return write_csv(tmp_path / "CHARLSON_QUAN.csv", CHARLSON_ROWS)


# ---------------------------------------------------------------------------------------------
# reading


def test_read_quan_keeps_prefixes_and_skips_the_age_row(charlson_csv: Path) -> None:
    source = read_quan(QUAN_CHARLSON, charlson_csv)
    assert source.library_id == "charlson-quan2005" and source.group == "charlson"
    assert [c.cohort_id for c in source.cohorts] == [
        "charlson-congestive-heart-failure",
        "charlson-peripheral-vascular-disease",
        "charlson-diabetes-without-chronic-complication",
        "charlson-aids-hiv",
        "charlson-any-diabetes",
    ]
    assert source.cohorts[0].cohort_name == "Congestive heart failure"
    assert source.cohorts[0].codes == ["I50", "I43"]
    assert "codes beginning with I50, I43" in (source.cohorts[0].description or "")
    assert source.notes == ["rows that are not diagnoses (not cohorts): Age"]
    assert source.provenance["n_source_rows"] == 5
    assert "Med Care 2005" in source.citation.source and "pycomorb==1.20261001.1" in source.citation.source
    assert "MIT" in source.citation.licence


@pytest.mark.parametrize(
    "rows, message",
    [
        ([HEADER, ("1", "Heart failure", "428", "I50|heart")], "not ICD-10 code prefixes"),
        ([HEADER, ("1", "Heart failure", "428", "")], "not ICD-10 code prefixes"),
        ([HEADER, ("1", "", "428", "I50")], "empty category"),
        ([HEADER, ("1", "Heart failure", "428", "I50"), ("2", "Heart  failure", "x", "I11")], "same cohort id"),
        ([("index", "category", "icd9_codes"), ("1", "Heart failure", "428")], "icd10_codes"),
        ([HEADER], "no conditions"),
    ],
)
def test_read_quan_rejects_malformed_files(tmp_path: Path, rows: list[tuple[str, ...]], message: str) -> None:
    with pytest.raises(LibraryError, match=message):
        read_quan(QUAN_ELIXHAUSER, write_csv(tmp_path / "bad.csv", rows))


def test_packaged_lists() -> None:
    """The pinned pycomorb files: 17 Charlson and 31 Elixhauser conditions with their names."""
    charlson, elixhauser = read_quan_charlson(), read_quan_elixhauser()
    assert len(charlson.cohorts) == 17 and len(elixhauser.cohorts) == 31
    names = {c.cohort_name for c in charlson.cohorts}
    assert {"Congestive heart failure", "Dementia", "Metastatic solid tumor"} <= names
    assert "Age" not in names
    hf = next(c for c in elixhauser.cohorts if c.cohort_id == "quan-elix-congestive-heart-failure")
    assert {"I50", "I43", "I099"} <= set(hf.codes)
    assert elixhauser.group == elixhauser_source.ELIXHAUSER_GROUP
    # the builder's reserved folders are the variants' folders
    assert {variant.dir_name for variant in QUAN_VARIANTS} == {variant.dir_name for variant in QUAN_VARIANTS}
    assert {variant.dir_name for variant in QUAN_VARIANTS} <= set(bundled.RESERVED_DIRS)


# ---------------------------------------------------------------------------------------------
# expansion onto the fixture vocabulary


def test_prefix_covers_billable_codes_only(fixture_con: duckdb.DuckDBPyConnection) -> None:
    index = PrefixIndex(get_hierarchy(fixture_con))
    assert index.billable_under("I50") == ["I50.21", "I50.22", "I50.9"]  # not I50 or I50.2
    assert index.billable_under("I50.2") == ["I50.21", "I50.22"]
    assert index.billable_under("I5022") == ["I50.22"]  # a billable code covers itself
    assert index.billable_under("S72") == ["S72.001A", "S72.001D"]  # 7th-character extensions
    assert index.billable_under("E1") == [  # a two-character prefix spans categories
        "E10.9",
        "E10.10",
        "E11.21",
        "E11.22",
        "E11.29",
        "E11.51",
        "E11.65",
        "E11.9",
    ]
    # the fixture's diamond: E11.51 sits under I73.9 without sharing its prefix
    assert index.billable_under("I739") == ["E11.51"]
    assert index.billable_under("I4") == ["I48.0", "I48.91"]
    assert index.billable_under("F00") == []
    assert index.billable_under("not a code") == []


def test_expand_prefix_library_reports_unmatched(fixture_con: duckdb.DuckDBPyConnection, charlson_csv: Path) -> None:
    source = expand_prefix_library(fixture_con, read_quan(QUAN_CHARLSON, charlson_csv))
    by_id = {c.cohort_id: c for c in source.cohorts}
    assert by_id["charlson-congestive-heart-failure"].codes == ["I50.21", "I50.22", "I50.9", "I43"]
    assert by_id["charlson-diabetes-without-chronic-complication"].codes == ["E10.9", "E11.9", "E14"]
    assert by_id["charlson-aids-hiv"].codes == ["B20"]
    assert source.provenance["unmatched_prefixes"] == ["B20", "E14", "I43"]
    assert source.provenance["n_unmatched_prefixes"] == 3
    assert source.provenance["unmatched_prefixes_by_cohort"] == {
        "charlson-congestive-heart-failure": ["I43"],
        "charlson-diabetes-without-chronic-complication": ["E14"],
        "charlson-aids-hiv": ["B20"],
    }
    assert source.provenance["n_cohort_prefix_pairs"] == 8
    assert source.notes[-1].startswith("3 of the source's prefixes match no billable code")


def test_built_library_counts_unmatched_prefixes(
    fixture_con: duckdb.DuckDBPyConnection, charlson_csv: Path, tmp_path: Path
) -> None:
    root = tmp_path / "libs"
    manifests = build_bundled_libraries(fixture_con, root=root, quan_csvs={"charlson-quan": charlson_csv})
    charlson = next(m for m in manifests if m.library_id == "charlson-quan2005")
    assert library_group(charlson) == "charlson"
    assert charlson.stats.codes_not_in_vocabulary == ["B20", "E14", "I43"]
    assert charlson.report["build"]["unmatched_prefixes"] == ["B20", "E14", "I43"]
    assert charlson.report["build"]["source_package"] == "pycomorb"
    hf = load_curated_concept_set(fixture_con, root / "charlson-quan", "charlson-congestive-heart-failure")
    assert hf.cohort_name == "Congestive heart failure"
    assert hf.codes == ["I50.21", "I50.22", "I50.9"] and hf.unresolvable == ["I43"]
    pvd = load_curated_concept_set(fixture_con, root / "charlson-quan", "charlson-peripheral-vascular-disease")
    assert pvd.codes == ["E11.51"] and pvd.unresolvable == []
    # a changed source file makes only its library stale
    written: list[str] = []
    real_write = bundled.write_library

    def spy(dest: Path, *args: Any, **kwargs: Any) -> Path:
        written.append(Path(dest).name)
        return real_write(dest, *args, **kwargs)

    write_csv(charlson_csv, CHARLSON_ROWS[:3])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bundled, "write_library", spy)
        rebuilt = build_bundled_libraries(fixture_con, root=root, quan_csvs={"charlson-quan": charlson_csv})
    assert written == ["charlson-quan"]
    assert next(m for m in rebuilt if m.library_id == "charlson-quan2005").stats.n_cohorts == 1


# ---------------------------------------------------------------------------------------------
# the real lists on the real FY2026 vocabulary


def test_real_quan_libraries(real_con: duckdb.DuckDBPyConnection) -> None:  # noqa: F811
    charlson = build_quan_source(real_con, QUAN_CHARLSON)
    elixhauser = build_quan_source(real_con, QUAN_ELIXHAUSER)
    # WHO ICD-10 codes that ICD-10-CM does not have: reported, not dropped
    assert charlson.provenance["n_unmatched_prefixes"] == 37
    assert elixhauser.provenance["n_unmatched_prefixes"] == 40
    assert {"F00", "I64", "E14.0"} <= set(charlson.provenance["unmatched_prefixes"])
    hierarchy = get_hierarchy(real_con)
    hf = next(c for c in charlson.cohorts if c.cohort_id == "charlson-congestive-heart-failure")
    assert {"I50.9", "I50.21", "I11.0", "I42.9"} <= set(hf.codes)
    for source in (charlson, elixhauser):
        unmatched = set(source.provenance["unmatched_prefixes"])
        for cohort in source.cohorts:
            for code in cohort.codes:
                node = hierarchy.resolve(code)
                assert (node is None and code in unmatched) or (node is not None and hierarchy.billable[node])
