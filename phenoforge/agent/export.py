"""Exports of an assembled concept set: CSV with provenance, a FHIR R4 ValueSet, and a Circe concept set.

The FHIR ValueSet lists every code under ``compose.include`` with the ICD-10-CM system URI and the
vocabulary's release as its version, so a terminology server or a FHIR-based study tool reads the list
as it is (checked in the tests against a maintained FHIR model library, ``fhir.resources``).

The Circe JSON lists ICD10CM items; a code whose whole subtree is in the set is written once with
``includeDescendants: true`` (its descendants are not repeated), so the file reads the way a person
would have built it in ATLAS. ATLAS reads a concept by its OMOP ``CONCEPT_ID``: the file is written only
from a vocabulary loaded from the user's Athena download, whose ids are OMOP's. The embedded vocabulary
numbers its codes itself, and a file with those ids would import silently as other concepts: refused.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import duckdb

from phenoforge.agent.state import QUALIFIER_ADVICE, ConceptSet
from phenoforge.csv_safe import SafeWriter
from phenoforge.engine.db import read_metadata
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.engine.schema import ICD10CM
from phenoforge.errors import PhenoforgeError

OMOP_SOURCE = "athena"
"""The vocabulary source whose concept ids are OMOP's (``build --athena DIR``)."""


class ExportUnavailable(PhenoforgeError):
    """An export this vocabulary cannot make correctly (the message says what would make it possible)."""


def circe_unavailable(con: duckdb.DuckDBPyConnection) -> str | None:
    """Why a Circe (OMOP/ATLAS) concept set cannot be written from this vocabulary; None when it can."""
    source = read_metadata(con).get("source", "unknown")
    if source == OMOP_SOURCE:
        return None
    return (
        f"an OMOP/ATLAS concept set needs OMOP concept ids, and this vocabulary ({source}) numbers its codes "
        "itself: ATLAS would read other concepts. Load your Athena download (`python -m phenoforge build "
        "--athena DIR`, see docs/athena.md) to export it; the CSV export has every code"
    )


CSV_FIELDS = [
    "code",
    "name",
    "tier",
    "source",
    "evidence",
    "terms",
    "via_descendants_of",
    "reviewer",
    "decision",
    "reason",
]


def require_reviewer(concept_set: ConceptSet) -> str:
    """The reviewer of the set; ``ExportUnavailable`` when none is named (no list leaves without one)."""
    reviewer = " ".join(concept_set.reviewer.split())
    if not reviewer:
        raise ExportUnavailable(
            "the concept set names no reviewer: name one and assemble again (every exported list is reviewed)"
        )
    return reviewer


def concept_set_csv(concept_set: ConceptSet) -> str:
    """One row per code, then one ``unmappable`` row per term that produced nothing, with why, then one
    ``qualifier`` row per part of the description no code expresses (apply it in the other criteria)."""
    reviewer = require_reviewer(concept_set)
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
                reviewer,
                entry.decision,
                entry.reason,
            ]
        )
    for item in concept_set.unmappable:
        writer.writerow(["", "", "unmappable", "", item.reason, item.term, "", reviewer, "", ""])
    for qualifier in concept_set.qualifiers:
        writer.writerow(["", "", "qualifier", qualifier.kind, QUALIFIER_ADVICE, qualifier.text, "", reviewer, "", ""])
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
    """A Circe ``ConceptSet`` object: ``{"id", "name", "expression": {"items": [...]}}``, every item with its
    OMOP concept id (``ExportUnavailable`` when this vocabulary has none; see the module docstring)."""
    problem = circe_unavailable(con)
    if problem is not None:
        raise ExportUnavailable(problem)
    require_reviewer(concept_set)
    hierarchy = get_hierarchy(con)
    names = {entry.code: entry.name for entry in concept_set.entries}
    items_codes, roots = subtree_roots(con, concept_set.codes)
    items = []
    for code in items_codes:
        node = hierarchy.resolve(code)
        if node is None:
            raise ExportUnavailable(f"{code} is not in the loaded vocabulary: no OMOP concept id to export it with")
        items.append(
            {
                "concept": {
                    "CONCEPT_ID": node,
                    "CONCEPT_NAME": names.get(code) or hierarchy.name[node],
                    "CONCEPT_CODE": code,
                    "VOCABULARY_ID": ICD10CM,
                    "DOMAIN_ID": "Condition",
                    "CONCEPT_CLASS_ID": hierarchy.kind[node],
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


ICD10CM_SYSTEM = "http://hl7.org/fhir/sid/icd-10-cm"
"""The code system URI HL7 assigns ICD-10-CM (terminology.hl7.org)."""


_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def fhir_name(text: str, prefix: str) -> str:
    """A FHIR ``name`` (a machine identifier, ``[A-Z][A-Za-z0-9_]{0,254}``) from ``text``: its ASCII words
    capitalised and joined; ``prefix`` put first when that does not start with a capital letter."""
    name = "".join(word.capitalize() for word in _NOT_ALNUM.split(text) if word)
    if not name or not ("A" <= name[0] <= "Z"):
        name = prefix + name
    return name[:255]


def concept_set_fhir_valueset(
    con: duckdb.DuckDBPyConnection | None,
    concept_set: ConceptSet,
    set_id: str = "concept-set",
    status: str = "draft",
    release: str | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    """A FHIR R4 ``ValueSet``: every code of the set in ``compose.include``, with its display name, the
    ICD-10-CM system and the vocabulary release as the system's version; the description as title.

    ``release`` (the release the list was made with) replaces the open vocabulary's, and ``version`` (a signed-off
    version's number) becomes the ValueSet's own ``version``; ``con`` is read only when ``release`` is None."""
    if not concept_set.entries:  # an include of the system without concepts would mean every ICD-10-CM code
        raise ExportUnavailable("the concept set is empty: a FHIR ValueSet of no codes is not written")
    reviewer = require_reviewer(concept_set)
    if release is None:
        if con is None:
            raise ValueError("a FHIR export needs the vocabulary or the release it was made with")
        release = read_metadata(con).get("vocabulary_release", "") or "unknown"
    # FHIR strings allow no other whitespace than space, tab and newlines (a no-break space alone was invalid)
    plain_description = " ".join(concept_set.description.split())
    slug = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-." else "-" for ch in set_id)[:64].strip("-.")
    slug = slug or "concept-set"  # FHIR ids: ASCII letters, digits, - and ., at most 64
    concepts = [{"code": entry.code, "display": entry.name} for entry in concept_set.entries]
    value_set: dict[str, Any] = {
        "resourceType": "ValueSet",
        "id": slug,
        "url": f"urn:phenoforge:valueset:{slug}",
        "name": fhir_name(slug, "ConceptSet"),
        "title": plain_description[:200] or "phenoforge concept set",
        "status": status,
        "experimental": True,
        "description": f"Assembled by phenoforge from: {plain_description or '(none)'}; reviewed by {reviewer}"
        + "".join(
            f"; not coded, apply in the cohort's other criteria: {q.kind}: {q.text}" for q in concept_set.qualifiers
        ),
        "compose": {"include": [{"system": ICD10CM_SYSTEM, "version": release, "concept": concepts}]},
    }
    if version is not None:
        value_set["version"] = version
    return value_set


def concept_set_fhir_json(con: duckdb.DuckDBPyConnection, concept_set: ConceptSet, set_id: str = "concept-set") -> str:
    return json.dumps(concept_set_fhir_valueset(con, concept_set, set_id), indent=2, ensure_ascii=False)
