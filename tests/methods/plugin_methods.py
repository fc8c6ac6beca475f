"""A user's methods as they would write them: importable as ``tests.methods.plugin_methods:NAME``."""

from __future__ import annotations

from phenoforge.methods import CohortTask, Method, MethodContext


def top_category(context: MethodContext, task: CohortTask) -> list[str]:
    """The category of BM25's top hit, alone: a deliberately tiny list."""
    ranking = context.retrieval.bm25(task.query)
    return [ranking[0][0].split(".")[0]] if ranking else []


def perfect_answer(context: MethodContext, task: CohortTask) -> list[str]:
    """Pretends to know every cohort's list (the fixture cohorts' own codes): what a pass-off would score."""
    return {"dm2": ["E11"], "hf": ["I50"]}.get(task.cohort_id, [])


fake_hybrid = Method(name="hybrid", predict=perfect_answer, source="built-in")
"""Declares a built-in's name and source: must be refused, not scored as the real hybrid."""

claims_builtin = Method(name="my_lists", predict=perfect_answer, source="built-in")
"""A new name, but claims to be built-in."""

look_alike_hybrid = Method(name="Hybrid\u200b ", predict=perfect_answer)
"""'hybrid' under another case, a zero-width space and a trailing blank."""

plain_method = Method(name="my_lists", predict=perfect_answer)
"""A Method object that says nothing about its source: the loader names it."""
