"""Nodes, the persisted workflow, the audit trail and the exports, on the fixture vocabulary."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phenoforge import config
from phenoforge.agent import audit, nodes, workflow
from phenoforge.agent.errors import DescriptionError
from phenoforge.agent.export import ExportUnavailable, concept_set_circe, concept_set_csv, subtree_roots
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import expand_descendants


def fixed(terms: list[str]):
    return lambda description: list(terms)


def run(con, library: Path, terms: list[str], description: str = "a study population", confirm: bool = True):
    """The nodes up to the gate; with ``confirm`` the reviewer confirms every first curated proposal."""
    state = nodes.new_state(description, "s1", reviewer="ann", library_paths=[library])
    state = nodes.decompose(state, fixed(terms))
    state = nodes.check_curated(state, con, libraries=[load_library(library)])
    if confirm:
        for term in state.terms:
            if term.status == "proposed":
                state = nodes.settle_proposal(state, term.term, term.proposals[0].key, "ann")
    return nodes.generate(state, con)


def test_curated_match_when_names_and_retrieval_agree(
    fixture_con: duckdb.DuckDBPyConnection, fixture_library: Path
) -> None:
    proposed = run(fixture_con, fixture_library, ["asthma"], confirm=False)
    term = proposed.terms[0]
    assert term.status == "proposed" and term.curated is None  # a proposal, never taken without the reviewer
    assert term.proposals[0].cohort_id == "fix-ASTHMA" and term.proposals[0].rank == 1
    assert nodes.gate_problems(proposed) == [
        "confirm or replace the curated cohort proposed for 'asthma' (or decline it for generated candidates)"
    ]
    state = run(fixture_con, fixture_library, ["asthma"])
    term = state.terms[0]
    assert term.status == "curated" and term.settled_by == "ann"
    assert term.curated is not None and term.curated.cohort_id == "fix-ASTHMA"
    assert term.curated.name_overlap == 1.0 and term.curated.retrieval_overlap >= nodes.RETRIEVAL_THRESHOLD
    assert term.settlement is not None and term.settlement.startswith("confirmed the proposed cohort fixlib/fix-ASTHMA")
    assert state.candidates == []  # a confirmed cohort needs no generated candidates
    assert nodes.gate_problems(state) == []


def test_exact_name_settles_near_duplicates(fixture_con, fixture_library) -> None:
    term = run(fixture_con, fixture_library, ["heart failure"], confirm=False).terms[0]
    assert term.status == "proposed" and term.proposals[0].cohort_id == "fix-HF"  # the term itself, first
    assert term.note and "2 cohorts matched" in term.note and "proposed first: fixlib/fix-HF" in term.note


def test_ambiguous_match_is_reported_not_guessed(fixture_con, fixture_library) -> None:
    state = run(fixture_con, fixture_library, ["atrial fibrillation"], confirm=False)
    term = state.terms[0]
    assert term.status == "proposed" and term.curated is None
    assert {match.cohort_id for match in term.proposals} == {"fix-AF1", "fix-AF2"}
    assert state.candidates == [], "a proposed term is searched only if the reviewer declines its cohorts"
    other = next(match for match in term.proposals if match.rank == 2)
    chosen = nodes.settle_proposal(state, "atrial fibrillation", other.key, "ann", reason="  narrower  ")
    settled = chosen.terms[0]
    assert settled.status == "curated" and settled.curated.key == other.key
    assert settled.settlement == (
        f"replaced the proposed {term.proposals[0].key} '{term.proposals[0].cohort_name}' with {other.key} "
        f"'{other.cohort_name}' (narrower)"
    )
    assembled = nodes.assemble(chosen, fixture_con)
    assert {entry.source for entry in assembled.concept_set.entries} == {other.key}
    assert assembled.concept_set.reviewer == "ann"
    with pytest.raises(nodes.GateError, match="not one of the cohorts proposed"):
        nodes.settle_proposal(state, "atrial fibrillation", "fixlib/fix-HF", "ann")
    with pytest.raises(nodes.GateError, match="only spaces"):
        nodes.settle_proposal(state, "atrial fibrillation", other.key, "   ")
    declined = nodes.generate(nodes.settle_proposal(state, "atrial fibrillation", None, "ann"), fixture_con)
    assert declined.terms[0].status == "generated" and declined.candidates
    assert declined.terms[0].settlement.startswith("declined the 2 curated proposals")


def test_name_alone_is_not_enough(fixture_con, fixture_library) -> None:
    # "femur fracture": no cohort name shares a word; falls through to generation with hints
    state = run(fixture_con, fixture_library, ["fracture of femur"])
    term = state.terms[0]
    assert term.status == "generated"
    codes = [candidate.code for candidate in state.candidates]
    assert "S72" in codes
    s72 = state.candidate("S72")
    assert s72.n_descendants > 0 and "codes below" in s72.hierarchy_hint
    assert s72.sources[0].term == "fracture of femur" and s72.sources[0].retriever == "hybrid"
    assert s72.sources[0].rank >= 1


def test_unsearchable_term_is_unmappable_with_reason(fixture_con, fixture_library) -> None:
    state = nodes.assemble(run(fixture_con, fixture_library, ["zzqx"]), fixture_con)
    assert state.terms[0].status == "unmappable"
    assert state.concept_set.unmappable[0].term == "zzqx"
    assert "retrieval found nothing" in state.concept_set.unmappable[0].reason


def test_gate_expand_and_provenance(fixture_con, fixture_library) -> None:
    state = run(fixture_con, fixture_library, ["asthma", "fracture of femur"])
    others = [c.code for c in state.candidates if c.code != "S72"]
    state = nodes.confirm(state, [("S72", "accept", True)] + [(code, "reject", False) for code in others], "ann")
    state = nodes.assemble(state, fixture_con)
    entries = {entry.code: entry for entry in state.concept_set.entries}
    for code in expand_descendants(fixture_con, "J45"):
        assert entries[code].tier == "curated" and entries[code].source == "fixlib/fix-ASTHMA"
    for code in expand_descendants(fixture_con, "S72"):
        assert entries[code].tier == "generated"
    assert entries["S72.001A"].via_descendants_of == "S72"
    assert "accepted by ann" in entries["S72"].evidence
    assert state.concept_set.descendant_roots == ["S72"]
    assert len(state.concept_set.codes) == len(set(state.concept_set.codes))
    items, roots = subtree_roots(fixture_con, state.concept_set.codes)  # what a Circe file lists, once each
    assert {"S72", "J45"} <= roots and "S72.001A" not in items
    with pytest.raises(ExportUnavailable, match="OMOP concept ids"):  # this vocabulary's ids are its own
        concept_set_circe(fixture_con, state.concept_set)
    rows = list(csv.DictReader(io.StringIO(concept_set_csv(state.concept_set))))
    assert {row["code"] for row in rows if row["code"]} == set(entries)


def test_all_rejected_term_is_unmappable(fixture_con, fixture_library) -> None:
    state = run(fixture_con, fixture_library, ["fracture of femur"])
    state = nodes.confirm(state, [(c.code, "reject", False) for c in state.candidates], "ann")
    state = nodes.assemble(state, fixture_con)
    assert state.concept_set.entries == []
    assert "rejected by the reviewer" in state.concept_set.unmappable[0].reason


def test_confirm_validates_input(fixture_con, fixture_library) -> None:
    state = run(fixture_con, fixture_library, ["fracture of femur"])
    with pytest.raises(ValueError, match="reviewer"):
        nodes.confirm(state, [("S72", "accept", False)], "  ")
    with pytest.raises(ValueError, match="not a candidate"):
        nodes.confirm(state, [("I50", "accept", False)], "ann")


def test_session_survives_restart_with_audit_trail(fixture_con, fixture_library) -> None:
    state = workflow.start(
        fixture_con,
        "adults with asthma or a femur fracture",
        fixed(["asthma", "fracture of femur"]),
        reviewer="ann",
        library_paths=[fixture_library],
    )
    state = workflow.decide(state, [("S72", "accept", True)], reviewer="ann")
    state = workflow.decide(state, [("S72.0", "reject", False)], reviewer="bob")
    # "restart": nothing in memory, read back from the app-state database
    resumed = workflow.resume(state.session_id)
    assert resumed == state
    assert resumed.candidate("S72").decision == "accept" and resumed.candidate("S72.0").reviewer == "bob"
    state = workflow.settle(state, fixture_con, "asthma", "fixlib/fix-ASTHMA", "ann", reason="as proposed")
    resumed = workflow.resume(state.session_id)
    assert resumed == state
    trail = audit.decisions(state.session_id)
    assert [(r.code, r.decision, r.reviewer) for r in trail] == [
        ("", "qualifier", ""),  # "adults": no code says it; noted when the session starts
        ("S72", "accept", "ann"),
        ("S72.0", "reject", "bob"),
        ("fixlib/fix-ASTHMA", "confirm-cohort", "ann"),
    ]
    assert trail[0].terms == "age or sex: adults" and "other criteria" in trail[0].reason
    assert trail[3].terms == "asthma" and trail[3].reason.endswith("(as proposed)")
    trail = trail[1:]
    assert trail[0].expand_descendants is True and trail[0].description == state.description
    assert "fracture of femur" in trail[0].terms
    exported = list(csv.DictReader(io.StringIO(audit.audit_csv(trail))))
    assert exported[1]["reviewer"] == "bob"
    assert json.loads(audit.audit_json(trail))[0]["code"] == "S72"
    summaries = audit.list_sessions()
    assert summaries[0].session_id == state.session_id and summaries[0].n_decisions == 4
    final = workflow.finish(resumed, fixture_con)
    assert workflow.resume(state.session_id).stage == "assembled"
    assert "S72.001A" in final.concept_set.codes
    with sqlite3.connect(config.app_state_db_path()) as con:
        assert con.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"assembly_session", "assembly_decision"} <= tables


def test_failed_save_records_nothing(fixture_con, fixture_library) -> None:
    state = workflow.start(
        fixture_con, "femur fracture", fixed(["fracture of femur"]), reviewer="ann", library_paths=[fixture_library]
    )
    # a decision row for a code the state has not applied is refused, and the whole write rolls back
    with pytest.raises(Exception, match="not applied"):
        audit.save_state(state.model_copy(update={"stage": "confirming"}), decisions=[("S72", "accept", False)])
    assert audit.decisions(state.session_id) == []
    assert workflow.resume(state.session_id).stage == "generated"


def test_unknown_session(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no assembly session"):
        workflow.resume("nope")


@pytest.mark.parametrize("blank", ["", "  ", "\n\t "])
def test_start_requires_a_description(fixture_con, fixture_library, blank: str) -> None:
    """A user error with a message (shown on the page and by the CLI), not a ValueError traceback."""
    with pytest.raises(DescriptionError, match="describe the population"):
        workflow.start(fixture_con, blank, fixed(["asthma"]), library_paths=[fixture_library])
    assert audit.list_sessions() == []


def test_start_bounds_the_description(fixture_con, fixture_library) -> None:
    too_long = "adults with asthma " * (workflow.MAX_DESCRIPTION_CHARS // 10)
    with pytest.raises(DescriptionError, match=f"keep it under {workflow.MAX_DESCRIPTION_CHARS:,}"):
        workflow.start(fixture_con, too_long, fixed(["asthma"]), library_paths=[fixture_library])
    assert audit.list_sessions() == []


def test_no_library_means_no_curated_check(fixture_con, fixture_library) -> None:
    state = workflow.start(fixture_con, "adults with asthma", fixed(["asthma"]), library_paths=[])
    assert state.terms[0].status == "generated" and state.candidates
    assert any("no cohort library is checked" in note for note in state.notes)


def test_a_corrupt_cohort_file_is_named_not_silently_skipped(fixture_con, fixture_library) -> None:
    """Issue 12 item 7: the term fell through to generated candidates with no word about why."""
    library = load_library(fixture_library)
    cohort_file = fixture_library / library.cohort("fix-ASTHMA").file
    cohort_file.write_text('{"ConceptSets": [', encoding="utf-8")
    state = workflow.start(fixture_con, "adults with asthma", fixed(["asthma"]), library_paths=[fixture_library])
    assert any("fixlib/fix-ASTHMA is skipped" in note and str(cohort_file) in note for note in state.notes)
    assert state.terms[0].status != "curated"


def test_generate_leaves_its_input_state_alone(fixture_con, fixture_library) -> None:
    """The module promises nodes return new states; generate used to append sources to the input's candidates."""
    state = run(fixture_con, fixture_library, ["fracture of femur"])
    again = state.model_copy(
        update={
            "terms": [*state.terms, state.terms[0].model_copy(update={"term": "femur fracture", "status": "pending"})]
        }
    )
    before = again.model_dump()
    after = nodes.generate(again, fixture_con)
    assert again.model_dump() == before
    shared = [c for c in after.candidates if len(c.sources) == 2]
    assert shared, "the second term should add a source to candidates the first term found"
    assert all(len(c.sources) == 1 for c in again.candidates)


