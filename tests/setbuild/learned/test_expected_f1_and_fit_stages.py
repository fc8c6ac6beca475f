"""The expected-F1 selection rule, the all-curated training guard and the fit's progress stages, attacked.

``select(p, "expected_f1", factor)`` keeps the top k maximising ``2 * sum(p[:k]) / (k + factor * sum(p))``.
For probabilities in [0, 1] and factors >= 0 the kept count never shrinks as the factor grows: with
``g_f(k) = C_k / (k + f S)`` (``C_k`` the top-k sum, ``S`` the total), ``log g_f`` has increasing differences
in (k, f) because ``(k + fS) / (k' + fS)`` grows with f for k' > k, so the smallest maximiser is monotone
(Topkis). The monotonicity property below rests on that, not on the implementation.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.engine.curated import Library, load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild import learned, model_store
from phenoforge.setbuild.api import fit_builders, fit_stages
from phenoforge.setbuild.candidates import CandidateTable, Retrieval, build_candidates
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.learned import (
    F1_FACTORS,
    MembershipModel,
    TrainingDataTooSmall,
    build_learned,
    learned_features,
    select,
    train_membership_model,
)
from phenoforge.setbuild.model_store import ensure_model, load_model, models_dir, save_model
from tests.setbuild.conftest import SMALL, all_curated, edit_manifest

# -- helpers -------------------------------------------------------------------------------------


def expected_f1(probabilities: np.ndarray, kept: np.ndarray | list[int], factor: float) -> float:
    """The rule's objective for one kept subset, computed with exact-ish sums (math.fsum), not cumsum."""
    total = math.fsum(probabilities.tolist())
    kept_sum = math.fsum(probabilities[list(kept)].tolist())
    return 2 * kept_sum / (len(kept) + factor * total)


def assert_valid_selection(probabilities: np.ndarray, kept: np.ndarray) -> None:
    """Non-empty when there are candidates, valid unique integer indices, most probable first (NaN last)."""
    assert isinstance(kept, np.ndarray) and kept.ndim == 1
    assert np.issubdtype(kept.dtype, np.integer), kept.dtype
    if not len(probabilities):
        assert len(kept) == 0
        return
    assert 1 <= len(kept) <= len(probabilities)
    indices = kept.tolist()
    assert all(0 <= i < len(probabilities) for i in indices), indices
    assert len(set(indices)) == len(indices), indices
    values = probabilities[kept]
    finite_part = values[~np.isnan(values)]
    assert np.all(finite_part[:-1] >= finite_part[1:]), values  # most probable first
    nan_positions = np.flatnonzero(np.isnan(values))
    assert all(position >= len(finite_part) for position in nan_positions), values  # a NaN never precedes a number


def diabetes_table(hierarchy: Hierarchy) -> CandidateTable:
    table = build_candidates(hierarchy, Retrieval(query="Type 2 diabetes mellitus", bm25=[("E11", 5.0), ("E10", 3.0)]))
    assert len(table) >= 4, "the fixture query must give several candidates"
    return table


unit_probabilities = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=8).map(np.array)
factors = st.floats(0, 10, allow_nan=False)


# -- select: degenerate inputs -------------------------------------------------------------------


def test_expected_f1_of_no_candidates_is_an_empty_integer_array() -> None:
    kept = select(np.zeros(0), "expected_f1", 2.0)
    assert kept.tolist() == [] and np.issubdtype(kept.dtype, np.integer)


@pytest.mark.parametrize("factor", [0.0, 1.0, 6.0, -3.0, 1e9])
@pytest.mark.parametrize("p", [0.0, 0.4, 1.0, 7.5, -2.0])
def test_a_single_candidate_is_always_kept_whatever_its_probability_or_the_factor(p: float, factor: float) -> None:
    assert select(np.array([p]), "expected_f1", factor).tolist() == [0]


@pytest.mark.parametrize("factor", F1_FACTORS)
def test_all_zero_probabilities_keep_exactly_the_first_candidate(factor: float) -> None:
    # every top-k scores 0: the smallest k (1), and ties in probability go to the first index
    assert select(np.zeros(7), "expected_f1", factor).tolist() == [0]


