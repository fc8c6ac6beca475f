"""Typo tolerance, umbrella nodes, library groups and the registry-facing entry points."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.api import FittedBuilders, build_set, candidate_table, fit_builders, robust_query
from phenoforge.setbuild.builders.adaptive_cutoff import AdaptiveCutoff
from phenoforge.setbuild.builders.curated_transfer import CuratedTransfer
from phenoforge.setbuild.builders.learned import Learned
from phenoforge.setbuild.builders.subtree import Subtree
from phenoforge.setbuild.cutoff import CutoffParams
from phenoforge.setbuild.groups import is_development_library, is_test_library, is_training_library, library_group
from phenoforge.setbuild.learned import LeakageError
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.robust import TypoCorrector, edit_distance, get_typo_corrector, umbrella_nodes
from phenoforge.setbuild.subtree import SubtreeParams
from phenoforge.setbuild.transfer import TransferParams


def test_edit_distance_counts_a_transposition_as_one_and_stops_at_the_limit() -> None:
    assert edit_distance("diabetis", "diabetes", 2) == 1
    assert edit_distance("haert", "heart", 1) == 1
    assert edit_distance("asthma", "asthma", 1) == 0
    assert edit_distance("asthma", "obesity", 2) == 3


def test_an_unknown_word_is_replaced_by_the_nearest_frequent_known_word() -> None:
    corrector = TypoCorrector(Counter({"diabetes": 50, "diabetic": 30, "heart": 40, "failure": 40}))
    fixed = corrector.correct("diabetis haert failure")
    assert fixed.corrected == "diabetes heart failure"
    assert fixed.replaced == {"diabetis": "diabetes", "haert": "heart"}
    assert corrector.correct("heart failure").corrected == "heart failure"  # known words untouched
    assert corrector.correct("xqzv").corrected == "xqzv"  # nothing near: unchanged


def test_an_abbreviation_typed_in_capitals_is_never_corrected_into_another_word() -> None:
    """ "ARDS" is one edit from "rads": as typed in capitals it is an abbreviation and stays; in lower case it
    is a word the vocabulary does not use, corrected as before."""
    corrector = TypoCorrector(Counter({"rads": 5, "heart": 40, "failure": 40, "hfrex": 3}))
    for query in ["ARDS", "adults with ARDS", "heart failure HFrEX-like HFrEF"]:
        correction = corrector.correct(query)
        assert correction.replaced == {} and correction.corrected == query
    assert corrector.correct("ards").replaced == {"ards": "rads"}
    assert corrector.correct("Ards hearts").replaced == {"ards": "rads", "hearts": "heart"}  # one capital: a word


def test_the_vocabulary_corrector_fixes_a_misspelt_fixture_word(fixture_con: duckdb.DuckDBPyConnection) -> None:
    assert get_typo_corrector(fixture_con).correct("Type 2 diabetis").corrected == "type 2 diabetes"


def test_umbrella_nodes_come_from_block_names_and_inclusion_notes(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy
) -> None:
    found = {hierarchy.code[node] for node in umbrella_nodes(fixture_con, hierarchy, "diabetes mellitus")}
    assert "E08-E13" in found  # block name "Diabetes mellitus (E08-E13)"
    by_note = umbrella_nodes(fixture_con, hierarchy, "congestive heart disease")
    assert {hierarchy.code[node] for node in by_note} == {"I50"}
    assert umbrella_nodes(fixture_con, hierarchy, "fracture of the skull") == {}
    searched, umbrellas = robust_query(fixture_con, "congestive heart diseasse")
    assert searched == "congestive heart disease" and "I50" in umbrellas


def test_library_groups_follow_the_manifest_else_the_fallback_rule() -> None:
    assert library_group({"library_id": "cms-hcc-v28-py2026"}) == library_group({"library_id": "cms-hcc-v24-py2026"})
    assert library_group({"library_id": "elixhauser-2026.1"}) == library_group({"library_id": "quan-elixhauser-2005"})
    assert library_group({"library_id": "quan-charlson-2005"}) == "quan-charlson-2005"
    assert library_group({"library_id": "cms-hcc-v28-py2026", "group": "hcc"}) == "hcc"
    assert is_development_library({"library_id": "elixhauser-2026.1"})
    assert not is_development_library({"library_id": "quan-elixhauser-2005"})
    # the bundled Quan libraries train other groups' builders; an import or OHDSI library never trains
    assert is_training_library({"library_id": "charlson-quan2005"})
    assert is_training_library({"library_id": "cms-hcc-v24-py2026"})
    assert is_test_library({"library_id": "elixhauser-quan2005"}) and not is_development_library(
        {"library_id": "elixhauser-quan2005"}
    )
    assert not is_training_library({"library_id": "ohdsi-phenotypes"})
    assert not is_training_library({"library_id": "charlson-x"})


def test_fit_builders_without_development_libraries_falls_back_and_says_so(
    fixture_con: duckdb.DuckDBPyConnection, libraries_root: Path
) -> None:
    fitted = fit_builders(fixture_con, None, libraries=[load_library(libraries_root / "train")])
    assert fitted.model is None and fitted.training_libraries == []
    assert any("untuned" in note for note in fitted.notes)
    assert any("falls back to the adaptive cut-off" in note for note in fitted.notes)


def test_build_set_refuses_a_library_the_builders_were_fitted_on(hierarchy: Hierarchy) -> None:
    cutoff, subtree, transferred = AdaptiveCutoff(), Subtree(), CuratedTransfer()
    cutoff.params_, subtree.params_, transferred.params_ = CutoffParams(), SubtreeParams(), TransferParams()
    learned = Learned.from_state({"model_directory": None, "context_model_directory": None}, hierarchy, [])
    builders = {"adaptive_cutoff": cutoff, "subtree": subtree, "learned": learned, "curated_transfer": transferred}
    fitted = FittedBuilders(["lib-a"], ["group-a"], builders)
    ranking = [("I50", 3.0), ("I50.9", 2.0)]
    with pytest.raises(LeakageError):
        _build_ranked(hierarchy, "subtree", "heart failure", ranking, None, fitted, scored_library_id="lib-a")
    with pytest.raises(LeakageError):
        _build_ranked(hierarchy, "adaptive_cutoff", "heart failure", ranking, None, fitted, scored_group="group-a")
    built = _build_ranked(hierarchy, "learned", "heart failure", ranking, None, fitted, scored_library_id="lib-b")
    assert built.method == "learned" and built.fallback and "too little training data" in built.fallback
    assert set(built.code_list) == {"I50.21", "I50.22", "I50.9"}


def test_fit_builders_holds_out_the_scored_group_and_build_set_enforces_it(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, libraries_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("phenoforge.setbuild.api.is_training_library", lambda manifest: True)
    libraries = [load_library(libraries_root / "train"), load_library(libraries_root / "other")]
    reported: list[tuple[int, int, str]] = []
    fitted = fit_builders(
        fixture_con,
        None,
        held_out_group="fixture-other",
        libraries=libraries,
        progress=lambda done, total, message: reported.append((done, total, message)),
    )
    assert fitted.training_libraries == ["fixture-train"]
    # a fit from scratch says which stage runs (each can take minutes on the bundled libraries)
    stages = [(done, total, message) for done, total, message in reported if message.startswith("set builders")]
    # the library-context stage (2) runs only when the membership model could be trained
    assert [(done, total) for done, total, _ in stages] in (
        [(0, 4), (1, 4), (3, 4), (4, 4)],
        [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)],
    )
    assert (2, 4) not in [(done, total) for done, total, _ in stages] or fitted.model is not None
    assert all(message.startswith("set builders without fixture-other:") for _, _, message in stages)
    assert "membership model" in stages[1][2] and stages[-1][2].endswith("fitted")
    states = fitted.states()
    assert states["adaptive_cutoff"]["trained_on"] == ["fixture-train"] == states["subtree"]["trained_on"]
    ranking = [("J45.90", 3.0), ("J45.909", 2.0)]
    built = _build_ranked(
        hierarchy,
        "subtree",
        "Unspecified asthma",
        ranking,
        None,
        fitted,
        scored_library_id="fixture-other",
        scored_group="fixture-other",
    )
    assert built.codes and built.trained_on == ["fixture-train"]
    for method in ("adaptive_cutoff", "subtree", "learned", "curated_transfer"):
        with pytest.raises(LeakageError):
            _build_ranked(hierarchy, method, "Asthma", ranking, None, fitted, scored_library_id="fixture-train")
    again = fit_builders(fixture_con, None, held_out_group="fixture-other", libraries=libraries)
    assert any(note.startswith("reused the builders fitted on fixture-train") for note in again.notes)


def test_robust_query_reads_no_build_id_per_query(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The corrector of the hierarchy's build is reused without a database query per cohort (a
    millisecond each, a benchmark asks hundreds of times); without a build the query still happens."""
    from phenoforge.setbuild import robust

    corrector = get_typo_corrector(fixture_con)
    asked: list[object] = []
    real = robust.build_id
    monkeypatch.setattr(robust, "build_id", lambda con: asked.append(con) or real(con))
    assert get_typo_corrector(fixture_con, hierarchy.build_id) is corrector
    assert robust_query(fixture_con, "Type 2 diabetis")[0] == "type 2 diabetes"
    assert asked == []
    assert get_typo_corrector(fixture_con) is corrector and len(asked) == 1