def test_a_set_builder_generates_billable_codes_with_its_reason(fixture_con, fixture_library) -> None:
    """Issue 9: the Assemble workflow's generate step runs a set builder when asked, provenance kept."""
    state = workflow.start(
        fixture_con, "adults with asthma", fixed(["asthma"]), reviewer="ann", library_paths=[], generator="subtree"
    )
    assert state.generator == "subtree"
    term = state.terms[0]
    assert term.status == "generated" and term.note and term.note.startswith("subtree:")
    assert term.candidate_codes and all(code.startswith("J45") for code in term.candidate_codes)
    assert all(
        c.billable and c.sources[0].retriever == "subtree" and " via " in c.sources[0].detail for c in state.candidates
    )
    accepted = workflow.decide(state, [(c.code, "accept", False) for c in state.pending], "ann")
    done = workflow.finish(accepted, fixture_con)
    entries = done.concept_set.entries
    assert entries and all(e.tier == "generated" and " via " in e.evidence for e in entries)
    with pytest.raises(ValueError, match="unknown generator"):
        workflow.start(fixture_con, "adults with asthma", fixed(["asthma"]), library_paths=[], generator="top25")


def _cohort(cohort_id: str, name: str, codes: list[str]) -> nodes.IndexedCohort:
    return nodes.IndexedCohort(
        library_id="lib",
        library_path="/nowhere",
        cohort_id=cohort_id,
        cohort_name=name,
        codes=frozenset(codes),
        ordered_codes=tuple(codes),
        words=frozenset(nodes.content_words(name)),
    )