def test_ties_are_broken_by_index_and_the_kept_set_is_a_top_k() -> None:
    probabilities = np.array([0.2, 0.5, 0.5, 0.2, 0.5, 0.0])
    kept = select(probabilities, "expected_f1", 1.0).tolist()
    # g(1) = 1/(1+1.9) < g(2) = 2/(2+1.9) < g(3) = 3/(3+1.9) > g(4) = 3.4/(4+1.9): the three 0.5s, in index order
    assert kept == [1, 2, 4]
    ordered = sorted(range(len(probabilities)), key=lambda i: (-probabilities[i], i))
    assert kept == ordered[: len(kept)]


def test_equal_probabilities_keep_everything_because_each_one_adds_expected_f1() -> None:
    # g(k) = k p / (k + f n p) grows with k: every candidate is kept, the order is the input order
    probabilities = np.full(1000, 0.3)
    assert select(probabilities, "expected_f1", 6.0).tolist() == list(range(1000))


def test_select_does_not_modify_the_caller_s_probabilities() -> None:
    probabilities = np.array([0.1, 0.9, 0.4, 0.4])
    before = probabilities.copy()
    select(probabilities, "expected_f1", 2.0)
    assert np.array_equal(probabilities, before)


def test_float32_probabilities_select_the_same_codes_as_float64() -> None:
    probabilities = np.array([0.05, 0.8, 0.3, 0.75, 0.01, 0.4])
    assert (
        select(probabilities.astype(np.float32), "expected_f1", 2.0).tolist()
        == select(probabilities, "expected_f1", 2.0).tolist()
    )


@pytest.mark.parametrize(
    "probabilities",
    [
        np.array([2.0, 0.5, 3.0]),  # above 1
        np.array([-1.0, 0.5, 0.2]),  # negative
        np.array([0.0, -1.0]),  # a total of -1 makes the first denominator 0 (0/0)
        np.array([-0.5, -0.25, -1.0]),  # all negative
        np.array([np.inf, 0.5, 0.2]),
        np.array([-np.inf, 0.5, 0.2]),
        np.array([np.nan, np.nan, np.nan]),
        np.array([0.3, np.nan, 0.9]),
        np.array([1e308, 1e308, 0.5]),  # the sum overflows
    ],
)
@pytest.mark.parametrize("factor", [0.0, 1.0, 3.0, -1.0, -2.0])
def test_out_of_range_probabilities_or_factors_never_crash_nor_return_nothing(
    probabilities: np.ndarray, factor: float
) -> None:
    with np.errstate(all="ignore"):
        kept = select(probabilities, "expected_f1", factor)
    assert_valid_selection(probabilities, kept)


@pytest.mark.parametrize("factor", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_factor_still_keeps_at_least_one_valid_candidate(factor: float) -> None:
    probabilities = np.array([0.1, 0.9, 0.6])
    with np.errstate(all="ignore"):
        kept = select(probabilities, "expected_f1", factor)
    assert_valid_selection(probabilities, kept)
    assert kept[0] == 1


def test_a_nan_probability_does_not_change_which_other_candidates_are_kept() -> None:
    # was a defect: one NaN made sum(p) NaN, every expected F1 NaN, and argmax kept only the top code
    with_nan = np.array([0.9, 0.9, 0.9, np.nan])
    assert select(with_nan[:3], "expected_f1", 1.0).tolist() == [0, 1, 2]
    assert select(with_nan, "expected_f1", 1.0).tolist() == [0, 1, 2]


def test_expected_size_with_a_nan_or_infinite_probability_selects_instead_of_crashing() -> None:
    # was a defect: round(nan) raised "cannot convert float NaN to integer" (and inf an OverflowError)
    assert select(np.array([0.9, np.nan]), "expected_size", 1.0).tolist() == [0]
    assert select(np.array([0.9, 0.8, np.nan]), "expected_size", 1.0).tolist() == [0, 1]  # round(1.7)
    kept = select(np.array([0.2, np.inf, 0.5]), "expected_size", 1.0)
    assert kept[0] == 1 and len(set(kept.tolist())) == len(kept)


def test_an_unknown_rule_is_refused_not_read_as_a_threshold(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    # was a defect: a misspelt rule fell through to "threshold" and kept only the top code
    probabilities = np.array([0.9, 0.8, 0.7])
    assert select(probabilities, "expected_f1", 2.0).tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="expected-f1"):
        select(probabilities, "expected-f1", 2.0)
    with pytest.raises(ValueError, match="unknown selection rule 'expected-f1'"):
        train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, rule=("expected-f1", 2.0))


