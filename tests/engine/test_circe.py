"""The Circe reader: concept-set items, and which sets are inclusion, exclusion or other."""

from __future__ import annotations

from typing import Any

import pytest

from phenoforge.engine.circe import CohortDefinition, concept_set_roles, parse_cohort


def _set(set_id: int, name: str = "", items: list[dict[str, Any]] | None = None) -> dict:
    return {"id": set_id, "name": name or f"set {set_id}", "expression": {"items": items or []}}


def _criteria(
    codeset_id: int, domain: str = "ConditionOccurrence", nested: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"CodesetId": codeset_id}
    if nested is not None:
        body["CorrelatedCriteria"] = nested
    return {domain: body}


def _correlated(
    codeset_id: int, occurrence_type: int, count: int, nested: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "Criteria": _criteria(codeset_id, nested=nested),
        "StartWindow": {"Start": {"Coeff": -1}, "End": {"Days": 0, "Coeff": 1}},
        "Occurrence": {"Type": occurrence_type, "Count": count, "IsDistinct": False},
    }


def _group(
    kind: str = "ALL", criteria: list[dict] | None = None, groups: list[dict] | None = None, count: int | None = None
) -> dict[str, Any]:
    group: dict[str, Any] = {
        "Type": kind,
        "CriteriaList": criteria or [],
        "DemographicCriteriaList": [],
        "Groups": groups or [],
    }
    if count is not None:
        group["Count"] = count
    return group


def _cohort(n_sets: int, primary: list[dict], rules: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "ConceptSets": [_set(i) for i in range(n_sets)],
        "PrimaryCriteria": {"CriteriaList": primary},
        "InclusionRules": [{"name": f"rule {i}", "expression": rule} for i, rule in enumerate(rules or [])],
        **extra,
    }


def _roles(definition: dict[str, Any]) -> tuple[list[int], list[int], list[int]]:
    roles = concept_set_roles(definition)
    return roles.inclusion, roles.exclusion, roles.other


def test_shape_of_phenotype_library_288() -> None:
    """Entry on diagnosis, drug or lab; zero T1DM and zero secondary DM; at least one T2DM."""
    definition = _cohort(
        6,
        primary=[_criteria(0), _criteria(4, "DrugExposure"), _criteria(3, "Measurement")],
        rules=[
            _group(criteria=[_correlated(5, 0, 0)]),
            _group(criteria=[_correlated(2, 0, 0)]),
            _group(criteria=[_correlated(0, 2, 1)]),
        ],
    )
    assert _roles(definition) == ([0, 3, 4], [2, 5], [1])


def test_at_most_zero_is_an_exclusion() -> None:
    assert _roles(_cohort(2, [_criteria(0)], [_group(criteria=[_correlated(1, 1, 0)])])) == ([0], [1], [])


@pytest.mark.parametrize(("occurrence_type", "count"), [(2, 1), (0, 2), (1, 3), (2, 0)])
def test_other_counts_are_not_exclusions(occurrence_type: int, count: int) -> None:
    definition = _cohort(2, [_criteria(0)], [_group(criteria=[_correlated(1, occurrence_type, count)])])
    assert _roles(definition) == ([0], [], [1])


def test_a_set_both_forbidden_and_required_is_other() -> None:
    definition = _cohort(
        2, [_criteria(0)], [_group(criteria=[_correlated(1, 0, 0)]), _group(criteria=[_correlated(1, 2, 1)])]
    )
    assert _roles(definition) == ([0], [], [1])


def test_an_entry_set_is_never_an_exclusion() -> None:
    definition = _cohort(1, [_criteria(0)], [_group(criteria=[_correlated(0, 0, 0)])])
    assert _roles(definition) == ([0], [], [])


def test_zero_inside_any_of_several_is_not_firm() -> None:
    definition = _cohort(3, [_criteria(0)], [_group("ANY", criteria=[_correlated(1, 0, 0), _correlated(2, 2, 1)])])
    assert _roles(definition) == ([0], [], [1, 2])


def test_at_most_zero_group_forbids_its_members() -> None:
    definition = _cohort(
        3, [_criteria(0)], [_group("AT_MOST", count=0, criteria=[_correlated(1, 2, 1), _correlated(2, 2, 1)])]
    )
    assert _roles(definition) == ([0], [1, 2], [])


def test_double_negation_is_a_requirement() -> None:
    # "none of (no X)" = at least one X: a requirement, so X is other
    definition = _cohort(2, [_criteria(0)], [_group("AT_MOST", count=0, criteria=[_correlated(1, 0, 0)])])
    assert _roles(definition) == ([0], [], [1])


