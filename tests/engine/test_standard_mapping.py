"""Standard concepts -> ICD-10-CM: descendants, exclusion before mapping, fan-out, reporting."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phenoforge.engine.curated import resolve_curated_concepts
from phenoforge.engine.models import ConceptItem
from phenoforge.engine.standard_mapping import map_standard_items
from tests.athena.athena_fixture import GROUPER_ID, MAPS_TO, N_GROUPER_CODES, SNOMED_CONCEPTS


def snomed(concept_id: int, descendants: bool = True, excluded: bool = False) -> ConceptItem:
    return ConceptItem(
        concept_id=concept_id,
        vocabulary_id="SNOMED",
        code=str(concept_id),
        name=f"concept {concept_id}",
        include_descendants=descendants,
        is_excluded=excluded,
    )


DIABETES_CODES = ["E09", "E09.9", "E10", "E10.1", "E10.10", "E10.9", "E11", "E11.2", "E11.21", "E11.22", "E11.9"]


def test_descendants_through_a_diamond(athena_con: duckdb.DuckDBPyConnection) -> None:
    result = map_standard_items(athena_con, [snomed(1002)], 100)
    assert result.codes == DIABETES_CODES
    assert result.skipped == [] and result.unresolvable == []


def test_without_descendants_only_the_concept_itself(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    many_to_one = map_standard_items(athena_con, [snomed(1003, descendants=False)], 100)
    assert many_to_one.codes == ["E11", "E11.9"]
    nothing = map_standard_items(athena_con, [snomed(1002, descendants=False)], 100)
    assert nothing.codes == []
    assert len(nothing.skipped) == 1
    assert nothing.skipped[0].concept_id == 1002
    assert nothing.skipped[0].reason == "no ICD-10-CM code maps to it (domain Condition)"


def test_excluded_branch_is_removed_before_mapping(athena_con: duckdb.DuckDBPyConnection) -> None:
    result = map_standard_items(
        athena_con, [snomed(1002), snomed(1004, excluded=True), snomed(1009, excluded=True)], 100
    )
    assert result.codes == ["E11", "E11.2", "E11.21", "E11.22", "E11.9"]
    assert result.excluded_codes == ["E09", "E09.9", "E10", "E10.1", "E10.10", "E10.9"]
    assert result.skipped == []


def test_excluded_without_descendants_keeps_the_children(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    result = map_standard_items(athena_con, [snomed(1004), snomed(1004, descendants=False, excluded=True)], 100)
    # 1008 (T1DM with ketoacidosis) stays: only 1004 itself was excluded
    assert result.codes == ["E10.1", "E10.10"]
    assert result.excluded_codes == ["E10", "E10.9"]


def test_a_code_mapping_to_an_included_and_an_excluded_concept_stays(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    # E11.22 maps to 1006 (kept) and 1012 (chronic kidney disease, excluded)
    result = map_standard_items(athena_con, [snomed(1010), snomed(1012, excluded=True)], 100)
    assert result.codes == ["E11.2", "E11.21", "E11.22"]
    assert result.excluded_codes == ["N18", "N18.9"]


def test_excluding_the_listed_concept_itself_is_reported(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    result = map_standard_items(athena_con, [snomed(1004), snomed(1002, excluded=True)], 100)
    assert result.codes == []
    assert [item.reason for item in result.skipped] == ["removed by an excluded item of the same concept set"]


def test_broad_grouper_is_skipped_and_reported(athena_con: duckdb.DuckDBPyConnection) -> None:
    result = map_standard_items(athena_con, [snomed(1030), snomed(GROUPER_ID)], 100)
    assert result.codes == ["J45", "J45.20", "J45.909"]
    assert len(result.skipped) == 1
    skipped = result.skipped[0]
    assert skipped.concept_id == GROUPER_ID and skipped.code == "82271004"
    assert f"{N_GROUPER_CODES} ICD-10-CM codes map to it" in skipped.reason
    assert "fanout_threshold=100" in skipped.reason


@pytest.mark.parametrize(("threshold", "kept"), [(N_GROUPER_CODES, True), (N_GROUPER_CODES - 1, False)])
def test_fanout_threshold_is_more_than(athena_con: duckdb.DuckDBPyConnection, threshold: int, kept: bool) -> None:
    result = map_standard_items(athena_con, [snomed(GROUPER_ID)], threshold)
    assert (len(result.codes) == N_GROUPER_CODES) is kept
    assert (result.skipped == []) is kept


def test_a_grouper_below_a_listed_concept_is_skipped_alone(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    result = map_standard_items(athena_con, [snomed(1000)], 100)
    assert not any(code.startswith("S01") for code in result.codes)
    assert "I50.9" in result.codes and "E11.22" in result.codes
    assert [item.concept_id for item in result.skipped] == [GROUPER_ID]


@pytest.mark.parametrize(
    ("vocabulary", "phrase"),
    [
        ("LOINC", "laboratory tests"),
        ("ATC", "drug classes"),
        ("RxNorm", "drugs"),
        ("ICD9CM", "vocabulary ICD9CM is not loaded"),
    ],
)
def test_out_of_scope_vocabularies(athena_con: duckdb.DuckDBPyConnection, vocabulary: str, phrase: str) -> None:
    item = ConceptItem(concept_id=3000, vocabulary_id=vocabulary, name="x")
    result = map_standard_items(athena_con, [item, snomed(1021)], 100)
    assert result.codes == ["I50", "I50.2", "I50.21", "I50.22", "I50.9"]
    assert len(result.skipped) == 1
    assert result.skipped[0].vocabulary_id == vocabulary
    assert result.skipped[0].reason.startswith("out of scope")
    assert phrase in result.skipped[0].reason


def test_absent_and_deprecated_ids_are_unresolvable(
    athena_con: duckdb.DuckDBPyConnection,
) -> None:
    result = map_standard_items(athena_con, [snomed(424242), snomed(1040), snomed(1003)], 100)
    assert result.unresolvable == ["SNOMED concept 424242", "SNOMED concept 1040"]
    assert result.codes == ["E11", "E11.21", "E11.22", "E11.9"]


def test_non_standard_concept_is_reported(athena_con: duckdb.DuckDBPyConnection) -> None:
    result = map_standard_items(athena_con, [snomed(1060, descendants=False)], 100)
    assert result.codes == []
    assert result.skipped[0].reason.startswith("non-standard concept")


def test_measurement_concept_is_unmappable(athena_con: duckdb.DuckDBPyConnection) -> None:
    result = map_standard_items(athena_con, [snomed(1050)], 100)
    assert result.skipped[0].reason == ("no ICD-10-CM code maps to it or its descendants (domain Measurement)")


def test_item_without_concept_id(athena_con: duckdb.DuckDBPyConnection) -> None:
    item = ConceptItem(concept_id=None, vocabulary_id="SNOMED", code="73211009")
    result = map_standard_items(athena_con, [item], 100)
    assert result.skipped[0].reason.startswith("no CONCEPT_ID")


def test_a_database_without_snomed_says_to_load_athena(
    fixture_con: duckdb.DuckDBPyConnection,
) -> None:
    result = map_standard_items(fixture_con, [snomed(1002)], 100)
    assert result.codes == [] and result.unresolvable == []
    assert "python -m phenoforge build --athena DIR" in result.skipped[0].reason


def test_through_resolve_curated_concepts(athena_con: duckdb.DuckDBPyConnection) -> None:
    items = [
        ConceptItem(vocabulary_id="ICD10CM", code="I50.9", concept_id=0),
        snomed(1030),
        ConceptItem(concept_id=21600712, vocabulary_id="ATC", name="drugs"),
    ]
    result = resolve_curated_concepts(athena_con, items)
    assert result.codes == ["I50.9", "J45", "J45.20", "J45.909"]
    assert [item.vocabulary_id for item in result.skipped] == ["ATC"]


SNOMED_IDS = [row[0] for row in SNOMED_CONCEPTS if not row[6]]


def _closure(con: duckdb.DuckDBPyConnection, concept_id: int, descendants: bool) -> set[int]:
    if not descendants:
        return {concept_id}
    return {
        row[0]
        for row in con.execute(
            "SELECT descendant_id FROM concept_ancestor WHERE ancestor_id = ?", [concept_id]
        ).fetchall()
    } | {concept_id}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(SNOMED_IDS), st.booleans(), st.booleans()), min_size=1, max_size=6))
def test_mapping_matches_a_brute_force_model(
    athena_con: duckdb.DuckDBPyConnection, specs: list[tuple[int, bool, bool]]
) -> None:
    """codes = every code whose 'Maps to' target is in (included - excluded), minus groupers."""
    items = [snomed(cid, descendants=desc, excluded=exc) for cid, desc, exc in specs]
    included: set[int] = set()
    excluded: set[int] = set()
    for cid, desc, exc in specs:
        (excluded if exc else included).update(_closure(athena_con, cid, desc))
    kept = (included - excluded) - {GROUPER_ID}
    maps = MAPS_TO + [(f"S01.{n:02d}", GROUPER_ID) for n in range(N_GROUPER_CODES)]
    expected = {code for code, target in maps if target in kept}
    result = map_standard_items(athena_con, items, 100)
    assert set(result.codes) == expected
    assert not set(result.codes) & set(result.excluded_codes)
