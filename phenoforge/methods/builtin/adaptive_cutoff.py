"""``adaptive_cutoff``: the fused ranking cut where the score falls away (fitted on other libraries), no fixed k."""

from __future__ import annotations

from phenoforge.methods.registry import register
from phenoforge.methods.set_building import set_builder

register(
    set_builder(
        "adaptive_cutoff",
        "Adaptive cut-off",
        "the fused ranking cut where the score falls away (fitted on other libraries), no fixed k",
    )
)
