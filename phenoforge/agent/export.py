"""Exports of an assembled concept set: CSV with provenance, and a Circe-shaped concept set.

The Circe JSON lists ICD10CM items; a code whose whole subtree is in the set is written once with
``includeDescendants: true`` (its descendants are not repeated), so the file reads the way a person
would have built it in ATLAS.
"""

from __future__ import annotations

import io
import json
from typing import Any

import duckdb

from phenoforge.agent.state import ConceptSet
from phenoforge.csv_safe import SafeWriter
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.engine.schema import ICD10CM

CSV_FIELDS = ["code", "name", "tier", "source", "evidence", "terms", "via_descendants_of"]


def concept_set_csv(concept_set: ConceptSet) -> str:
    """One row per code, then one ``UNMAPPABLE`` row per term that produced nothing, with why."""
    out = io.StringIO()
    writer = SafeWriter(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for entry in concept_set.entries:
        writer.writerow(
            [
                entry.code,
                entry.name,
                entry.tier,
                entry.source,
                entry.evidence,
                "; ".join(entry.terms),
                entry.via_descendants_of or "",
            ]
        )
    for item in concept_set.unmappable:
        writer.writerow(["", "", "unmappable", "", item.reason, item.term, ""])
    return out.getvalue()


def subtree_roots(con: duckdb.DuckDBPyConnection, codes: list[str]) -> tuple[list[str], set[str]]:
    """``(items in order, roots)``: codes not covered by an ancestor whose full subtree is present."""
    hierarchy = get_hierarchy(con)
    present = set(codes)
    full: set[str] = set()
    for code in codes:
        node = hierarchy.resolve(code)
        if node is None:
            continue
        below = hierarchy.descendants(node)
        if below and all(hierarchy.code[child] in present for child in below):
            full.add(code)
    covered: set[str] = set()
    for code in full:
        node = hierarchy.resolve(code)
        if node is not None:  # always: ``full`` holds only codes that resolved above
            covered.update(hierarchy.code[child] for child in hierarchy.descendants(node))
    items = [code for code in codes if code not in covered]
    return items, {code for code in items if code in full}


def concept_set_circe(con: duckdb.DuckDBPyConnection, concept_set: ConceptSet, set_id: int = 0) -> dict[str, Any]:
    """A Circe ``ConceptSet`` object: ``{"id", "name", "expression": {"items": [...]}}``."""
    hierarchy = get_hierarchy(con)
    names = {entry.code: entry.name for entry in concept_set.entries}
    items_codes, roots = subtree_roots(con, concept_set.codes)
    items = []
    for code in items_codes:
        node = hierarchy.resolve(code)
        items.append(
            {
                "concept": {
                    "CONCEPT_ID": node if node is not None else 0,
                    "CONCEPT_NAME": names.get(code) or (hierarchy.name[node] if node is not None else ""),
                    "CONCEPT_CODE": code,
                    "VOCABULARY_ID": ICD10CM,
                    "DOMAIN_ID": "Condition",
                    "CONCEPT_CLASS_ID": hierarchy.kind[node] if node is not None else "",
                    "STANDARD_CONCEPT": "N",
                    "STANDARD_CONCEPT_CAPTION": "Non-Standard",
                    "INVALID_REASON": "V",
                    "INVALID_REASON_CAPTION": "Valid",
                },
                "isExcluded": False,
                "includeDescendants": code in roots,
                "includeMapped": False,
            }
        )
    return {"id": set_id, "name": concept_set.description[:200], "expression": {"items": items}}


def concept_set_circe_json(con: duckdb.DuckDBPyConnection, concept_set: ConceptSet) -> str:
    return json.dumps(concept_set_circe(con, concept_set), indent=2)
