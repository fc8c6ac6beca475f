"""The built-in methods, one module each; importing this package registers them in order."""

from phenoforge.methods.builtin import (  # noqa: F401
    adaptive_cutoff,
    bm25,
    curated_transfer,
    dense,
    expand_descendants,
    hybrid,
    learned,
    subtree,
)
