"""A small cohort library over the fixture vocabulary, with near-duplicate cohorts on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
    write_library,
)
from tests.dashboard.conftest import app, dash, dashboard_data  # noqa: F401  (AppTest fixtures for the page)

FIXTURE_COHORTS: dict[str, tuple[str, list[str], bool]] = {
    "fix-T2DM": ("Type 2 diabetes mellitus", ["E11"], True),
    "fix-T1DM": ("Type 1 diabetes mellitus", ["E10"], True),
    "fix-HF": ("Heart failure", ["I50"], True),
    "fix-HFSYS": ("Systolic heart failure", ["I50.2"], True),
    "fix-ASTHMA": ("Asthma", ["J45"], True),
    "fix-OBESE": ("Obesity", ["E66.0", "E66.9"], False),
    "fix-AF1": ("Atrial fibrillation and flutter", ["I48"], True),
    "fix-AF2": ("Atrial fibrillation, paroxysmal or unspecified", ["I48.0", "I48.91"], False),
}


def write_fixture_library(dest: Path, library_id: str = "fixlib") -> Path:
    entries = [CohortEntry(cohort_id=cid, cohort_name=name, file=cohort_file_name(cid))
               for cid, (name, _codes, _desc) in FIXTURE_COHORTS.items()]
    manifest = LibraryManifest(
        library_id=library_id, name="Fixture library", description="tests",
        citation=Citation(source="tests", version="1", licence="CC0"),
        created_at="2026-01-01T00:00:00+00:00",
        stats=LibraryStats(n_cohorts=len(entries), n_listed_codes=0),
        cohorts=entries,
    )
    definitions = {cid: icd_cohort_definition(name, codes, include_descendants=desc)
                   for cid, (name, codes, desc) in FIXTURE_COHORTS.items()}
    return write_library(dest, manifest, definitions)


@pytest.fixture
def fixture_library(tmp_path: Path) -> Path:
    return write_fixture_library(tmp_path / "libraries" / "fixlib")
