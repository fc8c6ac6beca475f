"""Cross-library curated evidence: name matching, the per-candidate features and the group exclusions."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import knowledge as knowledge_module
from phenoforge.setbuild.api import library_stamp
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.transfer import (
    TRANSFER_FEATURES,
    CuratedKnowledge,
    KnowledgeLeakError,
    curated_knowledge,
    transfer_features,
    with_transfer_features,
)


@pytest.fixture
def knowledge(fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path) -> CuratedKnowledge:
    libraries = [load_library(libraries_root / "train"), load_library(libraries_root / "other")]
    return curated_knowledge(fixture_con, hierarchy, libraries, library_stamp)


def test_a_view_never_shows_an_excluded_group_and_refuses_a_leaky_one(knowledge: CuratedKnowledge) -> None:
    view = knowledge.view({"fixture-train"})
    assert view.cohorts and all(c.library_id == "fixture-other" for c in view.cohorts)
    view.check_excludes(["fixture-train"])
    with pytest.raises(KnowledgeLeakError, match="own library group"):
        knowledge.view(set()).check_excludes(["fixture-train"])


def test_names_match_by_words_and_a_complement_does_not(knowledge: CuratedKnowledge) -> None:
    view = knowledge.view({"fixture-other"})
    best = view.matches("Heart failure, congestive", depth=1)[0]
    assert best.cohort.cohort_id == "hf"
    plain = {m.cohort.cohort_id: m.similarity for m in view.matches("Type 2 diabetes mellitus", depth=10)}
    negated = {m.cohort.cohort_id: m.similarity for m in view.matches("Type 2 diabetes mellitus without", depth=10)}
    assert plain["dm2"] == pytest.approx(1.0)
    assert negated["dm2"] < plain["dm2"] - 0.2


def test_candidates_listed_by_the_matched_cohort_are_marked(
    hierarchy: Hierarchy, knowledge: CuratedKnowledge, other_examples: list[Example]
) -> None:
    (chf,) = [ex for ex in other_examples if ex.cohort_id == "x-hf"]
    rows = transfer_features(hierarchy, chf.table, knowledge.view({"fixture-other"}))
    col = {name: i for i, name in enumerate(TRANSFER_FEATURES)}
    listed = {hierarchy.code[node] for node in chf.table.ids if hierarchy.code[node].startswith("I50")}
    assert listed
    for i, node in enumerate(chf.table.ids):
        in_hf = hierarchy.code[node] in listed
        assert rows[i, col["tr_in_top"]] == float(in_hf), hierarchy.code[node]
        assert (rows[i, col["tr_best_sim"]] > 0) == in_hf or not in_hf
    assert np.all(rows[:, col["tr_top_sim"]] == rows[0, col["tr_top_sim"]]) and rows[0, col["tr_top_sim"]] > 0.5
    assert not transfer_features(hierarchy, chf.table, None).any()


def test_a_training_cohort_never_sees_its_own_or_the_held_out_groups_lists(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    knowledge: CuratedKnowledge,
    libraries_root: Path,
    train_examples: list[Example],
) -> None:
    """Its transfer columns are what a knowledge without its own library gives; with the other
    library held out too, nothing is left to see."""
    extended = with_transfer_features(hierarchy, train_examples, knowledge, ["fixture-other"])
    for ex in extended:
        assert ex.features.shape[1] == len(FEATURE_NAMES) + len(TRANSFER_FEATURES)
        assert not ex.features[:, len(FEATURE_NAMES) :].any(), ex.key
    seen = with_transfer_features(hierarchy, train_examples, knowledge, [])
    other_only = curated_knowledge(fixture_con, hierarchy, [load_library(libraries_root / "other")], library_stamp)
    expected = with_transfer_features(hierarchy, train_examples, other_only, [])
    assert any(ex.features[:, len(FEATURE_NAMES) :].any() for ex in seen), "the other library matched nothing"
    for got, want in zip(seen, expected, strict=True):
        np.testing.assert_array_equal(got.features, want.features, err_msg=got.key)
    with pytest.raises(ValueError, match="added once"):
        with_transfer_features(hierarchy, extended, knowledge, [])


def test_the_query_vector_cache_is_bounded_and_keeps_the_newest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-running dashboard embeds every query a user types: the cache must not grow without end."""

    monkeypatch.setattr(knowledge_module, "QUERY_CACHE_SIZE", 3)
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.ones((len(texts), 4), np.float32)

    known = CuratedKnowledge(cohorts=[], vectors=np.ones((1, 4), np.float32), embed=embed)
    for query in ("a", "b", "c", "d"):
        assert known.query_vector(query) is not None
    known.warm(["e", "f"])
    assert list(known._query_vectors) == ["d", "e", "f"]
    before = len(calls)
    known.query_vector("f")
    assert len(calls) == before  # the newest are still served from the cache
    known.query_vector("a")
    assert len(calls) == before + 1  # the oldest was dropped and is embedded again


def test_the_category_share_is_the_per_candidate_one(
    hierarchy: Hierarchy, knowledge: CuratedKnowledge, other_examples: list[Example], train_examples: list[Example]
) -> None:
    """``tr_cat_in_top`` read from the node table equals each candidate's own category walk, bit for bit."""
    from phenoforge.setbuild.nodes import hierarchy_stats

    stats = hierarchy_stats(hierarchy)
    col = TRANSFER_FEATURES.index("tr_cat_in_top")
    checked = 0
    for ex in [*other_examples, *train_examples]:
        view = knowledge.view({ex.group})
        found = view.matches(ex.table.query)
        rows = transfer_features(hierarchy, ex.table, view)
        if not found or not len(ex.table):
            continue
        top = found[0].cohort
        for i, node in enumerate(ex.table.ids):
            cat = hierarchy.ancestor_of_kind(node, "category")
            expected = 0.0 if cat is None else top.categories.get(cat, 0) / max(stats.billable_count(cat), 1)
            assert rows[i, col] == expected, (ex.key, hierarchy.code[node])
        checked += int(rows[:, col].any())
    assert checked  # some candidates share a category with the matched cohort
