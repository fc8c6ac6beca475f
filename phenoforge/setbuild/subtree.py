"""Hierarchy-aware builder: decide node by node whether to take a whole subtree.

A node's subtree is taken when enough of its children were retrieved (``min_child_share`` of them,
at least ``min_children_hit``), or when the node itself is a strong hit whose own description
matches the query; its billable descendants come with it. Billable hits outside every taken
subtree stay on their own agreement, as in the cut-off builder.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
from pydantic import BaseModel, Field

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.assemble import SetAssembler, agreement, mean_objective, ranked_hits
from phenoforge.setbuild.candidates import CandidateTable, lexical_overlap
from phenoforge.setbuild.models import BuiltSet

METHOD = "subtree"
NODE_KINDS = ("subcategory", "category")


class SubtreeParams(BaseModel):
    max_hits: int = 50
    min_child_share: float = 0.5
    min_children_hit: int = 2
    min_node_match: float = 0.75
    node_max_rank: int = 30
    leaf_agreement: float = 0.6
    take_umbrellas: bool = True
    trained_on: list[str] = Field(default_factory=list, description="libraries these values were tuned on")


def build_subtree(hierarchy: Hierarchy, table: CandidateTable, params: SubtreeParams | None = None) -> BuiltSet:
    """The billable code list with a provenance record per code (see the module docstring for the rule)."""
    return select_subtree(hierarchy, table, params).finish()


def select_subtree(hierarchy: Hierarchy, table: CandidateTable, params: SubtreeParams | None = None) -> SetAssembler:
    params = params or SubtreeParams()
    out = SetAssembler(hierarchy, METHOD, table.query)
    out.result.trained_on = list(params.trained_on)
    hits = ranked_hits(table, params.max_hits)
    if not hits and not (params.take_umbrellas and table.umbrellas):
        out.result.notes.append("no candidates: " + ("; ".join(table.notes) or "the retrievers found nothing"))
        return out
    hit_set = set(hits)
    under_hit: set[int] = set()  # nodes with a hit at or below them
    for hit in hits:
        under_hit.update(hierarchy.chain(hit))
    nodes = {a for hit in hits for a in hierarchy.chain(hit) if hierarchy.kind.get(a) in NODE_KINDS}
    selected: dict[int, tuple[float, str]] = {}
    for node in nodes:
        if hierarchy.billable.get(node, False):
            continue
        children = hierarchy.children.get(node, ())
        retrieved = [child for child in children if child in under_hit]
        share = len(retrieved) / len(children) if children else 0.0
        if share >= params.min_child_share and len(retrieved) >= params.min_children_hit:
            selected[node] = (share, f"{len(retrieved)} of its {len(children)} children retrieved ({share:.0%})")
            continue
        rank = table.hit_rank.get(node)
        if node in hit_set and rank is not None and rank <= params.node_max_rank:
            match = lexical_overlap(table.query_tokens, hierarchy.name[node])
            backing = agreement(table, node)
            if match >= params.min_node_match and backing >= params.leaf_agreement:
                selected[node] = (
                    match,
                    f"its description matches the query ({match:.0%} of the words), "
                    f"fused rank {rank}, agreement {backing:.2f}",
                )
    if params.take_umbrellas:
        for node, text in table.umbrellas.items():
            selected.setdefault(node, (1.0, f"the vocabulary names it an umbrella of the query ({text!r})"))
    # maximal selected nodes only: a taken subtree already holds everything selected below it
    roots = [node for node in selected if not any(a in selected for a in hierarchy.chain(node)[1:])]
    for node in sorted(roots, key=lambda n: (table.hit_rank.get(n, 1 << 30), hierarchy.code[n])):
        score, why = selected[node]
        out.add_node(
            node, "rollup", score, f"subtree {hierarchy.code[node]} taken: {why}", via_rank=table.hit_rank.get(node)
        )
    for node in hits:
        backing = agreement(table, node)
        if backing >= params.leaf_agreement:
            rank = table.hit_rank[node]
            out.add_node(
                node,
                "hit",
                backing,
                f"fused rank {rank} with agreement {backing:.2f} >= {params.leaf_agreement:.2f}",
                via_rank=rank,
            )
    if not len(out) and hits:
        top = hits[0]
        out.result.fallback = "no node or hit passed the rules: the top hit is kept"
        out.add_node(top, "fallback", agreement(table, top), "top fused hit (fallback)", via_rank=1)
    return out


def tune_subtree(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    cases: Sequence[tuple[str, str, list[str], CandidateTable]],
    trained_on: list[str],
    start: SubtreeParams | None = None,
    rounds: int = 1,
) -> SubtreeParams:
    """Coordinate ascent over the rule's parameters on ``cases`` (other libraries than the scored ones)."""
    grid: dict[str, Sequence[float | int]] = {
        "leaf_agreement": (0.45, 0.6, 0.75, 0.9),
        "min_child_share": (0.34, 0.5, 0.67, 1.01),
        "min_node_match": (0.75, 1.0, 1.01),
        "max_hits": (20, 50),
        "min_children_hit": (2, 3),
        "take_umbrellas": (True, False),
    }
    scoring = [(cid, name, truth) for cid, name, truth, _t in cases]

    def value(params: SubtreeParams) -> float:
        hier, f1 = mean_objective(con, scoring, lambda i: select_subtree(hierarchy, cases[i][3], params).codes())
        return (hier + f1) / 2

    best = (start or SubtreeParams()).model_copy(update={"trained_on": trained_on})
    best_value = value(best)
    for _round in range(rounds):
        improved = False
        for name, options in grid.items():
            for option in options:
                if getattr(best, name) == option:
                    continue
                trial = best.model_copy(update={name: option})
                trial_value = value(trial)
                if trial_value > best_value + 1e-9:
                    best, best_value, improved = trial, trial_value, True
        if not improved:
            break
    return best
