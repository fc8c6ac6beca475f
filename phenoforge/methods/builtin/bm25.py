"""``bm25``: the top k of the BM25 ranking of the cohort's name."""

from __future__ import annotations

from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext


def predict(context: MethodContext, task: CohortTask) -> list[RunEntry]:
    ranked = context.retrieval.bm25(task.query)[: context.k]
    if not ranked:
        # an empty answer scores zero: say why (BM25 matches whole words, with no stemming)
        context.note("bm25", task.cohort_id, "no vocabulary text shares a word with the query (BM25 does not stem)")
    return [
        RunEntry(code=code, rank=rank, score=score, provenance=[f"bm25 rank {rank}"])
        for rank, (code, score) in enumerate(ranked, start=1)
    ]


METHOD = Method(name="bm25", predict=predict, label="BM25", description="top k of the BM25 ranking")
