"""Assembly sessions and the decision audit trail, in the app-state SQLite database.

Two tables of our own (``assembly_session``, ``assembly_decision``) beside the dashboard's. A
session row holds the whole :class:`AssemblyState` as JSON, so a restart resumes it exactly; each
reviewer decision is inserted *in the same transaction* that saves the new state, so the trail
and the state can never disagree. Connections are short-lived, WAL mode (via
``phenoforge.app_state.connect_app_state``).
"""

from __future__ import annotations

import io
import json
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ValidationError

from phenoforge.agent.state import AssemblyState
from phenoforge.app_state import AppStateError, connect_app_state
from phenoforge.csv_safe import SafeDictWriter

SCHEMA = """
CREATE TABLE IF NOT EXISTS assembly_session (
    session_id TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    reviewer TEXT NOT NULL DEFAULT '',
    decomposer TEXT NOT NULL DEFAULT '',
    stage TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_assembly_session_updated ON assembly_session (updated_at);
CREATE TABLE IF NOT EXISTS assembly_decision (
    decision_id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES assembly_session (session_id),
    decided_at TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    code TEXT NOT NULL,
    decision TEXT NOT NULL,
    expand_descendants INTEGER NOT NULL DEFAULT 0,
    terms TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_assembly_decision_session ON assembly_decision (session_id, decision_id);
CREATE TABLE IF NOT EXISTS assembly_decision_legacy_description (
    decision_id INTEGER PRIMARY KEY REFERENCES assembly_decision (decision_id),
    description TEXT NOT NULL
);
"""
"""The description lives once, on the session; a decision row reads it from there. Databases from
before kept a copy per decision: ``_ensure_schema`` drops that column, and a copy that ever differed
from its session's description is kept in ``assembly_decision_legacy_description``."""


class DecisionRecord(BaseModel):
    decision_id: int
    session_id: str
    decided_at: str
    reviewer: str
    code: str
    decision: str
    expand_descendants: bool
    terms: str
    description: str
    reason: str = ""


class Event(BaseModel):
    """An audit row that is not a code's accept/reject: a curated proposal confirmed, replaced or declined
    (``confirm-cohort``, ``replace-cohort``, ``decline-cohorts``; ``code`` is the cohort), or a qualifier of the
    description no code expresses (``qualifier``, noted when the session starts; no reviewer yet)."""

    code: str
    decision: str
    terms: str = ""
    reason: str = ""
    reviewer: str = ""
    decided_at: str = ""


class SessionSummary(BaseModel):
    session_id: str
    description: str
    reviewer: str
    decomposer: str
    stage: str
    created_at: str
    updated_at: str
    n_decisions: int


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


@contextmanager
def _open(path: Path | None) -> Iterator[sqlite3.Connection]:
    with connect_app_state(path) as con:
        _ensure_schema(con)
        yield con


def _ensure_schema(con: sqlite3.Connection) -> None:
    """Create the tables; move a pre-existing per-decision description copy out, losing nothing."""
    con.executescript(SCHEMA)
    columns = {row[1] for row in con.execute("PRAGMA table_info(assembly_decision)").fetchall()}
    if "reason" not in columns:  # a database from before reasons were kept: add the column, empty
        try:
            con.execute("ALTER TABLE assembly_decision ADD COLUMN reason TEXT NOT NULL DEFAULT ''")
        except sqlite3.OperationalError as error:  # another process added it first
            if "duplicate column" not in str(error):
                raise
    if not _has_decision_description(con):
        return
    con.execute("BEGIN IMMEDIATE")  # one migrator at a time; the others find it done
    try:
        if _has_decision_description(con):
            con.execute(
                "INSERT OR REPLACE INTO assembly_decision_legacy_description (decision_id, description) "
                "SELECT d.decision_id, d.description FROM assembly_decision d "
                "LEFT JOIN assembly_session s ON s.session_id = d.session_id "
                "WHERE s.session_id IS NULL OR s.description IS NOT d.description"
            )
            con.execute("ALTER TABLE assembly_decision DROP COLUMN description")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _has_decision_description(con: sqlite3.Connection) -> bool:
    return any(row[1] == "description" for row in con.execute("PRAGMA table_info(assembly_decision)").fetchall())


