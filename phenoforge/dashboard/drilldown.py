"""One cohort under the microscope: which codes matched, how near the misses were, and where.

Every code on either side gets its best match on the other side, the tree distance to it and
the partial credit the metrics give it, so a reader sees exactly why a cohort scored what it did.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import duckdb
from pydantic import BaseModel

from phenoforge.engine.expansion import Hierarchy, ancestor_chain_ids, get_hierarchy
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE, distance_weighted_score, tree_distance
from phenoforge.eval.models import CohortEvalResult

Status = Literal["in both", "predicted only", "curated only"]
Outcome = Literal["hit", "near miss", "miss", "over-inclusion"]
OUTCOME_COLOURS: dict[str, str] = {
    "hit": "#2e8b57",
    "near miss": "#e0a526",
    "miss": "#c0392b",
    "over-inclusion": "#7f56d9",
}


class CodeRow(BaseModel):
    code: str
    name: str
    status: Status
    outcome: Outcome
    best_match: str | None
    best_match_name: str | None
    tree_distance: int | None
    partial_credit: float


class DrilldownView(BaseModel):
    cohort_id: str
    cohort_name: str
    method: str
    coverage: float
    over_inclusion: float
    hierarchical: float
    rows: list[CodeRow]
    distance_counts: dict[str, dict[str, int]]  # direction -> distance label -> count


def _nearest(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, code: str, targets: list[str],
    chains: dict[str, list[int]],
) -> tuple[str | None, int | None]:
    """The target nearest ``code`` in the tree (ties: the first listed) and its distance."""
    own = chains.get(code)
    if own is None:
        own = chains[code] = ancestor_chain_ids(con, code)
    if not own:
        return None, None
    best_code: str | None = None
    best: int | None = None
    for target in targets:
        chain = chains.get(target)
        if chain is None:
            chain = chains[target] = ancestor_chain_ids(con, target)
        if not chain:
            continue
        distance = tree_distance(own, chain)
        if distance is not None and (best is None or distance < best):
            best, best_code = distance, target
            if distance == 0:
                break
    return best_code, best


def _name(hierarchy: Hierarchy, code: str | None) -> str | None:
    if code is None:
        return None
    concept_id = hierarchy.resolve(code)
    return hierarchy.name[concept_id] if concept_id is not None else None


def distance_label(distance: int | None) -> str:
    return "no common ancestor" if distance is None else str(distance)


def cohort_drilldown(con: duckdb.DuckDBPyConnection, result: CohortEvalResult) -> DrilldownView:
    """Side-by-side rows for one cohort and method, plus tree-distance counts per direction."""
    hierarchy = get_hierarchy(con)
    predicted = list(dict.fromkeys(result.predicted_codes))
    curated = list(dict.fromkeys(result.ground_truth_codes))
    predicted_set, curated_set = set(predicted), set(curated)
    chains: dict[str, list[int]] = {}
    rows: list[CodeRow] = []
    counts: dict[str, Counter[str]] = {"curated → predicted": Counter(),
                                        "predicted → curated": Counter()}
    match: str | None
    distance: int | None
    for code in curated:
        if code in predicted_set:
            match, distance = code, 0
        else:
            match, distance = _nearest(con, hierarchy, code, predicted, chains)
        credit = distance_weighted_score(distance, DEFAULT_MAX_DISTANCE)
        status: Status = "in both" if code in predicted_set else "curated only"
        outcome: Outcome = "hit" if code in predicted_set else ("near miss" if credit > 0 else "miss")
        rows.append(CodeRow(code=code, name=_name(hierarchy, code) or "", status=status,
                            outcome=outcome, best_match=match,
                            best_match_name=_name(hierarchy, match), tree_distance=distance,
                            partial_credit=credit))
        counts["curated → predicted"][distance_label(distance)] += 1
    for code in predicted:
        if code in curated_set:
            counts["predicted → curated"]["0"] += 1
            continue
        match, distance = _nearest(con, hierarchy, code, curated, chains)
        credit = distance_weighted_score(distance, DEFAULT_MAX_DISTANCE)
        rows.append(CodeRow(code=code, name=_name(hierarchy, code) or "", status="predicted only",
                            outcome="near miss" if credit > 0 else "over-inclusion",
                            best_match=match, best_match_name=_name(hierarchy, match),
                            tree_distance=distance, partial_credit=credit))
        counts["predicted → curated"][distance_label(distance)] += 1
    return DrilldownView(
        cohort_id=result.cohort_id, cohort_name=result.cohort_name, method=result.method,
        coverage=result.coverage, over_inclusion=result.over_inclusion_penalty,
        hierarchical=result.hierarchical_score, rows=rows,
        distance_counts={direction: dict(counter) for direction, counter in counts.items()},
    )


class TreeNodes(BaseModel):
    """Flat node lists in the shape plotly's sunburst and treemap take."""

    ids: list[str]
    labels: list[str]
    parents: list[str]
    values: list[int]
    colors: list[str]
    hover: list[str]


def hierarchy_nodes(con: duckdb.DuckDBPyConnection, view: DrilldownView) -> TreeNodes:
    """Chapter > block > category > code, each code leaf coloured by its outcome.

    Codes below category level hang directly under their category so the picture stays three
    rings deep whatever the code length; parents are grey and sized by their leaves.
    """
    hierarchy = get_hierarchy(con)
    nodes: dict[str, tuple[str, str, str]] = {}  # id -> (label, parent, hover)
    leaf_values: dict[str, int] = {}
    leaf_colour: dict[str, str] = {}
    for row in view.rows:
        concept_id = hierarchy.resolve(row.code)
        if concept_id is None:
            continue
        ancestors = {hierarchy.kind[a]: a for a in reversed(hierarchy.chain(concept_id))}
        parent_id = ""
        for kind in ("chapter", "block", "category"):
            node = ancestors.get(kind)
            if node is None or (kind == "category" and node == concept_id):
                continue
            node_id = f"{kind}:{hierarchy.code[node]}"
            label = hierarchy.code[node] if kind != "chapter" else f"Ch. {hierarchy.code[node]}"
            nodes.setdefault(node_id, (label, parent_id, hierarchy.name[node]))
            parent_id = node_id
        leaf = f"code:{row.code}"
        nodes[leaf] = (row.code, parent_id, f"{row.name} — {row.outcome}")
        leaf_values[leaf] = 1
        leaf_colour[leaf] = OUTCOME_COLOURS[row.outcome]
    ids = list(nodes)
    return TreeNodes(
        ids=ids,
        labels=[nodes[i][0] for i in ids],
        parents=[nodes[i][1] for i in ids],
        values=[leaf_values.get(i, 0) for i in ids],
        colors=[leaf_colour.get(i, "#d9dee4") for i in ids],
        hover=[nodes[i][2] for i in ids],
    )


def outcome_counts(view: DrilldownView) -> dict[str, int]:
    counts: Counter[str] = Counter(row.outcome for row in view.rows)
    return {outcome: counts[outcome] for outcome in OUTCOME_COLOURS}
