"""``subtree``: decides node by node whether to take a subtree, expanded to its billable codes."""

from __future__ import annotations

from phenoforge.methods.registry import register
from phenoforge.methods.set_building import set_builder

register(
    set_builder(
        "subtree", "Subtree builder", "decides node by node whether to take a subtree, expanded to its billable codes"
    )
)