# -- select: huge inputs -------------------------------------------------------------------------


def test_a_million_candidates_select_a_locally_optimal_top_k() -> None:
    rng = np.random.default_rng(7)
    probabilities = rng.beta(0.3, 3.0, size=1_000_000)
    factor = 2.0
    kept = select(probabilities, "expected_f1", factor)
    assert_valid_selection(probabilities, kept)
    k = len(kept)
    ranked = np.sort(probabilities)[::-1]
    assert np.array_equal(probabilities[kept], ranked[:k])
    # g(k+1) > g(k) exactly when p_(k+1) > C_k / (k + f S): the kept k cannot gain by one more or one fewer
    total = math.fsum(ranked.tolist())
    top = math.fsum(ranked[:k].tolist())
    assert k == len(ranked) or ranked[k] <= top / (k + factor * total) * (1 + 1e-9)
    assert k == 1 or ranked[k - 1] >= (top - ranked[k - 1]) / (k - 1 + factor * total) * (1 - 1e-9)


def test_a_million_zero_candidates_are_never_kept_beside_a_positive_one() -> None:
    probabilities = np.zeros(1_000_000)
    probabilities[[123_456, 5, 999_999]] = [0.2, 0.9, 0.6]
    for factor in F1_FACTORS:
        kept = select(probabilities, "expected_f1", factor).tolist()
        assert kept == [5, 999_999, 123_456][: len(kept)] and kept, (factor, kept)


# -- select: properties --------------------------------------------------------------------------


@settings(max_examples=400)
@given(probabilities=unit_probabilities, factor=factors)
def test_no_subset_of_candidates_has_more_expected_f1_than_the_kept_one(
    probabilities: np.ndarray, factor: float
) -> None:
    """Brute force over every non-empty subset (not only top-k sets): the kept one is the best."""
    kept = select(probabilities, "expected_f1", factor)
    assert_valid_selection(probabilities, kept)
    found = expected_f1(probabilities, kept, factor)
    n = len(probabilities)
    best = max(
        expected_f1(probabilities, list(subset), factor)
        for size in range(1, n + 1)
        for subset in itertools.combinations(range(n), size)
    )
    assert found >= best - 1e-9 * max(1.0, best), (probabilities.tolist(), factor, kept.tolist(), found, best)


@settings(max_examples=400)
@given(probabilities=unit_probabilities, factor=factors)
def test_the_kept_codes_are_the_most_probable_ones(probabilities: np.ndarray, factor: float) -> None:
    kept = select(probabilities, "expected_f1", factor)
    left_out = np.setdiff1d(np.arange(len(probabilities)), kept)
    assert not len(left_out) or probabilities[kept].min() >= probabilities[left_out].max()
    # a zero-probability code adds nothing but a false positive: kept only when nothing is positive
    if probabilities.max() > 0:
        assert probabilities[kept].min() > 0, (probabilities.tolist(), factor, kept.tolist())


@settings(max_examples=600)
@given(probabilities=unit_probabilities, a=st.floats(0, 1e3), b=st.floats(0, 1e3))
def test_a_larger_factor_never_keeps_fewer_codes(probabilities: np.ndarray, a: float, b: float) -> None:
    """True for p in [0, 1] and factors >= 0 (see the module docstring); the kept sets are then nested too."""
    small, large = sorted((a, b))
    fewer = select(probabilities, "expected_f1", small).tolist()
    more = select(probabilities, "expected_f1", large).tolist()
    assert len(fewer) <= len(more), (probabilities.tolist(), small, large)
    assert more[: len(fewer)] == fewer