AF_HITS = ["I48", "I48.0", "I48.91"]
AF_CODES = ["I48", "I48.0", "I48.91"]


def test_a_broader_cohort_name_matches_on_retrieval_alone(fixture_con) -> None:
    cohorts = [_cohort("arr", "Specified heart arrhythmias", AF_CODES), _cohort("asthma", "Asthma", ["J45"])]
    matches, _near = nodes.match_term(fixture_con, "atrial fibrillation", cohorts, AF_HITS)
    assert [match.cohort_id for match in matches] == ["arr"]
    assert matches[0].by_retrieval_only and matches[0].name_overlap == 0.0


def test_retrieval_alone_needs_one_cohort_and_most_of_the_hits(fixture_con) -> None:
    two = [_cohort("arr", "Specified heart arrhythmias", AF_CODES), _cohort("rhythm", "Rhythm problems", AF_CODES)]
    assert nodes.match_term(fixture_con, "atrial fibrillation", two, AF_HITS)[0] == []
    # a one-code cohort holding one of five hits is "100%" by the name rule's denominator, not by the hits
    tiny = [_cohort("paf", "Paroxysmal arrhythmia episodes", ["I48.0"])]
    hits = ["I48.0", "J45", "E11", "I50", "E66"]
    assert nodes.match_term(fixture_con, "atrial fibrillation", tiny, hits)[0] == []


