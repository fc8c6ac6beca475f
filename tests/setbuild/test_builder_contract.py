"""Checks of the set-builder registry and the estimator contract a plug-in author relies on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Self

import pytest

from phenoforge.engine.expansion import Hierarchy
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
from phenoforge.setbuild.builders.adaptive_cutoff import AdaptiveCutoff as BuiltInCutoff
from phenoforge.setbuild.builders.subtree import Subtree
from phenoforge.setbuild.models import BuiltSet


class _Plain(SetBuilder):
    name = "hostile_plain"
    label = "Hostile plain"
    description = "a test's toy"

    def fit(self, training: Training) -> Self:
        return self

    def build(self, inputs: BuildInputs) -> BuiltSet:
        return BuiltSet(method=self.name, query=inputs.query)

    def state(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_state(cls, state: Any, hierarchy: Hierarchy, library_ids: list[str]) -> Self:
        return cls()


@pytest.fixture
def forget() -> Iterator[list[str]]:
    """Names to unregister after the test (whatever it registered under them)."""
    names: list[str] = []
    yield names
    for name in names:
        unregister_builder(name)
    # the built-ins stay registered whatever the test did
    register_builder(BuiltInCutoff)


class AdaptiveCutoff(_Plain):
    """A plug-in's class that happens to share the built-in's class name (and so its ``__qualname__``)."""

    name = "adaptive_cutoff"


def test_another_modules_class_of_the_same_class_name_cannot_take_a_builders_name(forget: list[str]) -> None:
    assert builder_class("adaptive_cutoff") is BuiltInCutoff
    with pytest.raises(UnknownBuilder, match="already registered"):
        register_builder(AdaptiveCutoff)  # the fixture puts the built-in back if this replaced it
    assert builder_class("adaptive_cutoff") is BuiltInCutoff


class _SelfRequiring(_Plain):
    name = "hostile_self_requiring"
    requires = ("hostile_self_requiring",)


def test_a_builder_requiring_itself_is_refused_at_registration_not_everywhere_after(forget: list[str]) -> None:
    forget.append(_SelfRequiring.name)
    with contextlib.suppress(UnknownBuilder):  # refused up front: what a careful author expects
        register_builder(_SelfRequiring)
    assert builder_names()[:4] == ("adaptive_cutoff", "subtree", "learned", "curated_transfer")


class _CycleA(_Plain):
    name = "hostile_cycle_a"
    requires = ("hostile_cycle_b",)


class _CycleB(_Plain):
    name = "hostile_cycle_b"
    requires = ("hostile_cycle_a",)


def test_a_cycle_of_requirements_is_named_when_listed(forget: list[str]) -> None:
    forget += [_CycleA.name, _CycleB.name]
    register_builder(_CycleA)
    try:
        register_builder(_CycleB)
    except UnknownBuilder as error:
        assert "circle" in str(error) or "require" in str(error)
        return
    with pytest.raises(UnknownBuilder, match="hostile_cycle_a.*circle|circle"):
        builder_names()


class _NeedsGhost(_Plain):
    name = "hostile_needs_ghost"
    requires = ("hostile_ghost",)


def test_with_requirements_names_an_unknown_requirement(forget: list[str]) -> None:
    forget.append(_NeedsGhost.name)
    register_builder(_NeedsGhost)
    with pytest.raises(UnknownBuilder, match="hostile_ghost"):
        with_requirements([_NeedsGhost.name])
    with pytest.raises(UnknownBuilder, match="no_such"):
        with_requirements(["no_such"])


def test_set_of_a_missing_peer_is_a_state_error_naming_it(hierarchy: Hierarchy) -> None:
    from phenoforge.setbuild.candidates import CandidateTable

    table = CandidateTable.__new__(CandidateTable)
    inputs = BuildInputs(hierarchy, table)
    with pytest.raises(StateError, match="'learned'"):
        inputs.set_of("learned")


@pytest.mark.parametrize("cls", [BuiltInCutoff, Subtree])
def test_stored_parameters_tuned_on_other_libraries_are_refused(cls: type, hierarchy: Hierarchy) -> None:
    state = cls.params_model(trained_on=["elixhauser-2026-fixture"]).model_dump(mode="json")
    with pytest.raises(StateError):
        cls.from_state(state, hierarchy, ["cms-hcc-v28-fixture"])


def test_learned_state_with_notes_of_the_wrong_type_is_a_state_error(hierarchy: Hierarchy) -> None:
    from phenoforge.setbuild.builders.learned import Learned

    with pytest.raises(StateError):
        Learned.from_state({"model_directory": None, "context_model_directory": None, "notes": 5}, hierarchy, [])
