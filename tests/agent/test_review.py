"""Review by branch: grouping by the hierarchy, relevance order, one action per branch, conflicts, reasons."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import duckdb

from phenoforge.agent import audit, nodes, review, workflow
from phenoforge.agent.export import concept_set_csv


def fixed(terms: list[str]):
    return lambda description: list(terms)


def _session(con: duckdb.DuckDBPyConnection, library: Path):
    return workflow.start(
        con, "femur fracture and type 2 diabetes", fixed(["fracture of femur", "diabetes"]), library_paths=[]
    )


def test_candidates_are_grouped_block_then_category_most_relevant_first(fixture_con, fixture_library) -> None:
    state = _session(fixture_con, fixture_library)
    found = review.branches(state, fixture_con)
    kinds = [branch.kind for branch in found]
    assert kinds[0] == "block"
    blocks = [branch for branch in found if branch.kind == "block"]
    assert [b.best_rank for b in blocks] == sorted(b.best_rank for b in blocks)  # most relevant block first
    for position, branch in enumerate(found):  # every category right under its block
        if branch.kind == "category":
            owner = next(b for b in reversed(found[:position]) if b.kind == "block")
            assert branch.parent == owner.code
            assert {c.code for c in branch.candidates} <= {c.code for c in owner.candidates}
    assert sum(len(b.candidates) for b in blocks) == len(state.candidates)  # each candidate in one block
    s72 = next(branch for branch in found if branch.code == "S72")
    assert s72.candidates[0].code == "S72"  # the category's own code leads its rows


def test_a_branch_is_included_with_descendants_in_one_action_and_conflicts_are_flagged(
    fixture_con, fixture_library
) -> None:
    state = _session(fixture_con, fixture_library)
    s72 = next(branch for branch in review.branches(state, fixture_con) if branch.code == "S72")
    state = workflow.decide(state, review.branch_decisions(s72, "accept"), "ann", reason="femur fractures in scope")
    included = [state.candidate(c.code) for c in s72.candidates]
    assert all(c is not None and c.decision == "accept" and c.reason == "femur fractures in scope" for c in included)
    assert state.candidate("S72").expand_descendants  # with its descendants
    assert review.conflicts(state, fixture_con) == []
    assert next(b for b in review.branches(state, fixture_con) if b.code == "S72").status == "included"
    # one code of the branch excluded: the branch is partly included, and the code enters anyway under S72
    inner = next(c.code for c in s72.candidates if c.code != "S72")
    state = workflow.decide(state, [(inner, "reject", False)], "ann", reason="not this one")
    flagged = review.conflicts(state, fixture_con)
    assert any("S72" in text and "partly included" in text for text in flagged)
    assert f"{inner} is excluded but enters the set anyway: S72 is included with its descendants" in flagged
    trail = [r for r in audit.decisions(state.session_id) if r.decision in ("accept", "reject")]
    assert {r.reason for r in trail} == {"femur fractures in scope", "not this one"}
    state = workflow.decide(state, [(c.code, "reject", False) for c in state.pending], "ann")
    done = workflow.finish(state, fixture_con)
    rows = {row["code"]: row for row in csv.DictReader(io.StringIO(concept_set_csv(done.concept_set)))}
    assert rows["S72"]["decision"] == "accept with descendants" and rows["S72"]["reason"] == "femur fractures in scope"
    below = next(row for row in rows.values() if row["via_descendants_of"] == "S72")
    assert below["decision"] == "accept S72 with descendants"


def test_a_curated_choice_carries_its_reason_into_the_export(fixture_con, fixture_library) -> None:
    state = workflow.start(fixture_con, "asthma", fixed(["asthma"]), library_paths=[fixture_library])
    state = workflow.settle(state, fixture_con, "asthma", state.terms[0].proposals[0].key, "ann", reason="as cited")
    done = workflow.finish(state, fixture_con)
    rows = list(csv.DictReader(io.StringIO(concept_set_csv(done.concept_set))))
    assert {(row["decision"], row["reason"]) for row in rows if row["tier"] == "curated"} == {
        ("confirm-cohort", "as cited")
    }
    assert nodes.gate_problems(done) == []
