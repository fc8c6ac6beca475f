"""A synthetic Athena download (invented concept ids) and OHDSI-shaped cohorts over it.

The SNOMED side has a diamond (T2DM with nephropathy is both a type 2 diabetes and a diabetic
renal disease), a second diamond under diabetic ketoacidosis, an excluded branch (secondary
diabetes), a broad grouper (120 invented injury codes map to "Injury of head"), a measurement
concept no diagnosis maps to, a non-standard concept and a deprecated one. The ICD10CM side has the
Athena concept classes, a block and a chapter from 'ICD10 Hierarchy', 'Is a' edges, 'Maps to'
edges many-to-one (E11 and E11.9 both map to T2DM) and one-to-many (E11.22), a deprecated code and
a deprecated edge. Files are tab-delimited, unquoted, with a header, like Athena's.
"""

from __future__ import annotations

import csv
import json
from collections import deque
from pathlib import Path
from typing import Any

CONCEPT_HEADER = [
    "concept_id",
    "concept_name",
    "domain_id",
    "vocabulary_id",
    "concept_class_id",
    "standard_concept",
    "concept_code",
    "valid_start_date",
    "valid_end_date",
    "invalid_reason",
]
RELATIONSHIP_HEADER = [
    "concept_id_1",
    "concept_id_2",
    "relationship_id",
    "valid_start_date",
    "valid_end_date",
    "invalid_reason",
]
ANCESTOR_HEADER = [
    "ancestor_concept_id",
    "descendant_concept_id",
    "min_levels_of_separation",
    "max_levels_of_separation",
]
VOCABULARY_HEADER = [
    "vocabulary_id",
    "vocabulary_name",
    "vocabulary_reference",
    "vocabulary_version",
    "vocabulary_concept_id",
]

# SNOMED: (id, name, domain, class, standard, code, invalid_reason, parents)
SNOMED_CONCEPTS: list[tuple[int, str, str, str, str, str, str, tuple[int, ...]]] = [
    (1000, "Clinical finding", "Condition", "Clinical Finding", "S", "404684003", "", ()),
    (1001, "Disorder of endocrine system", "Condition", "Disorder", "S", "362969004", "", (1000,)),
    (1002, "Diabetes mellitus", "Condition", "Disorder", "S", "73211009", "", (1001,)),
    (1003, "Type 2 diabetes mellitus", "Condition", "Disorder", "S", "44054006", "", (1002,)),
    (1004, "Type 1 diabetes mellitus", "Condition", "Disorder", "S", "46635009", "", (1002,)),
    (1005, "Diabetic renal disease", "Condition", "Disorder", "S", "127013003", "", (1002, 1010)),
    (
        1006,
        "Type 2 diabetes mellitus with diabetic nephropathy",
        "Condition",
        "Disorder",
        "S",
        "1481000119100",
        "",
        (1003, 1005),
    ),
    (1007, "Diabetic ketoacidosis", "Condition", "Disorder", "S", "420422005", "", (1002,)),
    (1008, "Type 1 diabetes mellitus with ketoacidosis", "Condition", "Disorder", "S", "420270002", "", (1004, 1007)),
    (1009, "Secondary diabetes mellitus", "Condition", "Disorder", "S", "8801005", "", (1002,)),
    (1011, "Steroid-induced diabetes", "Condition", "Disorder", "S", "190416008", "", (1009,)),
    (1010, "Kidney disease", "Condition", "Disorder", "S", "90708001", "", (1000,)),
    (1012, "Chronic kidney disease", "Condition", "Disorder", "S", "709044004", "", (1010,)),
    (1020, "Heart disease", "Condition", "Disorder", "S", "56265001", "", (1000,)),
    (1021, "Heart failure", "Condition", "Disorder", "S", "84114007", "", (1020,)),
    (1022, "Systolic heart failure", "Condition", "Disorder", "S", "417996009", "", (1021,)),
    (1023, "Chronic systolic heart failure", "Condition", "Disorder", "S", "441481004", "", (1022,)),
    (1024, "Acute systolic heart failure", "Condition", "Disorder", "S", "443254009", "", (1022,)),
    (1030, "Asthma", "Condition", "Disorder", "S", "195967001", "", (1000,)),
    (1031, "Mild intermittent asthma", "Condition", "Disorder", "S", "426979002", "", (1030,)),
    (1040, "Diabetes mellitus type 2 in obese", "Condition", "Disorder", "", "81531005", "D", (1003,)),
    (1050, "Hemoglobin A1c measurement", "Measurement", "Procedure", "S", "43396009", "", ()),
    (1060, "Diabetes mellitus without complication", "Condition", "Disorder", "", "111552007", "", ()),
    (1090, 'Injury of head "NOS"', "Condition", "Disorder", "S", "82271004", "", (1000,)),
]

