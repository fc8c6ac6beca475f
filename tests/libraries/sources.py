"""Small synthetic source files in the shape of the packaged ones (AHRQ workbook, CMS-HCC tables)."""

from __future__ import annotations

import csv
from pathlib import Path

import openpyxl

MEASURES = [
    ("CMR_CBVD", "Cerebrovascular disease", "Yes"),
    ("CMR_DIAB_CX", "Diabetes with chronic complications ", "No"),
    ("CMR_HF", "Heart failure ", "Yes"),
]
MAPPING_COLUMNS = ["CBVD_POA", "CBVD_SQLA", "DIAB_CX", "HF"]
# code, description, CBVD_POA, CBVD_SQLA, DIAB_CX, HF
MAPPING_ROWS = [
    ("E1121", "T2DM with diabetic nephropathy", 0, 0, 1, 0),
    ("E1122", "T2DM with diabetic CKD", 0, 0, 1, 1),
    ("I5021", "Acute systolic heart failure", 0, 0, 0, 1),
    ("I509", "Heart failure, unspecified", 0, 0, 0, 1),
    ("I739", "Peripheral vascular disease, unspecified", 1, 0, 0, 0),
    ("I480", "Paroxysmal atrial fibrillation", 0, 1, 0, 0),
    ("I5099", "A code FY2026 does not have", 0, 0, 0, 1),
]


def write_elixhauser_xlsx(
    path: Path,
    rows: list[tuple] = MAPPING_ROWS,
    columns: list[str] = MAPPING_COLUMNS,
    measures: list[tuple[str, str, str]] = MEASURES,
) -> Path:
    """A tiny workbook in the shape of the AHRQ reference file, footer rows included."""
    workbook = openpyxl.Workbook()
    toc = workbook.active
    toc.title = "Table_of_Contents"
    toc.append(["This Excel file provides searchable lists ..., v2026.1"])
    toc.append(["End of Content"])
    sheet = workbook.create_sheet("Comorbidity_Measures")
    sheet.append(["Searchable list of measures ..., v2026.1", None, None])
    sheet.append(
        [
            "Abbreviation \n(SAS Data Element Name)",
            "Comorbidity Description",
            "Uses present on admission (POA) indicators for assignment?",
        ]
    )
    for measure in measures:
        sheet.append(list(measure))
    sheet.append(["End of Content", None, None])
    mapping = workbook.create_sheet("DX_to_Comorb_Mapping")
    mapping.append(["Searchable list of ICD-10-CM diagnosis codes mapped ..., v2026.1"] + [None] * (len(columns) + 2))
    mapping.append(["ICD-10-CM Diagnosis", "ICD-10-CM Code Description", "# Comorbidities"] + columns)
    for code, description, *flags in rows:
        mapping.append([code, description, sum(f for f in flags if isinstance(f, int))] + flags)
    mapping.append(["End of Content"] + [None] * (len(columns) + 2))
    workbook.save(path)
    return path


DX_ROWS = [
    ("diagnosis_code", "cc", "model_name"),
    ("E1122", "37", "CMS-HCC Model V28"),
    ("E1121", "37", "CMS-HCC Model V28"),
    ("I5021", "224", "CMS-HCC Model V28"),
    ("I509", "226", "CMS-HCC Model V28"),
    ("J45909", "2", "CMS-HCC Model V28"),
    ("E1122", "18", "CMS-HCC Model V24"),
    ("I509", "85", "CMS-HCC Model V24"),
    ("S72001A", "170", "CMS-HCC Model V24"),
    ("I5099", "85", "CMS-HCC Model V24"),
    ("E1122", "18", "CMS-HCC ESRD Model V24"),
    ("I509", "999", "CMS-HCC ESRD Model V24"),
    ("E119", "31", "RxHCC Model V08"),
]
LABEL_ROWS = [
    ("cc", "label", "model_domain", "model_version", "model_fullname"),
    ("HCC37", "Diabetes with Chronic Complications", "CMS-HCC", "V28", "V28115L3"),
    ("HCC224", "Acute on Chronic Heart Failure", "CMS-HCC", "V28", "V28115L3"),
    ("HCC226", "Heart Failure, Except End-Stage and Acute", "CMS-HCC", "V28", "V28115L3"),
    ("HCC2", "Septicemia, Sepsis, SIRS/Shock", "CMS-HCC", "V28", "V28115L3"),
    ("HCC18", "Diabetes with Chronic Complications", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC85", "Congestive Heart Failure", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC170", "Hip Fracture/Dislocation", "CMS-HCC", "V24", "V24H86L1"),
    ("HCC85", "ESRD label that must not be used", "ESRD", "V24", "V24H86L1"),
    ("HCC18", "Diabetes with Chronic Complications", "CMS-HCC", "V22", "V22H79L1"),
]


def write_csv(path: Path, rows: list[tuple]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)
    return path


CCS_LINES = [
    "'ICD-10-CM CODE','CCS CATEGORY','ICD-10-CM CODE DESCRIPTION','CCS CATEGORY DESCRIPTION','MULTI CCS LVL 1',"
    "'MULTI CCS LVL 1 LABEL','MULTI CCS LVL 2','MULTI CCS LVL 2 LABEL'",
    "'I5021','108',\"Acute systolic (congestive) heart failure\",\"Congestive heart failure; nonhypertensive\",'7',"
    '"Diseases of the circulatory system",\'7.2\',"Diseases of the heart"',
    "'I509','108',\"Heart failure, unspecified\",\"Congestive heart failure; nonhypertensive\",'7',"
    '"Diseases of the circulatory system",\'7.2\',"Diseases of the heart"',
    "'I5099','108',\"A code FY2026 does not have\",\"Congestive heart failure; nonhypertensive\",'7',"
    '"Diseases of the circulatory system",\'7.2\',"Diseases of the heart"',
    "'E1122','50',\"Type 2 diabetes mellitus with diabetic chronic kidney disease\",\"Diabetes mellitus with "
    "complications\",'3',\"Endocrine; nutritional; and metabolic diseases and immunity disorders\",'3.3',"
    '"Diabetes mellitus with complications"',
]
"""The AHRQ CCS file's shape: codes in single quotes, texts in double quotes (commas inside them)."""

CCC_ROWS = [
    (
        "ICD_Code",
        "ICD_Code_Description",
        "DX_PR",
        "CCC_Category",
        "CCC_Subcategory",
        "ICD9_ICD10",
        "Tech_Dep",
        "Transplant",
    ),
    ("4280", "Heart failure (ICD-9)", "DX", "cvd", "Cardiomyopathies", "9", "0", "0"),
    ("I5021", "Acute systolic heart failure", "DX", "cvd", "Cardiomyopathies", "0", "0", "0"),
    ("I509", "Heart failure, unspecified", "DX", "cvd   ", "Other Cardiovascular ", "0", "0", "0"),
    ("Z950", "Presence of cardiac pacemaker", "DX", "cvd", "Device & Technology Use", "0", "1", "0"),
    ("02HK3JZ", "A procedure", "PR", "cvd", "Device & Technology Use", "0", "1", "0"),
    ("E1122", "T2DM with CKD", "DX", "Metabolic", "Other metabolic disorders", "0", "0", "0"),
]
"""The pediatric CCC file's shape: an ICD-9 row and a procedure row (left out), spellings that differ."""


def write_ccs_csv(path: Path, lines: list[str] = CCS_LINES) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_ccc_csv(path: Path, rows: list[tuple[str, ...]] = CCC_ROWS) -> Path:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path
