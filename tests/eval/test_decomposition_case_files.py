"""Checks of the decomposition case CSVs: BOM, CRLF, extra columns, quoted newlines, a missing split."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.eval import decomposition_cases
from phenoforge.eval.decomposition_cases import CaseFileError, case_rows, load_case_set

HEADER = "population_description,cohort_id,library,source,pattern,split"


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(decomposition_cases, "CASES_DIR", tmp_path)
    (tmp_path / "hostile.csv").write_bytes(data)


def test_a_case_file_with_a_bom_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, monkeypatch, f"\ufeff{HEADER}\nadults with asthma,a1,elixhauser,src,single,dev\n".encode())
    (case,) = load_case_set("hostile")
    assert case.population_description == "adults with asthma"


def test_crlf_extra_columns_and_quoted_newlines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (
        f"{HEADER},comment\r\n"
        'adults with asthma,a1,elixhauser,"two\r\nlines",single,dev,x\r\n'
        "\r\n"
        "adults with gout,a2,elixhauser,src,single,test,y,z\r\n"
    )
    _write(tmp_path, monkeypatch, text.encode())
    cases = load_case_set("hostile")
    assert [c.cohort_id for c in cases] == ["a1", "a2"]
    assert cases[0].source == "two\r\nlines" or cases[0].source == "two\nlines"
    assert cases[1].split == "test"


def test_a_missing_split_names_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(
        tmp_path, monkeypatch, f"{HEADER}\nadults with asthma,a1,elixhauser,src,single,dev\nx,a2,elix,s,p\n".encode()
    )
    with pytest.raises(CaseFileError, match="line 3: split ''"):
        load_case_set("hostile")


def test_the_line_named_is_where_a_multiline_row_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, monkeypatch, f'{HEADER}\nadults with asthma,a1,elixhauser,"one\ntwo\nthree",single,\n'.encode())
    with pytest.raises(CaseFileError, match="line 2:"):
        load_case_set("hostile")


def test_a_header_naming_a_column_twice_is_refused() -> None:
    text = "population_description,cohort_id,cohort_id\nasthma,a1,\n"
    try:
        rows = list(case_rows(text, "dup.csv"))
    except CaseFileError:
        return
    assert rows[0][1]["cohort_id"] == "a1", "the second, empty cohort_id column silently won"
