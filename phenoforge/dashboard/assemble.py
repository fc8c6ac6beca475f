"""Plain rows for the Assemble page (no streamlit here): what each table shows, and what changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb

from phenoforge.agent import nodes, workflow
from phenoforge.agent.offline import offline_decomposer
from phenoforge.agent.review import Branch
from phenoforge.agent.scope import categories_summary, chapter_range
from phenoforge.agent.state import AssemblyState, ConceptSet, Decision, TermState
from phenoforge.dashboard.markdown import plain
from phenoforge.engine.dense import DenseRetriever

PENDING = "pending"
CHOICES = [PENDING, "accept", "reject"]
MAX_ROWS = 30
"""Per-code rows drawn for one branch: a page of 500 radios took seconds per action; a branch is a screenful."""


def branch_rows(found: list[Branch]) -> list[dict[str, Any]]:
    """The review overview: every block, then its categories, most relevant first, with where each stands."""
    rows = []
    for branch in found:
        accepted, rejected, pending = branch.counts
        rows.append(
            {
                "branch": ("" if branch.kind == "block" else "  └ ") + f"{branch.code} {branch.name}",
                "level": branch.kind,
                "candidates": len(branch.candidates),
                "included": accepted,
                "excluded": rejected,
                "pending": pending,
                "status": branch.status,
                "best rank": branch.best_rank,
            }
        )
    return rows


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
        if match is None and term.status == "proposed" and term.proposals:
            cohort = f"proposed: {term.proposals[0].key} {term.proposals[0].cohort_name} (to confirm or replace)"
        elif match is not None:
            cohort = f"{match.key} {match.cohort_name}"
        else:
            cohort = "; ".join(m.key for m in term.ambiguous)
        rows.append(
            {
                "term": term.term,
                "status": term.status,
                "cohort": cohort,
                "settled": f"{term.settled_by}: {term.settlement}" if term.settled_by else "",
                "note": term.note or term.search_reason or "",
            }
        )
    return rows


DECLINE = "__generated__"
"""The proposal picker's last option: no curated cohort, review generated candidates for the term."""


def proposal_rows(term: TermState) -> list[dict[str, Any]]:
    """One row per proposed cohort, best-fitting scope first: what a reviewer compares before confirming."""
    return [
        {
            "#": match.rank,
            "cohort": f"{match.key} {match.cohort_name}",
            "codes": match.n_codes,
            "chapters": ", ".join(chapter_range(name) for name in match.chapters),
            "categories": categories_summary(match.categories),
            "own share": f"{match.own_share:.0%} in {', '.join(match.own_categories) or '-'}",
            "vs the others": match.difference,
            "why this rank": match.scope_note or ("passed the match rule" if match.matched else "named for the term"),
        }
        for match in term.proposals
    ]


def proposal_label(term: TermState, key: str) -> str:
    if key == DECLINE:
        return "None of these: review generated candidates for the term"
    match = next((m for m in term.proposals if m.key == key), None)
    if match is None:
        return key
    first = " (proposed)" if match.rank == 1 else ""
    return f"{match.rank}. {match.cohort_name} · {match.key} · {match.n_codes} codes{first}"


def settle_button_label(term: TermState, key: str) -> str:
    if key == DECLINE:
        return "Decline: review generated candidates"
    if term.proposals and key == term.proposals[0].key:
        return "Confirm the proposed cohort"
    return "Use this cohort instead"


def gate_status(state: AssemblyState, reviewer: str) -> list[str]:
    """What stands between the reviewer and an exported list, shown above every action it disables."""
    problems = nodes.gate_problems(state.model_copy(update={"reviewer": reviewer or state.reviewer}))
    if not reviewer:
        problems = [p for p in problems if not p.startswith("name the reviewer")]
        problems.insert(0, "Enter your name in Reviewer name above: every action is recorded under it")
    return problems


def qualifier_rows(state: AssemblyState) -> list[dict[str, str]]:
    return [{"kind": q.kind, "criterion": q.text} for q in state.qualifiers]


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
