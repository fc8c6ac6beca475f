"""The model variant attacked: hand-edited and older manifests, monotone constraints on subsets, reordered,
transfer and context columns, stored monotone trees on NaN/inf rows, and a stored model's variant when
``ensure_model`` decides whether to reuse it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import duckdb
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.context import CONTEXT_FEATURES
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.learned import (
    MANIFEST_FILE,
    MATRIX_COLUMNS,
    MONOTONE_EVIDENCE,
    VARIANTS,
    MembershipModel,
    ModelError,
    ModelManifest,
    build_learned,
    monotone_constraints,
    select,
    train_membership_model,
)
from phenoforge.setbuild.model_store import ensure_model, load_model, model_name, save_model
from phenoforge.setbuild.nodes import billable_below
from phenoforge.setbuild.transfer import TRANSFER_FEATURES
from tests.setbuild.conftest import DROP, SMALL, edit_manifest

RULE = ("threshold", 0.3)
FUSED_REL = MATRIX_COLUMNS.index("fused_rel")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """The machine is shared: fits stay on one thread."""
    with threadpool_limits(limits=1):
        yield


def _inverted(examples: Sequence[Example], copies: int = 20, extra: int = 0, seed: int = 0) -> list[Example]:
    """Cohorts relabelled so the weaker the fused score the likelier a code is curated (free trees learn to
    lower a probability as evidence grows), copied with noise so trees have rows to split on; ``extra``
    random columns appended (transfer, then context columns)."""
    rng = np.random.default_rng(seed)
    out = []
    for ex in (ex for ex in examples if len(ex.table)):
        for copy in range(copies):
            features = ex.features + rng.normal(0.0, 0.01, ex.features.shape)
            labels = (features[:, FUSED_REL] < 0.93).astype(np.int8)
            if extra:
                features = np.hstack([features, rng.uniform(0.0, 1.0, (len(ex.table), extra))])
            out.append(dataclasses.replace(ex, cohort_id=f"{ex.cohort_id}-{copy}", features=features, labels=labels))
    return out


class _Recorder:
    """Wraps ``learned._fit``: records each fit's rows, constraints and estimator."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, list[int] | None, object]] = []
        self.real = learned._fit

    def __call__(self, x: np.ndarray, y: np.ndarray, w: np.ndarray, monotonic_cst: list[int] | None = None) -> object:
        estimator = self.real(x, y, w, monotonic_cst)
        self.calls.append((x, monotonic_cst, estimator))
        return estimator


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    """Every ``learned._fit`` of the test, recorded."""
    fits = _Recorder()
    monkeypatch.setattr(learned, "_fit", fits)
    return fits


def _stored(model: MembershipModel, directory: Path, build_id: str) -> MembershipModel:
    save_model(model, directory)
    return load_model(directory, build_id)


@pytest.fixture(scope="module")
def small_model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> MembershipModel:
    return train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, rule=RULE, variant="monotone", **SMALL
    )


# -- manifests ------------------------------------------------------------------------------------


def test_a_manifest_written_before_the_variant_existed_reads_as_free_trees(
    small_model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    directory = tmp_path / "m"
    save_model(small_model, directory)
    edit_manifest(directory, variant=DROP)
    assert "variant" not in json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert load_model(directory, hierarchy.build_id).manifest.variant == "free"


def test_an_older_recipe_manifest_without_variant_is_retrained_not_reused(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
) -> None:
    directory = tmp_path / "m"
    ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, rule=RULE, **SMALL)
    edit_manifest(directory, variant=DROP, recipe="4")
    model, notes = ensure_model(
        fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, rule=RULE, **SMALL
    )
    assert not any(note.startswith("reused") for note in notes), notes
    assert model.manifest.recipe == learned.RECIPE
    assert json.loads((directory / MANIFEST_FILE).read_text(encoding="utf-8"))["variant"] == "free"


@pytest.mark.parametrize("bad", [None, "Monotone", "FREE", " free", "", 1, ["free"], {"v": "free"}, True])
def test_a_hand_edited_variant_makes_the_manifest_unusable_and_names_the_field(
    small_model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path, bad: object
) -> None:
    directory = tmp_path / "m"
    save_model(small_model, directory)
    edit_manifest(directory, variant=bad)
    with pytest.raises(ModelError, match=r"corrupt model manifest \(variant: "):
        load_model(directory, hierarchy.build_id)