def test_the_factor_grid_is_sorted_positive_and_grows_the_kept_list() -> None:
    assert list(F1_FACTORS) == sorted(F1_FACTORS) and all(0 < f < math.inf for f in F1_FACTORS)
    probabilities = np.array([0.9, 0.7, 0.5, 0.35, 0.2, 0.1, 0.05, 0.02])
    sizes = [len(select(probabilities, "expected_f1", f)) for f in F1_FACTORS]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1], sizes


@settings(max_examples=300)
@given(probabilities=unit_probabilities, factor=factors, seed=st.integers(0, 2**32 - 1))
def test_shuffling_the_candidates_keeps_the_same_probabilities(
    probabilities: np.ndarray, factor: float, seed: int
) -> None:
    # the rule reads only the sorted probabilities: the input order may change which tied index is kept, not
    # which probabilities are
    shuffled = probabilities[np.random.default_rng(seed).permutation(len(probabilities))]
    kept = probabilities[select(probabilities, "expected_f1", factor)]
    kept_shuffled = shuffled[select(shuffled, "expected_f1", factor)]
    assert np.array_equal(kept, kept_shuffled)


@settings(max_examples=300)
@given(probabilities=unit_probabilities)
def test_factor_zero_keeps_only_codes_as_probable_as_the_top_one(probabilities: np.ndarray) -> None:
    """With factor 0 the objective is twice the mean of the kept probabilities: only the top ones tie."""
    kept = select(probabilities, "expected_f1", 0.0)
    assert np.allclose(probabilities[kept], probabilities.max(), rtol=1e-12, atol=0)


@settings(max_examples=300)
@given(
    probabilities=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=0, max_size=12).map(
        np.array
    ),
    factor=st.floats(allow_nan=True, allow_infinity=True),
)
def test_any_floats_at_all_give_a_valid_selection(probabilities: np.ndarray, factor: float) -> None:
    with np.errstate(all="ignore"):
        kept = select(probabilities, "expected_f1", factor)
    assert_valid_selection(probabilities, kept)


# -- a stored manifest with the expected-F1 rule ---------------------------------------------------


def _with_rule(
    model: MembershipModel, directory: Path, rule: str, factor: float, hierarchy: Hierarchy
) -> MembershipModel:
    """The model saved, its manifest's rule rewritten on disk (the checksum covers only the trees), then loaded."""
    save_model(model, directory)
    edit_manifest(directory, rule=rule, threshold=factor)
    return load_model(directory, hierarchy.build_id)


