"""Reading OHDSI Circe cohort definitions: concept-set items and the role each set plays.

Native ICD-10-CM libraries and OHDSI Phenotype Library cohorts share this shape, so both go
through one reader. Roles: sets referenced by ``PrimaryCriteria`` are the entry (inclusion) sets;
sets used only inside inclusion rules that require zero occurrences are exclusions; every other set
is reported as ``other`` and never merged in.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from phenoforge.engine.models import ConceptItem


class ConceptSetRoles(BaseModel):
    inclusion: list[int] = Field(default_factory=list)
    exclusion: list[int] = Field(default_factory=list)
    other: list[int] = Field(default_factory=list)


class ConceptSet(BaseModel):
    id: int
    name: str
    items: list[ConceptItem]


class CohortDefinition(BaseModel):
    concept_sets: dict[int, ConceptSet]
    roles: ConceptSetRoles


def _codeset_ids(node: Any) -> set[int]:
    """Every ``CodesetId`` anywhere below ``node``."""
    found: set[int] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "CodesetId" and isinstance(value, int):
                found.add(value)
            else:
                found |= _codeset_ids(value)
    elif isinstance(node, list):
        for value in node:
            found |= _codeset_ids(value)
    return found


def _zero_occurrence_ids(node: Any) -> set[int]:
    """CodesetIds inside correlated criteria that require exactly (or at most) zero occurrences."""
    found: set[int] = set()
    if isinstance(node, dict):
        occurrence = node.get("Occurrence")
        criteria = node.get("Criteria")
        if isinstance(occurrence, dict) and criteria is not None:
            kind, count = occurrence.get("Type"), occurrence.get("Count")
            # Circe occurrence types: 0 = exactly, 1 = at most, 2 = at least
            if count == 0 and kind in (0, 1):
                found |= _codeset_ids(criteria)
        for key, value in node.items():
            if key != "Criteria" or not isinstance(occurrence, dict):
                found |= _zero_occurrence_ids(value)
    elif isinstance(node, list):
        for value in node:
            found |= _zero_occurrence_ids(value)
    return found


def _positive_rule_ids(node: Any) -> set[int]:
    """CodesetIds inside inclusion-rule criteria that do not require zero occurrences."""
    found: set[int] = set()
    if isinstance(node, dict):
        occurrence = node.get("Occurrence")
        criteria = node.get("Criteria")
        if isinstance(occurrence, dict) and criteria is not None:
            kind, count = occurrence.get("Type"), occurrence.get("Count")
            if not (count == 0 and kind in (0, 1)):
                found |= _codeset_ids(criteria)
            return found | _positive_rule_ids(criteria)
        for value in node.values():
            found |= _positive_rule_ids(value)
    elif isinstance(node, list):
        for value in node:
            found |= _positive_rule_ids(value)
    return found


def concept_set_roles(definition: dict[str, Any]) -> ConceptSetRoles:
    all_ids = sorted(
        int(concept_set["id"]) for concept_set in definition.get("ConceptSets", []) or []
    )
    entry = _codeset_ids(definition.get("PrimaryCriteria", {}))
    rules = definition.get("InclusionRules", []) or []
    zero = _zero_occurrence_ids(rules) - entry
    positive = _positive_rule_ids(rules)
    exclusion = {set_id for set_id in zero if set_id not in positive}
    return ConceptSetRoles(
        inclusion=[set_id for set_id in all_ids if set_id in entry],
        exclusion=[set_id for set_id in all_ids if set_id in exclusion],
        other=[set_id for set_id in all_ids if set_id not in entry and set_id not in exclusion],
    )


def _item(raw: dict[str, Any]) -> ConceptItem:
    concept = raw.get("concept") or {}
    concept_id = concept.get("CONCEPT_ID")
    return ConceptItem(
        concept_id=int(concept_id) if concept_id not in (None, "") else None,
        code=concept.get("CONCEPT_CODE"),
        vocabulary_id=str(concept.get("VOCABULARY_ID") or ""),
        name=concept.get("CONCEPT_NAME"),
        is_excluded=bool(raw.get("isExcluded", False)),
        include_descendants=bool(raw.get("includeDescendants", False)),
    )


def parse_cohort(definition: dict[str, Any]) -> CohortDefinition:
    """Parse a Circe cohort definition; raises ValueError naming what is malformed."""
    if not isinstance(definition, dict):
        raise ValueError("a cohort definition must be a JSON object")
    raw_sets = definition.get("ConceptSets")
    if not isinstance(raw_sets, list):
        raise ValueError("'ConceptSets' is missing or not a list")
    concept_sets: dict[int, ConceptSet] = {}
    for position, raw in enumerate(raw_sets):
        if not isinstance(raw, dict) or "id" not in raw:
            raise ValueError(f"ConceptSets[{position}] has no 'id'")
        items = (raw.get("expression") or {}).get("items")
        if not isinstance(items, list):
            raise ValueError(f"ConceptSets[{position}].expression.items is missing or not a list")
        parsed = []
        for item_position, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("concept"), dict):
                raise ValueError(
                    f"ConceptSets[{position}].expression.items[{item_position}] has no 'concept'"
                )
            parsed.append(_item(item))
        concept_sets[int(raw["id"])] = ConceptSet(
            id=int(raw["id"]), name=str(raw.get("name", "")), items=parsed
        )
    return CohortDefinition(concept_sets=concept_sets, roles=concept_set_roles(definition))
