"""The vocabulary-grounded offline decomposer, on the fixture vocabulary.

The fixture knows diabetes (types 1 and 2), obesity, heart failure, atrial fibrillation, peripheral
vascular disease, asthma and femur fractures, and nothing about drugs, settings or procedures: every
qualifier below is dropped because no diagnosis names it, not because a list does.
"""

from __future__ import annotations

import duckdb
import pytest

from phenoforge.agent.lay_terms import LAY_TERMS, SPELLING
from phenoforge.agent.offline import FRAMING_WORDS, GroundedDecomposer, get_grounding, normalise, offline_decomposer


@pytest.fixture(scope="module")
def decompose(fixture_con: duckdb.DuckDBPyConnection) -> GroundedDecomposer:
    return offline_decomposer(fixture_con)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("description", "expected"),
    [
        ("adults with type 2 diabetes mellitus", ["type 2 diabetes mellitus"]),
        # a drug, a lab threshold and a time window match no diagnosis
        (
            "adults with type 2 diabetes inadequately controlled on metformin with an HbA1c of 7.5% for 3 months",
            ["type 2 diabetes"],
        ),
        # settings and procedures
        ("patients admitted to the icu with heart failure referred for catheter ablation", ["heart failure"]),
        ("children with asthma using inhaled bronchodilators", ["asthma"]),
        # lists keep every condition
        (
            "patients with asthma, heart failure, or atrial fibrillation",
            ["asthma", "heart failure", "atrial fibrillation"],
        ),
        ("patients with type 1 or type 2 diabetes", ["type 1 diabetes", "type 2 diabetes"]),
        # severity modifiers stay attached to their condition
        ("adults with mild intermittent asthma", ["mild intermittent asthma"]),
        ("adults with chronic systolic heart failure", ["chronic systolic heart failure"]),
        # an exclusion is not the population
        ("adults with obesity (BMI of 30 or greater) without type 2 diabetes", ["obesity"]),
        # a body site alone is not a condition; the fracture is
        ("adults with a femur fracture after a fall", ["femur fracture"]),
        # lay wording and abbreviations, then grounded like any span
        ("patients with afib on warfarin", ["atrial fibrillation"]),
        ("adults with T2DM", ["type 2 diabetes mellitus"]),
    ],
)
def test_decomposition(decompose: GroundedDecomposer, description: str, expected: list[str]) -> None:
    assert decompose(description) == expected


def test_no_condition_gives_no_terms(decompose: GroundedDecomposer) -> None:
    assert decompose("adults aged 40 to 75 years") == []
    assert decompose("malignant") == []  # a severity word folded to a noun is still not a condition
    assert decompose("patients in the emergency department") == []
    assert decompose("") == []


def test_a_span_the_vocabulary_does_not_know_is_dropped(decompose: GroundedDecomposer) -> None:
    """No phrase list: an invented qualifier is dropped because no diagnosis contains its words."""
    assert decompose("adults with heart failure enrolled in the zorblax programme") == ["heart failure"]
    assert decompose("patients with zorblax disease") == []


def test_grounding_is_built_once_per_vocabulary(fixture_con: duckdb.DuckDBPyConnection) -> None:
    first = get_grounding(fixture_con)
    assert get_grounding(fixture_con) is first
    assert "asthma" in first.solo and "fracture" in first.heads
    assert "femur" not in first.heads  # a site qualifies a fracture; it does not head a diagnosis
    assert all(
        code[0] not in "TVWXYZ" for code in (first.index.codes[row] for rows in first.postings.values() for row in rows)
    )


def test_lay_terms_name_their_source() -> None:
    for lay, (clinical, source) in LAY_TERMS.items():
        assert lay == lay.lower() and clinical and clinical != lay
        assert len(source) >= 8, lay
    assert normalise("Ischaemic stroke in an oedematous patient") == "ischemic stroke in an edematous patient"
    assert all(british != american for british, american in SPELLING.items())


def test_framing_words_are_general_not_conditions() -> None:
    clinical = {"diabetes", "asthma", "failure", "fracture", "obesity", "stroke", "infection", "pregnancy"}
    assert not clinical & FRAMING_WORDS


class StubDense:
    """A ready dense index answering from a table: span text -> nearest (code, cosine) pairs."""

    is_ready = True

    def __init__(self, table: dict[str, list[tuple[str, float]]]) -> None:
        self.table = table
        self.calls = 0
        self.texts: list[str] = []

    def rankings(self, texts: list[str], n: int) -> list[list[tuple[str, float]]]:
        self.calls += 1
        self.texts.extend(texts)
        return [self.table.get(text, [("I50", 0.7)])[:n] for text in texts]


def with_dense(fixture_con: duckdb.DuckDBPyConnection, table: dict[str, list[tuple[str, float]]]) -> GroundedDecomposer:
    return GroundedDecomposer(get_grounding(fixture_con), dense=StubDense(table))  # type: ignore[arg-type]


