"""Adaptive cut-off: keep fused hits while both retrievers still back them, not a fixed k.

A hit stays when its agreement (BM25 and dense, each relative to their own best; see
:func:`~phenoforge.setbuild.assemble.agreement`) is at least ``min_agreement`` and it ranks within
``max_hits``; a non-billable hit is expanded to its billable descendants. The list's size follows
the query: a sharp name keeps a handful, a broad one keeps many.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
from pydantic import BaseModel, Field

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.assemble import SetAssembler, agreement, mean_objective, ranked_hits
from phenoforge.setbuild.candidates import CandidateTable
from phenoforge.setbuild.models import BuiltSet

METHOD = "adaptive_cutoff"


class CutoffParams(BaseModel):
    min_agreement: float = 0.5
    max_hits: int = 50
    trained_on: list[str] = Field(default_factory=list, description="libraries these values were tuned on")


def build_cutoff(hierarchy: Hierarchy, table: CandidateTable, params: CutoffParams | None = None) -> BuiltSet:
    """The billable code list with a provenance record per code (see the module docstring for the rule)."""
    return select_cutoff(hierarchy, table, params).finish()


def select_cutoff(hierarchy: Hierarchy, table: CandidateTable, params: CutoffParams | None = None) -> SetAssembler:
    """Billable codes of the fused hits that pass the agreement cut-off (the top hit always does)."""
    params = params or CutoffParams()
    out = SetAssembler(hierarchy, METHOD, table.query)
    out.result.trained_on = list(params.trained_on)
    hits = ranked_hits(table, params.max_hits)
    if not hits:
        out.result.notes.append("no candidates: " + ("; ".join(table.notes) or "the retrievers found nothing"))
        return out
    for node in hits:
        score = agreement(table, node)
        if score >= params.min_agreement or node == hits[0]:
            rank = table.hit_rank[node]
            rule = f"fused rank {rank} with agreement {score:.2f} >= {params.min_agreement:.2f}"
            if score < params.min_agreement:
                rule = f"top hit kept although agreement {score:.2f} < {params.min_agreement:.2f}"
            out.add_node(node, "hit", score, rule, via_rank=rank)
    return out


def tune_cutoff(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    cases: Sequence[tuple[str, str, list[str], CandidateTable]],
    trained_on: list[str],
    agreements: Sequence[float] = (0.3, 0.45, 0.6, 0.7, 0.8, 0.9),
    max_hits: Sequence[int] = (20, 60),
) -> CutoffParams:
    """The grid point with the best mean of hierarchical score and exact F1 over ``cases``.

    ``cases`` must come from libraries other than the ones the result will score; ``trained_on``
    names them and travels with the parameters.
    """
    best: tuple[float, CutoffParams] | None = None
    scoring = [(cid, name, truth) for cid, name, truth, _t in cases]
    for limit in max_hits:
        for threshold in agreements:
            params = CutoffParams(min_agreement=threshold, max_hits=limit, trained_on=trained_on)
            hier, f1 = mean_objective(
                con, scoring, lambda i, p=params: select_cutoff(hierarchy, cases[i][3], p).codes()
            )
            if best is None or (hier + f1) / 2 > best[0]:
                best = ((hier + f1) / 2, params)
    assert best is not None
    return best[1]
