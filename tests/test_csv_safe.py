"""Every CSV the project writes neutralises formula cells (OWASP CSV injection), and keeps plain numbers."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.agent.audit import DecisionRecord, audit_csv
from phenoforge.agent.export import concept_set_csv
from phenoforge.agent.state import ConceptEntry, ConceptSet, Qualifier, UnmappableTerm
from phenoforge.csv_safe import FORMULA_STARTS, safe_cell
from phenoforge.dashboard.benchmark import report_csv
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult

HOSTILE = ['=HYPERLINK("http://evil","x")', "+SUM(1,2)", "-2+3", "@SUM(A1)", "\tTAB", "\rCR=1"]


def _cells(text: str) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(text, newline="")) for cell in row]


def _assert_no_formula(text: str) -> None:
    starts = [cell for cell in _cells(text) if cell.startswith(FORMULA_STARTS)]
    assert starts == []


@pytest.mark.parametrize("value", HOSTILE)
def test_safe_cell_quotes_formula_starts(value: str) -> None:
    assert safe_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["-0.25", "+3", "-1e-3", 0.5, -3, None, "Heart failure", "E11.9", ""])
def test_safe_cell_keeps_data(value: object) -> None:
    assert safe_cell(value) == value


@given(st.text())
def test_safe_cell_never_leaves_a_formula(value: str) -> None:
    cell = safe_cell(value)
    assert (
        not cell.startswith(FORMULA_STARTS)
        or cell.lstrip("+-").replace(".", "", 1).replace("e", "", 1).lstrip("+-").isdigit()
    )
    assert cell.removeprefix("'") == value or cell == value


def test_audit_csv_neutralises_reviewer_and_description() -> None:
    records = [
        DecisionRecord(
            decision_id=i,
            session_id="s",
            decided_at="t",
            reviewer=value,
            code="E11.9",
            decision="accept",
            expand_descendants=False,
            terms=value,
            description=value,
        )
        for i, value in enumerate(HOSTILE)
    ]
    text = audit_csv(records)
    _assert_no_formula(text)
    assert len(list(csv.reader(io.StringIO(text, newline="")))) == 1 + len(HOSTILE)  # a CR never splits a row
    assert '\'=HYPERLINK(""http://evil"",""x"")' in text  # quoted, not dropped


def test_concept_set_csv_neutralises_terms_and_reasons() -> None:
    concept_set = ConceptSet(
        description=HOSTILE[0],
        entries=[
            ConceptEntry(
                code="E11.9",
                name="Type 2 diabetes mellitus without complications",
                tier="generated",
                source=f"bm25 for {HOSTILE[1]}",
                evidence=HOSTILE[3],
                terms=[HOSTILE[2]],
            )
        ],
        unmappable=[UnmappableTerm(term=value, reason=value) for value in HOSTILE],
        reviewer=HOSTILE[0],
        qualifiers=[Qualifier(text=value, kind="other") for value in HOSTILE],
    )
    text = concept_set_csv(concept_set)
    _assert_no_formula(text)
    assert "'@SUM(A1)" in _cells(text)


def test_benchmark_csv_neutralises_cohort_names_and_keeps_numbers() -> None:
    result = CohortEvalResult(
        cohort_id="@id",
        cohort_name=HOSTILE[0],
        method="bm25",
        predicted_codes=["E11.9"],
        ground_truth_codes=["E11.9"],
        coverage=1.0,
        over_inclusion_penalty=0.0,
        hierarchical_score=1.0,
    )
    report = BenchmarkReport(
        results=[result],
        mean_coverage_by_method={"bm25": 1.0},
        mean_over_inclusion_by_method={"bm25": 0.0},
        mean_hierarchical_score_by_method={"bm25": 1.0},
    )
    text = report_csv(report)
    _assert_no_formula(text)
    row = list(csv.reader(io.StringIO(text, newline="")))[1]
    assert row[:2] == ["'@id", "'" + HOSTILE[0]] and row[3] == "1.000000"