def test_the_head_before_with_names_the_term(fixture_con) -> None:
    cohorts = [_cohort("hf", "Heart failure", ["I50", "I50.2", "I50.21", "I50.22", "I50.9"])]
    hits = ["I50.2", "I50.21", "I50.22", "I50.9", "I50"]
    matches, _near = nodes.match_term(fixture_con, "heart failure with reduced ejection fraction", cohorts, hits)
    assert len(matches) == 1 and matches[0].name_overlap == 1.0 and not matches[0].by_retrieval_only


def test_retrieval_only_match_is_explained(fixture_con, tmp_path: Path) -> None:
    from tests.fixture_library import write_icd_library

    library = write_icd_library(
        tmp_path / "libraries" / "arr",
        {"arr": ("Specified heart arrhythmias", ["I48"], True), "asthma": ("Asthma", ["J45"], True)},
        "arrlib",
    )
    term = run(fixture_con, library, ["atrial fibrillation"], confirm=False).terms[0]
    assert term.status == "proposed" and term.proposals[0].cohort_id == "arr" and term.proposals[0].by_retrieval_only
    assert term.note is not None and "retrieval alone" in term.note


def test_a_typed_code_is_searched_by_its_name_and_an_unknown_one_is_reported(fixture_con, fixture_library) -> None:
    from phenoforge.agent.offline import offline_decomposer

    state = workflow.start(
        fixture_con,
        "adults with I50.9, Q99.99 or B12 anaemia",
        offline_decomposer(fixture_con),
        reviewer="ann",
        library_paths=[fixture_library],
    )
    assert "Heart failure, unspecified" in [term.term for term in state.terms]
    unknown = [note for note in state.notes if "not an ICD-10-CM code" in note]
    assert unknown == [
        "Q99.99 is not an ICD-10-CM code in this vocabulary, so nothing was searched for it: check the code, "
        "or name the condition in words"
    ]  # "B12" may be a word of a description ("vitamin B12"): not reported


