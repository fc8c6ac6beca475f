"""Review by branch: the generated candidates grouped by the ICD-10-CM hierarchy (block > category > code),
ordered by relevance, decided a whole branch at a time, with conflicts flagged.

A *branch* is a block or a category holding at least one candidate. Including a branch accepts every
candidate under it, each with its descendants (the branch's whole subtree as far as the candidates reach);
excluding it rejects them all. A branch whose candidates are partly accepted and partly rejected is flagged,
and so is a rejected code that still enters the set because an accepted code above it takes its descendants.

Relevance: a branch's best (lowest) retrieval rank over its candidates, then how many candidates it holds;
inside a branch, the category's own code first, then the candidates by rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from phenoforge.agent.state import AssemblyState, Candidate, Decision
from phenoforge.engine.expansion import get_hierarchy


@dataclass
class Branch:
    """A block or a category with the candidates under it (its own code included when it is one)."""

    code: str
    name: str
    kind: str  # "block" or "category"
    parent: str | None  # a category's block
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def best_rank(self) -> int:
        return min((candidate.best_rank for candidate in self.candidates), default=0)

    @property
    def counts(self) -> tuple[int, int, int]:
        """``(accepted, rejected, pending)``"""
        accepted = sum(1 for c in self.candidates if c.decision == "accept")
        rejected = sum(1 for c in self.candidates if c.decision == "reject")
        return accepted, rejected, len(self.candidates) - accepted - rejected

    @property
    def status(self) -> str:
        accepted, rejected, pending = self.counts
        if accepted and rejected:
            return "partly included (conflict)"
        if accepted and not pending:
            return "included"
        if rejected and not pending:
            return "excluded"
        if accepted:
            return "partly included, rest pending"
        if rejected:
            return "partly excluded, rest pending"
        return "pending"

    def label(self) -> str:
        """What the branch picker shows: stable across decisions (where it stands is in the overview)."""
        indent = "" if self.kind == "block" else "└ "
        return f"{indent}{self.code} {self.name} · {len(self.candidates)} candidates"


def _branch_of(hierarchy, code: str, kind: str) -> tuple[str, str] | None:  # noqa: ANN001
    node = hierarchy.resolve(code)
    if node is None:
        return None
    found = hierarchy.ancestor_of_kind(node, kind)
    return (hierarchy.code[found], hierarchy.name[found]) if found is not None else None


def branches(state: AssemblyState, con: duckdb.DuckDBPyConnection) -> list[Branch]:
    """Blocks, each followed by its categories, most relevant first; every candidate in one category (or
    directly in its block when it is a block or has no category)."""
    hierarchy = get_hierarchy(con)
    blocks: dict[str, Branch] = {}
    categories: dict[str, Branch] = {}
    for candidate in state.candidates:
        block = _branch_of(hierarchy, candidate.code, "block") or ("(no block)", "outside the blocks")
        holder = blocks.setdefault(block[0], Branch(block[0], block[1], "block", None))
        holder.candidates.append(candidate)
        category = _branch_of(hierarchy, candidate.code, "category")
        if category is not None:
            branch = categories.setdefault(category[0], Branch(category[0], category[1], "category", block[0]))
            branch.candidates.append(candidate)
    for branch in [*blocks.values(), *categories.values()]:
        own = branch.code
        branch.candidates.sort(key=lambda c: (c.code != own, c.best_rank, c.code))  # noqa: B023 (sorted here)
    out: list[Branch] = []
    for group in sorted(blocks.values(), key=lambda b: (b.best_rank, -len(b.candidates), b.code)):
        out.append(group)
        inside = [c for c in categories.values() if c.parent == group.code]
        out.extend(sorted(inside, key=lambda c: (c.best_rank, -len(c.candidates), c.code)))
    return out


def branch_decisions(branch: Branch, decision: Decision) -> list[tuple[str, Decision, bool]]:
    """One action on a branch: every candidate under it accepted with its descendants, or rejected."""
    return [(c.code, decision, decision == "accept" and c.n_descendants > 0) for c in branch.candidates]


def conflicts(state: AssemblyState, con: duckdb.DuckDBPyConnection, found: list[Branch] | None = None) -> list[str]:
    """What a reviewer should look at again: partly included branches, and rejected codes that enter the set
    anyway under an accepted code taken with its descendants."""
    hierarchy = get_hierarchy(con)
    said: list[str] = []
    for branch in found if found is not None else branches(state, con):
        accepted, rejected, _pending = branch.counts
        if accepted and rejected:
            said.append(
                f"{branch.kind} {branch.code} {branch.name} is partly included: {accepted} codes included, "
                f"{rejected} excluded"
            )
    expanded = [c for c in state.candidates if c.decision == "accept" and c.expand_descendants]
    for root in expanded:
        node = hierarchy.resolve(root.code)
        if node is None:
            continue
        below = {hierarchy.code[child] for child in hierarchy.descendants(node)}
        for candidate in state.candidates:
            if candidate.decision == "reject" and candidate.code in below:
                said.append(
                    f"{candidate.code} is excluded but enters the set anyway: {root.code} is included with its "
                    "descendants"
                )
    return said
