"""``learned``: a membership model over candidates, trained leave-one-library-group-out."""

from __future__ import annotations

from phenoforge.methods.registry import register
from phenoforge.methods.set_building import set_builder

register(
    set_builder(
        "learned", "Learned set builder", "a membership model over candidates, trained leave-one-library-group-out"
    )
)