def test_nested_groups_keep_polarity() -> None:
    definition = _cohort(
        3,
        [_criteria(0)],
        [_group(groups=[_group(criteria=[_correlated(1, 0, 0)]), _group("ANY", criteria=[_correlated(2, 0, 0)])])],
    )
    assert _roles(definition) == ([0], [1, 2], [])


def test_qualifier_of_a_forbidden_event_is_not_excluded() -> None:
    # "no X that has at least one Y within 30 days": X is excluded, Y is not
    qualifier = _group(criteria=[_correlated(2, 2, 1)])
    definition = _cohort(3, [_criteria(0)], [_group(criteria=[_correlated(1, 0, 0, nested=qualifier)])])
    assert _roles(definition) == ([0], [1], [2])


def test_entry_qualifiers_are_not_entry_sets() -> None:
    # an entry event "X with no prior Y" and "X with a Z": only X is the entry set
    qualifier = _group(criteria=[_correlated(1, 0, 0), _correlated(2, 2, 1)])
    definition = _cohort(3, [_criteria(0, nested=qualifier)])
    assert _roles(definition) == ([0], [1], [2])


def test_additional_criteria_count_like_rules() -> None:
    definition = _cohort(2, [_criteria(0)], AdditionalCriteria=_group(criteria=[_correlated(1, 0, 0)]))
    assert _roles(definition) == ([0], [1], [])


def test_censoring_end_strategy_and_unused_sets_are_other() -> None:
    definition = _cohort(
        4, [_criteria(0)], CensoringCriteria=[_criteria(1)], EndStrategy={"CustomEra": {"DrugCodesetId": 2}}
    )
    assert _roles(definition) == ([0], [], [1, 2, 3])


def test_a_source_concept_filter_is_other_unless_it_is_the_only_selector() -> None:
    narrowed = [{"ConditionOccurrence": {"CodesetId": 0, "ConditionSourceConcept": 1}}]
    assert _roles(_cohort(2, narrowed)) == ([0], [], [1])
    alone = [{"ConditionOccurrence": {"ConditionSourceConcept": 1}}]
    assert _roles(_cohort(2, alone)) == ([1], [], [0])


def test_parse_cohort_items() -> None:
    definition = _cohort(1, [_criteria(0)])
    definition["ConceptSets"][0]["expression"]["items"] = [
        {
            "concept": {
                "CONCEPT_ID": 201820,
                "CONCEPT_CODE": "73211009",
                "VOCABULARY_ID": "SNOMED",
                "CONCEPT_NAME": "Diabetes mellitus",
            },
            "isExcluded": False,
            "includeDescendants": True,
            "includeMapped": False,
        },
        {
            "concept": {
                "CONCEPT_ID": 201254,
                "CONCEPT_CODE": "46635009",
                "VOCABULARY_ID": "SNOMED",
                "CONCEPT_NAME": "Type 1 diabetes mellitus",
            },
            "isExcluded": True,
            "includeDescendants": True,
        },
        {"concept": {"CONCEPT_ID": None, "CONCEPT_CODE": "E11.9", "VOCABULARY_ID": "ICD10CM"}},
    ]
    cohort = parse_cohort(definition)
    assert isinstance(cohort, CohortDefinition)
    items = cohort.concept_sets[0].items
    assert [(i.concept_id, i.vocabulary_id, i.is_excluded, i.include_descendants) for i in items] == [
        (201820, "SNOMED", False, True),
        (201254, "SNOMED", True, True),
        (None, "ICD10CM", False, False),
    ]
    assert items[0].code == "73211009" and items[0].name == "Diabetes mellitus"


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        ([], "must be a JSON object"),
        ({"PrimaryCriteria": {}}, "'ConceptSets' is missing"),
        ({"ConceptSets": [{"name": "x"}]}, r"ConceptSets\[0\] has no 'id'"),
        ({"ConceptSets": [{"id": 0, "expression": {}}]}, r"ConceptSets\[0\]\.expression\.items"),
        ({"ConceptSets": [{"id": 0, "expression": {"items": [{"isExcluded": True}]}}]}, r"items\[0\] has no 'concept'"),
    ],
)
def test_parse_errors_name_the_problem(definition: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_cohort(definition)


def test_roles_tolerate_missing_sections() -> None:
    assert _roles({"ConceptSets": [_set(0)]}) == ([], [], [0])
    assert _roles({"ConceptSets": [_set(0)], "PrimaryCriteria": None, "InclusionRules": None}) == ([], [], [0])
