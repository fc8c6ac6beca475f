"""A user's methods as they would write them: importable as ``tests.methods.plugin_methods:NAME``."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator

from phenoforge.eval.runs import RunEntry
from phenoforge.methods import CohortTask, Method, MethodContext, MethodSetup, SkipMethod


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


# --- plug-ins that fail: each must cost only its own row ------------------------------------------


def returns_int(context: MethodContext, task: CohortTask) -> int:
    return 42


def returns_string(context: MethodContext, task: CohortTask) -> str:
    """One code as a bare string: must not be scored as the codes 'E', '1', '1', '.', '9'."""
    return "E11.9"


def returns_none(context: MethodContext, task: CohortTask) -> None:
    return None


def exits(context: MethodContext, task: CohortTask) -> list[str]:
    raise SystemExit(3)


def interrupts(context: MethodContext, task: CohortTask) -> list[str]:
    raise KeyboardInterrupt


def _failing_setup(context: MethodContext) -> MethodSetup:
    raise RuntimeError("no model file")


def fails_setup(context: MethodContext, task: CohortTask) -> list[str]:
    return ["E11"]


fails_setup.setup = _failing_setup  # type: ignore[attr-defined]  # a plain attribute, as a user would set it

RELEASE = threading.Event()
"""Set by the test that uses ``blocks`` once it is done, so the abandoned worker thread ends."""


def blocks(context: MethodContext, task: CohortTask) -> list[str]:
    """Hangs (until released): the harness must stop waiting for it."""
    RELEASE.wait(120)
    return ["E11"]


def fails_midway(context: MethodContext, task: CohortTask) -> Iterator[str]:
    yield "E11"
    raise ValueError("lost the connection half way")


def non_strings(context: MethodContext, task: CohortTask) -> list[object]:
    return ["E11", 11.9, None]


def nan_scores(context: MethodContext, task: CohortTask) -> list[RunEntry]:
    return [RunEntry(code="E11", rank=1, score=math.nan)]


def mutates_task(context: MethodContext, task: CohortTask) -> list[str]:
    """Writes another cohort's id into its task: its answer must still be filed under its own cohort."""
    task.cohort_id = "hf"
    return ["E11"]


def skips_in_predict(context: MethodContext, task: CohortTask) -> list[str]:
    """SkipMethod belongs in setup; raised per cohort it is that cohort's failure, not the run's end."""
    raise SkipMethod("no key")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


def raises_unprintable(context: MethodContext, task: CohortTask) -> list[str]:
    raise UnprintableError


def runaway(context: MethodContext, task: CohortTask) -> Iterator[str]:
    """Never stops yielding: stopped by the answer cap, not left to fill memory."""
    return (f"E11.{i}" for i in itertools.count())


def returns_set(context: MethodContext, task: CohortTask) -> set[str]:
    return {"E11", "I50"}


def narrows_the_context(context: MethodContext, task: CohortTask) -> list[str]:
    """Sets the run's k and weight: the built-ins after it must not notice."""
    context.k = 1
    context.dense_weight = 1.0
    return ["E11"]
