"""The curated knowledge attacked as a careless user would: odd names, empty or edited libraries, misspelt groups."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.api import library_stamp
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.transfer import (
    MATCH_FLOOR,
    CuratedKnowledge,
    KnowledgeLeakError,
    TransferParams,
    build_transfer,
    curated_knowledge,
    polarity,
    transfer_features,
)
from tests.engine.fake_embedder import FakeEmbedder
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS

ODD = {
    "dm2-no": ("Type 2 diabetes mellitus without complications", ["E11.9"], False),
    "dm2-with": ("Type 2 diabetes mellitus with complications", ["E11.2"], True),
    "fr": ("Insuffisance cardiaque congestive — ÉTAT", ["I50"], True),
    "ghost": ("Ghost codes only", ["Q99.999", "ZZZ"], False),
}


def _knowledge(con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, *paths: Path, embed=None) -> CuratedKnowledge:  # noqa: ANN001
    return curated_knowledge(con, hierarchy, [load_library(p) for p in paths], library_stamp, embed)


@pytest.fixture
def odd_library(tmp_path: Path) -> Path:
    return write_icd_library(tmp_path / "odd", ODD, library_id="odd-names")


def _fallback() -> BuiltSet:
    return BuiltSet(method="learned", query="q", notes=[])


def test_no_library_means_no_match_no_feature_and_the_fallback_answers(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, other_examples: list[Example]
) -> None:
    knowledge = curated_knowledge(fixture_con, hierarchy, [], library_stamp, FakeEmbedder())
    view = knowledge.view(set())
    assert knowledge.cohorts == [] and view.matches("Heart failure") == []
    assert not transfer_features(hierarchy, other_examples[0].table, view).any()
    built = build_transfer(hierarchy, "Heart failure", view, TransferParams(min_similarity=0.0), _fallback())
    assert built.method == "curated_transfer" and built.codes == [] and "no cohort" in built.notes[-1]


def test_a_cohort_none_of_whose_codes_resolve_is_not_knowledge(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, odd_library: Path
) -> None:
    knowledge = _knowledge(fixture_con, hierarchy, odd_library)
    assert {c.cohort_id for c in knowledge.cohorts} == {"dm2-no", "dm2-with", "fr"}
    assert all(len(c.ids) for c in knowledge.cohorts)


@pytest.mark.parametrize("query", ["without", "no", "not other", "   ", "", "心不全", "w/o"])
def test_a_name_of_only_stop_or_complement_words_transfers_nothing(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, odd_library: Path, query: str
) -> None:
    """No content word: every similarity stays under the match floor, even with names embedded."""
    knowledge = _knowledge(fixture_con, hierarchy, odd_library, embed=FakeEmbedder())
    view = knowledge.view(set())
    assert all(m.similarity < MATCH_FLOOR for m in view.matches(query, depth=10)), query
    built = build_transfer(hierarchy, query, view, TransferParams(min_similarity=MATCH_FLOOR), _fallback())
    assert built.codes == []


def test_a_unicode_name_matches_its_folded_spelling(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, odd_library: Path
) -> None:
    view = _knowledge(fixture_con, hierarchy, odd_library).view(set())
    best = view.matches("insuffisance cardiaque congestive etat", depth=1)[0]
    assert best.cohort.cohort_id == "fr" and best.similarity == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Type 2 diabetes mellitus (without complications)", "dm2-no"),
        ("Type 2 diabetes mellitus w/o complications", "dm2-no"),
        ("Type 2 diabetes mellitus, with complications", "dm2-with"),
    ],
)
def test_a_complement_word_beside_a_bracket_or_slash_still_counts(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, odd_library: Path, query: str, expected: str
) -> None:
    """'(without' and 'w/o' name the complement: splitting on spaces alone matched them to 'with complications'."""
    view = _knowledge(fixture_con, hierarchy, odd_library).view(set())
    assert view.matches(query, depth=1)[0].cohort.cohort_id == expected
    assert polarity(query) == (frozenset({"without"}) if expected == "dm2-no" else frozenset())


def test_duplicate_cohort_names_in_two_groups_are_both_known_and_hidden_separately(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    first = write_icd_library(tmp_path / "a", OTHER_COHORTS, library_id="lib-a")
    second = write_icd_library(tmp_path / "b", {"x-hf": ("Congestive heart failure", ["I50.2"], True)}, "lib-b")
    knowledge = _knowledge(fixture_con, hierarchy, first, second)
    names = [(c.library_id, c.cohort_id) for c in knowledge.cohorts if c.cohort_name == "Congestive heart failure"]
    assert names == [("lib-a", "x-hf"), ("lib-b", "x-hf")]
    only_b = knowledge.view({"lib-a"}).matches("Congestive heart failure", depth=1)[0]
    assert only_b.cohort.library_id == "lib-b"
    with pytest.raises(KnowledgeLeakError):
        knowledge.view({"lib-a"}).check_excludes(["lib-b"])


def test_a_misspelt_declared_group_is_still_hidden_with_its_group(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    """'CMS_HCC' is read as 'cms-hcc' (and the id family says so too); a library with no group answers to its id."""
    typo = write_icd_library(tmp_path / "t", OTHER_COHORTS, library_id="cms-hcc-v28-typo", group="CMS_HCC")
    other_id = write_icd_library(tmp_path / "o", OTHER_COHORTS, library_id="my-hcc-copy", group="Cms Hcc")
    bare = write_icd_library(tmp_path / "u", OTHER_COHORTS, library_id="no-group-lib")
    knowledge = _knowledge(fixture_con, hierarchy, typo, other_id, bare)
    assert {c.library_id for c in knowledge.view({"cms-hcc"}).cohorts} == {"no-group-lib"}
    assert {c.library_id for c in knowledge.view({"cms-hcc", "no-group-lib"}).cohorts} == set()
    knowledge.view({"cms-hcc", "no-group-lib"}).check_excludes(["cms-hcc", "no-group-lib"])


def test_a_cohort_file_edited_in_place_gives_new_knowledge_not_the_cached_one(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    path = write_icd_library(tmp_path / "e", {"x-hf": ("Congestive heart failure", ["I50"], True)}, "lib-e")
    before = _knowledge(fixture_con, hierarchy, path)
    write_icd_library(tmp_path / "e", {"x-hf": ("Congestive heart failure", ["I50.2"], True)}, "lib-e")
    after = _knowledge(fixture_con, hierarchy, path)
    assert after is not before and after.digest != before.digest
    assert set(hierarchy.code[i] for i in after.cohorts[0].ids.tolist()) < set(
        hierarchy.code[i] for i in before.cohorts[0].ids.tolist()
    )


def test_without_an_embedding_names_match_by_words_alone(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, odd_library: Path
) -> None:
    """``--no-dense``: no vectors, no embed function, and similarities are the word Dice less the penalty."""
    knowledge = _knowledge(fixture_con, hierarchy, odd_library, embed=None)
    assert knowledge.vectors is None and knowledge.query_vector("heart") is None
    sims = knowledge.view(set()).similarities("Type 2 diabetes mellitus with complications")
    assert np.max(sims) == pytest.approx(1.0)
