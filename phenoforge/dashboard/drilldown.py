"""One cohort under the microscope: which codes matched, how near the misses were, and where.

Every code on either side gets its best match on the other side, the tree distance to it and
the partial credit the metrics give it, so a reader sees exactly why a cohort scored what it did.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import duckdb
from pydantic import BaseModel

from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.eval.matching import match_cohort
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE, distance_weighted_score
from phenoforge.eval.models import CohortEvalResult

NO_ANCESTOR = "no common ancestor"
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
    why: list[str] = []
    """The method's provenance for a predicted code: the hit, or the subtree it was expanded from."""


class DrilldownView(BaseModel):
    cohort_id: str
    cohort_name: str
    method: str
    coverage: float
    over_inclusion: float
    hierarchical: float
    rows: list[CodeRow]
    distance_counts: dict[str, dict[str, int]]  # direction -> distance label -> count


def _name(hierarchy: Hierarchy, code: str | None) -> str | None:
    if code is None:
        return None
    concept_id = hierarchy.resolve(code)
    return hierarchy.name[concept_id] if concept_id is not None else None


def distance_label(distance: int | None) -> str:
    return NO_ANCESTOR if distance is None else str(distance)


def cohort_drilldown(con: duckdb.DuckDBPyConnection, result: CohortEvalResult) -> DrilldownView:
    """Side-by-side rows for one cohort and method, plus tree-distance counts per direction.

    The matches come from :func:`~phenoforge.eval.matching.match_cohort`, the function every
    score is computed from, so each row's credit is exactly what the report counted.
    """
    hierarchy = get_hierarchy(con)
    matches = match_cohort(hierarchy, result.ground_truth_codes, result.predicted_codes)
    predicted_set = set(matches.predicted_codes)
    curated_set = set(matches.truth_codes)
    rows: list[CodeRow] = []
    counts: dict[str, Counter[str]] = {"curated → predicted": Counter(), "predicted → curated": Counter()}
    for match in matches.truth:
        credit = distance_weighted_score(match.distance, DEFAULT_MAX_DISTANCE)
        found = match.code in predicted_set
        outcome: Outcome = "hit" if found else ("near miss" if credit > 0 else "miss")
        rows.append(
            CodeRow(
                code=match.code,
                name=_name(hierarchy, match.code) or "",
                status="in both" if found else "curated only",
                outcome=outcome,
                best_match=match.nearest_code,
                best_match_name=_name(hierarchy, match.nearest_code),
                tree_distance=match.distance,
                partial_credit=credit,
                why=result.provenance.get(match.code, []) if found else [],
            )
        )
        counts["curated → predicted"][distance_label(match.distance)] += 1
    for match in matches.predicted:
        counts["predicted → curated"][distance_label(match.distance)] += 1
        if match.code in curated_set:
            continue
        credit = distance_weighted_score(match.distance, DEFAULT_MAX_DISTANCE)
        rows.append(
            CodeRow(
                code=match.code,
                name=_name(hierarchy, match.code) or "",
                status="predicted only",
                outcome="near miss" if credit > 0 else "over-inclusion",
                best_match=match.nearest_code,
                best_match_name=_name(hierarchy, match.nearest_code),
                tree_distance=match.distance,
                partial_credit=credit,
                why=result.provenance.get(match.code, []),
            )
        )
    return DrilldownView(
        cohort_id=result.cohort_id,
        cohort_name=result.cohort_name,
        method=result.method,
        coverage=result.coverage,
        over_inclusion=result.over_inclusion_penalty,
        hierarchical=result.hierarchical_score,
        rows=rows,
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


SIDES: dict[str, str] = {"in both": "both", "predicted only": "predicted", "curated only": "curated"}


def outcome_text(row: CodeRow) -> str:
    """The outcome in words a reader needs no legend for: hit, near miss at distance d, miss."""
    if row.outcome == "near miss":
        return f"near miss at distance {row.tree_distance}"
    if row.outcome == "over-inclusion":
        return "miss (over-inclusion)"
    return row.outcome


def short_why(why: list[str], limit: int = 30) -> str:
    """The first reason a code is in the list, cut to fit a table cell; the rest are in the detail."""
    if not why:
        return ""
    first = why[0] if len(why[0]) <= limit else why[0][: limit - 1] + "…"
    return first + (f" (+{len(why) - 1} more)" if len(why) > 1 else "")


def code_table(view: DrilldownView) -> list[dict[str, object]]:
    """One table per method, narrow enough for a 1,280 px window: no None, no cut-off columns."""
    return [
        {
            "code": row.code,
            "name": row.name,
            "in": SIDES[row.status],
            "outcome": outcome_text(row),
            "credit": row.partial_credit,
            "why in the list": short_why(row.why),
        }
        for row in view.rows
    ]


def provenance_table(view: DrilldownView) -> list[dict[str, object]]:
    """The detail behind each row (best match, tree distance, every reason), shown on demand."""
    return [
        {
            "code": row.code,
            "best match": row.best_match or "",
            "best match name": row.best_match_name or "",
            "tree distance": distance_label(row.tree_distance),
            "why in the list (all)": "; ".join(row.why),
        }
        for row in view.rows
    ]


class HistogramBins(BaseModel):
    """Bars on a numeric axis: distances at their value, 'no common ancestor' one step past the largest."""

    x: list[int]
    ticktext: list[str]
    counts: dict[str, list[int]]  # direction -> count per x


def distance_bins(view: DrilldownView) -> HistogramBins:
    distances = sorted({int(d) for counter in view.distance_counts.values() for d in counter if d.isdigit()})
    top = max(distances, default=0)
    x = list(range(top + 1))
    ticktext = [str(d) for d in x]
    if any(NO_ANCESTOR in counter for counter in view.distance_counts.values()):
        x.append(top + 2)
        ticktext.append(NO_ANCESTOR)
    return HistogramBins(
        x=x,
        ticktext=ticktext,
        counts={
            direction: [counter.get(label, 0) for label in ticktext]
            for direction, counter in view.distance_counts.items()
        },
    )


def outcome_sentence(counts: dict[str, int]) -> str:
    """The outcome counts in words, which a metric tile cut off ("33 / 16 / 1 …")."""

    def n(count: int, one: str, many: str) -> str:
        return f"{count} {one if count == 1 else many}"

    return (
        f"{n(counts['hit'], 'hit', 'hits')}, {n(counts['near miss'], 'near miss', 'near misses')}, "
        f"{n(counts['miss'], 'miss', 'misses')}, {counts['over-inclusion']} over-included "
        "(listed, nowhere near a curated code)."
    )
