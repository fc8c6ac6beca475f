"""Set builders as estimators: one module each, one shape (:mod:`.base`), one registry (:mod:`.registry`)."""

from phenoforge.setbuild.builders.base import BuildInputs, ParamsBuilder, SetBuilder, StateError, Training, TunedRule
from phenoforge.setbuild.builders.registry import (
    UnknownBuilder,
    builder_class,
    builder_classes,
    builder_identities,
    builder_names,
    is_plugin,
    register_builder,
    unregister_builder,
    with_requirements,
)

__all__ = [
    "BuildInputs",
    "ParamsBuilder",
    "SetBuilder",
    "StateError",
    "Training",
    "TunedRule",
    "UnknownBuilder",
    "builder_class",
    "builder_classes",
    "builder_identities",
    "builder_names",
    "is_plugin",
    "register_builder",
    "unregister_builder",
    "with_requirements",
]
