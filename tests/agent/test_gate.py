"""The human gate on curated matches: proposals with their scope, ranked by a general rule; qualifiers no code
expresses listed back; nothing leaves Assemble without a named reviewer."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import duckdb
import pytest

from phenoforge.agent import audit, nodes, workflow
from phenoforge.agent.export import ExportUnavailable, concept_set_csv, concept_set_fhir_valueset
from phenoforge.agent.qualifiers import uncoded_qualifiers
from phenoforge.agent.scope import extra_words, name_marks, scope_key
from phenoforge.agent.state import CohortMatch, ConceptEntry, ConceptSet, Qualifier
from phenoforge.engine.curated import load_library


def fixed(terms: list[str]):
    return lambda description: list(terms)


def _match(name: str, **scope: object) -> CohortMatch:
    fields: dict[str, object] = {
        "library_id": "lib",
        "library_path": "/nowhere",
        "cohort_id": name.lower().replace(" ", "-"),
        "cohort_name": name,
        "retrieval_overlap": 0.5,
        "name_overlap": 1.0,
    }
    complicated, plain = name_marks(name)
    fields |= {"complicated": complicated, "plain": plain, "extra_words": extra_words({"hypertension"}, name)}
    return CohortMatch.model_validate(fields | scope)


@pytest.mark.parametrize(
    ("name", "complicated", "plain"),
    [
        ("Hypertension, complicated", True, False),
        ("Hypertension, uncomplicated", False, True),
        ("Diabetes with chronic complications", True, False),
        ("Diabetes without chronic complication", False, True),
        ("Diabetes with Glycemic, Unspecified, or No Complications", False, True),
        ("Heart failure", False, False),
    ],
)
def test_the_name_says_whether_a_cohort_is_the_condition_or_its_complications(
    name: str, complicated: bool, plain: bool
) -> None:
    assert name_marks(name) == (complicated, plain)


def test_the_condition_comes_before_its_complications_and_its_subtypes() -> None:
    complicated = _match("Hypertension, complicated", retrieval_overlap=0.9, own_share=0.9, chapters=["9", "15"])
    neighbour = _match("Hypertensive heart disease", retrieval_overlap=0.9, own_share=1.0, chapters=["9"])
    plain = _match("Hypertension, uncomplicated", retrieval_overlap=0.1, own_share=0.2, chapters=["9"], matched=False)
    assert neighbour.extra_words == ["heart"] and plain.extra_words == [] and complicated.extra_words == []
    ranked = sorted([complicated, neighbour, plain], key=scope_key)
    assert [m.cohort_name for m in ranked] == [plain.cohort_name, neighbour.cohort_name, complicated.cohort_name]
    wide = _match("Hypertension", own_share=0.3, chapters=["9", "15"])
    narrow = _match("Hypertension", own_share=0.9, chapters=["9"], cohort_id="other")
    assert sorted([wide, narrow], key=scope_key)[0] is narrow  # more of it in the term's own categories


@pytest.fixture
def diabetes_library(tmp_path: Path) -> Path:
    from tests.fixture_library import write_icd_library

    return write_icd_library(
        tmp_path / "libraries" / "dm",
        {
            "dm-cx": ("Diabetes, complicated", ["E11.2", "E11.5", "E11.6", "E10.1"], True),
            "dm-uncx": ("Diabetes, uncomplicated", ["E11.9", "E10.9"], True),
            "hf": ("Heart failure", ["I50"], True),
        },
        "dmlib",
    )


def test_the_uncomplicated_cohort_is_proposed_first_with_its_scope(
    fixture_con: duckdb.DuckDBPyConnection, diabetes_library: Path
) -> None:
    state = nodes.new_state("adults with diabetes", "s", library_paths=[diabetes_library])
    state = nodes.decompose(state, fixed(["diabetes"]))
    state = nodes.check_curated(state, fixture_con, libraries=[load_library(diabetes_library)])
    term = state.terms[0]
    assert term.status == "proposed"
    keys = [match.key for match in term.proposals]
    assert keys[0] == "dmlib/dm-uncx" and "dmlib/dm-cx" in keys and "dmlib/hf" not in keys
    first, complicated = term.proposals[0], next(m for m in term.proposals if m.key == "dmlib/dm-cx")
    assert first.rank == 1 and first.plain and not first.complicated
    assert first.n_codes == 2 and set(first.categories) == {"E10", "E11"}
    assert complicated.complicated and "complicated" in complicated.scope_note
    assert complicated.n_codes > first.n_codes and "codes no other proposal has" in complicated.difference
    assert first.chapters == ["Endocrine, nutritional and metabolic diseases (E00-E89)"]


def test_qualifiers_no_code_expresses_are_listed_with_their_kind() -> None:
    found = uncoded_qualifiers("adults hospitalized with heart failure", ["heart failure"])
    assert [(q.kind, q.text) for q in found] == [("age or sex", "adults"), ("setting", "hospitalized")]
    found = uncoded_qualifiers("type 2 diabetes on metformin for 6 months", ["type 2 diabetes"])
    assert [(q.kind, q.text) for q in found] == [("treatment", "on metformin"), ("time", "for 6 months")]
    assert uncoded_qualifiers("patients with high blood pressure", ["hypertension"]) == []  # a lay name, covered
    found = uncoded_qualifiers("heart failure without diabetes, NYHA class 3", ["heart failure"])
    assert [(q.kind, q.text) for q in found] == [
        ("exclusion", "without diabetes"),
        ("score or lab value", "nyha class 3"),
    ]


def test_a_description_of_only_qualifiers_keeps_them_all() -> None:
    found = uncoded_qualifiers("adults over 65 in the ICU within 30 days", [])
    assert [q.kind for q in found] == ["age or sex", "setting", "time"]
    assert [q.text for q in found] == ["adults over 65", "in the icu", "within 30 days"]


def test_nothing_leaves_without_a_named_reviewer(fixture_con: duckdb.DuckDBPyConnection, fixture_library: Path) -> None:
    state = workflow.start(
        fixture_con, "adults hospitalized with asthma", fixed(["asthma"]), library_paths=[fixture_library]
    )
    assert [(q.kind, q.text) for q in state.qualifiers] == [("age or sex", "adults"), ("setting", "hospitalized")]
    with pytest.raises(nodes.GateError, match="name the reviewer") as refused:
        workflow.finish(state, fixture_con)
    assert "confirm or replace the curated cohort proposed for 'asthma'" in str(refused.value)
    with pytest.raises(nodes.GateError, match="only spaces"):
        workflow.with_reviewer(state, "   ")
    with pytest.raises(nodes.GateError, match="only spaces"):
        workflow.settle(state, fixture_con, "asthma", "fixlib/fix-ASTHMA", " \t ")
    state = workflow.settle(state, fixture_con, "asthma", "fixlib/fix-ASTHMA", "  Ann   Lee ")
    assert state.reviewer == "Ann Lee"
    done = workflow.finish(state, fixture_con)
    assert done.concept_set is not None and done.concept_set.reviewer == "Ann Lee"
    rows = list(csv.DictReader(io.StringIO(concept_set_csv(done.concept_set))))
    assert {row["reviewer"] for row in rows} == {"Ann Lee"}
    qualifiers = [(row["source"], row["terms"]) for row in rows if row["tier"] == "qualifier"]
    assert qualifiers == [("age or sex", "adults"), ("setting", "hospitalized")]
    assert all("other criteria" in row["evidence"] for row in rows if row["tier"] == "qualifier")
    value_set = concept_set_fhir_valueset(fixture_con, done.concept_set)
    assert "reviewed by Ann Lee" in value_set["description"] and "setting: hospitalized" in value_set["description"]
    trail = audit.decisions(state.session_id)
    assert [(r.decision, r.reviewer) for r in trail] == [
        ("qualifier", ""),
        ("qualifier", ""),
        ("confirm-cohort", "Ann Lee"),
    ]


def test_an_export_of_a_set_with_no_reviewer_is_refused(fixture_con: duckdb.DuckDBPyConnection) -> None:
    entry = ConceptEntry(code="J45.20", name="Mild intermittent asthma", tier="curated", source="t", evidence="t")
    unreviewed = ConceptSet(description="asthma", entries=[entry], qualifiers=[Qualifier(text="adults")])
    with pytest.raises(ExportUnavailable, match="names no reviewer"):
        concept_set_csv(unreviewed)
    with pytest.raises(ExportUnavailable, match="names no reviewer"):
        concept_set_fhir_valueset(fixture_con, unreviewed)


def test_a_session_saved_before_the_gate_gets_its_cohort_back_as_a_proposal(fixture_con, fixture_library) -> None:
    """A cohort taken without a reviewer (the old rule) must not slip through on resume."""
    state = workflow.start(fixture_con, "asthma", fixed(["asthma"]), library_paths=[fixture_library])
    proposal = state.terms[0].proposals[0]
    old = state.model_copy(
        update={
            "terms": [
                state.terms[0].model_copy(update={"status": "curated", "curated": proposal, "proposals": []}),
            ]
        }
    )
    assert old.unsettled  # a curated term nobody confirmed
    upgraded = workflow.upgrade(old)
    assert upgraded.terms[0].status == "proposed" and upgraded.terms[0].proposals[0].key == proposal.key
    assert [problem for problem in nodes.gate_problems(upgraded) if "asthma" in problem]


def test_a_description_of_only_qualifiers_is_listed_back_and_still_needs_a_reviewer(
    fixture_con: duckdb.DuckDBPyConnection, fixture_library: Path
) -> None:
    state = workflow.start(
        fixture_con, "adults over 65 in the ICU within 30 days", fixed([]), library_paths=[fixture_library]
    )
    assert state.terms == [] and "the decomposer found no clinical condition in the description" in state.notes
    assert [q.kind for q in state.qualifiers] == ["age or sex", "setting", "time"]
    with pytest.raises(nodes.GateError, match="name the reviewer"):
        workflow.finish(state, fixture_con)
    done = workflow.finish(workflow.with_reviewer(state, "ann"), fixture_con)
    rows = list(csv.DictReader(io.StringIO(concept_set_csv(done.concept_set))))
    assert [row["tier"] for row in rows] == ["unmappable", "qualifier", "qualifier", "qualifier"]
