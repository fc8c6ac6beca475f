"""``curated_transfer``: another library group's curated list of the same condition, else ``learned``."""

from __future__ import annotations

from phenoforge.methods.registry import register
from phenoforge.methods.set_building import set_builder

register(
    set_builder(
        "curated_transfer",
        "Curated transfer",
        "the list of another library group's curated cohort whose name matches the query (threshold tuned "
        "leave-one-group-out), else the learned set",
    )
)