def test_a_null_variant_in_a_stored_manifest_is_retrained_with_a_note(
    small_model: MembershipModel,
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
) -> None:
    directory = tmp_path / "m"
    save_model(small_model, directory)
    edit_manifest(directory, variant=None)
    model, notes = ensure_model(
        fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, rule=RULE, **SMALL
    )
    assert any("unusable, retrained" in note and "variant" in note for note in notes), notes
    assert model.manifest.variant == "free"
    assert load_model(directory, hierarchy.build_id).manifest.variant == "free"


def test_the_manifest_validator_refuses_a_wrong_variant_built_in_code() -> None:
    fields = {
        "vocabulary_build_id": "b",
        "with_dense": False,
        "training_libraries": [],
        "training_groups": [],
        "training_cohorts": [],
        "features": FEATURE_NAMES,
        "rule": "threshold",
        "threshold": 0.3,
        "threshold_chosen_on": "x",
        "n_rows": 1,
        "n_positive": 1,
        "estimator": "e",
        "sklearn_version": "1",
        "trained_at": "t",
    }
    assert ModelManifest(**fields).variant == "free"  # type: ignore[arg-type]
    assert ModelManifest(**fields, variant="monotone").variant == "monotone"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown model variant 'Monotone'"):
        ModelManifest(**fields, variant="Monotone")  # type: ignore[arg-type]


def test_an_unknown_variant_is_refused_by_ensure_model_even_over_a_stored_model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "m"
    ensure_model(fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, rule=RULE, **SMALL)
    before = (directory / MANIFEST_FILE).read_bytes()
    for bad in ("Monotone", "", "none"):
        with pytest.raises(ValueError, match="unknown model variant"):
            ensure_model(
                fixture_con,
                hierarchy,
                train_examples,
                with_dense=False,
                directory=directory,
                rule=RULE,
                variant=bad,
                **SMALL,
            )
    assert (directory / MANIFEST_FILE).read_bytes() == before  # the stored model was not touched


# -- constraints and columns ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "features",
    [
        list(reversed(FEATURE_NAMES)),
        ["depth", "fused_rank", "cat_size", "fused_rel", "bm25_rank", "lex_self"],
        [name for name in FEATURE_NAMES if name not in ("fused_rank", "is_hit", "fused_rel")],
        ["fused_rel"],
    ],
    ids=["reversed", "shuffled-subset", "ablated-fused", "one"],
)
def test_the_constraints_align_with_the_columns_actually_fitted(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    features: list[str],
    recorder: _Recorder,
) -> None:
    model = train_membership_model(
        fixture_con, hierarchy, train_examples, features, with_dense=False, rule=RULE, variant="monotone", **SMALL
    )
    assert len(recorder.calls) == 1
    x, cst, estimator = recorder.calls[0]
    assert cst is not None and len(cst) == x.shape[1] == len(features)
    usable = [ex for ex in train_examples if len(ex.table)]
    full = np.vstack([ex.features for ex in usable])
    for i, name in enumerate(features):
        assert cst[i] == MONOTONE_EVIDENCE.get(name, 0), name
        assert np.array_equal(x[:, i], full[:, MATRIX_COLUMNS.index(name)]), name
    assert list(estimator.monotonic_cst) == cst  # type: ignore[attr-defined]
    assert model.manifest.features == features


