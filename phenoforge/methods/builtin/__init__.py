"""The built-in methods, declared in one table: the reference's four, then every registered set builder.

Each reference method is a module with a ``METHOD``; the set builders come from
:mod:`phenoforge.setbuild.builders`' registry, so a new builder module is a new method without an edit here.
Nothing registers by import side effect: :mod:`phenoforge.methods.registry` reads ``builtin_table``.
"""

from __future__ import annotations

from phenoforge.methods.base import Method
from phenoforge.methods.builtin import bm25, dense, expand_descendants, hybrid

REFERENCE_METHODS: tuple[Method, ...] = (bm25.METHOD, dense.METHOD, hybrid.METHOD, expand_descendants.METHOD)
"""The reference's four methods, in the reference's order."""


def builtin_table() -> list[Method]:
    """Every built-in method: the reference's four, then the set builders by name."""
    from phenoforge.methods.set_building import set_builder_methods  # the set builders' stack loads on first use

    return [*REFERENCE_METHODS, *sorted(set_builder_methods(), key=lambda m: m.name)]
