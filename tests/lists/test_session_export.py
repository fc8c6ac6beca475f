"""A reviewed session signed off as a version, and the version's CSV and FHIR exports."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import duckdb
import pytest

from phenoforge.agent import nodes
from phenoforge.agent.state import AssemblyState
from phenoforge.csv_safe import unescaped_cell
from phenoforge.engine.expansion import expand_descendants
from phenoforge.lists import store
from phenoforge.lists.export import VERSION_CSV_FIELDS, version_csv, version_fhir, version_fhir_json
from phenoforge.lists.session import draft_from_session, not_ready, save_session
from phenoforge.lists.store import VersionError
from tests.lists.conftest import draft


def test_a_session_becomes_a_version_with_provenance_decision_and_reason(
    reviewed_session: AssemblyState, fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    saved = save_session(reviewed_session, fixture_con, " Ann  Reviewer ", "asthma-fracture", "first", root=tmp_path)
    version = saved.version
    assert version.number == 1 and version.reviewer == "Ann Reviewer" and version.session_id == "s42"
    assert "decomposer offline, generator hybrid" in version.method and "fixlib" in version.method
    by_code = {entry.code: entry for entry in version.codes}
    assert set(by_code) == set(reviewed_session.concept_set.codes)  # type: ignore[union-attr]
    for code in expand_descendants(fixture_con, "J45"):
        assert by_code[code].decision == "curated" and by_code[code].provenance == "fixlib/fix-ASTHMA"
        assert "ann confirmed the proposed cohort fixlib/fix-ASTHMA" in by_code[code].reason
    assert by_code["S72"].decision == "accept" and by_code["S72"].decided_by == "ann" and by_code["S72"].decided_at
    rejected = {c.code for c in reviewed_session.candidates if c.decision == "reject"}
    assert rejected and {e.code for e in version.excluded} == rejected
    assert all(e.decision == "reject" and "rejected by ann" in e.reason for e in version.excluded)
    with_subtree = nodes.assemble(nodes.confirm(reviewed_session, [("S72", "accept", True)], "bo"), fixture_con)
    second = save_session(with_subtree, fixture_con, "Bo", "asthma-fracture", based_on=1, root=tmp_path).version
    below = {entry.code: entry for entry in second.codes}["S72.001A"]
    assert below.provenance == "descendant of S72" and below.decision == "accept" and below.decided_by == "bo"
    assert store.load_version("asthma-fracture", 1, tmp_path) == version  # the first is unchanged


def test_a_session_not_yet_reviewed_is_not_signed_off(
    reviewed_session: AssemblyState, fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    unassembled = reviewed_session.model_copy(update={"concept_set": None})
    assert "assemble the concept set first" in (not_ready(unassembled) or "")
    pending = reviewed_session.model_copy(deep=True)
    pending.candidates[0].decision = None
    with pytest.raises(VersionError, match="1 candidates are still pending"):
        draft_from_session(pending, fixture_con, "ann")
    stale = nodes.confirm(reviewed_session, [("S72", "reject", False)], "ann")  # decided after assembling
    with pytest.raises(VersionError, match="assemble it again"):
        save_session(stale, fixture_con, "ann", root=tmp_path)
    with pytest.raises(VersionError, match="reviewer name is empty"):
        save_session(reviewed_session, fixture_con, "   ", root=tmp_path)
    assert store.list_ids(tmp_path) == []


def test_the_csv_has_the_columns_and_no_formula_runs(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    hostile = draft(fixture_con, ["I50.9", "I50.21"], reviewer='=HYPERLINK("http://x")')
    hostile.codes[0].reason = "=cmd|' /C calc'!A0"
    hostile.codes[1].provenance = "@SUM(1+1)"
    version = store.save_version(hostile, tmp_path).version
    rows = list(csv.reader(io.StringIO(version_csv(version))))
    assert rows[0] == VERSION_CSV_FIELDS and [row[0] for row in rows[1:]] == ["I50.9", "I50.21"]
    assert rows[0][:5] == ["code", "description", "provenance", "decision", "reason"]
    cells = [cell for row in rows for cell in row]
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)  # every formula-like cell is quoted
    assert rows[1][4] == "'=cmd|' /C calc'!A0" and unescaped_cell(rows[1][4]) == hostile.codes[0].reason
    assert rows[1][1] == "Heart failure, unspecified" and rows[1][3] == "curated"


def test_the_fhir_export_carries_the_version_number_and_its_release(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    from fhir.resources.R4B.valueset import ValueSet

    store.save_version(draft(fixture_con, ["I50.9"]), tmp_path)
    version = store.save_version(draft(fixture_con, ["I50.9", "I50.21"], based_on=1), tmp_path).version
    value_set = version_fhir(version)
    assert value_set["version"] == "2" and value_set["id"] == "hf-adults-v2" and value_set["status"] == "active"
    include = value_set["compose"]["include"][0]  # type: ignore[index]
    assert include["version"] == "phenoforge test fixture"
    assert [c["code"] for c in include["concept"]] == ["I50.9", "I50.21"]
    assert version.vocabulary_release == include["version"]
    parsed = ValueSet.model_validate(json.loads(version_fhir_json(version)))  # a valid R4(B) ValueSet
    assert parsed.version == "2"
