"""What is loaded: the vocabulary, the cohort libraries, and their citations, for the Home page."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from pydantic import BaseModel

from phenoforge.config import libraries_dir
from phenoforge.engine.curated import Library, list_libraries
from phenoforge.engine.db import VocabularyInfo, vocabulary_info
from phenoforge.libraries.bundled import BUNDLED_DIRS
from phenoforge.libraries.common import FORMAT_VERSION


class LibrarySummary(BaseModel):
    library_id: str
    name: str
    path: str
    n_cohorts: int
    n_listed_codes: int
    citation: str
    url: str | None = None


def library_summary(library: Library) -> LibrarySummary:
    manifest = library.manifest
    citation = manifest.citation
    return LibrarySummary(
        library_id=manifest.library_id,
        name=manifest.name,
        path=str(library.path),
        n_cohorts=len(manifest.cohorts),
        n_listed_codes=manifest.stats.n_listed_codes,
        citation=f"{citation.source}, version {citation.version} ({citation.licence})",
        url=citation.url,
    )


def library_summaries() -> tuple[list[LibrarySummary], list[str]]:
    """Every readable library, and a message per library that could not be read."""
    problems: list[str] = []
    libraries = list_libraries(errors=problems)
    return [library_summary(library) for library in libraries], problems


def describe_vocabulary(con: duckdb.DuckDBPyConnection) -> VocabularyInfo:
    return vocabulary_info(con)


def bundled_libraries_current(root: Path | None = None) -> bool:
    """Whether every bundled library is built in the current format (a cheap check of manifests only).

    Home builds what is missing or older on first run, so a data directory from an earlier release
    gains new bundled libraries without a manual ``build``.
    """
    root = root or libraries_dir()
    for name in BUNDLED_DIRS:
        try:
            manifest = json.loads((root / name / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        build = manifest.get("report", {}).get("build", {}) if isinstance(manifest, dict) else {}
        if not isinstance(build, dict) or build.get("format_version") != FORMAT_VERSION:
            return False
    return True


def stored_files() -> tuple[list[dict[str, object]], list[str]]:
    """What the data directory holds, one row per described kind (``phenoforge.artifacts``), and the names no
    description matches: Home's table of stored files reads the same table ``clean`` does."""
    from phenoforge.artifacts import inventory
    from phenoforge.config import data_dir

    held, unknown = inventory(data_dir())
    rows = [
        {
            "kind": entry.artifact.kind,
            "where": f"data/{entry.artifact.folder}" if entry.artifact.folder else "data",
            "count": entry.count,
            "megabytes": round(entry.size / 1e6, 1),
            "format": str(entry.artifact.format()) if entry.artifact.format is not None else "",
            "what": entry.artifact.what,
        }
        for entry in held
    ]
    return rows, unknown
