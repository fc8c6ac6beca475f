"""Models made from values already of their declared types, for the few paths that make a great many.

A benchmark turns every built code into a provenance record, a built code and a run entry: about
150,000 of each. ``model_construct`` skips validation but still walks every field's aliases and
defaults (2-4 µs a model); these records have neither, so setting the instance's state directly does
the same in a fraction of that. Only plain models qualify: no private attributes, no post-init hook,
no extra fields, not a root model; ``tests/test_trusted.py`` checks that the result equals what
validation makes, so a pydantic release that changes the instance layout fails there first.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_PLAIN: dict[type[BaseModel], tuple[str, ...]] = {}
_set_state = object.__setattr__


def plain_fields(cls: type[BaseModel]) -> tuple[str, ...]:
    """The field names of ``cls``, declared order; ``TypeError`` for a model this module cannot make."""
    fields = _PLAIN.get(cls)
    if fields is None:
        problems = [
            why
            for why, present in (
                ("private attributes", bool(cls.__private_attributes__)),
                ("a post-init hook", bool(cls.__pydantic_post_init__)),
                ("extra fields", cls.model_config.get("extra") == "allow"),
                ("a root model", bool(cls.__pydantic_root_model__)),
                ("aliases", any(f.alias or f.validation_alias for f in cls.model_fields.values())),
            )
            if present
        ]
        if problems:
            raise TypeError(f"{cls.__name__} has {', '.join(problems)}: make it with model_construct")
        fields = _PLAIN[cls] = tuple(cls.model_fields)
    return fields


def trusted(cls: type[M], **values: Any) -> M:
    """``cls.model_construct(**values)`` for a plain model given every field (in declared order).

    ``TypeError`` otherwise: a field left to its default would be missing from the instance (no attribute,
    absent from ``model_dump``), and fields out of order would dump in another order than validation gives.
    """
    fields = plain_fields(cls)
    if tuple(values) != fields:
        raise TypeError(_misfit(cls, fields, tuple(values)))
    model = cls.__new__(cls)
    _set_state(model, "__dict__", values)
    _set_state(model, "__pydantic_fields_set__", set(values))
    _set_state(model, "__pydantic_extra__", None)
    _set_state(model, "__pydantic_private__", None)
    return model


def _misfit(cls: type[BaseModel], fields: tuple[str, ...], given: tuple[str, ...]) -> str:
    missing = [name for name in fields if name not in given]
    unknown = [name for name in given if name not in fields]
    if missing:
        return f"{cls.__name__}: give every field, {', '.join(missing)} missing (defaults are not filled in)"
    if unknown:
        return f"{cls.__name__}: unknown fields {', '.join(unknown)}"
    return f"{cls.__name__}: give the fields in declared order ({', '.join(fields)})"
