"""The learned builder: training, storage (stale, corrupt, foreign build), fallbacks and no leakage."""

from __future__ import annotations

import functools
from pathlib import Path

import duckdb
import numpy as np
import pytest

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import evaluate as evaluate_module
from phenoforge.setbuild.candidates import Retrieval, build_candidates
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.evaluate import check_no_leakage, evaluate_library, training_examples
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.learned import (
    MODEL_FILE,
    RECIPE,
    LeakageError,
    MembershipModel,
    ModelError,
    TrainingDataTooSmall,
    build_learned,
    select,
    train_membership_model,
)
from phenoforge.setbuild.model_store import ensure_model, load_model, save_model
from tests.setbuild.conftest import SMALL, all_curated, edit_manifest, score_fixture_library


def test_the_manifest_records_what_the_model_was_trained_on(
    model: MembershipModel, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    manifest = model.manifest
    assert manifest.training_libraries == ["fixture-train"]
    assert sorted(manifest.training_cohorts) == sorted(ex.key for ex in train_examples if len(ex.table))
    assert manifest.vocabulary_build_id == hierarchy.build_id
    assert manifest.features == FEATURE_NAMES
    assert manifest.n_positive == sum(int(ex.labels.sum()) for ex in train_examples)


def test_learned_returns_billable_codes_with_model_provenance(model: MembershipModel, hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, Retrieval(query="Heart failure", bm25=[("I50", 5.0), ("I50.9", 4.0)]))
    built = build_learned(hierarchy, table, model, scored_library_id="fixture-other", scored_group="fixture-other")
    assert built.codes
    assert all(hierarchy.billable[hierarchy.resolve(code)] for code in built.code_list)
    assert built.trained_on == ["fixture-train"]
    for item in built.codes:
        assert item.provenance.source in ("model", "fallback")
        assert 0.0 <= item.provenance.score <= 1.0
        assert "fixture-train" in item.provenance.rule


def test_a_model_refuses_to_score_its_own_training_library_or_group(
    model: MembershipModel, hierarchy: Hierarchy
) -> None:
    table = build_candidates(hierarchy, Retrieval(query="Asthma", bm25=[("J45", 5.0)]))
    with pytest.raises(LeakageError, match="fixture-train"):
        build_learned(hierarchy, table, model, scored_library_id="fixture-train")
    with pytest.raises(LeakageError, match="group"):
        build_learned(hierarchy, table, model, scored_library_id="another", scored_group="fixture-train")


def test_lolo_evaluation_never_fits_on_the_scored_group(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
) -> None:
    examples = train_examples + other_examples
    development = {"fixture-train", "fixture-other"}
    assert {ex.library_id for ex in training_examples(examples, "fixture-train", development)} == {"fixture-other"}
    report = evaluate_library(
        fixture_con,
        hierarchy,
        examples,
        "fixture-other",
        development,
        methods=("adaptive_cutoff", "subtree"),
        with_dense=False,
    )
    assert report.trained_on == {"adaptive_cutoff": ["fixture-train"], "subtree": ["fixture-train"]}
    assert set(report.hierarchical) == {"adaptive_cutoff", "subtree"}
    with pytest.raises(LeakageError):
        check_no_leakage(["fixture-train"], ["fixture-train"], train_examples[:1])


def test_a_library_too_small_to_train_on_says_so(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, other_examples: list[Example]
) -> None:
    with pytest.raises(TrainingDataTooSmall, match="needs at least"):
        train_membership_model(fixture_con, hierarchy, other_examples, with_dense=False)


def test_evaluate_reports_the_fallback_when_training_data_is_too_small(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
) -> None:
    report = score_fixture_library(fixture_con, hierarchy, train_examples, other_examples, scored="fixture-train")
    assert "learned" not in report.hierarchical
    assert any("not scored" in note and "needs at least" in note for note in report.notes)


def test_saved_model_round_trips(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path, train_examples: list[Example]
) -> None:
    save_model(model, tmp_path / "m")
    loaded = load_model(tmp_path / "m", hierarchy.build_id)
    example = train_examples[0]
    assert np.allclose(loaded.probabilities(example.features), model.probabilities(example.features))
    assert loaded.manifest.training_cohorts == model.manifest.training_cohorts


def test_corrupt_foreign_or_missing_models_are_refused_with_a_reason(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    directory = save_model(model, tmp_path / "m")
    with pytest.raises(ModelError, match="vocabulary build"):
        load_model(directory, "another-build")
    (directory / MODEL_FILE).write_bytes(b"not a model")
    with pytest.raises(ModelError, match="corrupt"):
        load_model(directory, hierarchy.build_id)
    (directory / "manifest.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(ModelError, match="corrupt model manifest"):
        load_model(directory, hierarchy.build_id)
    with pytest.raises(ModelError, match="no stored model"):
        load_model(tmp_path / "nothing", hierarchy.build_id)


def test_ensure_model_reuses_then_rebuilds_a_corrupt_or_stale_model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    first, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert any(note.startswith("trained model") for note in notes)
    again, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert any(note.startswith("reused model") for note in notes)
    (directory / MODEL_FILE).write_bytes(b"garbage")
    rebuilt, notes = ensure_model(
        fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL
    )
    assert any("unusable, retrained" in note and "corrupt" in note for note in notes)
    edit_manifest(directory, vocabulary_build_id="older-build")
    _model, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert any("vocabulary build" in note for note in notes)
    assert load_model(directory, hierarchy.build_id).manifest.vocabulary_build_id == hierarchy.build_id
    _model, notes = ensure_model(
        fixture_con, hierarchy, train_examples[:-1], with_dense=False, directory=directory, **SMALL
    )
    assert any("trained on other data" in note for note in notes)


def test_learned_with_no_candidates_is_empty_and_says_why(model: MembershipModel, hierarchy: Hierarchy) -> None:
    table = build_candidates(hierarchy, Retrieval(query="zzz", bm25=[]))
    built = build_learned(hierarchy, table, model, scored_library_id="fixture-other")
    assert built.codes == [] and "no candidates" in built.notes[0]


def test_select_never_returns_an_empty_list_when_there_are_candidates() -> None:
    probabilities = np.array([0.1, 0.05, 0.2])
    assert select(probabilities, "threshold", 0.9).tolist() == [2]
    assert select(probabilities, "threshold", 0.08).tolist() == [2, 0]
    assert select(probabilities, "expected_size", 1.0).tolist() == [2]
    assert select(np.zeros(0), "threshold", 0.5).tolist() == []
    assert select(probabilities, "expected_f1", 1.0).tolist() == [2]


def test_expected_f1_keeps_the_top_k_of_most_expected_f1() -> None:
    # sum p = 2.4; a code joins while its p exceeds sum(p[:k]) / (k + factor * 2.4): 0.3 < 1.8 / 4.4
    probabilities = np.array([0.3, 0.9, 0.3, 0.9])
    assert select(probabilities, "expected_f1", 1.0).tolist() == [1, 3]
    # a larger factor (more true codes than the probabilities say): 0.3 > 1.8 / 9.2 and 0.3 > 2.1 / 10.2
    assert select(probabilities, "expected_f1", 3.0).tolist() == [1, 3, 0, 2]


def test_a_model_with_the_expected_f1_rule_keeps_that_cut_and_says_so(
    model: MembershipModel, hierarchy: Hierarchy
) -> None:
    manifest = model.manifest.model_copy(update={"rule": "expected_f1", "threshold": 1.0})
    table = build_candidates(
        hierarchy, Retrieval(query="Heart failure", bm25=[("I50", 5.0), ("I50.9", 4.0), ("J45", 1.0)])
    )
    probabilities = np.linspace(0.9, 0.05, len(table))
    built = build_learned(
        hierarchy, table, MembershipModel(manifest, model.trees), scored_library_id="x", probabilities=probabilities
    )
    kept = select(probabilities, "expected_f1", 1.0)
    assert 0 < len(kept) < len(table)
    assert all(
        f"within the top {len(kept)} (the cut of most expected F1)" in item.provenance.rule for item in built.codes
    )
    assert not built.fallback


def test_training_where_every_candidate_is_curated_says_so_instead_of_failing_in_the_fit(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    everything_curated = [all_curated(ex) for ex in train_examples]
    with pytest.raises(TrainingDataTooSmall, match="are curated codes"):
        train_membership_model(fixture_con, hierarchy, everything_curated, with_dense=False, **SMALL)


def test_a_model_of_an_older_training_recipe_is_retrained_not_reused(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    edit_manifest(directory, recipe="an older recipe")
    _model, notes = ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL)
    assert any("trained on other data" in note for note in notes)
    assert load_model(directory, hierarchy.build_id).manifest.recipe == RECIPE


def test_a_given_rule_is_kept_and_recorded_instead_of_chosen_out_of_fold(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    fixed = train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, rule=("expected_size", 1.25), **SMALL
    )
    assert (fixed.manifest.rule, fixed.manifest.threshold) == ("expected_size", 1.25)
    assert fixed.manifest.threshold_chosen_on == "given by the caller"


def test_lolo_learned_is_trained_without_the_scored_group_and_its_rule_can_be_fixed(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the fixture library is smaller than the default training minimums
    monkeypatch.setattr(evaluate_module, "ensure_model", functools.partial(ensure_model, **SMALL))
    report = score_fixture_library(fixture_con, hierarchy, train_examples, other_examples, rule=("threshold", 0.3))
    assert report.trained_on == {"learned": ["fixture-train"]}
    assert report.learned_rule == ("threshold", 0.3)
    assert "learned" in report.hierarchical and "learned" in report.fit_seconds