def test_a_stored_monotone_model_on_reordered_subset_columns_never_lowers_a_probability(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
) -> None:
    features = ["cat_size", "fused_rank", "depth", "fused_rel", "lex_path", "bm25_rel", "is_hit", "cat_vote"]
    examples = _inverted(train_examples)
    models = {
        v: _stored(
            train_membership_model(
                fixture_con, hierarchy, examples, features, with_dense=False, rule=RULE, variant=v, **SMALL
            ),
            tmp_path / v,
            hierarchy.build_id,
        )
        for v in VARIANTS
    }
    rows = np.vstack([ex.features for ex in examples[:200]])
    moved = rows.copy()
    moved[:, FUSED_REL] += 0.5
    # the free model does lower probabilities on these labels: the monotone check below could fail
    assert (models["free"].probabilities(moved) < models["free"].probabilities(rows) - 1e-6).any()
    mono = models["monotone"]
    assert (mono.probabilities(moved) >= mono.probabilities(rows) - 1e-12).all()
    rank = MATRIX_COLUMNS.index("fused_rank")
    worse = rows.copy()
    worse[:, rank] += 3.0
    assert (mono.probabilities(worse) <= mono.probabilities(rows) + 1e-12).all()


@pytest.fixture(scope="module")
def wide_models(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, MembershipModel], list[Example]]:
    """Both variants fitted on every matrix column (transfer and context ones too), labels inverted in
    ``tr_best_sim`` as well, stored and read back."""
    examples = _inverted(train_examples, copies=12, extra=len(TRANSFER_FEATURES) + len(CONTEXT_FEATURES), seed=1)
    best_sim = MATRIX_COLUMNS.index("tr_best_sim")
    examples = [
        dataclasses.replace(ex, labels=((ex.features[:, best_sim] < 0.5) | (ex.labels == 1)).astype(np.int8))
        for ex in examples
    ]
    assert learned.default_features(examples) == MATRIX_COLUMNS
    out = {}
    for v in VARIANTS:
        fitted = train_membership_model(
            fixture_con, hierarchy, examples, with_dense=False, rule=RULE, variant=v, **SMALL
        )
        out[v] = _stored(fitted, tmp_path_factory.mktemp(v) / "m", hierarchy.build_id)
    return out, examples


@pytest.mark.parametrize("name", ["tr_in_top", "tr_best_sim", "tr_n_match", "fused_rel", "bm25_rank"])
def test_transfer_evidence_never_lowers_a_wide_monotone_models_probability(
    wide_models: tuple[dict[str, MembershipModel], list[Example]], name: str
) -> None:
    models, examples = wide_models
    assert models["monotone"].manifest.features == MATRIX_COLUMNS
    rows = np.vstack([ex.features for ex in examples[:150]])
    column = MATRIX_COLUMNS.index(name)
    mono = models["monotone"]
    base = mono.probabilities(rows)
    for step in (0.05, 0.4, 2.0, 50.0):
        moved = rows.copy()
        moved[:, column] += step * MONOTONE_EVIDENCE[name]
        assert (mono.probabilities(moved) >= base - 1e-12).all(), (name, step)


def test_the_wide_free_model_does_use_transfer_evidence_against_its_direction(
    wide_models: tuple[dict[str, MembershipModel], list[Example]],
) -> None:
    models, examples = wide_models
    rows = np.vstack([ex.features for ex in examples[:150]])
    moved = rows.copy()
    moved[:, MATRIX_COLUMNS.index("tr_best_sim")] += 0.6
    free = models["free"]
    assert (free.probabilities(moved) < free.probabilities(rows) - 1e-6).any()


def test_context_and_unlisted_transfer_columns_stay_unconstrained() -> None:
    cst = monotone_constraints(MATRIX_COLUMNS, "monotone")
    assert cst is not None
    by_name = dict(zip(MATRIX_COLUMNS, cst, strict=True))
    assert all(by_name[name] == 0 for name in CONTEXT_FEATURES)
    assert by_name["tr_top_sim"] == 0 and by_name["tr_cat_in_top"] == 0
    assert by_name["tr_in_top"] == by_name["tr_best_sim"] == by_name["tr_n_match"] == 1
    assert monotone_constraints([], "monotone") == []
    assert monotone_constraints(MATRIX_COLUMNS, "free") is None


# -- stored monotone trees ------------------------------------------------------------------------