# ICD10CM: (id, code, name, class, invalid_reason, parent code)
ICD_CONCEPTS: list[tuple[int, str, str, str, str, str | None]] = [
    (2900, "E00-E89", "Endocrine, nutritional and metabolic diseases", "ICD10 Hierarchy", "", None),
    (2901, "E08-E13", "Diabetes mellitus", "ICD10 Hierarchy", "", "E00-E89"),
    (2000, "E11", "Type 2 diabetes mellitus", "3-char nonbill code", "", "E08-E13"),
    (2001, "E11.2", "Type 2 diabetes mellitus with kidney complications", "4-char nonbill code", "", "E11"),
    (2002, "E11.21", "Type 2 diabetes mellitus with diabetic nephropathy", "5-char billing code", "", "E11.2"),
    (
        2003,
        "E11.22",
        "Type 2 diabetes mellitus with diabetic chronic kidney disease",
        "5-char billing code",
        "",
        "E11.2",
    ),
    (2004, "E11.9", "Type 2 diabetes mellitus without complications", "4-char billing code", "", "E11"),
    (2005, "E11.1", "Type 2 diabetes mellitus with ketoacidosis (deprecated)", "4-char nonbill code", "D", "E11"),
    (2010, "E10", "Type 1 diabetes mellitus", "3-char nonbill code", "", "E08-E13"),
    (2011, "E10.1", "Type 1 diabetes mellitus with ketoacidosis", "4-char nonbill code", "", "E10"),
    (2012, "E10.10", "Type 1 diabetes mellitus with ketoacidosis without coma", "5-char billing code", "", "E10.1"),
    (2013, "E10.9", "Type 1 diabetes mellitus without complications", "4-char billing code", "", "E10"),
    (2020, "E09", "Drug or chemical induced diabetes mellitus", "3-char nonbill code", "", "E08-E13"),
    (
        2021,
        "E09.9",
        "Drug or chemical induced diabetes mellitus without complications",
        "4-char billing code",
        "",
        "E09",
    ),
    (2030, "N18", "Chronic kidney disease (CKD)", "3-char nonbill code", "", None),
    (2032, "N18.9", "Chronic kidney disease, unspecified", "4-char billing code", "", "N18"),
    (2040, "I50", "Heart failure", "3-char nonbill code", "", None),
    (2041, "I50.2", "Systolic (congestive) heart failure", "4-char nonbill code", "", "I50"),
    (2042, "I50.21", "Acute systolic (congestive) heart failure", "5-char billing code", "", "I50.2"),
    (2043, "I50.22", "Chronic systolic (congestive) heart failure", "5-char billing code", "", "I50.2"),
    (2044, "I50.9", "Heart failure, unspecified", "4-char billing code", "", "I50"),
    (2050, "J45", "Asthma", "3-char nonbill code", "", None),
    (2051, "J45.20", "Mild intermittent asthma, uncomplicated", "5-char billing code", "", "J45"),
    (2052, "J45.909", "Unspecified asthma, uncomplicated", "6-char billing code", "", "J45"),
    (2060, "S72", "Fracture of femur", "3-char nonbill code", "", None),
    (2061, "S72.001", "Fracture of unspecified part of neck of right femur", "6-char nonbill code", "", "S72"),
    (
        2062,
        "S72.001A",
        "Fracture of unspecified part of neck of right femur, initial encounter",
        "7-char billing code",
        "",
        "S72.001",
    ),
    (2070, "S01", "Open wound of head", "3-char nonbill code", "", None),
    (2080, "Z13.1", "Encounter for screening for diabetes mellitus", "4-char billing code", "", None),
]
N_GROUPER_CODES = 120
GROUPER_ID = 1090

