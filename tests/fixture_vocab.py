"""A tiny ICD-10-CM-shaped vocabulary with a real shape, shared by every engine test.

Three chapters with blocks, categories, subcategories and 7th-character extensions, inclusion
notes that carry synonyms, and one artificial diamond: E11.51 sits under both E11.5 and I73.9
(real ICD-10-CM is a tree; the diamond checks code that must also handle Athena's 'Is a' DAG).
"""

from __future__ import annotations

from pathlib import Path

from phenoforge.engine.codes import code_key
from phenoforge.engine.schema import ICD10CM
from phenoforge.engine.vocab_build import VocabularyRows, write_vocabulary

# (code, name, kind, parents)
FIXTURE_NODES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("4", "Endocrine, nutritional and metabolic diseases (E00-E89)", "chapter", ()),
    ("E08-E13", "Diabetes mellitus (E08-E13)", "block", ("4",)),
    ("E10", "Type 1 diabetes mellitus", "category", ("E08-E13",)),
    ("E10.9", "Type 1 diabetes mellitus without complications", "subcategory", ("E10",)),
    ("E10.1", "Type 1 diabetes mellitus with ketoacidosis", "subcategory", ("E10",)),
    ("E10.10", "Type 1 diabetes mellitus with ketoacidosis without coma", "subcategory", ("E10.1",)),
    ("E11", "Type 2 diabetes mellitus", "category", ("E08-E13",)),
    ("E11.2", "Type 2 diabetes mellitus with kidney complications", "subcategory", ("E11",)),
    ("E11.21", "Type 2 diabetes mellitus with diabetic nephropathy", "subcategory", ("E11.2",)),
    ("E11.22", "Type 2 diabetes mellitus with diabetic chronic kidney disease", "subcategory", ("E11.2",)),
    ("E11.29", "Type 2 diabetes mellitus with other diabetic kidney complication", "subcategory", ("E11.2",)),
    ("E11.5", "Type 2 diabetes mellitus with circulatory complications", "subcategory", ("E11",)),
    (
        "E11.51",
        "Type 2 diabetes mellitus with diabetic peripheral angiopathy without gangrene",
        "subcategory",
        ("E11.5", "I73.9"),
    ),
    ("E11.6", "Type 2 diabetes mellitus with other specified complications", "subcategory", ("E11",)),
    ("E11.65", "Type 2 diabetes mellitus with hyperglycemia", "subcategory", ("E11.6",)),
    ("E11.9", "Type 2 diabetes mellitus without complications", "subcategory", ("E11",)),
    ("E65-E68", "Overweight, obesity and other hyperalimentation (E65-E68)", "block", ("4",)),
    ("E66", "Overweight and obesity", "category", ("E65-E68",)),
    ("E66.0", "Obesity due to excess calories", "subcategory", ("E66",)),
    ("E66.9", "Obesity, unspecified", "subcategory", ("E66",)),
    ("9", "Diseases of the circulatory system (I00-I99)", "chapter", ()),
    ("I30-I5A", "Other forms of heart disease (I30-I5A)", "block", ("9",)),
    ("I50", "Heart failure", "category", ("I30-I5A",)),
    ("I50.2", "Systolic (congestive) heart failure", "subcategory", ("I50",)),
    ("I50.21", "Acute systolic (congestive) heart failure", "subcategory", ("I50.2",)),
    ("I50.22", "Chronic systolic (congestive) heart failure", "subcategory", ("I50.2",)),
    ("I50.9", "Heart failure, unspecified", "subcategory", ("I50",)),
    ("I48", "Atrial fibrillation and flutter", "category", ("I30-I5A",)),
    ("I48.0", "Paroxysmal atrial fibrillation", "subcategory", ("I48",)),
    ("I48.91", "Unspecified atrial fibrillation", "subcategory", ("I48",)),
    ("I70-I79", "Diseases of arteries, arterioles and capillaries (I70-I79)", "block", ("9",)),
    ("I73", "Other peripheral vascular diseases", "category", ("I70-I79",)),
    ("I73.9", "Peripheral vascular disease, unspecified", "subcategory", ("I73",)),
    ("10", "Diseases of the respiratory system (J00-J99)", "chapter", ()),
    ("J40-J4A", "Chronic lower respiratory diseases (J40-J4A)", "block", ("10",)),
    ("J45", "Asthma", "category", ("J40-J4A",)),
    ("J45.2", "Mild intermittent asthma", "subcategory", ("J45",)),
    ("J45.20", "Mild intermittent asthma, uncomplicated", "subcategory", ("J45.2",)),
    ("J45.90", "Unspecified asthma", "subcategory", ("J45",)),
    ("J45.909", "Unspecified asthma, uncomplicated", "subcategory", ("J45.90",)),
    ("19", "Injury, poisoning and certain other consequences of external causes (S00-T88)", "chapter", ()),
    ("S70-S79", "Injuries to the hip and thigh (S70-S79)", "block", ("19",)),
    ("S72", "Fracture of femur", "category", ("S70-S79",)),
    ("S72.0", "Fracture of head and neck of femur", "subcategory", ("S72",)),
    ("S72.00", "Fracture of unspecified part of neck of femur", "subcategory", ("S72.0",)),
    ("S72.001", "Fracture of unspecified part of neck of right femur", "subcategory", ("S72.00",)),
    (
        "S72.001A",
        "Fracture of unspecified part of neck of right femur, initial encounter for closed fracture",
        "extension",
        ("S72.001",),
    ),
    (
        "S72.001D",
        "Fracture of unspecified part of neck of right femur, subsequent encounter for closed fracture with routine healing",
        "extension",
        ("S72.001",),
    ),
]

FIXTURE_NOTES: list[tuple[str, str, str]] = [
    ("E11.21", "inclusion_term", "Type 2 diabetes mellitus with Kimmelstiel-Wilson disease"),
    ("E11", "includes", "diabetes NOS"),
    ("E11", "excludes1", "gestational diabetes (O24.4-)"),
    ("J45", "includes", "allergic (predominantly) asthma"),
    ("I50", "includes", "congestive heart disease"),
    ("E66", "notes", "Use additional code to identify body mass index (BMI), if known"),
]


def fixture_rows() -> VocabularyRows:
    ids = {code: index + 1 for index, (code, *_rest) in enumerate(FIXTURE_NODES)}
    children = {parent for _c, _n, _k, parents in FIXTURE_NODES for parent in parents}
    rows = VocabularyRows(
        metadata={
            "source": "fixture",
            "source_version": "test",
            "vocabulary_release": "phenoforge test fixture",
        }
    )
    for code, name, kind, parents in FIXTURE_NODES:
        billable = code not in children and kind in ("category", "subcategory", "extension")
        rows.concepts.append((ids[code], ICD10CM, code, code_key(code), name, kind, billable, None, None, None))
        rows.parents.extend((ids[code], ids[parent]) for parent in parents)
    rows.notes = [(ids[code], note_type, text) for code, note_type, text in FIXTURE_NOTES]
    return rows


def build_fixture_vocab(path: Path) -> Path:
    return write_vocabulary(path, fixture_rows())
