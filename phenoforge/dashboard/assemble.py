"""Plain rows for the Assemble page (no streamlit here): what each table shows, and what changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

from phenoforge.agent import workflow
from phenoforge.agent.offline import offline_decomposer
from phenoforge.agent.state import AssemblyState, ConceptSet, Decision
from phenoforge.dashboard.markdown import plain
from phenoforge.engine.dense import DenseRetriever

PENDING = "pending"
CHOICES = [PENDING, "accept", "reject"]


def decomposer_for(
    name: str, con: duckdb.DuckDBPyConnection, dense: DenseRetriever | None = None
) -> Callable[[str], list[str]]:
    """The offline decomposer grounded on the page's own connection (and the dense index when ready), or Claude."""
    if name == "offline":
        return offline_decomposer(con, dense=dense)
    return workflow.get_decomposer(name)


def claude_available() -> bool:
    from phenoforge.agent.claude import resolve_api_key
    from phenoforge.agent.errors import MissingAPIKeyError

    try:
        resolve_api_key()
    except MissingAPIKeyError:
        return False
    return True


def term_rows(state: AssemblyState) -> list[dict[str, Any]]:
    rows = []
    for term in state.terms:
        match = term.curated
        rows.append(
            {
                "term": term.term,
                "status": term.status,
                "cohort": f"{match.library_id}/{match.cohort_id} {match.cohort_name}"
                if match
                else "; ".join(f"{m.library_id}/{m.cohort_id}" for m in term.ambiguous),
                "name overlap": match.name_overlap if match else None,
                "retrieval overlap": match.retrieval_overlap if match else None,
                "note": term.note or term.search_reason or "",
            }
        )
    return rows


def candidate_label(state: AssemblyState, code: str) -> str:
    candidate = state.candidate(code)
    if candidate is None:
        return code
    sources = "; ".join(f"'{s.term}' {s.retriever} #{s.rank}" for s in candidate.sources)
    # Markdown: the bold code is ours; names and terms (terms come from the user's text) are shown as typed
    return f"**{candidate.code}** {plain(candidate.name)} · {plain(sources)} · {plain(candidate.hierarchy_hint)}"


def candidate_rows(state: AssemblyState) -> list[dict[str, Any]]:
    return [
        {
            "code": c.code,
            "name": c.name,
            "terms": "; ".join(c.terms),
            "retriever": "; ".join(sorted({s.retriever for s in c.sources})),
            "rank": c.best_rank,
            "hierarchy": c.hierarchy_hint,
            "decision": c.decision or PENDING,
            "descendants": c.expand_descendants,
            "reviewer": c.reviewer or "",
        }
        for c in state.candidates
    ]


def changed_decisions(state: AssemblyState, choices: dict[str, tuple[str, bool]]) -> list[tuple[str, Decision, bool]]:
    """Decisions in ``choices`` (code -> (choice, expand)) that differ from what the state holds."""
    changed: list[tuple[str, Decision, bool]] = []
    for code, (choice, expand) in choices.items():
        candidate = state.candidate(code)
        if candidate is None or choice == PENDING:
            continue
        decision: Decision = "accept" if choice == "accept" else "reject"
        if decision != choice:
            raise ValueError(f"unknown choice {choice!r} for {code}: accept, reject or {PENDING}")
        if candidate.decision != decision or (decision == "accept" and candidate.expand_descendants != expand):
            changed.append((code, decision, expand))
    return changed


def bulk(state: AssemblyState, decision: Decision, only_pending: bool = True) -> list[tuple[str, Decision, bool]]:
    return [(c.code, decision, False) for c in state.candidates if c.decision is None or not only_pending]


def concept_rows(concept_set: ConceptSet) -> list[dict[str, Any]]:
    return [
        {
            "code": e.code,
            "name": e.name,
            "tier": e.tier,
            "source": e.source,
            "evidence": e.evidence,
            "terms": "; ".join(e.terms),
            "via descendants of": e.via_descendants_of or "",
        }
        for e in concept_set.entries
    ]
