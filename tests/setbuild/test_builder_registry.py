"""A new set builder is one module: registered, it is a method, runs in the benchmark and shows in ``clean``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import duckdb
import pytest

from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.eval.harness import registered_methods, run_benchmark
from phenoforge.methods import available_methods, set_building
from phenoforge.prune import current_state, models_directory, plan_prune
from phenoforge.setbuild import api
from phenoforge.setbuild.assemble import SetAssembler, ranked_hits
from phenoforge.setbuild.builders import (
    BuildInputs,
    SetBuilder,
    StateError,
    Training,
    UnknownBuilder,
    builder_class,
    builder_names,
    register_builder,
    unregister_builder,
    with_requirements,
)
from phenoforge.setbuild.models import BuiltSet
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS


class TopHits(SetBuilder):
    """A toy builder: the top ``n_`` fused hits, ``n_`` the training cohorts' median list size (at most 5)."""

    name = "toy_top_hits"
    label = "Toy top hits"
    description = "the fused top hits, as many as a median training cohort lists (a test's toy)"

    def __init__(self, cap: int = 5) -> None:
        self.cap = cap
        self.n_: int | None = None

    def fitted_attributes(self) -> tuple[str, ...]:
        return ("n_",)

    def fit(self, training: Training) -> Self:
        sizes = sorted(len(ex.truth) for ex in training.examples) or [1]
        self.n_ = max(1, min(self.cap, sizes[len(sizes) // 2]))
        return self

    def build(self, inputs: BuildInputs) -> BuiltSet:
        if self.n_ is None:
            raise self.not_fitted()
        out = SetAssembler(inputs.hierarchy, self.name, inputs.query)
        for node in ranked_hits(inputs.table, self.n_):
            out.add_node(node, "hit", 1.0, f"one of the top {self.n_} fused hits")
        return out.finish()

    def state(self) -> dict[str, Any]:
        if self.n_ is None:
            raise self.not_fitted()
        return {"n": self.n_}

    @classmethod
    def from_state(cls, state: Any, hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        builder = cls()
        if not isinstance(state.get("n"), int) or state["n"] < 1:
            raise StateError("stored toy size is not a positive whole number")
        builder.n_ = state["n"]
        return builder


@pytest.fixture
def toy() -> Iterator[type[TopHits]]:
    register_builder(TopHits)
    set_building.clear_fitted()
    try:
        yield TopHits
    finally:
        unregister_builder(TopHits.name)
        set_building.clear_fitted()


def test_the_built_in_builders_are_found_in_their_order() -> None:
    assert builder_names()[:4] == ("adaptive_cutoff", "subtree", "learned", "curated_transfer")
    assert with_requirements(["curated_transfer"]) == ["adaptive_cutoff", "learned", "curated_transfer"]
    with pytest.raises(UnknownBuilder, match="choose one of adaptive_cutoff"):
        builder_class("no_such_builder")


def test_a_name_taken_by_another_builder_is_refused() -> None:
    class Impostor(TopHits):
        name = "learned"

    with pytest.raises(UnknownBuilder, match="already registered"):
        register_builder(Impostor)
    assert builder_class("learned").__name__ == "Learned"


def test_an_unfitted_builder_says_so(hierarchy: Hierarchy) -> None:
    with pytest.raises(StateError, match="not fitted"):
        TopHits().state()


def test_a_toy_builder_in_one_module_is_a_method_runs_in_the_benchmark_and_shows_in_clean(
    fixture_con: duckdb.DuckDBPyConnection, toy: type[TopHits], tmp_path: Path
) -> None:
    assert "toy_top_hits" in builder_names()
    assert "toy_top_hits" in available_methods(include_entry_points=False)
    assert "toy_top_hits" in registered_methods()
    library = write_icd_library(
        tmp_path / "data" / "libraries" / "elix",
        {**OTHER_COHORTS, "dm2": TRAIN_COHORTS["dm2"]},
        library_id="elixhauser-2026-fixture",
        group="elixhauser",
    )
    write_icd_library(
        tmp_path / "data" / "libraries" / "hcc", TRAIN_COHORTS, library_id="cms-hcc-v28-fixture", group="cms-hcc"
    )
    report = run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=["toy_top_hits"])
    record = report.methods["toy_top_hits"]
    assert record.trained_on == ["cms-hcc-v28-fixture"]  # fitted without the scored group, like every builder
    answered = [r for r in report.results if r.method == "toy_top_hits"]
    assert answered and all(r.predicted_codes for r in answered)
    # the fit is stored with the others, and clean names the builder among what the current fit holds
    stored = api.fit_builders(fixture_con, None, "elixhauser")
    assert isinstance(stored.builder("toy_top_hits"), TopHits)
    assert any(note.startswith("reused the builders") for note in stored.notes)
    plan = plan_prune(models_directory(), current_state(fixture_con, None))
    bundles = [entry for entry in plan.current if entry.kind == "fitted builders"]
    assert bundles and all("toy_top_hits" in entry.reason for entry in bundles)


def test_the_registry_reaches_a_new_builders_fit_from_the_same_stored_examples(
    fixture_con: duckdb.DuckDBPyConnection, toy: type[TopHits], tmp_path: Path
) -> None:
    """A fit made before a builder was registered is not taken for one that holds it."""
    write_icd_library(tmp_path / "data" / "libraries" / "hcc", TRAIN_COHORTS, "cms-hcc-v28-fixture", group="cms-hcc")
    unregister_builder(TopHits.name)
    set_building.clear_fitted()
    before = api.fit_builders(fixture_con, None, "elixhauser")
    assert "toy_top_hits" not in before.builders
    register_builder(TopHits)
    after = api.fit_builders(fixture_con, None, "elixhauser")
    assert isinstance(after.builder("toy_top_hits"), TopHits)
    assert after.builder("toy_top_hits").state() == {"n": TopHits().fit(_training(fixture_con, after)).n_}


def _training(con: duckdb.DuckDBPyConnection, fitted: api.FittedBuilders) -> Training:
    from phenoforge.engine.curated import list_libraries
    from phenoforge.setbuild.corpus import library_examples

    examples = [
        ex
        for lib in list_libraries(errors=[])
        if lib.library_id in fitted.training_libraries
        for ex in library_examples(con, lib, None)
    ]
    return Training(con, get_hierarchy(con), examples, fitted.training_libraries, with_dense=False)
