"""Checks of a careless plug-in builder and of hand-edited stored fits, on the fixture libraries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import duckdb
import pytest

from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.expansion import Hierarchy
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_builder_fits, set_building
from phenoforge.setbuild import api
from phenoforge.setbuild.builders import (
    BuildInputs,
    SetBuilder,
    Training,
    builder_identities,
    register_builder,
    unregister_builder,
)
from phenoforge.setbuild.models import BuiltSet
from tests.methods.test_set_builders import ELIX_ID, HCC_ID, installed  # noqa: F401 - the fixture

__all__ = ["installed"]


class _Raising(SetBuilder):
    name = "hostile_raising"
    label = "Hostile raising"
    description = "a plug-in whose fit raises"

    def fit(self, training: Training) -> Self:
        raise RuntimeError("plug-in bug")

    def build(self, inputs: BuildInputs) -> BuiltSet:
        raise AssertionError("never fitted")

    def state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_state(cls, state: Any, hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        return cls()


@pytest.fixture
def raising() -> Iterator[None]:
    register_builder(_Raising)
    set_building.clear_fitted()
    try:
        yield
    finally:
        unregister_builder(_Raising.name)
        set_building.clear_fitted()


@pytest.mark.usefixtures("raising")
def test_a_plugin_whose_fit_raises_does_not_take_the_built_in_builders_down(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811 - the fixture
) -> None:
    library = installed[ELIX_ID]
    report = run_benchmark(fixture_con, library, load_library(library).cohort_ids, methods=["adaptive_cutoff"])
    assert [r for r in report.results if r.method == "adaptive_cutoff"], report.methods["adaptive_cutoff"].notes


def test_a_hand_edited_parameters_file_is_not_reused_as_tuned(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811 - the fixture
) -> None:
    libraries = [load_library(path) for path in installed.values()]
    first = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert first.training_libraries == [HCC_ID]
    models = libraries_dir().parent / "models"
    (params,) = models.glob("builder-params-*.json")
    stored = json.loads(params.read_text(encoding="utf-8"))
    stored["states"]["adaptive_cutoff"]["min_agreement"] = 0.0123
    stored["states"]["adaptive_cutoff"]["trained_on"] = [ELIX_ID]  # the scored library, by hand
    params.write_text(json.dumps(stored), encoding="utf-8")
    for bundle in models.glob("fitted-*.json"):  # a fit under another key reads the parameters file
        bundle.unlink()
    set_building.clear_fitted()
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    state = again.states()["adaptive_cutoff"]
    assert state["min_agreement"] != 0.0123 and ELIX_ID not in state["trained_on"], again.notes


def test_a_bundle_whose_digest_is_recomputed_over_an_extra_state_still_holds_the_registered_builders(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811 - the fixture
) -> None:
    libraries = [load_library(path) for path in installed.values()]
    api.fit_builders(fixture_con, None, "elixhauser", libraries)
    (bundle,) = (libraries_dir().parent / "models").glob("fitted-*.json")
    stored = api._StoredFit.model_validate_json(bundle.read_text(encoding="utf-8"))
    del stored.states["subtree"]
    stored.states["ghost"] = {"x": 1}
    stored.digest = stored.content_digest()
    bundle.write_text(stored.model_dump_json(), encoding="utf-8")
    again = api.fit_builders(fixture_con, None, "elixhauser", libraries)
    assert any("holds no fitted subtree builder" in note for note in again.notes), again.notes
    assert set(again.builders) == {"adaptive_cutoff", "subtree", "learned", "curated_transfer"}


class _VersionOne(SetBuilder):
    name = "hostile_versioned"
    label = "Hostile versioned"
    description = "a plug-in builder, first version"

    def fit(self, training: Training) -> Self:
        return self

    def build(self, inputs: BuildInputs) -> BuiltSet:
        return BuiltSet(method=self.name, query=inputs.query)

    def state(self) -> dict[str, Any]:
        return {"version": 1}

    @classmethod
    def from_state(cls, state: Any, hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        return cls()


class _VersionTwo(_VersionOne):
    description = "a plug-in builder, second version"

    def state(self) -> dict[str, Any]:
        return {"version": 2}


def test_a_builder_registered_again_as_another_class_is_not_served_the_old_fit(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811 - the fixture
) -> None:
    library = installed[ELIX_ID]
    cohorts = load_library(library).cohort_ids
    register_builder(_VersionOne)
    try:
        run_benchmark(fixture_con, library, cohorts, methods=["hostile_versioned"])
        unregister_builder(_VersionOne.name)
        register_builder(_VersionTwo)
        run_benchmark(fixture_con, library, cohorts, methods=["hostile_versioned"])
        now = builder_identities()  # the fits made for the classes registered now
        served = [fit.builders["hostile_versioned"] for key, fit in set_builder_fits._FITTED.items() if now in key]
        assert served and all(type(builder) is _VersionTwo for builder in served)
    finally:
        unregister_builder(_VersionOne.name)
        set_building.clear_fitted()


class _WrongType(_VersionOne):
    name = "hostile_wrong_type"
    description = "a plug-in whose build returns a list of codes, not a BuiltSet"

    def build(self, inputs: BuildInputs) -> BuiltSet:
        return ["E11.9"]  # type: ignore[return-value]  # the careless plug-in


def test_a_plugin_whose_build_returns_the_wrong_type_fails_alone(
    fixture_con: duckdb.DuckDBPyConnection,
    installed: dict[str, Path],  # noqa: F811 - the fixture
) -> None:
    library = installed[ELIX_ID]
    register_builder(_WrongType)
    set_building.clear_fitted()
    try:
        report = run_benchmark(
            fixture_con, library, load_library(library).cohort_ids, methods=["adaptive_cutoff", "hostile_wrong_type"]
        )
    finally:
        unregister_builder(_WrongType.name)
        set_building.clear_fitted()
    assert [r for r in report.results if r.method == "adaptive_cutoff"]
    assert not [r for r in report.results if r.method == "hostile_wrong_type" and r.predicted_codes]
