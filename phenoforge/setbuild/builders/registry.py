"""The set builders' registry: every part of phenoforge that lists builders reads it.

The built-in builders are the modules of :mod:`phenoforge.setbuild.builders` (found on first use, so a
new builder is one new module there); another package's builder registers its class with
:func:`register_builder`. ``build``, the methods, the sweep, the Assemble generators and ``clean`` all
ask :func:`builder_names` and :func:`builder_class`.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from phenoforge.errors import PhenoforgeError

if TYPE_CHECKING:
    from phenoforge.setbuild.builders.base import SetBuilder

_BUILDERS: dict[str, type[SetBuilder]] = {}
_DISCOVERED = False
_LOCK = threading.RLock()
B = TypeVar("B", bound="type[SetBuilder]")


class UnknownBuilder(PhenoforgeError, ValueError):
    """A set builder name nothing registered."""


def register_builder(cls: B) -> B:
    """Register a set builder class under its ``name`` (a class decorator).

    Refused: a name taken by another class (from any module: a builder cannot pass for another), a
    builder that requires itself, or one whose requirements would go round a circle with those
    registered. A refusal leaves the registry as it was, so one bad plug-in cannot break the others.
    """
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.isidentifier():
        raise UnknownBuilder(f"a set builder needs a name that is an identifier, got {name!r}")
    requires = getattr(cls, "requires", ())
    if not isinstance(requires, tuple) or not all(isinstance(r, str) for r in requires):
        raise UnknownBuilder(f"set builder {name!r}: requires must be a tuple of builder names, got {requires!r}")
    if name in requires:
        raise UnknownBuilder(f"set builder {name!r} requires itself")
    with _LOCK:
        known = _BUILDERS.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise UnknownBuilder(
                f"set builder {name!r} is already registered ({known.__module__}.{known.__qualname__})"
            )
        _BUILDERS[name] = cls
        try:
            _ordered(list(_BUILDERS.values()))
        except UnknownBuilder:
            if known is None:
                del _BUILDERS[name]
            else:
                _BUILDERS[name] = known
            raise
    return cls


def unregister_builder(name: str) -> None:
    """Forget a registered builder (a test's toy builder, after the test)."""
    with _LOCK:
        _BUILDERS.pop(name, None)


def _discover() -> None:
    global _DISCOVERED
    with _LOCK:
        if _DISCOVERED:
            return
        _DISCOVERED = True
        package = __name__.rpartition(".")[0]  # the modules beside this one, without importing their package here
        for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
            if module.name not in ("base", "registry"):
                importlib.import_module(f"{package}.{module.name}")


def builder_classes() -> dict[str, type[SetBuilder]]:
    """Every registered builder class by name, each after the builders it requires, else by ``position``."""
    _discover()
    with _LOCK:
        registered = list(_BUILDERS.values())
    return _ordered(registered)


def _ordered(classes: list[type[SetBuilder]]) -> dict[str, type[SetBuilder]]:
    names = {cls.name for cls in classes}
    pending = sorted(classes, key=lambda cls: (cls.position, cls.name))
    ordered: dict[str, type[SetBuilder]] = {}
    while pending:
        ready = [cls for cls in pending if all(r in ordered or r not in names for r in cls.requires)]
        if not ready:
            circle = ", ".join(cls.name for cls in pending)
            raise UnknownBuilder(f"set builders {circle} require each other in a circle")
        ordered[ready[0].name] = ready[0]
        pending.remove(ready[0])
    return ordered


def builder_names() -> tuple[str, ...]:
    """The set builders' names, in the order they are fitted, built and reported."""
    return tuple(builder_classes())


def builder_identities() -> tuple[tuple[str, str], ...]:
    """Each registered builder's name and its class's full name: a fit is for exactly these classes."""
    return tuple((name, f"{cls.__module__}.{cls.__qualname__}") for name, cls in builder_classes().items())


def is_plugin(cls: type[SetBuilder]) -> bool:
    """Whether a builder comes from outside phenoforge's own builder modules (its failures are its own)."""
    return not cls.__module__.startswith(__name__.rpartition(".")[0] + ".")


def builder_class(name: str) -> type[SetBuilder]:
    classes = builder_classes()
    if name not in classes:
        raise UnknownBuilder(f"unknown set builder {name!r}; choose one of {', '.join(classes)}")
    return classes[name]


def with_requirements(names: list[str] | tuple[str, ...]) -> list[str]:
    """``names`` and every builder they require, in fitting order."""
    classes = builder_classes()
    wanted: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in wanted:
            continue
        wanted.add(name)
        stack += list(builder_class(name).requires)
    return [name for name in classes if name in wanted]
