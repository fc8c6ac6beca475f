"""``dense``: the top k of the dense (all-MiniLM-L6-v2) ranking of the cohort's name."""

from __future__ import annotations

from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext


def predict(context: MethodContext, task: CohortTask) -> list[RunEntry]:
    ranked = (context.retrieval.dense_ranking(task.query) or [])[: context.k]
    return [
        RunEntry(code=code, rank=rank, score=score, provenance=[f"dense rank {rank}"])
        for rank, (code, score) in enumerate(ranked, start=1)
    ]


METHOD = Method(
    name="dense",
    predict=predict,
    label="Dense",
    description="top k of the dense-embedding ranking",
    needs=frozenset({"dense"}),
)