# (ICD code, standard concept id): E11 and E11.9 map to the same concept (many-to-one),
# E11.22 to two (one-to-many); Z13.1 maps to a LOINC concept, which is not loaded.
MAPS_TO: list[tuple[str, int]] = [
    ("E11", 1003),
    ("E11.9", 1003),
    ("E11.2", 1005),
    ("E11.21", 1006),
    ("E11.22", 1006),
    ("E11.22", 1012),
    ("E10", 1004),
    ("E10.9", 1004),
    ("E10.1", 1008),
    ("E10.10", 1008),
    ("E09", 1011),
    ("E09.9", 1011),
    ("N18", 1012),
    ("N18.9", 1012),
    ("I50", 1021),
    ("I50.9", 1021),
    ("I50.2", 1022),
    ("I50.21", 1024),
    ("I50.22", 1023),
    ("J45", 1030),
    ("J45.909", 1030),
    ("J45.20", 1031),
    ("Z13.1", 3000),
]
DEPRECATED_MAPS_TO: list[tuple[str, int]] = [("E11.9", 1004)]

OTHER_CONCEPTS: list[list[str]] = [
    [
        "3000",
        "Hemoglobin A1c/Hemoglobin.total in Blood",
        "Measurement",
        "LOINC",
        "Lab Test",
        "S",
        "4548-4",
        "19700101",
        "20991231",
        "",
    ],
    ["21600712", "DRUGS USED IN DIABETES", "Drug", "ATC", "ATC 2nd", "C", "A10", "19700101", "20991231", ""],
]


def grouper_codes() -> list[tuple[int, str]]:
    """120 invented S01 codes that all map to the broad grouper 'Injury of head'."""
    return [
        (2100 + n, f"S01.{n:02d}") if n < 100 else (2100 + n, f"S01.{n - 100:02d}1") for n in range(N_GROUPER_CODES)
    ]