_WORDS = ["heart", "failure", "chronic", "kidney", "disease", "diabetes", "type"]


@given(
    texts=st.lists(st.tuples(st.integers(1, 6), st.lists(st.sampled_from(_WORDS), max_size=6)), max_size=12),
    query=st.lists(st.sampled_from([*_WORDS, "unknown"]), max_size=4),
)
def test_the_umbrella_word_index_finds_what_a_scan_of_every_text_finds(
    texts: list[tuple[int, list[str]]], query: list[str]
) -> None:
    """The index compares only texts holding every query word: same nodes, same texts, same order."""
    from phenoforge.setbuild.robust import MAX_EXTRA_WORDS, UmbrellaIndex

    entries = [(node, frozenset(words), " ".join(words)) for node, words in texts]
    words = set(query)
    expected: dict[int, str] = {}
    if words:
        for node, text_words, text in entries:
            if words <= text_words and len(text_words - words) <= MAX_EXTRA_WORDS and node not in expected:
                expected[node] = text
    found = UmbrellaIndex(entries).match(" ".join(query))
    assert list(found.items()) == list(expected.items())


def _build_ranked(
    hierarchy: Hierarchy,
    method: str,
    query: str,
    bm25: list[tuple[str, float]],
    dense: list[tuple[str, float]] | None,
    fitted: FittedBuilders,
    scored_library_id: str | None = None,
    scored_group: str | None = None,
) -> BuiltSet:
    """One builder's set for rankings, as the benchmark builds it: their candidate table, then the builder."""
    table = candidate_table(hierarchy, query, bm25, dense)
    return build_set(hierarchy, fitted, method, table, scored_library_id, scored_group)