def save_state(
    state: AssemblyState,
    decisions: list[tuple[str, str, bool]] | None = None,
    path: Path | None = None,
    events: list[Event] | None = None,
) -> None:
    """Upsert the session and insert its new decisions, atomically (one transaction)."""
    with _open(path) as con, con:
        con.execute(
            "INSERT INTO assembly_session (session_id, description, reviewer, decomposer, stage, created_at, "
            "updated_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
            "reviewer = excluded.reviewer, stage = excluded.stage, updated_at = excluded.updated_at, "
            "state = excluded.state",
            [
                state.session_id,
                state.description,
                state.reviewer,
                state.decomposer,
                state.stage,
                state.created_at,
                state.updated_at,
                state.model_dump_json(),
            ],
        )
        for code, decision, expand in decisions or []:
            candidate = state.candidate(code)
            if candidate is None or candidate.reviewer is None:
                raise AppStateError(f"decision for {code} is not applied to the session state")
            con.execute(
                "INSERT INTO assembly_decision (session_id, decided_at, reviewer, code, decision, "
                "expand_descendants, terms, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    state.session_id,
                    candidate.decided_at,
                    candidate.reviewer,
                    code,
                    decision,
                    int(bool(expand) and candidate.expand_descendants),
                    "; ".join(candidate.terms),
                    candidate.reason,
                ],
            )
        for event in events or []:
            con.execute(
                "INSERT INTO assembly_decision (session_id, decided_at, reviewer, code, decision, "
                "expand_descendants, terms, reason) VALUES (?, ?, ?, ?, ?, 0, ?, ?)",
                [
                    state.session_id,
                    event.decided_at or state.updated_at,
                    event.reviewer,
                    event.code,
                    event.decision,
                    event.terms,
                    event.reason,
                ],
            )


def saved_state(session_id: str, path: Path | None = None) -> str:
    """The session's saved state as stored (JSON text); ``AppStateError`` when there is no such session."""
    with _open(path) as con:
        rows = con.execute("SELECT state FROM assembly_session WHERE session_id = ?", [session_id]).fetchall()
    if not rows:
        raise AppStateError(f"no assembly session {session_id!r}; list sessions with `assemble --list`")
    return str(rows[0]["state"])


def load_state(session_id: str, path: Path | None = None) -> AssemblyState:
    text = saved_state(session_id, path)
    try:
        state = AssemblyState.model_validate_json(text)
    except ValidationError as error:  # edited or cut off in the database: say so, not a pydantic traceback
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the saved state"
        raise AppStateError(
            f"assembly session {session_id!r} is damaged in the app-state database ({where}: {first['msg']}); "
            f"it cannot be resumed: its decision trail is still there (`assemble --audit {session_id}`), "
            "start a new session for the description"
        ) from None
    if state.session_id != session_id:  # a row is the session its key names, or it is not resumed
        raise AppStateError(
            f"assembly session {session_id!r} holds the state of another session ({state.session_id!r}) in the "
            f"app-state database: it is not resumed, so neither session is overwritten; its decision trail is still "
            f"there (`assemble --audit {session_id}`)"
        )
    return state


def list_sessions(path: Path | None = None, limit: int = 50) -> list[SessionSummary]:
    with _open(path) as con:
        rows = con.execute(
            "SELECT s.session_id, s.description, s.reviewer, s.decomposer, s.stage, s.created_at, s.updated_at, "
            "(SELECT count(*) FROM assembly_decision d WHERE d.session_id = s.session_id) AS n_decisions "
            "FROM assembly_session s ORDER BY s.updated_at DESC, s.session_id LIMIT ?",
            [limit],
        ).fetchall()
    return [SessionSummary(**dict(row)) for row in rows]


def decisions(session_id: str, path: Path | None = None) -> list[DecisionRecord]:
    with _open(path) as con:
        rows = con.execute(
            "SELECT d.decision_id, d.session_id, d.decided_at, d.reviewer, d.code, d.decision, "
            "d.expand_descendants, d.terms, d.reason, COALESCE(l.description, s.description, '') AS description "
            "FROM assembly_decision d LEFT JOIN assembly_session s ON s.session_id = d.session_id "
            "LEFT JOIN assembly_decision_legacy_description l ON l.decision_id = d.decision_id "
            "WHERE d.session_id = ? ORDER BY d.decision_id",
            [session_id],
        ).fetchall()
    return [DecisionRecord(**{**dict(row), "expand_descendants": bool(row["expand_descendants"])}) for row in rows]


def audit_csv(records: list[DecisionRecord]) -> str:
    out = io.StringIO()
    fields = list(DecisionRecord.model_fields)
    writer = SafeDictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow(record.model_dump())
    return out.getvalue()


def audit_json(records: list[DecisionRecord]) -> str:
    return json.dumps([record.model_dump() for record in records], indent=2)
