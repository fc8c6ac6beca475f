"""The AHRQ Elixhauser reader on small synthetic workbooks."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import pytest

from phenoforge.errors import LibraryError
from phenoforge.libraries.elixhauser import read_elixhauser
from tests.libraries.sources import MAPPING_COLUMNS, MAPPING_ROWS, write_elixhauser_xlsx


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
    bad_code = write_elixhauser_xlsx(tmp_path / "code.xlsx", rows=[("heart failure", "HF", 0, 0, 0, 1)])
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