def _write(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    """Tab-separated, no quoting at all: Athena writes names with '"' in them as they are."""
    lines = ["\t".join(header)]
    lines += ["\t".join("" if value is None else str(value) for value in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def snomed_closure() -> dict[int, dict[int, tuple[int, int]]]:
    """ancestor -> descendant -> (min, max) levels, self included, over valid SNOMED concepts."""
    valid = {cid for cid, *_rest, invalid, _p in SNOMED_CONCEPTS if not invalid}
    children: dict[int, list[int]] = {}
    for cid, *_rest, invalid, parents in SNOMED_CONCEPTS:
        if invalid:
            continue
        for parent in parents:
            children.setdefault(parent, []).append(cid)
    closure: dict[int, dict[int, tuple[int, int]]] = {}
    for root in sorted(valid):
        levels: dict[int, tuple[int, int]] = {root: (0, 0)}
        queue = deque([(root, 0)])
        while queue:
            node, depth = queue.popleft()
            for child in children.get(node, []):
                low, high = levels.get(child, (depth + 1, depth + 1))
                levels[child] = (min(low, depth + 1), max(high, depth + 1))
                queue.append((child, depth + 1))
        closure[root] = levels
    return closure


def write_athena_fixture(folder: Path, vocabulary_file: bool = True) -> Path:
    """Write CONCEPT, CONCEPT_RELATIONSHIP, CONCEPT_ANCESTOR (and VOCABULARY) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    concepts: list[list[Any]] = []
    for cid, name, domain, klass, standard, code, invalid, _parents in SNOMED_CONCEPTS:
        end = "20230101" if invalid else "20991231"
        concepts.append([cid, name, domain, "SNOMED", klass, standard, code, "20020131", end, invalid])
    icd_ids: dict[str, int] = {}
    for cid, code, name, klass, invalid, _parent in ICD_CONCEPTS:
        icd_ids[code] = cid
        start = "20240401" if code == "E11.22" else "20071001"
        concepts.append([cid, name, "Condition", "ICD10CM", klass, "", code, start, "20991231", invalid])
    for cid, code in grouper_codes():
        icd_ids[code] = cid
        concepts.append(
            [
                cid,
                f"Open wound of head, invented site {code}",
                "Condition",
                "ICD10CM",
                "5-char billing code",
                "",
                code,
                "20071001",
                "20991231",
                "",
            ]
        )
    concepts += OTHER_CONCEPTS
    _write(folder / "CONCEPT.csv", CONCEPT_HEADER, concepts)

    relationships: list[list[Any]] = []
    for cid, *_rest, parents in SNOMED_CONCEPTS:
        for parent in parents:
            relationships.append([cid, parent, "Is a", "20020131", "20991231", ""])
            relationships.append([parent, cid, "Subsumes", "20020131", "20991231", ""])
    for cid, _code, _name, _klass, _invalid, parent in ICD_CONCEPTS:
        if parent is not None:
            relationships.append([cid, icd_ids[parent], "Is a", "20071001", "20991231", ""])
            relationships.append([icd_ids[parent], cid, "Subsumes", "20071001", "20991231", ""])
    for cid, _code in grouper_codes():
        relationships.append([cid, icd_ids["S01"], "Is a", "20071001", "20991231", ""])
        relationships.append([cid, GROUPER_ID, "Maps to", "20071001", "20991231", ""])
    for code, target in MAPS_TO:
        relationships.append([icd_ids[code], target, "Maps to", "20071001", "20991231", ""])
        relationships.append([target, icd_ids[code], "Mapped from", "20071001", "20991231", ""])
    for code, target in DEPRECATED_MAPS_TO:
        relationships.append([icd_ids[code], target, "Maps to", "20071001", "20200101", "D"])
    # the deprecated ICD code's own edges (deprecated with it)
    relationships.append([icd_ids["E11.1"], 1007, "Maps to", "20071001", "20200101", "D"])
    _write(folder / "CONCEPT_RELATIONSHIP.csv", RELATIONSHIP_HEADER, relationships)

    ancestors: list[list[Any]] = []
    for ancestor, levels in snomed_closure().items():
        for descendant, (low, high) in sorted(levels.items()):
            ancestors.append([ancestor, descendant, low, high])
    ancestors.append([21600712, 21600712, 0, 0])  # an ATC row: not SNOMED, not kept
    _write(folder / "CONCEPT_ANCESTOR.csv", ANCESTOR_HEADER, ancestors)

    if vocabulary_file:
        _write(
            folder / "VOCABULARY.csv",
            VOCABULARY_HEADER,
            [
                ["None", "OMOP Standardized Vocabularies", "OMOP generated", "v5.0 30-AUG-24", 44819096],
                [
                    "ICD10CM",
                    "International Classification of Diseases, Tenth Revision, Clinical Modification",
                    "http://www.cdc.gov/nchs/icd/icd10cm.htm",
                    "ICD10CM FY2024",
                    44819098,
                ],
                [
                    "SNOMED",
                    "Systematic Nomenclature of Medicine - Clinical Terms (IHTSDO)",
                    "http://www.snomed.org",
                    "2024-03-01 SNOMED CT International Edition",
                    44819097,
                ],
            ],
        )
    return folder


# --- Circe-shaped cohorts over the fixture (the shape of the real Phenotype Library files) ---


def concept(
    concept_id: int, vocabulary: str = "SNOMED", code: str = "", name: str = "", domain: str = "Condition"
) -> dict[str, Any]:
    return {
        "CONCEPT_ID": concept_id,
        "CONCEPT_NAME": name,
        "STANDARD_CONCEPT": "S",
        "STANDARD_CONCEPT_CAPTION": "Standard",
        "INVALID_REASON": "V",
        "INVALID_REASON_CAPTION": "Valid",
        "CONCEPT_CODE": code,
        "DOMAIN_ID": domain,
        "VOCABULARY_ID": vocabulary,
        "CONCEPT_CLASS_ID": "Clinical Finding",
    }


def item(
    concept_id: int, vocabulary: str = "SNOMED", excluded: bool = False, descendants: bool = True, name: str = ""
) -> dict[str, Any]:
    return {
        "concept": concept(concept_id, vocabulary, name=name),
        "isExcluded": excluded,
        "includeDescendants": descendants,
        "includeMapped": False,
    }


def concept_set(set_id: int, name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": set_id, "name": name, "expression": {"items": items}}


def _window() -> dict[str, Any]:
    return {"Start": {"Coeff": -1}, "End": {"Days": 0, "Coeff": 1}, "UseIndexEnd": False, "UseEventEnd": False}


def rule(name: str, codeset_id: int, occurrence_type: int, count: int) -> dict[str, Any]:
    return {
        "name": name,
        "expression": {
            "Type": "ALL",
            "CriteriaList": [
                {
                    "Criteria": {"ConditionOccurrence": {"CodesetId": codeset_id, "ConditionTypeExclude": False}},
                    "StartWindow": _window(),
                    "RestrictVisit": False,
                    "IgnoreObservationPeriod": True,
                    "Occurrence": {"Type": occurrence_type, "Count": count, "IsDistinct": False},
                }
            ],
            "DemographicCriteriaList": [],
            "Groups": [],
        },
    }


def cohort(
    concept_sets: list[dict[str, Any]], primary: list[dict[str, Any]], rules: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "cdmVersionRange": ">=5.0.0",
        "PrimaryCriteria": {
            "CriteriaList": primary,
            "ObservationWindow": {"PriorDays": 0, "PostDays": 0},
            "PrimaryCriteriaLimit": {"Type": "First"},
        },
        "ConceptSets": concept_sets,
        "QualifiedLimit": {"Type": "First"},
        "ExpressionLimit": {"Type": "First"},
        "InclusionRules": rules or [],
        "CensoringCriteria": [],
        "CollapseSettings": {"CollapseType": "ERA", "EraPad": 0},
        "CensorWindow": {},
    }


def t2dm_cohort() -> dict[str, Any]:
    """Shaped like Phenotype Library cohort 288: several sets, exclusion rules, drug and lab."""
    return cohort(
        concept_sets=[
            concept_set(
                0,
                "Type 2 diabetes mellitus (excluding T1DM and secondary)",
                [
                    item(1002, name="Diabetes mellitus"),
                    item(1004, excluded=True, name="Type 1 diabetes mellitus"),
                    item(1009, excluded=True, name="Secondary diabetes mellitus"),
                    item(1040, name="Diabetes mellitus type 2 in obese"),  # deprecated: drift
                    item(424242, name="A concept of a newer release"),  # absent: drift
                ],
            ),
            concept_set(2, "Secondary diabetes mellitus", [item(1009)]),
            concept_set(
                3,
                "Hemoglobin A1c (HbA1c) measurements",
                [
                    item(1050, name="Hemoglobin A1c measurement"),
                    item(3000, "LOINC", name="Hemoglobin A1c/Hemoglobin.total in Blood"),
                ],
            ),
            concept_set(
                4,
                "Blood glucose lowering drugs, excluding insulin",
                [
                    item(21600712, "ATC", name="DRUGS USED IN DIABETES"),
                ],
            ),
            concept_set(5, "Type 1 Diabetes Mellitus", [item(1004)]),
            concept_set(6, "Chronic kidney disease", [item(1012)]),
        ],
        primary=[
            {"ConditionOccurrence": {"CodesetId": 0, "ConditionTypeExclude": False}},
            {"DrugExposure": {"CodesetId": 4, "DrugTypeExclude": False}},
            {
                "Measurement": {
                    "CodesetId": 3,
                    "MeasurementTypeExclude": False,
                    "ValueAsNumber": {"Value": 6.5, "Op": "bt", "Extent": 30},
                }
            },
        ],
        rules=[
            rule("no Type 1 diabetes mellitus on or prior to T2DM", 5, 0, 0),
            rule("no secondary diabetes on or prior to T2DM", 2, 0, 0),
            rule("has at least one diagnosis of T2DM within 365d", 0, 2, 1),
            rule("has chronic kidney disease", 6, 2, 1),
        ],
    )


def heart_failure_cohort() -> dict[str, Any]:
    """Shaped like cohort 519: one SNOMED concept with descendants."""
    return cohort(
        concept_sets=[concept_set(0, "Heart failure", [item(1021, name="Heart failure")])],
        primary=[{"ConditionOccurrence": {"CodesetId": 0, "ConditionTypeExclude": False}}],
    )


def asthma_cohort() -> dict[str, Any]:
    """Asthma plus the broad grouper, which the fan-out guard skips at the default threshold."""
    return cohort(
        concept_sets=[
            concept_set(
                0,
                "Asthma or head injury",
                [
                    item(1030, name="Asthma"),
                    item(GROUPER_ID, name="Injury of head"),
                ],
            )
        ],
        primary=[{"ConditionOccurrence": {"CodesetId": 0, "ConditionTypeExclude": False}}],
    )


FIXTURE_COHORTS: dict[str, tuple[str, Any]] = {
    "9288": ("[P] Type 2 Diabetes Mellitus indexed on diagnosis, treatment or lab results", t2dm_cohort),
    "9519": ("[P][R] Heart failure", heart_failure_cohort),
    "9521": ("[P][R] Asthma", asthma_cohort),
}

EXPECTED_CODES: dict[str, list[str]] = {
    "9288": ["E11", "E11.2", "E11.21", "E11.22", "E11.9"],
    "9519": ["I50", "I50.2", "I50.21", "I50.22", "I50.9"],
    "9521": ["J45", "J45.20", "J45.909"],
}


def cohorts_csv_rows() -> list[dict[str, str]]:
    return [
        {
            "cohortId": cohort_id,
            "cohortName": name,
            "cohortNameLong": name.split("] ")[-1],
            "status": "Pending peer review",
            "logicDescription": f"fixture cohort {cohort_id}",
            "hashTag": "",
            "recommendedReferentConceptIds": "",
        }
        for cohort_id, (name, _build) in FIXTURE_COHORTS.items()
    ]


def cohorts_csv_text(extra_rows: list[dict[str, str]] | None = None) -> str:
    import io

    buffer = io.StringIO()
    rows = cohorts_csv_rows() + (extra_rows or [])
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_phenotype_clone(root: Path, layout: str = "clone") -> Path:
    """A local copy of the Phenotype Library: ``clone`` (inst/...) or ``package`` (R install)."""
    base = root / "inst" if layout == "clone" else root
    (base / "cohorts").mkdir(parents=True, exist_ok=True)
    (base / "Cohorts.csv").write_text(cohorts_csv_text(), encoding="utf-8")
    for cohort_id, (_name, build) in FIXTURE_COHORTS.items():
        (base / "cohorts" / f"{cohort_id}.json").write_text(json.dumps(build(), indent=1), encoding="utf-8")
    (root / "DESCRIPTION").write_text("Package: PhenotypeLibrary\nVersion: 3.37.0\n", encoding="utf-8")
    return root
