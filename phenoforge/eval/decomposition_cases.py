"""The decomposition case sets, kept as data: ``phenoforge/eval/cases/<set>.csv``, one case a row.

``default`` (the bundled libraries) and ``ohdsi`` (the OHDSI Phenotype Library) are split into a
development and a test half, every other case in file order (which groups cases by library): declared
once, before the vocabulary-grounded decomposer was written, and never rearranged after seeing results.
``new`` holds held-out cases phrased the way trial eligibility criteria are, written before the
decomposer was tuned and never looked at case by case while changing it: reported, not tuned on. Each
case carries the qualifier class it exercises (``pattern``: medication, setting, lab, staging, time,
lay...) and a ``source`` note naming the phrasing pattern it follows (paraphrased from the way
ClinicalTrials.gov inclusion criteria are commonly written, not copied from one registration).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, Field

Split = Literal["dev", "test", "new"]


class DecompositionTestCase(BaseModel):
    """A free-text population description mapped to the cohort it should resolve to."""

    population_description: str = Field(description="phrased like a real study population, not the cohort name")
    cohort_id: str
    source: str = Field(description="where the phrasing pattern came from; documentation only")
    library_id: str = Field(
        default="ohdsi",
        description="library directory the cohort belongs to: elixhauser, cms-hcc-v28, cms-hcc-v24, ohdsi",
    )
    pattern: str = Field(default="single", description="single, and, or, qualifiers, lay, medication, setting, ...")
    split: Split = Field(
        default="test", description="dev: looked at while changing a decomposer; test/new: reported only"
    )


CASES_DIR = Path(__file__).with_name("cases")
CASE_COLUMNS = ("population_description", "cohort_id", "library", "source", "pattern", "split")


class CaseFileError(ValueError):
    """A case file whose header or rows cannot be read (the message names the file and line)."""


def case_rows(
    text: str, name: str, required: tuple[str, ...] = CASE_COLUMNS[:2]
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) of a case CSV, columns lower-cased and cells stripped; blank lines are skipped.

    The one reader of case files: the bundled sets and a user's upload (``parse_cases_csv``, which checks
    each case against the installed libraries on top) both come through here.
    """
    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff")))  # a BOM (Excel's UTF-8) is not a name
    header = [column.strip().lower() for column in reader.fieldnames or []]
    twice = sorted({column for column in header if column and header.count(column) > 1})
    if twice:
        raise CaseFileError(f"{name} line 1: column(s) {', '.join(twice)} named twice; name each column once")
    missing = [column for column in required if column not in header]
    if missing:
        raise CaseFileError(
            f"{name} line 1: missing column(s) {', '.join(missing)}; the header must name "
            "population_description, cohort_id and optionally library, source"
        )
    reader.fieldnames = header
    while True:
        starts = reader.line_num + 1  # the line a row starts on (a quoted cell may run over several)
        try:
            row = next(reader)
        except StopIteration:
            return
        cells = {key: (value or "").strip() for key, value in row.items() if key is not None}
        if any(cells.values()):
            yield starts, cells


def load_case_set(name: str) -> list[DecompositionTestCase]:
    """A bundled case set by name (``default``, ``ohdsi``, ``new``), every column given in its file."""
    path = CASES_DIR / f"{name}.csv"
    cases = []
    for line, row in case_rows(path.read_text(encoding="utf-8"), path.name, CASE_COLUMNS):
        if row["split"] not in get_args(Split):
            raise CaseFileError(f"{path.name} line {line}: split {row['split']!r} is not one of {get_args(Split)}")
        cases.append(
            DecompositionTestCase(
                population_description=row["population_description"],
                cohort_id=row["cohort_id"],
                source=row["source"],
                library_id=row["library"],
                pattern=row["pattern"],
                split=row["split"],  # type: ignore[arg-type]  # checked against Split above
            )
        )
    return cases


DEFAULT_TEST_CASES: list[DecompositionTestCase] = load_case_set("default")
OHDSI_TEST_CASES: list[DecompositionTestCase] = load_case_set("ohdsi")
NEW_TEST_CASES: list[DecompositionTestCase] = load_case_set("new")

CASE_SETS: dict[str, list[DecompositionTestCase]] = {
    "default": DEFAULT_TEST_CASES,
    "new": NEW_TEST_CASES,
    "ohdsi": OHDSI_TEST_CASES,
}
"""Named case sets; ``--split dev|test`` picks a half of ``default``, ``--split new`` the held-out set."""


def cases_for_split(split: str) -> list[DecompositionTestCase]:
    """``dev`` or ``test``: that half of the default cases; ``new``: the held-out eligibility-criteria cases."""
    if split == "new":
        return list(NEW_TEST_CASES)
    if split in ("dev", "test"):
        return [case for case in DEFAULT_TEST_CASES if case.split == split]
    raise ValueError(f"unknown split {split!r}: choose dev, test or new")
