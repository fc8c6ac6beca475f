"""The built-in methods, one module each; importing this package registers them in order."""

from phenoforge.methods.builtin import bm25, dense, expand_descendants, hybrid  # noqa: F401
