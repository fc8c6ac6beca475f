"""``hybrid``: BM25 and dense fused by weighted RRF (BM25 alone, marked degraded, without dense)."""

from __future__ import annotations

from phenoforge.engine.hybrid import fuse
from phenoforge.eval.runs import RunEntry
from phenoforge.methods.base import CohortTask, Method, MethodContext


def predict(context: MethodContext, task: CohortTask) -> list[RunEntry]:
    bm25 = context.retrieval.bm25(task.query, context.depth)
    dense = context.retrieval.dense_ranking(task.query, context.depth)
    bm25_rank = {code: rank for rank, (code, _) in enumerate(bm25, start=1)}
    dense_rank = {code: rank for rank, (code, _) in enumerate(dense or [], start=1)}
    fused = fuse([c for c, _ in bm25], [c for c, _ in dense] if dense is not None else None, context.dense_weight)
    out = []
    for rank, (code, score) in enumerate(fused[: context.k], start=1):
        why = [f"hybrid rank {rank} (RRF {score:.4f})"]
        why += [
            f"{name} rank {ranks[code]}"
            for name, ranks in (("bm25", bm25_rank), ("dense", dense_rank))
            if code in ranks
        ]
        out.append(RunEntry(code=code, rank=rank, score=score, provenance=["; ".join(why)]))
    return out


METHOD = Method(
    name="hybrid",
    predict=predict,
    label="Hybrid (RRF)",
    description="BM25 and dense fused by weighted reciprocal rank fusion",
    uses=frozenset({"dense"}),
)