def test_dense_drops_a_condition_inside_a_procedure_name(fixture_con: duckdb.DuckDBPyConnection) -> None:
    description = "adults with a femur fracture fixation"
    assert offline_decomposer(fixture_con)(description) == ["femur fracture"]  # BM25 alone keeps the site
    table = {"femur fracture fixation": [("Z47.89", 0.9)], "femur fracture": [("S72", 0.8)]}
    assert with_dense(fixture_con, table)(description) == []
    # the longer span nearer to a diagnosis than to the aftercare code: the fracture stays
    table["femur fracture fixation"] = [("S72", 0.85), ("Z47.89", 0.7)]
    assert with_dense(fixture_con, table)(description) == ["femur fracture"]


def test_dense_needs_a_diagnosis_near_the_span(fixture_con: duckdb.DuckDBPyConnection) -> None:
    description = "patients with heart failure"
    far = {"heart failure": [("Z99.89", 0.5), ("I50", 0.4)]}
    assert with_dense(fixture_con, far)(description) == []
    near = {"heart failure": [("I50", 0.61)]}
    assert with_dense(fixture_con, near)(description) == ["heart failure"]


def test_a_status_code_must_be_clearly_nearer_to_overrule_a_diagnosis(fixture_con: duckdb.DuckDBPyConnection) -> None:
    description = "adults with atrial fibrillation"
    close = {"atrial fibrillation": [("Z86.79", 0.70), ("I48", 0.69)]}
    assert with_dense(fixture_con, close)(description) == ["atrial fibrillation"]
    clear = {"atrial fibrillation": [("Z86.79", 0.80), ("I48", 0.69)]}
    assert with_dense(fixture_con, clear)(description) == []


def test_dense_is_one_call_per_chunk_and_unready_is_ignored(fixture_con: duckdb.DuckDBPyConnection) -> None:
    stub = StubDense({})
    decompose = GroundedDecomposer(get_grounding(fixture_con), dense=stub)  # type: ignore[arg-type]
    assert decompose("patients with asthma, heart failure or atrial fibrillation") == [
        "asthma",
        "heart failure",
        "atrial fibrillation",
    ]
    assert stub.calls == 3 and "patients" not in stub.texts  # framing words are never embedded
    stub.is_ready = False  # type: ignore[misc]
    assert GroundedDecomposer(get_grounding(fixture_con), dense=stub).dense is None  # type: ignore[arg-type]


def test_coordinated_numbered_modifiers_each_keep_their_word(decompose: GroundedDecomposer) -> None:
    assert normalise("stage 3 or 4 ckd") == "stage 3 or stage 4 chronic kidney disease"
    assert normalise("stage 2-4") == "stage 2 or stage 3 or stage 4"
    assert normalise("stage iii or iv") == "stage 3 or stage 4"
    assert decompose("patients with type 1 or 2 diabetes") == ["type 1 diabetes", "type 2 diabetes"]


def test_adjacent_spans_stay_one_noun_phrase(decompose: GroundedDecomposer) -> None:
    # no single diagnosis holds all four words, but nothing separates them: one term, not two
    assert decompose("adults with asthma heart failure") == ["asthma heart failure"]
    assert decompose("adults with asthma and heart failure") == ["asthma", "heart failure"]


class PregnancyAware(GroundedDecomposer):
    """The fixture vocabulary has no chapter 15: pretend every condition has an 'in pregnancy' code."""

    def _codes_with_all(self, tokens: list[str]) -> list[str]:
        return ["O99.51"] if "pregnancy" in tokens else []


def test_pregnancy_anywhere_in_the_description_is_context(fixture_con: duckdb.DuckDBPyConnection) -> None:
    decompose = PregnancyAware(get_grounding(fixture_con))
    assert decompose("pregnant women with asthma") == ["asthma in pregnancy"]
    assert decompose("women who developed asthma during the second trimester of pregnancy") == ["asthma in pregnancy"]
    assert decompose("women with asthma who are not pregnant") == ["asthma"]


def test_only_abbreviations_typed_in_capitals_and_unknown_to_the_vocabulary_are_spelt_out() -> None:
    from phenoforge.agent.lay_terms import spell_out_abbreviations

    known = {"copd", "heart"}.__contains__
    assert spell_out_abbreviations("adults with CHF and COPD", known) == (
        "adults with congestive heart failure and COPD",
        {"CHF": "congestive heart failure"},
    )
    assert spell_out_abbreviations("Chf or chf or MS", known) == (
        "Chf or chf or multiple sclerosis",
        {"MS": "multiple sclerosis"},
    )
    assert spell_out_abbreviations("ZZQX heart", known) == ("ZZQX heart", {})  # not in the table: as typed


def test_a_typed_code_becomes_its_name_and_an_unknown_code_gives_no_term(decompose: GroundedDecomposer) -> None:
    """ "I50.9" used to decompose to nothing: a code is not a word of any diagnosis."""
    assert decompose("adults with I50.9") == ["Heart failure, unspecified"]
    assert decompose("patients with i509 or asthma") == ["Heart failure, unspecified", "asthma"]
    assert decompose("adults with Q99.99 and asthma") == ["asthma"]  # reported by workflow.start, not guessed
    assert decompose("adults with T2DM") == ["type 2 diabetes mellitus"]  # an abbreviation, not a code
    # a bare category after a name is part of the name, not a code to search ("CMS-HCC V28")
    assert "Heart failure" not in decompose("asthma as coded in the CMS-HCC I50 model")
    assert sorted(decompose("asthma or I50")) == ["Heart failure", "asthma"]
