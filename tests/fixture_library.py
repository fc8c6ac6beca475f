"""Write a small ICD-10-CM cohort library for tests, in the same format the bundled ones use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
    write_library,
)

CohortSpec = tuple[str, Sequence[str], bool]
"""(cohort name, listed ICD-10-CM codes, include descendants)"""


def write_icd_library(
    dest: Path,
    cohorts: Mapping[str, CohortSpec],
    library_id: str,
    name: str = "Fixture library",
    description: str = "cohorts over the fixture vocabulary",
    citation: Citation | None = None,
    group: str | None = None,
) -> Path:
    manifest = LibraryManifest(
        library_id=library_id,
        name=name,
        description=description,
        citation=citation or Citation(source="tests", version="1", licence="CC0"),
        created_at="2026-12-02T00:00:00+00:00",
        group=group,
        stats=LibraryStats(
            n_cohorts=len(cohorts), n_listed_codes=sum(len(codes) for _n, codes, _d in cohorts.values())
        ),
        cohorts=[
            CohortEntry(cohort_id=cid, cohort_name=cohort_name, file=cohort_file_name(cid))
            for cid, (cohort_name, _codes, _desc) in cohorts.items()
        ],
    )
    definitions = {
        cid: icd_cohort_definition(cohort_name, list(codes), include_descendants=desc)
        for cid, (cohort_name, codes, desc) in cohorts.items()
    }
    return write_library(dest, manifest, definitions, replace=True)  # a fixture library written before is replaced
