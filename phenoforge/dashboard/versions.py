"""Plain rows for the Versions page and the Assemble page's "Save as version" (no streamlit here)."""

from __future__ import annotations

import re
from typing import Any

import duckdb

from phenoforge.agent.state import AssemblyState
from phenoforge.dashboard.markdown import plain
from phenoforge.lists import store
from phenoforge.lists.releases import ListReleaseChanges, list_release_history
from phenoforge.lists.session import default_list_id, not_ready, save_session
from phenoforge.lists.store import ListVersion, SaveResult, VersionDiff


def latest_number(list_id: str) -> int | None:
    """The list's latest version number; None when it has none (or the name cannot name a list)."""
    try:
        numbers = store.version_numbers(list_id)
    except store.VersionError:
        return None
    return numbers[-1] if numbers else None


def suggested_list_id(state: AssemblyState) -> str:
    """The list a session saved to before (its latest version names the session), else ``list-<session>``."""
    for list_id in store.list_ids():
        try:
            if store.load_version(list_id).session_id == state.session_id:
                return list_id
        except store.VersionError:
            continue
    return default_list_id(state)


def save_state(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    reviewer: str,
    list_id: str,
    note: str,
    seen: int | None,
    other_description: bool = False,
) -> SaveResult:
    """Sign the session's list off; ``seen`` is the latest version the reviewer saw when the page was drawn;
    ``other_description`` says the list may hold another population's versions (the reviewer ticked it)."""
    return save_session(
        state,
        con,
        reviewer,
        list_id.strip() or default_list_id(state),
        note,
        based_on=seen,
        seen=seen,
        other_description=other_description,
    )


def save_blocker(state: AssemblyState) -> str | None:
    return not_ready(state)


def signature_text(check: store.SignatureCheck) -> str:
    """A version's sign-off as a cell says it: 'verified', or why it is not signed off."""
    return "verified" if check.verified else f"NOT SIGNED OFF: {check.message}"


def list_rows(problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every list's latest readable version; each unreadable one named in ``problems`` (the others are listed)."""
    rows = []
    for list_id in store.list_ids():
        latest = store.latest_readable(list_id, problems=problems if problems is not None else [])
        if latest is None:
            continue
        rows.append(
            {
                "list": list_id,
                "versions": store.version_numbers(list_id)[-1],
                "latest by": latest.reviewer,
                "saved at": latest.saved_at,
                "codes": len(latest.codes),
                "sign-off": signature_text(latest.signature_check),
                "description": latest.description,
            }
        )
    return rows


def version_rows(list_id: str, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every readable version of the list, newest first; each unreadable one named in ``problems``."""
    return [
        {
            "version": v.number,
            "saved at": v.saved_at,
            "reviewer": v.reviewer,
            "codes": v.n_codes,
            "sign-off": signature_text(v.signature),
            "based on": v.based_on,
            "note": v.note,
            "vocabulary": v.vocabulary_release,
        }
        for v in reversed(store.list_versions(list_id, problems=problems if problems is not None else []))
    ]


def code_rows(entries: list[store.VersionCode]) -> list[dict[str, Any]]:
    return [
        {
            "code": e.code,
            "description": e.name,
            "decision": e.decision,
            "provenance": e.provenance,
            "reason": e.reason,
        }
        for e in entries
    ]


CODE_COLUMNS = {"code": 80, "description": 230, "decision": 70, "provenance": 170, "reason": 220}
"""Column widths (px) that keep a version's code table inside a 1,280 px window; a long cell is cut, not
scrolled to (the CSV export and ``version show`` have every word; who decided and when are in the reason)."""


def header(version: ListVersion) -> list[str]:
    """Markdown lines about a version; every supplied piece (reviewer, note, method, list) escaped with ``plain``."""
    check = version.signature_check
    said = "signed off" if check.verified else f"NOT SIGNED OFF ({check.message}); saved"
    lines = [
        f"**{plain(version.ref)}** · "
        + plain(f"{said} by {version.reviewer} at {version.saved_at} · {len(version.codes)} codes"),
        plain(f"method: {version.method}"),
        plain(f"vocabulary: {version.vocabulary_release} (build {version.vocabulary_build_id[:12]})"),
    ]
    if version.based_on is not None:
        lines.append(plain(f"based on version {version.based_on}"))
    if version.note:
        lines.append(plain(f"note: {version.note}"))
    return lines


def codes_typed(text: str) -> list[str]:
    """Codes typed in one box, separated by commas, semicolons or blanks."""
    return [code for code in re.split(r"[\s,;]+", text) if code]


def diff_rows(diff: VersionDiff) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    rows += [{"change": "added", "code": e.code, "description": e.name, "detail": e.reason} for e in diff.added]
    rows += [{"change": "removed", "code": e.code, "description": e.name, "detail": e.reason} for e in diff.removed]
    rows += [
        {"change": "decided otherwise", "code": code, "description": "", "detail": f"{then} -> {now}"}
        for code, then, now in diff.changed
    ]
    return rows


def release_changes(version: ListVersion, con: duckdb.DuckDBPyConnection) -> list[ListReleaseChanges]:
    """The version's codes release by release: FY2024 -> FY2025 -> the open vocabulary."""
    from phenoforge.engine.expansion import get_hierarchy

    release, _build, source = store.vocabulary_identity(con)
    return list_release_history(version.code_list, get_hierarchy(con), release, source)


def release_rows(changes: ListReleaseChanges) -> list[dict[str, Any]]:
    """One row per added, deleted or retitled code of the list, with both titles."""
    rows: list[dict[str, Any]] = []
    for change, entries in (("added", changes.added), ("deleted", changes.deleted), ("retitled", changes.retitled)):
        rows += [
            {
                "change": change,
                "code": e.code,
                f"title in {changes.earlier_release}": e.earlier_title,
                f"title in {changes.current_release}": e.current_title,
            }
            for e in entries
        ]
    return rows
