"""AHRQ CCS and the pediatric complex chronic conditions: read as their files write them, nothing invented."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.engine.curated import load_curated_concept_set, load_library
from phenoforge.errors import LibraryError
from phenoforge.libraries import build_bundled_libraries
from phenoforge.libraries.ccc import read_ccc
from phenoforge.libraries.ccs import build_ccs_source, read_ccs
from phenoforge.setbuild.groups import is_test_library, is_training_library
from tests.libraries.sources import CCS_LINES, write_ccc_csv, write_ccs_csv


def test_ccs_reads_quoted_codes_and_texts_with_commas(tmp_path: Path) -> None:
    source = read_ccs(write_ccs_csv(tmp_path / "ccs.csv"))
    assert [(c.cohort_id, c.cohort_name) for c in source.cohorts] == [
        ("ccs-50", "Diabetes mellitus with complications"),
        ("ccs-108", "Congestive heart failure; nonhypertensive"),
    ]
    assert source.cohorts[1].codes == ["I5021", "I509", "I5099"]
    assert source.group == "ahrq-ccs" and "public domain" in source.citation.licence


def test_ccs_refuses_a_category_named_two_ways(tmp_path: Path) -> None:
    lines = [*CCS_LINES, CCS_LINES[1].replace("I5021", "I5022").replace("nonhypertensive", "hypertensive")]
    with pytest.raises(LibraryError, match="category 108 is named"):
        read_ccs(write_ccs_csv(tmp_path / "ccs.csv", lines))


def test_ccs_refuses_another_file(tmp_path: Path) -> None:
    with pytest.raises(LibraryError, match="expected the header"):
        read_ccs(write_ccs_csv(tmp_path / "ccs.csv", ["a,b,c,d", "x,y,z,w"]))


def test_ccs_counts_what_the_release_added_and_no_category_holds(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    source = build_ccs_source(fixture_con, write_ccs_csv(tmp_path / "ccs.csv"))
    unlisted = source.provenance["codes_added_since_in_no_category"]
    assert unlisted > 0 and "I50.21" not in source.provenance["codes_added_since_examples"]
    assert any(f"{unlisted} billable codes" in note for note in source.notes)
    assert all(len(cohort.codes) for cohort in source.cohorts)  # no member invented


def test_ccc_keeps_icd10_diagnoses_and_merges_spellings(tmp_path: Path) -> None:
    source = read_ccc(write_ccc_csv(tmp_path / "ccc.csv"))
    by_id = {c.cohort_id: c for c in source.cohorts}
    assert by_id["ccc-cvd"].codes == ["I5021", "I509", "Z950"]  # "cvd   " is cvd; the ICD-9 and PR rows are out
    assert by_id["ccc-cvd"].cohort_name == "Cardiovascular complex chronic condition"
    assert by_id["ccc-cvd-cardiomyopathies"].cohort_name == "Cardiomyopathies (cardiovascular)"
    assert by_id["ccc-tech-dep"].codes == ["Z950"]
    assert by_id["ccc-metabolic"].codes == ["E1122"]  # "Metabolic" is metabolic
    assert "02HK3JZ" not in {code for c in source.cohorts for code in c.codes}


def test_ccc_refuses_an_unknown_category(tmp_path: Path) -> None:
    rows = [
        (
            "ICD_Code",
            "ICD_Code_Description",
            "DX_PR",
            "CCC_Category",
            "CCC_Subcategory",
            "ICD9_ICD10",
            "Tech_Dep",
            "Transplant",
        ),
        ("I509", "HF", "DX", "astrology", "", "0", "0", "0"),
    ]
    with pytest.raises(LibraryError, match="unknown category"):
        read_ccc(write_ccc_csv(tmp_path / "ccc.csv", rows))


def test_both_are_bundled_test_libraries_with_their_own_groups(
    fixture_con: duckdb.DuckDBPyConnection, sources: dict[str, Path], tmp_path: Path
) -> None:
    build_bundled_libraries(fixture_con, root=tmp_path / "libs", **sources)
    ccs = load_library(tmp_path / "libs" / "ahrq-ccs")
    ccc = load_library(tmp_path / "libs" / "pediatric-ccc")
    for library in (ccs, ccc):
        assert is_test_library(library.manifest) and is_training_library(library.manifest)
    assert (ccs.manifest.group, ccc.manifest.group) == ("ahrq-ccs", "pediatric-ccc")
    hf = load_curated_concept_set(fixture_con, ccs.path, "ccs-108")
    assert sorted(hf.codes) == ["I50.21", "I50.9"] and hf.unresolvable == ["I50.99"]
    assert ccs.manifest.report["build"]["codes_added_since_in_no_category"] > 0
