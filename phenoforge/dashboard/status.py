"""What is loaded: the vocabulary, the cohort libraries, and their citations, for the Home page."""

from __future__ import annotations

import duckdb
from pydantic import BaseModel

from phenoforge.engine.curated import Library, list_libraries
from phenoforge.engine.db import VocabularyInfo, vocabulary_info


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
