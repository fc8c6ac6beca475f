"""``expand_descendants``: the least specific curated code and everything below it.

The reference's deliberately weak baseline: it seeds from ground truth (the entry point a human
would expand from), so it is a yardstick for the hierarchy, not a competitor.
"""

from __future__ import annotations

from phenoforge.engine.expansion import expand_descendants
from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext, entries


def predict(context: MethodContext, task: CohortTask) -> list[RunEntry]:
    if not task.seed_code:
        return []
    return entries(expand_descendants(context.con, task.seed_code), f"descendant of curated seed {task.seed_code}")


METHOD = Method(
    name="expand_descendants",
    predict=predict,
    label="Expand descendants (seeded)",
    description="the shortest curated code and its descendants (a weak baseline that seeds from ground truth)",
    retrieves=False,
)
