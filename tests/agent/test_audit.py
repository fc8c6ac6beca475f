"""The audit trail stores a session's description once, and older databases migrate without losing a row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from phenoforge import config
from phenoforge.agent import audit, nodes, workflow

# The schema every database had before the description moved to the session (issue 12, item 15).
OLD_SCHEMA = """
CREATE TABLE assembly_session (
    session_id TEXT PRIMARY KEY, description TEXT NOT NULL, reviewer TEXT NOT NULL DEFAULT '',
    decomposer TEXT NOT NULL DEFAULT '', stage TEXT NOT NULL, created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL, state TEXT NOT NULL
);
CREATE TABLE assembly_decision (
    decision_id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES assembly_session (session_id), decided_at TEXT NOT NULL,
    reviewer TEXT NOT NULL, code TEXT NOT NULL, decision TEXT NOT NULL,
    expand_descendants INTEGER NOT NULL DEFAULT 0, terms TEXT NOT NULL DEFAULT '', description TEXT NOT NULL
);
"""


def _columns(path: Path, table: str) -> list[str]:
    with sqlite3.connect(path) as con:
        return [row[1] for row in con.execute(f"PRAGMA table_info({table})").fetchall()]


def test_description_is_stored_once_per_session(fixture_con, fixture_library: Path) -> None:
    description = "adults with a femur fracture " + "with-a-long-history " * 150  # ~3,000 characters
    state = workflow.start(
        fixture_con, description, lambda _text: ["fracture of femur"], reviewer="ann", library_paths=[fixture_library]
    )
    codes = [candidate.code for candidate in state.candidates]
    assert len(codes) >= 2
    for code in codes:
        state = workflow.decide(state, [(code, "accept", False)], reviewer="ann")
    path = config.app_state_db_path()
    assert "description" not in _columns(path, "assembly_decision")
    with sqlite3.connect(path) as con:
        texts = [
            value
            for table in ("assembly_session", "assembly_decision")
            for row in con.execute(f"SELECT * FROM {table}").fetchall()
            for value in row
            if isinstance(value, str)
        ]
    copies = sum(text.count(state.description) for text in texts)
    assert copies == 2  # the session row's column and its saved state: never once per decision
    trail = audit.decisions(state.session_id)
    assert [record.code for record in trail if record.decision != "qualifier"] == codes
    assert len(trail) == len(codes) + len(state.qualifiers)  # plus the description's uncoded qualifiers
    assert {record.description for record in trail} == {state.description}


def test_old_database_migrates_without_losing_a_decision(tmp_path: Path) -> None:
    path = config.app_state_db_path()
    state = nodes.new_state("adults with asthma", "old1", reviewer="ann")
    with sqlite3.connect(path) as con:
        con.executescript(OLD_SCHEMA)
        con.execute(
            "INSERT INTO assembly_session VALUES (?, ?, 'ann', 'offline', 'confirming', 't0', 't1', ?)",
            ["old1", state.description, state.model_dump_json()],
        )
        rows = [
            ("old1", "t1", "ann", "J45", "accept", 1, "asthma", state.description),
            ("old1", "t2", "bob", "J45.9", "reject", 0, "asthma", state.description),
            # a copy that differs from its session (never written by phenoforge, but kept if present)
            ("old1", "t3", "cy", "J45.909", "accept", 0, "asthma", "an older wording"),
        ]
        con.executemany(
            "INSERT INTO assembly_decision (session_id, decided_at, reviewer, code, decision, "
            "expand_descendants, terms, description) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    trail = audit.decisions("old1")
    assert [
        (r.decided_at, r.reviewer, r.code, r.decision, r.expand_descendants, r.terms, r.description) for r in trail
    ] == [(*row[1:5], bool(row[5]), row[6], row[7]) for row in rows]
    assert "description" not in _columns(path, "assembly_decision")
    assert audit.list_sessions()[0].n_decisions == 3
    # a second open finds it migrated and changes nothing
    assert audit.decisions("old1") == trail