def test_a_stored_expected_f1_manifest_is_loaded_and_applied_by_build_learned(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    loaded = _with_rule(model, tmp_path / "m", "expected_f1", 3.0, hierarchy)
    assert (loaded.manifest.rule, loaded.manifest.threshold) == ("expected_f1", 3.0)
    table = diabetes_table(hierarchy)
    probabilities = np.zeros(len(table))
    probabilities[3], probabilities[1] = 0.9, 0.8
    # sum 1.7, factor 3: g(1) = 1.8/6.1 < g(2) = 3.4/7.1, zeros only lower it. The threshold rule at 3.0 would
    # keep one code as a fallback; expected_size 3.0 would keep round(5.1) = 5
    built = build_learned(
        hierarchy,
        table,
        loaded,
        scored_library_id="fixture-other",
        scored_group="fixture-other",
        probabilities=probabilities,
    )
    assert built.code_list == [hierarchy.code[table.ids[3]], hierarchy.code[table.ids[1]]]
    assert not built.fallback
    assert [item.provenance.source for item in built.codes] == ["model", "model"]
    assert [item.provenance.score for item in built.codes] == [0.9, 0.8]
    assert all(">=" not in item.provenance.rule for item in built.codes)


def test_build_learned_with_the_model_s_own_probabilities_follows_the_stored_factor(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path
) -> None:
    table = diabetes_table(hierarchy)
    probabilities = model.probabilities(learned_features(hierarchy, table, None))
    sizes = []
    for i, factor in enumerate((0.0, 1.0, 6.0, 1000.0)):
        loaded = _with_rule(model, tmp_path / f"m{i}", "expected_f1", factor, hierarchy)
        built = build_learned(hierarchy, table, loaded, scored_library_id="fixture-other")
        expected = [hierarchy.code[table.ids[j]] for j in select(probabilities, "expected_f1", factor)]
        assert built.code_list == expected and built.codes
        sizes.append(len(built.codes))
    assert sizes == sorted(sizes)


@pytest.mark.parametrize("factor", [0.0, -1.0, -1000.0])
def test_a_manifest_with_a_zero_or_negative_factor_still_builds_a_set(
    model: MembershipModel, hierarchy: Hierarchy, tmp_path: Path, factor: float
) -> None:
    loaded = _with_rule(model, tmp_path / "m", "expected_f1", factor, hierarchy)
    table = diabetes_table(hierarchy)
    with np.errstate(all="ignore"):
        built = build_learned(hierarchy, table, loaded, scored_library_id="fixture-other")
    assert built.codes and len(set(built.code_list)) == len(built.code_list)
    assert set(built.code_list) <= {hierarchy.code[node] for node in table.ids}


def test_a_manifest_with_a_misspelt_rule_is_unusable_and_retrained(
    model: MembershipModel,
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
) -> None:
    # was a defect: a hand-edited "expected-f1" was read as a probability threshold of its factor
    directory = tmp_path / "m"
    with pytest.raises(
        learned.ModelError, match="corrupt model manifest \\(rule: .*unknown selection rule 'expected-f1'"
    ):
        _with_rule(model, directory, "expected-f1", 2.0, hierarchy)
    _model, notes = model_store.ensure_model(
        fixture_con, hierarchy, train_examples, with_dense=False, directory=directory, **SMALL
    )
    assert any("unusable, retrained" in note for note in notes)
    assert load_model(directory, hierarchy.build_id).manifest.rule in learned.RULES


def test_a_rule_chosen_out_of_fold_can_be_expected_f1_and_every_factor_is_tried(
    fixture_con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    train_examples: list[Example],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tried: list[tuple[str, float]] = []
    real_select = learned.select

    def recording_select(probabilities: np.ndarray, rule: str, threshold: float) -> np.ndarray:
        tried.append((rule, threshold))
        return real_select(probabilities, rule, threshold)

    def objective(
        con: object, cases: list[tuple[str, str, list[str]]], predict: Callable[[int], list[str]]
    ) -> tuple[float, float]:
        predict(0)
        return (1.0, 1.0) if tried[-1] == ("expected_f1", F1_FACTORS[-2]) else (0.5, 0.5)

    monkeypatch.setattr(learned, "select", recording_select)
    monkeypatch.setattr(learned, "mean_objective", objective)
    chosen = train_membership_model(fixture_con, hierarchy, train_examples, with_dense=False, **SMALL)
    assert {("expected_f1", f) for f in F1_FACTORS} <= set(tried)
    assert (chosen.manifest.rule, chosen.manifest.threshold) == ("expected_f1", F1_FACTORS[-2])
    assert "out-of-fold" in chosen.manifest.threshold_chosen_on
    monkeypatch.setattr(learned, "select", real_select)
    save_model(chosen, tmp_path / "m")
    assert load_model(tmp_path / "m", hierarchy.build_id).manifest.rule == "expected_f1"


def test_a_stored_expected_f1_model_is_reused_only_for_the_same_factor(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    kwargs = {"with_dense": False, "directory": directory, **SMALL}
    first, notes = ensure_model(fixture_con, hierarchy, train_examples, rule=("expected_f1", 2.0), **kwargs)
    assert (first.manifest.rule, first.manifest.threshold) == ("expected_f1", 2.0)
    _again, notes = ensure_model(fixture_con, hierarchy, train_examples, rule=("expected_f1", 2.0), **kwargs)
    assert any(note.startswith("reused model") for note in notes)
    other, notes = ensure_model(fixture_con, hierarchy, train_examples, rule=("expected_f1", 3.0), **kwargs)
    assert not any(note.startswith("reused model") for note in notes)
    assert load_model(directory, hierarchy.build_id).manifest.threshold == 3.0 == other.manifest.threshold


# -- the all-curated guard -----------------------------------------------------------------------


def _emptied(ex: Example, hierarchy: Hierarchy) -> Example:
    table = build_candidates(hierarchy, Retrieval(query="zzz", bm25=[]))
    assert not len(table)
    return dataclasses.replace(
        ex, table=table, features=np.zeros((0, ex.features.shape[1])), labels=np.zeros(0, dtype=np.int8)
    )


def test_all_curated_cohorts_beside_empty_tables_are_refused_with_the_right_counts(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    # every other cohort has no candidates: they are not usable, and add no negatives either
    mixed = [all_curated(ex) if i % 2 else _emptied(ex, hierarchy) for i, ex in enumerate(train_examples)]
    usable = [ex for ex in mixed if len(ex.table)]
    rows = sum(len(ex.table) for ex in usable)
    assert len(usable) >= SMALL["min_cohorts"] and rows >= SMALL["min_positives"]
    with pytest.raises(TrainingDataTooSmall, match=f"all {rows} candidates of the {len(usable)} usable cohorts"):
        train_membership_model(fixture_con, hierarchy, mixed, with_dense=False, **SMALL)


def test_too_few_usable_cohorts_is_said_before_all_curated(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    mixed = [all_curated(ex) if i < 2 else _emptied(ex, hierarchy) for i, ex in enumerate(train_examples)]
    with pytest.raises(TrainingDataTooSmall, match="needs at least 3 cohorts"):
        train_membership_model(fixture_con, hierarchy, mixed, with_dense=False, **SMALL)


def test_a_single_candidate_outside_the_curated_lists_is_enough_to_train(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example]
) -> None:
    examples = [all_curated(ex) for ex in train_examples] + [_emptied(train_examples[0], hierarchy)]
    first = examples[0]
    labels = first.labels.copy()
    labels[-1] = 0
    examples[0] = dataclasses.replace(first, labels=labels)
    fitted = train_membership_model(fixture_con, hierarchy, examples, with_dense=False, **SMALL)
    assert fitted.manifest.n_rows - fitted.manifest.n_positive == 1
    assert fitted.manifest.rule in learned.RULES


def test_ensure_model_stores_nothing_when_every_candidate_is_curated(
    fixture_con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, train_examples: list[Example], tmp_path: Path
) -> None:
    directory = tmp_path / "models" / "m"
    with pytest.raises(TrainingDataTooSmall, match="are curated codes"):
        ensure_model(
            fixture_con,
            hierarchy,
            [all_curated(ex) for ex in train_examples],
            with_dense=False,
            directory=directory,
            **SMALL,
        )
    assert not directory.exists()


# -- fit_builders' progress stages ---------------------------------------------------------------


class Cancelled(Exception):
    """What a dashboard's stop button might raise from its progress callback."""


@pytest.fixture
def fixture_libraries(libraries_root: Path, monkeypatch: pytest.MonkeyPatch) -> list[Library]:
    """The two fixture libraries as training libraries, with minimums the fixture meets (every stage runs)."""
    monkeypatch.setattr("phenoforge.setbuild.api.is_training_library", lambda manifest: True)
    monkeypatch.setattr(learned_builder, "ensure_model", lambda *args, **kwargs: ensure_model(*args, **kwargs, **SMALL))
    return [load_library(libraries_root / "train"), load_library(libraries_root / "other")]


def _stages(reported: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    return [entry for entry in reported if entry[2].startswith("set builders")]


def test_a_progress_callback_that_raises_stops_the_fit_and_leaves_nothing_half_fitted(
    fixture_con: duckdb.DuckDBPyConnection, fixture_libraries: list[Library]
) -> None:
    def cancel_at_transfer(done: int, total: int, message: str) -> None:
        if message.startswith("set builders") and done == 3:
            raise Cancelled(message)

    with pytest.raises(Cancelled, match="curated-transfer threshold"):
        fit_builders(fixture_con, None, "fixture-other", fixture_libraries, progress=cancel_at_transfer)
    assert not list(models_dir().glob("fitted-*.json"))  # no fitted bundle to be reused half-done
    reported: list[tuple[int, int, str]] = []
    fitted = fit_builders(
        fixture_con, None, "fixture-other", fixture_libraries, progress=lambda *entry: reported.append(entry)
    )
    stages = _stages(reported)
    assert stages[0][:2] == (0, FIT_STAGES) and stages[-1][:2] == (FIT_STAGES, FIT_STAGES)
    assert fitted.training_libraries == ["fixture-train"]
    reused: list[tuple[int, int, str]] = []
    again = fit_builders(
        fixture_con, None, "fixture-other", fixture_libraries, progress=lambda *entry: reused.append(entry)
    )
    assert any(note.startswith("reused the builders") for note in again.notes)
    assert _stages(reused) == []  # nothing fitted, no stage reported


FIT_STAGES = fit_stages()


@pytest.mark.parametrize("stage", [0, 1, 2, 3, FIT_STAGES])
def test_a_raise_at_any_stage_reaches_the_caller_unchanged(
    fixture_con: duckdb.DuckDBPyConnection, fixture_libraries: list[Library], stage: int
) -> None:
    seen: list[int] = []

    def cancel(done: int, total: int, message: str) -> None:
        if message.startswith("set builders"):
            seen.append(done)
            if done == stage:
                raise Cancelled(f"stop at {done}")

    with pytest.raises(Cancelled, match=f"^stop at {stage}$"):
        fit_builders(fixture_con, None, "fixture-other", fixture_libraries, progress=cancel)
    assert seen == list(range(stage + 1))
    assert not list(models_dir().glob("fitted-*.json"))


def test_no_progress_callback_fits_the_same_builders_as_a_recording_one(
    fixture_con: duckdb.DuckDBPyConnection,
    fixture_libraries: list[Library],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    silent = fit_builders(fixture_con, None, "fixture-other", fixture_libraries, progress=None)
    assert silent.training_libraries == ["fixture-train"]
    assert any(note.startswith("curated_transfer") for note in silent.notes)
    monkeypatch.setenv("PHENOFORGE_DATA_DIR", str(tmp_path / "elsewhere"))  # a fit from scratch again
    reported: list[tuple[int, int, str]] = []
    loud = fit_builders(
        fixture_con, None, "fixture-other", fixture_libraries, progress=lambda *entry: reported.append(entry)
    )
    assert _stages(reported)
    assert loud.states() == silent.states()
    assert (loud.model is None) == (silent.model is None)


def test_progress_stages_count_up_to_their_total_and_name_every_held_out_group(
    fixture_con: duckdb.DuckDBPyConnection, fixture_libraries: list[Library]
) -> None:
    reported: list[tuple[int, int, str]] = []
    fit_builders(
        fixture_con,
        None,
        "fixture-other",
        fixture_libraries,
        progress=lambda *entry: reported.append(entry),
        also_held_out=["zz-family", "aa-family"],
    )
    stages = _stages(reported)
    done = [entry[0] for entry in stages]
    assert done == sorted(done) and len(set(done)) == len(done)
    assert all(total == FIT_STAGES and 0 <= d <= total for d, total, _ in stages)
    assert all(m.startswith("set builders without aa-family, fixture-other, zz-family: ") for *_, m in stages)


def test_an_all_curated_training_set_falls_back_and_skips_the_context_stage(
    fixture_con: duckdb.DuckDBPyConnection,
    fixture_libraries: list[Library],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = learned_builder.with_transfer_features

    def transfer_then_all_curated(*args: object, **kwargs: object) -> list[Example]:
        return [all_curated(ex) for ex in real(*args, **kwargs)]  # type: ignore[arg-type]

    monkeypatch.setattr(learned_builder, "with_transfer_features", transfer_then_all_curated)
    reported: list[tuple[int, int, str]] = []
    fitted = fit_builders(
        fixture_con, None, "fixture-other", fixture_libraries, progress=lambda *entry: reported.append(entry)
    )
    assert fitted.model is None and fitted.context_model is None
    assert any("falls back to the adaptive cut-off" in n and "are curated codes" in n for n in fitted.notes)
    assert [entry[:2] for entry in _stages(reported)] == [(0, 4), (1, 4), (3, 4), (4, 4)]