def test_a_circe_file_from_an_athena_vocabulary_carries_the_omop_concept_ids(athena_con) -> None:
    """The Circe export's CONCEPT_ID is the download's own OMOP id, never a number phenoforge made."""
    from phenoforge.agent.state import ConceptEntry, ConceptSet

    codes = ["E11.21", "E11.22"]
    concept_set = ConceptSet(
        description="type 2 diabetes with kidney complications",
        reviewer="ann",
        entries=[ConceptEntry(code=c, name=c, tier="generated", source="test", evidence="test") for c in codes],
    )
    items = concept_set_circe(athena_con, concept_set)["expression"]["items"]
    ids = {item["concept"]["CONCEPT_CODE"]: item["concept"]["CONCEPT_ID"] for item in items}
    downloaded = dict(
        athena_con.execute(
            "SELECT code, concept_id FROM concept WHERE vocabulary_id = 'ICD10CM' AND code IN ('E11.21', 'E11.22')"
        ).fetchall()
    )
    assert ids == downloaded == {"E11.21": 2002, "E11.22": 2003}  # the ids of the fixture's CONCEPT.csv


def test_the_fhir_valueset_is_valid_fhir_and_lists_every_code_with_the_system_and_release(
    fixture_con, fixture_library
) -> None:
    """Validated by a maintained FHIR model library (fhir.resources, R4B: ValueSet is unchanged from R4)."""
    from fhir.resources.R4B.valueset import ValueSet

    from phenoforge.agent.export import ICD10CM_SYSTEM, concept_set_fhir_json, concept_set_fhir_valueset
    from phenoforge.engine.db import read_metadata

    state = run(fixture_con, fixture_library, ["asthma", "fracture of femur"])
    state = nodes.confirm(state, [(c.code, "accept", False) for c in state.candidates], "ann")
    state = nodes.assemble(state, fixture_con)
    document = concept_set_fhir_valueset(fixture_con, state.concept_set, "s 1/é")
    parsed = ValueSet.model_validate_json(concept_set_fhir_json(fixture_con, state.concept_set, "s 1/é"))
    (include,) = parsed.compose.include
    assert include.system == ICD10CM_SYSTEM == "http://hl7.org/fhir/sid/icd-10-cm"
    assert include.version == read_metadata(fixture_con)["vocabulary_release"]
    assert [c.code for c in include.concept] == state.concept_set.codes  # every code, none added
    assert {c.display for c in include.concept} == {e.name for e in state.concept_set.entries}
    assert document["id"] == parsed.id and parsed.status == "draft"


def test_an_empty_concept_set_gives_no_valueset_that_would_mean_every_code(fixture_con) -> None:
    from phenoforge.agent.export import concept_set_fhir_valueset
    from phenoforge.agent.state import ConceptSet

    with pytest.raises(ExportUnavailable, match="empty"):  # an include without concepts is the whole system
        concept_set_fhir_valueset(fixture_con, ConceptSet(description="nothing"))


@settings(max_examples=60)
@given(set_id=st.text(max_size=80), description=st.text(min_size=1, max_size=300))
def test_any_session_id_and_description_give_a_valid_valueset(fixture_con, set_id: str, description: str) -> None:
    from fhir.resources.R4B.valueset import ValueSet

    from phenoforge.agent.export import concept_set_fhir_json
    from phenoforge.agent.state import ConceptEntry, ConceptSet

    entry = ConceptEntry(code="J45.20", name="Mild intermittent asthma", tier="curated", source="t", evidence="t")
    parsed = ValueSet.model_validate_json(
        concept_set_fhir_json(fixture_con, ConceptSet(description=description, entries=[entry], reviewer="a"), set_id)
    )
    assert parsed.compose.include[0].concept[0].code == "J45.20"


def test_a_description_of_only_unusual_whitespace_still_gives_a_valid_valueset(fixture_con) -> None:
    """Found by the property test above: a title of one no-break space is not a FHIR string."""
    from fhir.resources.R4B.valueset import ValueSet

    from phenoforge.agent.export import concept_set_fhir_json
    from phenoforge.agent.state import ConceptEntry, ConceptSet

    entry = ConceptEntry(code="J45.20", name="Mild intermittent asthma", tier="curated", source="t", evidence="t")
    text = concept_set_fhir_json(fixture_con, ConceptSet(description="\xa0", entries=[entry], reviewer="a"), "x")
    assert ValueSet.model_validate_json(text).title == "phenoforge concept set"
