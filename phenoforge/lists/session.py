"""An assembly session's reviewed concept set as a version draft: every code with provenance, decision, reason."""

from __future__ import annotations

from pathlib import Path

import duckdb

from phenoforge.agent.state import AssemblyState
from phenoforge.lists.store import (
    SaveResult,
    VersionCode,
    VersionDraft,
    VersionError,
    check_list_id,
    save_version,
    vocabulary_identity,
)


def default_list_id(state: AssemblyState) -> str:
    """The name a session's list gets unless the reviewer gives one: ``list-<session id>``."""
    return check_list_id(f"list-{state.session_id}")


def not_ready(state: AssemblyState) -> str | None:
    """Why the session's list cannot be signed off yet; None when it can."""
    if state.concept_set is None:
        return "assemble the concept set first: there is no list to sign off yet"
    if state.pending:
        return f"{len(state.pending)} candidates are still pending: accept or reject each before signing off"
    in_set = {entry.code: entry for entry in state.concept_set.entries}
    roots = set(state.concept_set.descendant_roots)
    for candidate in state.candidates:
        entry = in_set.get(candidate.code)
        accepted = candidate.decision == "accept"
        if accepted and (entry is None or (candidate.expand_descendants != (candidate.code in roots))):
            return "decisions changed after the concept set was assembled: assemble it again, then save"
        if not accepted and entry is not None and entry.tier == "generated" and entry.via_descendants_of is None:
            return "decisions changed after the concept set was assembled: assemble it again, then save"
    return None


def draft_from_session(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    reviewer: str,
    list_id: str | None = None,
    note: str = "",
    based_on: int | None = None,
) -> VersionDraft:
    """The session's concept set as a draft: curated codes (decision ``curated``), accepted candidates and their
    descendants (``accept``, by whom and when), rejected candidates kept apart (``reject``)."""
    problem = not_ready(state)
    if problem is not None:
        raise VersionError(problem)
    concept_set = state.concept_set
    assert concept_set is not None  # not_ready says so otherwise
    by_code = {candidate.code: candidate for candidate in state.candidates}
    codes = []
    for entry in concept_set.entries:
        decided = by_code.get(entry.via_descendants_of or entry.code)
        generated = entry.tier == "generated" and decided is not None
        codes.append(
            VersionCode(
                code=entry.code,
                name=entry.name,
                provenance=entry.source,
                decision="accept" if generated else "curated",
                reason=entry.evidence,
                decided_by=(decided.reviewer or "") if generated and decided else "",
                decided_at=(decided.decided_at or "") if generated and decided else "",
            )
        )
    excluded = []
    in_set = {entry.code for entry in concept_set.entries}
    for candidate in state.candidates:
        if candidate.decision != "reject" or candidate.code in in_set:
            continue
        best = min(candidate.sources, key=lambda source: source.rank, default=None)
        excluded.append(
            VersionCode(
                code=candidate.code,
                name=candidate.name,
                provenance=f"{best.retriever} rank {best.rank} for '{best.term}'" if best else "generated",
                decision="reject",
                reason=f"rejected by {candidate.reviewer} at {candidate.decided_at}",
                decided_by=candidate.reviewer or "",
                decided_at=candidate.decided_at or "",
            )
        )
    release, build, source = vocabulary_identity(con)
    libraries = ", ".join(Path(path).name for path in state.library_paths) or "none"
    return VersionDraft(
        list_id=list_id or default_list_id(state),
        reviewer=reviewer,
        description=state.description,
        note=note,
        method=(
            f"assemble: decomposer {state.decomposer}, generator {state.generator}, k {state.k}, "
            f"curated libraries checked: {libraries}"
        ),
        session_id=state.session_id,
        based_on=based_on,
        vocabulary_release=release,
        vocabulary_build_id=build,
        vocabulary_source=source,
        codes=codes,
        excluded=excluded,
        notes=[f"unmappable '{item.term}': {item.reason}" for item in concept_set.unmappable],
    )


def save_session(
    state: AssemblyState,
    con: duckdb.DuckDBPyConnection,
    reviewer: str,
    list_id: str | None = None,
    note: str = "",
    based_on: int | None = None,
    root: Path | None = None,
    seen: int | None = None,
    other_description: bool = False,
) -> SaveResult:
    """Sign the session's reviewed list off as the next version of ``list_id`` (``seen`` and
    ``other_description`` as :func:`phenoforge.lists.store.save_version` takes them)."""
    draft = draft_from_session(state, con, reviewer, list_id, note, based_on)
    return save_version(draft, root, seen=seen, other_description=other_description)
