"""The method registry: the built-ins' table, and the methods users add by name or entry point.

A user's method is a function ``(context, task) -> list of codes or RunEntry``, named on the CLI
and the dashboard as ``module:function``, or published by a package under the entry-point group
``phenoforge.methods``. A function may carry ``needs``/``uses``/``label`` attributes, or be
decorated with :func:`method` to declare them.

Built-in names are reserved and only phenoforge's own methods are ``source="built-in"``: a plug-in
named like a built-in (or a look-alike of one, see :func:`~phenoforge.eval.runs.name_key`) or claiming
to be built-in is refused with a :class:`MethodError`, so no plug-in's row can pass for a built-in's.
This guards against mistakes and naive pass-offs, not against a plug-in's code, which runs in-process
and could patch anything.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from phenoforge.errors import PhenoforgeError
from phenoforge.eval.runs import mixed_script, name_key
from phenoforge.methods.base import KNOWN_NEEDS, Method, Predict, Setup
from phenoforge.methods.guard import MethodFailed, describe

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


def _is_own(function: object) -> bool:
    """Whether ``function`` is phenoforge's own code (a built-in's), by the module that defined it."""
    return str(getattr(function, "__module__", "") or "").split(".")[0] == "phenoforge"


def _origin(function: object) -> str:
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"


def _check_name(name: str, what: str) -> None:
    """A MethodError when ``name`` reads as a built-in method's name (or is no plain name at all)."""
    if not isinstance(name, str) or not name_key(name):
        raise MethodError(f"{what}: a method's name is a non-empty string, got {name!r}")
    if mixed_script(name):
        raise MethodError(f"{what}: {name!r} mixes Latin, Cyrillic or Greek letters (a look-alike name)")
    key = name_key(name)
    for builtin in builtin_methods():
        if name_key(builtin) == key:
            how = "is" if builtin == name else f"reads as {builtin!r},"
            raise MethodError(
                f"{what}: {name!r} {how} a built-in method's name; built-in names are reserved, name yours otherwise"
            )


def _same_function(a: object, b: object) -> bool:
    """``a`` and ``b`` are one function: the same object, or closures of the same code over equal values
    (the built-in table makes a set builder's ``predict`` afresh each time)."""
    if a is b:
        return True
    code = getattr(a, "__code__", None)
    if code is None or code is not getattr(b, "__code__", None):
        return False
    try:
        cells = [[cell.cell_contents for cell in getattr(f, "__closure__", None) or ()] for f in (a, b)]
        return bool(cells[0] == cells[1])
    except Exception:  # noqa: BLE001 - an empty cell or values that cannot be compared: not the same
        return False


def _is_builtin(declared: Method) -> bool:
    """Whether ``declared`` is the built-in of its name: phenoforge's own function, the very one the
    built-in table gives that name (not another built-in's function under it)."""
    if not isinstance(declared.name, str) or declared.source not in ("", "built-in"):
        return False
    known = builtin_methods().get(declared.name)
    return known is not None and _is_own(declared.predict) and _same_function(declared.predict, known.predict)


def _unreserved(declared: Method, what: str) -> Method:
    """``declared`` with its source filled in, unless it would pass for a built-in (then MethodError).

    A built-in itself passes, marked ``source="built-in"``; any other method may neither read as a
    built-in's name nor claim ``source="built-in"``.
    """
    if _is_builtin(declared):
        return declared if declared.source == "built-in" else replace(declared, source="built-in")
    _check_name(declared.name, what)
    if declared.source == "built-in":
        raise MethodError(
            f"{what}: method {declared.name!r} claims source 'built-in'; only phenoforge's own methods are "
            "built-in (leave source empty and the loader names where it came from)"
        )
    return declared if declared.source else replace(declared, source=_origin(declared.predict))


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
            source="built-in" if _is_own(function) else _origin(function),
        )
        if register:
            declared = _register(declared)
        function.__phenoforge_method__ = declared  # type: ignore[attr-defined]  # a plain attribute on a function
        return function

    return decorate


def register(declared: Method) -> Method:
    """Add ``declared`` to the registry under a new name (a built-in's name, or claiming to be built-in
    from outside phenoforge, is a MethodError). phenoforge's own methods are registered as built-in."""
    return _register(declared)


