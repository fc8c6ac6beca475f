"""The method registry: the built-ins' table, and the methods users add by name or entry point.

A user's method is a function ``(context, task) -> list of codes or RunEntry``, named on the CLI
and the dashboard as ``module:function``, or published by a package under the entry-point group
``phenoforge.methods``. A function may carry ``needs``/``uses``/``label`` attributes, or be
decorated with :func:`method` to declare them.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from typing import Any

from phenoforge.errors import PhenoforgeError
from phenoforge.methods.base import KNOWN_NEEDS, Method, Predict, Setup

ENTRY_POINT_GROUP = "phenoforge.methods"
REFERENCE_METHODS = ("bm25", "dense", "hybrid", "expand_descendants")
"""The reference's four methods' names (their declarations: :mod:`phenoforge.methods.builtin`)."""
_REGISTRY: dict[str, Method] = {}


class MethodError(PhenoforgeError, ValueError):
    """A method that cannot be found, loaded or declared as given."""


def _check_needs(name: str, needs: Iterable[str]) -> frozenset[str]:
    needs = frozenset(needs)
    unknown = needs - set(KNOWN_NEEDS)
    if unknown:
        raise MethodError(f"method {name!r} declares unknown needs {sorted(unknown)}; known: {', '.join(KNOWN_NEEDS)}")
    return needs


def method(
    name: str | None = None,
    *,
    label: str = "",
    description: str = "",
    needs: Iterable[str] = (),
    uses: Iterable[str] = (),
    setup: Setup | None = None,
    register: bool = False,
) -> Callable[[Predict], Predict]:
    """Declare a function a method (and register it by ``name`` when ``register``)."""

    def decorate(function: Predict) -> Predict:
        declared = Method(
            name=name or function.__name__,
            predict=function,
            label=label or name or function.__name__,
            description=description or (function.__doc__ or "").strip().split("\n")[0],
            needs=_check_needs(name or function.__name__, needs),
            uses=_check_needs(name or function.__name__, uses),
            setup=setup,
        )
        function.__phenoforge_method__ = declared  # type: ignore[attr-defined]  # a plain attribute on a function
        if register:
            _REGISTRY[declared.name] = declared
        return function

    return decorate


def register(declared: Method) -> Method:
    """Add ``declared`` to the registry (a later registration of the same name replaces it)."""
    _REGISTRY[declared.name] = declared
    return declared


def _as_method(obj: Any, name: str, source: str) -> Method:
    if isinstance(obj, Method):
        return obj
    declared = getattr(obj, "__phenoforge_method__", None)
    if isinstance(declared, Method):
        return Method(**{**declared.__dict__, "name": name if ":" in name else declared.name, "source": source})
    if not callable(obj):
        raise MethodError(f"{name!r} is not a function or a Method")
    return Method(
        name=name,
        predict=obj,
        label=str(getattr(obj, "label", "") or name),
        description=(getattr(obj, "__doc__", None) or "").strip().split("\n")[0],
        needs=_check_needs(name, getattr(obj, "needs", ())),
        uses=_check_needs(name, getattr(obj, "uses", ())),
        source=source,
        setup=getattr(obj, "setup", None),
    )


def load_callable(spec: str) -> Method:
    """A method from ``module:function`` (the module must be importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise MethodError(f"{spec!r}: a user method is named as module:function, e.g. my_methods:llm_lists")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise MethodError(f"{spec!r}: cannot import module {module_name!r} ({error})") from None
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise MethodError(f"{spec!r}: module {module_name!r} has no {attribute!r}")
        obj = getattr(obj, part)
    return _as_method(obj, spec, spec)


def entry_point_methods() -> dict[str, Method]:
    """Methods published by installed packages under the ``phenoforge.methods`` entry-point group."""
    found: dict[str, Method] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = entry_point.load()
        except Exception as error:  # noqa: BLE001 - a broken plug-in must not take the built-ins down
            raise MethodError(
                f"entry point {entry_point.name!r} ({entry_point.value}) failed to load: {error}"
            ) from None
        found[entry_point.name] = _as_method(obj, entry_point.name, f"entry point: {entry_point.value}")
    return found


def builtin_methods() -> dict[str, Method]:
    """The built-in methods (the reference's four first, then the set builders), then those registered."""
    from phenoforge.methods.builtin import builtin_table  # the set builders' stack loads on first use

    table = {declared.name: declared for declared in builtin_table()}
    return {**table, **{name: declared for name, declared in _REGISTRY.items() if name not in table}}


def available_methods(include_entry_points: bool = True) -> dict[str, Method]:
    """Built-ins and (unless switched off) entry-point methods, by name."""
    methods = builtin_methods()
    if include_entry_points:
        for name, declared in entry_point_methods().items():
            methods.setdefault(name, declared)
    return methods


def get_method(spec: str | Method) -> Method:
    """A method by registered name, entry-point name, or ``module:function``."""
    if isinstance(spec, Method):
        return spec
    if ":" in spec:
        return load_callable(spec)
    methods = builtin_methods()
    if spec in methods:
        return methods[spec]
    plugins = entry_point_methods()
    if spec in plugins:
        return plugins[spec]
    choices = ", ".join([*methods, *plugins])
    raise MethodError(f"unknown method {spec!r}; choose from {choices}, or name your own as module:function")
