"""The learned model's variant: unconstrained or monotone trees, chosen out of fold with the rule."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import evaluate as evaluate_module
from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.learned import (
    MONOTONE_EVIDENCE,
    VARIANTS,
    MembershipModel,
    monotone_constraints,
    train_membership_model,
)
from phenoforge.setbuild.model_store import ensure_model, load_model, save_model
from tests.setbuild.conftest import SMALL, score_fixture_library


def test_the_free_variant_is_unconstrained_and_the_monotone_one_constrains_only_evidence() -> None:
    assert monotone_constraints(FEATURE_NAMES, "free") is None
    cst = monotone_constraints(FEATURE_NAMES, "monotone")
    assert cst is not None and len(cst) == len(FEATURE_NAMES)
    by_name = dict(zip(FEATURE_NAMES, cst, strict=True))
    assert by_name["fused_rel"] == 1 and by_name["is_hit"] == 1
    assert by_name["fused_rank"] == -1 and by_name["bm25_rank"] == -1
    # structure and votes stay free: a bigger category is not evidence either way
    assert by_name["depth"] == 0 and by_name["cat_size"] == 0 and by_name["cat_vote"] == 0
    # every constrained name is a column a model can read
    assert set(MONOTONE_EVIDENCE) <= set(learned.MATRIX_COLUMNS)


def test_an_unknown_variant_is_refused_with_the_variants_there_are(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    with pytest.raises(ValueError, match="unknown model variant 'monotonic': one of free, monotone"):
        monotone_constraints(FEATURE_NAMES, "monotonic")
    with pytest.raises(ValueError, match="unknown model variant"):
        train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, variant="monotonic", **SMALL)


@pytest.mark.parametrize("better", VARIANTS)
def test_the_variant_with_the_better_out_of_fold_objective_is_fitted_and_recorded(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    better: str,
) -> None:
    fitted_with: list[list[int] | None] = []
    real_fit = learned._fit

    def recording_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, monotonic_cst: list[int] | None = None) -> object:
        fitted_with.append(monotonic_cst)
        return real_fit(x, y, w, monotonic_cst)

    def objective(
        con: object, hierarchy: Hierarchy, examples: Sequence[Example], oof: list[np.ndarray]
    ) -> tuple[float, str, float]:
        # the out-of-fold fits of the variant being judged were the last ones
        variant = "free" if fitted_with[-1] is None else "monotone"
        return (0.6 if variant == better else 0.4), "expected_f1", 2.0

    monkeypatch.setattr(learned, "_fit", recording_fit)
    monkeypatch.setattr(learned, "_choose_rule", objective)
    chosen = train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, **SMALL)
    assert chosen.manifest.variant == better
    # four cohort folds for each variant, then the final fit with the chosen one
    assert len(fitted_with) == 4 * len(VARIANTS) + 1
    assert (fitted_with[-1] is None) == (better == "free")
    assert "free 0.4" in chosen.manifest.threshold_chosen_on or "free 0.6" in chosen.manifest.threshold_chosen_on
    assert f"model variant {better}" in chosen.manifest.threshold_chosen_on


def test_a_tie_keeps_the_unconstrained_trees(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(learned, "_choose_rule", lambda *args: (0.5, "threshold", 0.3))
    chosen = train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, **SMALL)
    assert chosen.manifest.variant == "free"


def test_a_given_rule_uses_the_given_variant_or_free_and_fits_once(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[list[int] | None] = []
    real_fit = learned._fit
    monkeypatch.setattr(learned, "_fit", lambda x, y, w, cst=None: calls.append(cst) or real_fit(x, y, w, cst))
    plain = train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, rule=("threshold", 0.3), **SMALL
    )
    assert plain.manifest.variant == "free" and calls == [None]
    calls.clear()
    constrained = train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, rule=("threshold", 0.3), variant="monotone", **SMALL
    )
    assert constrained.manifest.variant == "monotone"
    assert len(calls) == 1 and calls[0] == monotone_constraints(FEATURE_NAMES, "monotone")


def test_a_given_variant_alone_restricts_the_out_of_fold_choice_to_it(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    chosen = train_membership_model(
        fixture_con, hierarchy, train_examples, with_dense=False, variant="monotone", **SMALL
    )
    assert chosen.manifest.variant == "monotone"
    assert "free" not in chosen.manifest.threshold_chosen_on.split("model variant")[1]


def _inverted(examples: list[Example], copies: int = 20) -> list[Example]:
    """The cohorts relabelled so that the weaker a candidate's fused score, the likelier it is curated
    (unconstrained trees learn to lower a probability as the evidence grows; monotone ones must not),
    each copied with a little noise so the trees have rows enough to split on."""
    column = learned.MATRIX_COLUMNS.index("fused_rel")
    rng = np.random.default_rng(0)
    out = []
    for ex in (ex for ex in examples if len(ex.table)):
        for copy in range(copies):
            features = ex.features + rng.normal(0.0, 0.01, ex.features.shape)
            labels = (features[:, column] < 0.93).astype(np.int8)
            out.append(dataclasses.replace(ex, cohort_id=f"{ex.cohort_id}-{copy}", features=features, labels=labels))
    return out


@pytest.fixture(scope="module")
def inverted_models(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, MembershipModel]:
    """Both variants fitted on the inverted cohorts, saved and read back: our own tree predictor answers."""
    examples = _inverted(train_examples)
    out = {}
    for variant in VARIANTS:
        fitted = train_membership_model(
            fixture_con, hierarchy, examples, with_dense=False, rule=("threshold", 0.3), variant=variant, **SMALL
        )
        directory = tmp_path_factory.mktemp(variant) / "m"
        save_model(fitted, directory)
        out[variant] = load_model(directory, hierarchy.build_id)
    return out


def _rows(train_examples: list[Example]) -> np.ndarray:
    return np.vstack([ex.features for ex in train_examples if len(ex.table)])


def test_unconstrained_trees_fitted_on_inverted_evidence_lower_a_probability_as_it_grows(
    inverted_models: dict[str, MembershipModel], train_examples: list[Example]
) -> None:
    # the check below could fail: on these labels the free model does lower probabilities
    rows = _rows(train_examples)
    moved = rows.copy()
    moved[:, learned.MATRIX_COLUMNS.index("fused_rel")] += 1.0
    free = inverted_models["free"]
    assert (free.probabilities(moved) < free.probabilities(rows) - 1e-6).any()


@settings(max_examples=80, deadline=None)
@given(
    row=st.integers(0, 10_000),
    feature=st.sampled_from(sorted(name for name in MONOTONE_EVIDENCE if name in FEATURE_NAMES)),
    step=st.floats(0.01, 50.0, allow_nan=False),
)
def test_more_evidence_never_lowers_a_stored_monotone_models_probability(
    inverted_models: dict[str, MembershipModel],
    train_examples: list[Example],
    row: int,
    feature: str,
    step: float,
) -> None:
    rows = _rows(train_examples)
    base = rows[row % len(rows)].copy()
    moved = base.copy()
    moved[learned.MATRIX_COLUMNS.index(feature)] += step * MONOTONE_EVIDENCE[feature]
    before, after = inverted_models["monotone"].probabilities(np.vstack([base, moved]))
    assert after >= before - 1e-12


@pytest.fixture(scope="module")
def monotone_model(inverted_models: dict[str, MembershipModel]) -> MembershipModel:
    return inverted_models["monotone"]


def test_a_stored_model_of_another_variant_is_not_reused_for_a_given_variant(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    kwargs = {"with_dense": False, "directory": tmp_path / "m", "rule": ("threshold", 0.3), **SMALL}
    first, _ = ensure_model(fixture_con, hierarchy, train_examples, variant="free", **kwargs)  # type: ignore[arg-type]
    _same, notes = ensure_model(fixture_con, hierarchy, train_examples, variant="free", **kwargs)  # type: ignore[arg-type]
    assert any(note.startswith("reused") for note in notes)
    other, notes = ensure_model(fixture_con, hierarchy, train_examples, variant="monotone", **kwargs)  # type: ignore[arg-type]
    assert not any(note.startswith("reused") for note in notes)
    assert (first.manifest.variant, other.manifest.variant) == ("free", "monotone")


@pytest.mark.parametrize(("given", "reported"), [(None, "free"), ("free", "free"), ("monotone", "monotone")])
def test_the_benchmark_reports_the_variant_and_an_ablation_can_fix_it(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    other_examples: list[Example],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    given: str | None,
    reported: str,
) -> None:
    # a given rule without a variant asks for free trees
    monkeypatch.setattr(model_store, "models_dir", lambda: tmp_path / "models")
    monkeypatch.setattr(evaluate_module, "ensure_model", functools.partial(ensure_model, **SMALL))
    report = score_fixture_library(
        fixture_con, hierarchy, train_examples, other_examples, rule=("threshold", 0.3), variant=given
    )
    assert report.learned_variant == reported and report.learned_rule == ("threshold", 0.3)
    assert any(f"{reported} trees" in note for note in report.notes)


def test_a_call_that_chooses_does_not_reuse_a_model_fitted_for_a_callers_rule(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    # was a defect: a model fitted for an ablation's given rule served a later call that asked for the choice
    directory = tmp_path / "m"
    kwargs = {"with_dense": False, "directory": directory, **SMALL}
    ensure_model(fixture_con, hierarchy, train_examples, rule=("threshold", 0.3), **kwargs)  # type: ignore[arg-type]
    chosen, notes = ensure_model(fixture_con, hierarchy, train_examples, **kwargs)  # type: ignore[arg-type]
    assert any("fitted on the same data, but its selection rule was given by a caller" in note for note in notes)
    assert sorted(chosen.manifest.variants_compared) == sorted(VARIANTS)
    _again, notes = ensure_model(fixture_con, hierarchy, train_examples, **kwargs)  # type: ignore[arg-type]
    assert notes[0].startswith("reused")