def test_stored_monotone_trees_match_scikit_learn_bit_for_bit_on_nan_and_inf_rows(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    recorder: _Recorder,
) -> None:
    examples = _inverted(train_examples)
    fitted = train_membership_model(
        fixture_con, hierarchy, examples, with_dense=False, rule=RULE, variant="monotone", **SMALL
    )
    estimator = recorder.calls[-1][2]
    stored = _stored(fitted, tmp_path / "m", hierarchy.build_id)
    rows = np.vstack([ex.features for ex in examples[:40]])
    rng = np.random.default_rng(3)
    odd = rows.copy()
    for name in ("fused_rel", "fused_rank", "is_hit", "bm25_rel", "depth"):
        column = MATRIX_COLUMNS.index(name)
        pick = rng.choice(len(odd), size=len(odd) // 3, replace=False)
        odd[pick, column] = rng.choice([np.nan, np.inf, -np.inf], size=len(pick))
    for matrix in (rows, odd):
        expected = estimator.predict_proba(matrix)[:, 1]  # type: ignore[attr-defined]
        got = stored.probabilities(matrix)
        assert np.array_equal(got, expected), np.abs(got - expected).max()
    # +inf evidence is the most evidence there is: never below the finite row
    up = rows.copy()
    up[:, FUSED_REL] = np.inf
    assert (stored.probabilities(up) >= stored.probabilities(rows) - 1e-12).all()
    down = rows.copy()
    down[:, MATRIX_COLUMNS.index("fused_rank")] = -np.inf  # a rank better than the first
    assert (stored.probabilities(down) >= stored.probabilities(rows) - 1e-12).all()


def test_build_learned_with_a_stored_monotone_model_keeps_what_its_probabilities_select(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
    tmp_path: Path,
) -> None:
    fitted = train_membership_model(
        fixture_con,
        hierarchy,
        _inverted(train_examples, copies=8),
        with_dense=False,
        rule=("expected_size", 1.0),
        variant="monotone",
        **SMALL,
    )
    stored = _stored(fitted, tmp_path / "m", hierarchy.build_id)
    assert stored.manifest.variant == "monotone" and stored.manifest.rule == "expected_size"
    scored = [ex for ex in other_examples if len(ex.table)]
    assert scored
    for ex in scored:
        p = stored.probabilities(ex.features)
        built = build_learned(hierarchy, ex.table, stored, "fixture-other", "fixture-other", features=ex.features)
        picked = select(p, "expected_size", 1.0)
        expected = {hierarchy.code[c] for j in picked for c in billable_below(hierarchy, ex.table.ids[j])}
        assert set(built.code_list) == expected
        assert max(item.provenance.score for item in built.codes) == round(float(p[picked[0]]), 6)


# -- choosing the variant -------------------------------------------------------------------------


def test_without_any_evidence_column_the_variants_tie_and_free_is_kept(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    recorder: _Recorder,
) -> None:
    features = ["depth", "cat_size", "parent_size", "cat_vote", "block_vote", "lex_path", "anc_hit_levels"]
    assert not set(features) & set(MONOTONE_EVIDENCE)
    model = train_membership_model(
        fixture_con, hierarchy, _inverted(train_examples, copies=3), features, with_dense=False, **SMALL
    )
    assert model.manifest.variant == "free"
    text = model.manifest.threshold_chosen_on.split("out-of-fold objective ")[1]
    free, mono = (part.split()[1].rstrip(")") for part in text.split(", "))
    assert free == mono  # all-zero constraints fit the same trees: an exact tie
    assert recorder.calls[-1][1] is None


def test_folds_whose_training_part_has_one_class_score_both_variants_the_same_way(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    recorder: _Recorder,
) -> None:
    usable = [ex for ex in train_examples if len(ex.table)]
    # four cohort folds (one group): positives only in fold 0's cohorts, so folds 1-3 train on both classes
    # but fold 0's training part has none
    examples = [
        ex if i % 4 == 0 else dataclasses.replace(ex, labels=np.zeros(len(ex.table), dtype=np.int8))
        for i, ex in enumerate(usable)
    ]
    model = train_membership_model(fixture_con, hierarchy, examples, with_dense=False, min_cohorts=3, min_positives=1)
    # one fold per variant was skipped (single class), then the final fit
    assert len(recorder.calls) == 3 * len(VARIANTS) + 1
    assert [cst is None for _, cst, _ in recorder.calls[:3]] == [True] * 3
    assert all(cst is not None for _, cst, _ in recorder.calls[3:6])
    assert model.manifest.variant in VARIANTS
    assert "free " in model.manifest.threshold_chosen_on and "monotone " in model.manifest.threshold_chosen_on


def test_model_names_keep_variants_apart_and_default_directories_reuse_per_variant(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    names = {v: model_name(["a"], FEATURE_NAMES, False, None, v) for v in (None, *VARIANTS)}
    assert len(set(names.values())) == 3
    assert model_name(["a"], FEATURE_NAMES, False) == names[None]  # an older caller's name is unchanged
    monkeypatch.setattr(model_store, "models_dir", lambda: tmp_path / "models")
    kwargs = {"with_dense": False, **SMALL}
    mono, _ = ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    assert mono.manifest.variant == "monotone"
    _again, notes = ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    assert notes[0].startswith("reused"), notes
    free, notes = ensure_model(fixture_con, hierarchy, train_examples, variant="free", **kwargs)  # type: ignore[arg-type]
    assert not any(note.startswith("reused") for note in notes) and free.manifest.variant == "free"
    assert len(list((tmp_path / "models").glob("membership-*"))) == 2


# -- reuse of a stored model of another variant (were defects: fixed) -----------------------------------------


def test_a_given_rule_without_variant_does_not_reuse_a_stored_monotone_model(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    kwargs = {"with_dense": False, "directory": tmp_path / "m", "rule": RULE, **SMALL}
    fresh = train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, rule=RULE, **SMALL)
    assert fresh.manifest.variant == "free"
    ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    model, notes = ensure_model(fixture_con, hierarchy, train_examples, **kwargs)  # type: ignore[arg-type]
    assert model.manifest.variant == fresh.manifest.variant, notes


def test_a_call_that_chooses_the_variant_does_not_reuse_a_model_restricted_to_one(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    recorder: _Recorder,
) -> None:

    def free_wins(
        con: object, hierarchy: Hierarchy, examples: Sequence[Example], oof: list[np.ndarray]
    ) -> tuple[float, str, float]:
        return (0.6 if recorder.calls[-1][1] is None else 0.4), "threshold", 0.3

    monkeypatch.setattr(learned, "_choose_rule", free_wins)
    kwargs = {"with_dense": False, "directory": tmp_path / "m", **SMALL}
    restricted, _ = ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    assert restricted.manifest.variant == "monotone"
    chosen = train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, **SMALL)
    assert chosen.manifest.variant == "free"
    model, notes = ensure_model(fixture_con, hierarchy, train_examples, **kwargs)  # type: ignore[arg-type]
    assert model.manifest.variant == "free", notes


def test_the_note_for_a_variant_mismatch_does_not_claim_other_training_data(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    kwargs = {"with_dense": False, "directory": tmp_path / "m", "rule": RULE, **SMALL}
    ensure_model(fixture_con, hierarchy, train_examples, variant="free", **kwargs)  # type: ignore[arg-type]
    model, notes = ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    assert model.manifest.variant == "monotone"
    assert not any("trained on other data" in note for note in notes), notes


def test_a_given_variant_reuses_a_stored_out_of_fold_choice_of_that_variant_with_the_same_rule(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    kwargs = {"with_dense": False, "directory": tmp_path / "m", **SMALL}
    chosen, _ = ensure_model(fixture_con, hierarchy, train_examples, **kwargs)  # type: ignore[arg-type]
    same, notes = ensure_model(fixture_con, hierarchy, train_examples, variant=chosen.manifest.variant, **kwargs)  # type: ignore[arg-type]
    assert notes[0].startswith("reused"), notes
    restricted = train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, variant=chosen.manifest.variant, **SMALL
    )
    # restricting the choice to the winning variant finds the same rule the joint choice found
    assert (restricted.manifest.rule, restricted.manifest.threshold) == (same.manifest.rule, same.manifest.threshold)
    other = next(v for v in VARIANTS if v != chosen.manifest.variant)
    switched, notes = ensure_model(fixture_con, hierarchy, train_examples, variant=other, **kwargs)  # type: ignore[arg-type]
    assert not notes[0].startswith("reused") and switched.manifest.variant == other
