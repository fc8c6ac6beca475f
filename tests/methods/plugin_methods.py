"""A user's methods as they would write them: importable as ``tests.methods.plugin_methods:NAME``."""

from __future__ import annotations

from phenoforge.methods import CohortTask, MethodContext


def top_category(context: MethodContext, task: CohortTask) -> list[str]:
    """The category of BM25's top hit, alone: a deliberately tiny list."""
    ranking = context.retrieval.bm25(task.query)
    return [ranking[0][0].split(".")[0]] if ranking else []
