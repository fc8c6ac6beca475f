"""Reading OHDSI Circe cohort definitions: concept-set items and the role each set plays.

Native ICD-10-CM libraries and OHDSI Phenotype Library cohorts share this shape, so both go
through one reader. Roles: sets a ``PrimaryCriteria`` criterion selects on are the entry
(inclusion) sets; a set the inclusion rules only ever forbid (zero occurrences, after every
``AT_MOST 0`` group and negation above it is applied; ``AdditionalCriteria`` and an entry event's
own qualifiers count like rules) is an exclusion; every other set (required by a rule, used in a
disjunction or a count, censoring, end strategy, unused) is reported as ``other`` and never merged
in.
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


# How a concept set is used where it is referenced, after every negation above it is applied:
# REQUIRE (must occur), FORBID (must not occur), UNKNOWN (neither firmly: a disjunction, a count
# like "exactly 2", a qualifier of a forbidden event).
REQUIRE, FORBID, UNKNOWN = "require", "forbid", "unknown"


def _flip(polarity: str) -> str:
    return {REQUIRE: FORBID, FORBID: REQUIRE}.get(polarity, UNKNOWN)


def _direct_ids(criteria: Any) -> set[int]:
    """CodesetIds a domain criterion selects on itself (not those of its nested qualifiers).

    A ``...SourceConcept`` set only narrows a criterion's ``CodesetId`` (an intersection, which
    a union of code lists cannot express), so it counts only when there is no ``CodesetId``.
    """
    found: set[int] = set()
    if not isinstance(criteria, dict):
        return found
    for body in criteria.values():
        if not isinstance(body, dict):
            continue
        codeset = body.get("CodesetId")
        if isinstance(codeset, int) and not isinstance(codeset, bool):
            found.add(codeset)
            continue
        for key, value in body.items():
            if key.endswith("SourceConcept") and isinstance(value, int) and not isinstance(value, bool):
                found.add(value)
    return found


def _nested_groups(criteria: Any) -> list[Any]:
    if not isinstance(criteria, dict):
        return []
    return [
        body["CorrelatedCriteria"]
        for body in criteria.values()
        if isinstance(body, dict) and isinstance(body.get("CorrelatedCriteria"), dict)
    ]


class _Uses:
    """Every concept-set reference found while walking the cohort, with its polarity."""

    def __init__(self) -> None:
        self.by_polarity: dict[str, set[int]] = {REQUIRE: set(), FORBID: set(), UNKNOWN: set()}

    def criteria(self, criteria: Any, polarity: str) -> None:
        self.by_polarity[polarity] |= _direct_ids(criteria)
        # "X that has Y": Y is required with a required X, undetermined with a forbidden one
        nested = REQUIRE if polarity == REQUIRE else UNKNOWN
        for group in _nested_groups(criteria):
            self.group(group, nested)

    def correlated(self, node: Any, polarity: str) -> None:
        if not isinstance(node, dict):
            return
        occurrence = node.get("Occurrence") or {}
        kind, count = occurrence.get("Type"), occurrence.get("Count")
        # Circe occurrence types: 0 = exactly, 1 = at most, 2 = at least
        if kind in (0, 1) and count == 0:
            inner = _flip(polarity)
        elif kind == 2 and isinstance(count, int) and count >= 1:
            inner = polarity
        else:
            inner = UNKNOWN
        self.criteria(node.get("Criteria"), inner)

    def group(self, group: Any, polarity: str) -> None:
        if not isinstance(group, dict):
            return
        criteria = [c for c in group.get("CriteriaList") or [] if isinstance(c, dict)]
        groups = [g for g in group.get("Groups") or [] if isinstance(g, dict)]
        n = len(criteria) + len(groups)
        kind = str(group.get("Type") or "ALL").upper()
        count = group.get("Count")
        if kind == "ALL" or (kind == "AT_LEAST" and count == n):
            # not(a and b) forbids neither a nor b on its own
            child = polarity if polarity != FORBID or n == 1 else UNKNOWN
        elif kind == "ANY" or (kind == "AT_LEAST" and count == 1):
            # a or b requires neither on its own; not(a or b) forbids both
            child = polarity if polarity == FORBID or n == 1 else UNKNOWN
        elif kind == "AT_MOST" and count == 0:
            # none of them: each forbidden; not(none of them) = at least one
            child = FORBID if polarity == REQUIRE else (REQUIRE if polarity == FORBID and n == 1 else UNKNOWN)
        else:
            child = UNKNOWN
        for node in criteria:
            self.correlated(node, child)
        for node in groups:
            self.group(node, child)


def concept_set_roles(definition: dict[str, Any]) -> ConceptSetRoles:
    """Entry sets (selected directly by PrimaryCriteria) are the inclusion sets; a set that the
    inclusion rules (or AdditionalCriteria, or an entry event's own qualifiers) only ever forbid
    is an exclusion; everything else (required by a rule, used in a disjunction or a count,
    censoring, end strategy, unused) is other."""
    all_ids = sorted(
        int(concept_set["id"])
        for concept_set in definition.get("ConceptSets", []) or []
        if isinstance(concept_set, dict) and "id" in concept_set
    )
    primary = definition.get("PrimaryCriteria") or {}
    uses = _Uses()
    entry: set[int] = set()
    for criteria in primary.get("CriteriaList") or [] if isinstance(primary, dict) else []:
        entry |= _direct_ids(criteria)
        for group in _nested_groups(criteria):
            uses.group(group, REQUIRE)
    uses.group(definition.get("AdditionalCriteria"), REQUIRE)
    for rule in definition.get("InclusionRules") or []:
        if isinstance(rule, dict):
            uses.group(rule.get("expression"), REQUIRE)
    positive = uses.by_polarity[REQUIRE] | uses.by_polarity[UNKNOWN]
    exclusion = uses.by_polarity[FORBID] - entry - positive
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
                raise ValueError(f"ConceptSets[{position}].expression.items[{item_position}] has no 'concept'")
            parsed.append(_item(item))
        concept_sets[int(raw["id"])] = ConceptSet(id=int(raw["id"]), name=str(raw.get("name", "")), items=parsed)
    return CohortDefinition(concept_sets=concept_sets, roles=concept_set_roles(definition))
