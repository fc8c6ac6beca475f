"""The rule-based decomposer: qualifiers dropped, lists split, lay wording translated."""

from __future__ import annotations

import pytest

from phenoforge.agent.offline import offline_decompose


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("adults with type 2 diabetes mellitus", ["type 2 diabetes mellitus"]),
        ("patients presenting to the emergency department with diabetic ketoacidosis", ["diabetic ketoacidosis"]),
        ("adult patients hospitalized with acute myocardial infarction", ["acute myocardial infarction"]),
        ("adults with a history of migraine", ["migraine"]),
        ("newly diagnosed atrial fibrillation in adults aged 65 and older", ["atrial fibrillation"]),
        ("Adults with high blood pressure and type 2 diabetes", ["hypertension", "type 2 diabetes"]),
        ("Medicare beneficiaries with a history of heart attack", ["myocardial infarction"]),
        ("patients with COPD, asthma, or interstitial lung disease",
         ["chronic obstructive pulmonary disease", "asthma", "interstitial lung disease"]),
        ("patients with type 1 or type 2 diabetes", ["type 1 diabetes", "type 2 diabetes"]),
        ("adults with chronic kidney disease stage 4 or 5",
         ["chronic kidney disease stage 4", "chronic kidney disease stage 5"]),
        ("type 2 diabetes mellitus confirmed by diagnosis, treatment, or laboratory testing",
         ["type 2 diabetes mellitus"]),
        ("adults with obesity (BMI >= 30)", ["obesity"]),
        ("adults with a physician's diagnosis of asthma", ["asthma"]),
        ("Women with breast cancer receiving chemotherapy", ["breast cancer"]),
    ],
)
def test_decomposition(description: str, expected: list[str]) -> None:
    assert offline_decompose(description) == expected


def test_no_condition_gives_no_terms() -> None:
    assert offline_decompose("adults aged 40 to 75 years") == []
    assert offline_decompose("") == []


def test_protected_names_are_not_split() -> None:
    assert offline_decompose("patients with overweight and obesity") == ["overweight and obesity"]
