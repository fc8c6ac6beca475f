"""Curated cohort libraries: the format, atomic writes, clear errors, and Circe resolution."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import pytest

from phenoforge.config import libraries_dir
from phenoforge.engine import curated
from phenoforge.engine.curated import (
    Citation,
    CohortEntry,
    CuratedConceptSet,
    LibraryManifest,
    LibraryStats,
    cohort_file_name,
    icd_cohort_definition,
    library_group,
    list_libraries,
    load_curated_concept_set,
    load_library,
    resolve_curated_concepts,
    write_library,
)
from phenoforge.engine.models import ConceptItem
from phenoforge.errors import LibraryError
from tests.fixture_library import write_icd_library
from tests.fixture_vocab import FIXTURE_NODES

ORDER = {code: index for index, (code, *_rest) in enumerate(FIXTURE_NODES)}
E11_ALL = [code for code, *_ in FIXTURE_NODES if code == "E11" or code.startswith("E11.")]


def manifest_for(cohorts: dict[str, str], library_id: str = "test-lib") -> LibraryManifest:
    return LibraryManifest(
        library_id=library_id,
        name="Test library",
        description="fixture cohorts",
        citation=Citation(source="tests", version="1", licence="CC0", url="https://example.org"),
        created_at="2026-12-02T00:00:00+00:00",
        stats=LibraryStats(n_cohorts=len(cohorts), n_listed_codes=0),
        cohorts=[
            CohortEntry(cohort_id=cid, cohort_name=name, file=cohort_file_name(cid)) for cid, name in cohorts.items()
        ],
    )


def write(dest: Path, definitions: dict[str, tuple[str, dict[str, Any]]], library_id: str = "test-lib") -> Path:
    manifest = manifest_for({cid: name for cid, (name, _d) in definitions.items()}, library_id)
    return write_library(
        dest, manifest, {cid: definition for cid, (_n, definition) in definitions.items()}, replace=True
    )


def item(
    code: str, excluded: bool = False, descendants: bool = False, vocabulary: str = "ICD10CM", concept_id: int = 0
) -> dict[str, Any]:
    return {
        "concept": {"CONCEPT_ID": concept_id, "CONCEPT_CODE": code, "VOCABULARY_ID": vocabulary, "CONCEPT_NAME": None},
        "isExcluded": excluded,
        "includeDescendants": descendants,
    }


def circe(
    sets: dict[int, list[dict[str, Any]]],
    entry: list[int],
    rules: list[dict[str, Any]] | None = None,
    names: dict[int, str] | None = None,
) -> dict[str, Any]:
    names = names or {}
    return {
        "ConceptSets": [
            {"id": set_id, "name": names.get(set_id, f"set {set_id}"), "expression": {"items": items}}
            for set_id, items in sets.items()
        ],
        "PrimaryCriteria": {"CriteriaList": [{"ConditionOccurrence": {"CodesetId": set_id}} for set_id in entry]},
        "InclusionRules": rules or [],
    }


def rule(codeset_id: int, occurrence_type: int, count: int) -> dict[str, Any]:
    return {
        "name": f"rule on {codeset_id}",
        "expression": {
            "Type": "ALL",
            "CriteriaList": [
                {
                    "Criteria": {"ConditionOccurrence": {"CodesetId": codeset_id}},
                    "StartWindow": {"Start": {"Coeff": -1}, "End": {"Days": 0, "Coeff": 1}},
                    "Occurrence": {"Type": occurrence_type, "Count": count},
                }
            ],
            "DemographicCriteriaList": [],
            "Groups": [],
        },
    }


def items(*raw: dict[str, Any]) -> list[ConceptItem]:
    return [
        ConceptItem(
            code=r["concept"]["CONCEPT_CODE"],
            vocabulary_id=r["concept"]["VOCABULARY_ID"],
            concept_id=r["concept"]["CONCEPT_ID"],
            is_excluded=r["isExcluded"],
            include_descendants=r["includeDescendants"],
        )
        for r in raw
    ]


# --- the library format --------------------------------------------------------------------------


def test_library_round_trip(tmp_path: Path) -> None:
    definitions = {
        "dm2": ("Type 2 diabetes mellitus", icd_cohort_definition("Type 2 diabetes mellitus", ["E11"], True)),
        "hf": ("Heart failure", icd_cohort_definition("Heart failure", ["I50.9", "I50.21"])),
    }
    dest = write(tmp_path / "lib", definitions)
    library = load_library(dest)
    assert library.library_id == "test-lib"
    assert library.cohort_ids == ["dm2", "hf"]
    assert library.manifest == manifest_for({"dm2": "Type 2 diabetes mellitus", "hf": "Heart failure"})
    assert library.definition("hf") == definitions["hf"][1]
    assert library.cohort("dm2").file == "cohorts/dm2.json"
    assert (dest / "cohorts" / "dm2.json").is_file() and (dest / "manifest.json").is_file()
    assert json.loads((dest / "manifest.json").read_text())["citation"]["licence"] == "CC0"
    with pytest.raises(LibraryError, match="nope"):
        library.cohort("nope")


def test_icd_cohort_definition_shape() -> None:
    definition = icd_cohort_definition("Asthma", ["J45", "J45.909"], include_descendants=True)
    (concept_set,) = definition["ConceptSets"]
    assert [i["concept"]["CONCEPT_CODE"] for i in concept_set["expression"]["items"]] == ["J45", "J45.909"]
    assert all(i["includeDescendants"] and not i["isExcluded"] for i in concept_set["expression"]["items"])
    assert all(i["concept"]["VOCABULARY_ID"] == "ICD10CM" for i in concept_set["expression"]["items"])
    assert definition["PrimaryCriteria"]["CriteriaList"][0]["ConditionOccurrence"]["CodesetId"] == concept_set["id"]


def test_rewrite_replaces_the_library(tmp_path: Path) -> None:
    dest = write(tmp_path / "lib", {"a": ("A", icd_cohort_definition("A", ["E11.9"]))})
    write(dest, {"b": ("B", icd_cohort_definition("B", ["J45"]))})
    library = load_library(dest)
    assert library.cohort_ids == ["b"]
    assert not (dest / "cohorts" / "a.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib"]


def test_failed_write_leaves_the_old_library(tmp_path: Path) -> None:
    dest = write(tmp_path / "lib", {"a": ("A", icd_cohort_definition("A", ["E11.9"]))})
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    bad = icd_cohort_definition("B", ["J45"])
    bad["unserialisable"] = {1, 2, 3}  # json.dumps fails half-way through the write
    with pytest.raises(TypeError):
        write(dest, {"ok": ("OK", icd_cohort_definition("OK", ["I50"])), "b": ("B", bad)})
    after = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lib"]  # no temporary folder left


def test_failed_final_rename_leaves_the_old_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = write(tmp_path / "lib", {"a": ("A", icd_cohort_definition("A", ["E11.9"]))})
    real_replace = os.replace
    calls: list[tuple[str, str]] = []

    def replace(src, dst):  # noqa: ANN001, ANN202
        calls.append((str(src), str(dst)))
        if len(calls) == 2:  # moving the new library into place
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(curated.os, "replace", replace)
    with pytest.raises(OSError):
        write(dest, {"b": ("B", icd_cohort_definition("B", ["J45"]))})
    monkeypatch.setattr(curated.os, "replace", real_replace)
    assert load_library(dest).cohort_ids == ["a"]


def test_manifest_and_definitions_must_agree(tmp_path: Path) -> None:
    manifest = manifest_for({"a": "A", "b": "B"})
    with pytest.raises(LibraryError, match="differ"):
        write_library(tmp_path / "lib", manifest, {"a": icd_cohort_definition("A", ["E11"])})
    assert not (tmp_path / "lib").exists()


def test_list_libraries(tmp_path: Path) -> None:
    assert list_libraries() == []
    write(libraries_dir() / "beta", {"x": ("X", icd_cohort_definition("X", ["E11"]))}, library_id="beta-id")
    write(libraries_dir() / "alpha", {"y": ("Y", icd_cohort_definition("Y", ["J45"]))}, library_id="alpha-id")
    (libraries_dir() / "not-a-library").mkdir()
    (libraries_dir() / ".hidden").mkdir()
    (libraries_dir() / ".hidden" / "manifest.json").write_text("{}")
    assert [lib.library_id for lib in list_libraries()] == ["alpha-id", "beta-id"]
    other = tmp_path / "elsewhere"
    write(other / "gamma", {"z": ("Z", icd_cohort_definition("Z", ["I50"]))}, library_id="gamma-id")
    assert [lib.library_id for lib in list_libraries(other)] == ["gamma-id"]
    assert list_libraries(tmp_path / "missing") == []


# --- clear errors ------------------------------------------------------------------------------------


def test_missing_manifest_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(LibraryError) as error:
        load_library(tmp_path / "empty")
    assert str(tmp_path / "empty" / "manifest.json") in str(error.value)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "malformed manifest"),
        ('{"library_id": "x"}', "malformed manifest"),
        (b"\xff\xfe\x00bad", "not valid JSON"),
    ],
)
def test_malformed_manifest_names_the_file(tmp_path: Path, content: str | bytes, problem: str) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    if isinstance(content, bytes):
        (lib / "manifest.json").write_bytes(content)
    else:
        (lib / "manifest.json").write_text(content)
    with pytest.raises(LibraryError) as error:
        load_library(lib)
    assert str(lib / "manifest.json") in str(error.value)
    assert problem in str(error.value)


def test_manifest_problem_names_the_field(tmp_path: Path) -> None:
    dest = write(tmp_path / "lib", {"a": ("A", icd_cohort_definition("A", ["E11"]))})
    raw = json.loads((dest / "manifest.json").read_text())
    del raw["citation"]["licence"]
    (dest / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(LibraryError, match="citation.licence"):
        load_library(dest)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{oops", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"PrimaryCriteria": {}}', "ConceptSets"),
        ('{"ConceptSets": [{"name": "no id"}]}', "has no 'id'"),
        ('{"ConceptSets": [{"id": 0, "expression": {}}]}', "items"),
        ('{"ConceptSets": [{"id": 0, "expression": {"items": [{"isExcluded": false}]}}]}', "has no 'concept'"),
        ('{"ConceptSets": [{"id": 0, "expression": {"items": []}}], "PrimaryCriteria": {}}', "PrimaryCriteria"),
    ],
)
def test_malformed_cohort_file_names_the_file(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path, content: str, problem: str
) -> None:
    dest = write(tmp_path / "lib", {"bad": ("Bad", icd_cohort_definition("Bad", ["E11"]))})
    (dest / "cohorts" / "bad.json").write_text(content)
    with pytest.raises(LibraryError) as error:
        load_curated_concept_set(fixture_con, dest, "bad")
    assert str(dest / "cohorts" / "bad.json") in str(error.value)
    assert problem in str(error.value)


def test_missing_cohort_file_names_the_file(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    dest = write(tmp_path / "lib", {"gone": ("Gone", icd_cohort_definition("Gone", ["E11"]))})
    (dest / "cohorts" / "gone.json").unlink()
    with pytest.raises(LibraryError) as error:
        load_curated_concept_set(fixture_con, dest, "gone")
    assert str(dest / "cohorts" / "gone.json") in str(error.value) and "missing" in str(error.value)


def test_unknown_cohort_id_is_a_library_error(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    dest = write(tmp_path / "lib", {"a": ("A", icd_cohort_definition("A", ["E11"]))})
    with pytest.raises(LibraryError, match="'zzz'"):
        load_curated_concept_set(fixture_con, dest, "zzz")


# --- resolution ------------------------------------------------------------------------------------


def test_plain_items_resolve_to_themselves(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(fixture_con, items(item("E11.9"), item("i50.21"), item("J4520")))
    assert resolution.codes == ["E11.9", "I50.21", "J45.20"]
    assert resolution.unresolvable == [] and resolution.skipped == [] and resolution.excluded_codes == []


def test_include_descendants(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(fixture_con, items(item("E11", descendants=True)))
    assert resolution.codes == E11_ALL
    assert resolution.codes.count("E11.51") == 1


def test_excluded_item_with_descendants_removes_the_subtree(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(
        fixture_con, items(item("E11", descendants=True), item("E11.2", excluded=True, descendants=True))
    )
    removed = {"E11.2", "E11.21", "E11.22", "E11.29"}
    assert resolution.codes == [code for code in E11_ALL if code not in removed]
    assert set(resolution.excluded_codes) == removed


def test_excluded_item_without_descendants_removes_only_itself(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(
        fixture_con, items(item("E11", descendants=True), item("E11.5", excluded=True))
    )
    assert "E11.5" not in resolution.codes
    assert "E11.51" in resolution.codes
    assert resolution.excluded_codes == ["E11.5"]


def test_exclusion_wins_regardless_of_item_order(fixture_con: duckdb.DuckDBPyConnection) -> None:
    first = resolve_curated_concepts(fixture_con, items(item("E11.9", excluded=True), item("E11", descendants=True)))
    second = resolve_curated_concepts(fixture_con, items(item("E11", descendants=True), item("E11.9", excluded=True)))
    assert first.codes == second.codes and "E11.9" not in first.codes


def test_unknown_codes_are_unresolvable(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(fixture_con, items(item("E11.9"), item("E11.99"), item("Q99.9")))
    assert resolution.codes == ["E11.9"]
    assert resolution.unresolvable == ["E11.99", "Q99.9"]


def test_non_icd_items_without_athena_tables_are_skipped_with_a_reason(fixture_con: duckdb.DuckDBPyConnection) -> None:
    resolution = resolve_curated_concepts(
        fixture_con, items(item("E11.9"), item("44054006", vocabulary="SNOMED", concept_id=201826))
    )
    assert resolution.codes == ["E11.9"]
    assert len(resolution.skipped) == 1
    skipped = resolution.skipped[0]
    assert skipped.vocabulary_id == "SNOMED" and skipped.concept_id == 201826
    assert skipped.reason and len(skipped.reason) > 5


# --- whole cohorts -------------------------------------------------------------------------------------


def test_load_curated_concept_set_from_an_icd_library(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = icd_cohort_definition("Type 2 diabetes", ["E11"], True)
    dest = write(tmp_path / "lib", {"dm2": ("Type 2 diabetes", definition)})
    result = load_curated_concept_set(fixture_con, dest, "dm2")
    assert isinstance(result, CuratedConceptSet)
    assert result.cohort_id == "dm2" and result.cohort_name == "Type 2 diabetes"
    assert result.codes == E11_ALL
    assert result.unresolvable == [] and result.other_concept_sets == []


def test_exclusion_concept_set_is_subtracted(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = circe(
        {0: [item("E11", descendants=True)], 1: [item("E11.2", descendants=True)]},
        entry=[0],
        rules=[rule(1, occurrence_type=0, count=0)],
        names={0: "T2DM", 1: "diabetic kidney disease"},
    )
    dest = write(tmp_path / "lib", {"c": ("T2DM without kidney disease", definition)})
    result = load_curated_concept_set(fixture_con, dest, "c")
    removed = {"E11.2", "E11.21", "E11.22", "E11.29"}
    assert result.codes == [code for code in E11_ALL if code not in removed]
    assert set(result.excluded_codes) == removed
    assert result.other_concept_sets == []


def test_at_most_zero_is_an_exclusion_too(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = circe(
        {0: [item("E11", descendants=True)], 1: [item("E11.9")]}, entry=[0], rules=[rule(1, occurrence_type=1, count=0)]
    )
    dest = write(tmp_path / "lib", {"c": ("C", definition)})
    assert "E11.9" not in load_curated_concept_set(fixture_con, dest, "c").codes


def test_other_concept_sets_are_reported_not_merged(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = circe(
        {0: [item("I50", descendants=True)], 1: [item("E11.9")], 2: [item("J45.909")]},
        entry=[0],
        rules=[rule(1, occurrence_type=2, count=1)],  # "at least one" T2DM: a requirement, not an exclusion
        names={0: "Heart failure", 1: "T2DM required", 2: "unused asthma"},
    )
    dest = write(tmp_path / "lib", {"c": ("HF with T2DM", definition)})
    result = load_curated_concept_set(fixture_con, dest, "c")
    assert result.codes == ["I50", "I50.2", "I50.21", "I50.22", "I50.9"]
    assert sorted(result.other_concept_sets) == ["T2DM required", "unused asthma"]
    assert result.excluded_codes == []


def test_several_entry_sets_are_unioned(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = circe({0: [item("I48", descendants=True)], 3: [item("I50.9"), item("E11.99")]}, entry=[0, 3])
    dest = write(tmp_path / "lib", {"c": ("C", definition)})
    result = load_curated_concept_set(fixture_con, dest, "c")
    assert result.codes == ["I48", "I48.0", "I48.91", "I50.9"]
    assert result.unresolvable == ["E11.99"]


def test_cohort_unresolvable_and_skipped_are_reported(fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    definition = circe(
        {0: [item("E66", descendants=True), item("Z99.999"), item("44054006", vocabulary="SNOMED", concept_id=1)]},
        entry=[0],
    )
    dest = write(tmp_path / "lib", {"c": ("Obesity", definition)})
    result = load_curated_concept_set(fixture_con, dest, "c")
    assert result.codes == ["E66", "E66.0", "E66.9"]
    assert result.unresolvable == ["Z99.999"]
    assert [s.vocabulary_id for s in result.skipped] == ["SNOMED"]


def test_cohort_ids_that_sanitise_alike_keep_their_own_definitions(tmp_path: Path) -> None:
    definitions = {
        "HF 1": ("Heart failure", icd_cohort_definition("Heart failure", ["I50.9"])),
        "HF_1": ("Asthma", icd_cohort_definition("Asthma", ["J45"])),
    }
    try:
        dest = write(tmp_path / "lib", definitions)
    except LibraryError:
        return  # refusing the collision with a clear error is fine too
    library = load_library(dest)
    assert library.definition("HF 1") == definitions["HF 1"][1]
    assert library.definition("HF_1") == definitions["HF_1"][1]


def test_correlated_criteria_inside_primary_criteria_are_not_entry_sets(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    definition = circe(
        {0: [item("E11", descendants=True)], 1: [item("E11.2", descendants=True)], 2: [item("I50", descendants=True)]},
        entry=[0],
        names={0: "T2DM", 1: "diabetic kidney disease", 2: "heart failure"},
    )
    # Atlas "with all of the following criteria" on the entry event: no kidney disease, at least one HF code
    definition["PrimaryCriteria"]["CriteriaList"][0]["ConditionOccurrence"]["CorrelatedCriteria"] = {
        "Type": "ALL",
        "CriteriaList": [
            {"Criteria": {"ConditionOccurrence": {"CodesetId": 1}}, "Occurrence": {"Type": 0, "Count": 0}},
            {"Criteria": {"ConditionOccurrence": {"CodesetId": 2}}, "Occurrence": {"Type": 2, "Count": 1}},
        ],
        "DemographicCriteriaList": [],
        "Groups": [],
    }
    dest = write(tmp_path / "lib", {"c": ("T2DM", definition)})
    result = load_curated_concept_set(fixture_con, dest, "c")
    assert not any(code.startswith("I50") for code in result.codes)  # a requirement, not part of the entry set
    assert "E11.21" not in result.codes  # the forbidden set is subtracted, not merged
    assert "E11.9" in result.codes
    assert result.other_concept_sets == ["heart failure"]


def test_library_group_defaults_to_the_library_id(tmp_path: Path) -> None:
    manifest = manifest_for({"hf": "Heart failure"}, library_id="mine")
    assert manifest.group is None and library_group(manifest) == "mine"
    grouped = manifest.model_copy(update={"group": "cms-hcc"})
    assert library_group(grouped) == "cms-hcc"
    # the group survives a write and a read, and an old manifest without one still loads
    write_library(tmp_path / "lib", grouped, {"hf": icd_cohort_definition("Heart failure", ["I50.9"])})
    assert library_group(load_library(tmp_path / "lib").manifest) == "cms-hcc"
    raw = json.loads((tmp_path / "lib" / "manifest.json").read_text(encoding="utf-8"))
    del raw["group"]
    (tmp_path / "lib" / "manifest.json").write_text(json.dumps(raw), encoding="utf-8")
    assert library_group(load_library(tmp_path / "lib").manifest) == "mine"


def test_a_duplicate_library_id_is_reported_and_the_bundled_one_kept(tmp_path: Path) -> None:
    """Issue 12 item 2: an import that took a bundled id shadowed it; the id now resolves to one library."""
    root = tmp_path / "libs"
    cohorts = {"hf": ("Heart failure", ["I50.9"], False)}
    write_icd_library(root / "elixhauser", cohorts, "elixhauser-2026.1", name="Bundled")
    imported = write_icd_library(root / "aaa-mine", cohorts, "elixhauser-2026.1", name="Mine")
    manifest = json.loads((imported / "manifest.json").read_text())
    manifest["report"] = {"build": {"imported_from": "/somewhere/mine.csv"}}
    (imported / "manifest.json").write_text(json.dumps(manifest))
    errors: list[str] = []
    found = list_libraries(root, errors=errors)
    assert [(lib.path.name, lib.manifest.name) for lib in found] == [("elixhauser", "Bundled")]
    assert len(errors) == 1 and "aaa-mine" in errors[0] and "already used by" in errors[0]
    with pytest.raises(LibraryError, match="already used by"):
        list_libraries(root)