def _register(declared: Method) -> Method:
    if _is_own(declared.predict):
        if declared.source not in ("", "built-in"):
            raise MethodError(f"built-in method {declared.name!r} must not declare source {declared.source!r}")
        declared = replace(declared, source="built-in") if not declared.source else declared
        known = _REGISTRY.get(declared.name)
        if known is not None and known is not declared and known.predict is not declared.predict:
            raise MethodError(f"{declared.name!r} is registered twice")
    else:
        declared = _unreserved(declared, "register")
        if declared.name in _REGISTRY:
            raise MethodError(f"register: {declared.name!r} is already registered ({_REGISTRY[declared.name].source})")
    _REGISTRY[declared.name] = declared
    return declared


def _as_method(obj: Any, name: str, source: str) -> Method:
    """A plug-in's object as a Method named ``name`` (a ``module:function`` spec or an entry point's
    declared name) with its loader's ``source``; one that would pass for a built-in is refused."""
    if isinstance(obj, Method) and _is_builtin(obj):
        return _unreserved(obj, name)  # a plug-in module re-exporting a built-in: it is that built-in
    declared = obj if isinstance(obj, Method) else getattr(obj, "__phenoforge_method__", None)
    if isinstance(declared, Method):
        _unreserved(declared, name)  # its own name may not read as a built-in's, nor claim to be built-in
        chosen = replace(declared, name=name if ":" in name else declared.name, source="")
        return replace(_unreserved(chosen, name), source=source)
    if not callable(obj):
        raise MethodError(f"{name!r} is not a function or a Method")
    plain = Method(
        name=name,
        predict=obj,
        label=str(getattr(obj, "label", "") or name),
        description=(getattr(obj, "__doc__", None) or "").strip().split("\n")[0],
        needs=_check_needs(name, getattr(obj, "needs", ())),
        uses=_check_needs(name, getattr(obj, "uses", ())),
        setup=getattr(obj, "setup", None),
    )
    return replace(_unreserved(plain, name), source=source)


def load_callable(spec: str) -> Method:
    """A method from ``module:function`` (the module must be importable)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise MethodError(f"{spec!r}: a user method is named as module:function, e.g. my_methods:llm_lists")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name + ".").startswith(error.name + "."):
            raise MethodError(f"{spec!r}: cannot import module {module_name!r} ({error})") from None
        return _failed_import(spec, module_name, error)  # the module is there; something it imports is not
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - a plug-in module raising (even SystemExit) fails only itself
        return _failed_import(spec, module_name, error)
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise MethodError(f"{spec!r}: module {module_name!r} has no {attribute!r}")
        obj = getattr(obj, part)
    return _as_method(obj, spec, spec)


def _failed_import(spec: str, module_name: str, error: BaseException) -> Method:
    """A stand-in for a plug-in whose module raised on import: the harness reports it failed, for that
    method alone (its setup raises the reason), and runs the others."""
    reason = f"importing {module_name} raised {describe(error)}"

    def fail(*_args: object) -> Any:
        raise MethodFailed(reason)

    return Method(name=spec, predict=fail, label=spec, source=spec, setup=fail, retrieves=False)


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
        what = f"entry point {entry_point.name!r}"
        _check_name(entry_point.name, what)
        found[entry_point.name] = _as_method(obj, entry_point.name, f"entry point: {entry_point.value}")
    return found


def builtin_methods() -> dict[str, Method]:
    """The built-in methods (the reference's four first, then the set builders), then those registered."""
    from phenoforge.methods.builtin import builtin_table  # the set builders' stack loads on first use

    table = {declared.name: _as_builtin(declared) for declared in builtin_table()}
    return {**table, **{name: declared for name, declared in _REGISTRY.items() if name not in table}}


def _as_builtin(declared: Method) -> Method:
    """A built-in table entry, marked ``source="built-in"`` (only phenoforge's own functions are); an entry
    that names its own source (a set builder a plug-in registered) keeps it and is guarded as a plug-in."""
    if not _is_own(declared.predict):
        raise MethodError(f"built-in {declared.name!r} is not phenoforge's own function")
    return declared if declared.source else replace(declared, source="built-in")


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
        return _unreserved(spec, spec.name)
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
