"""Rankings shared by every method of one benchmark run: each retriever is queried once per query.

``bm25`` and ``dense`` rankings are prefix-stable (a deeper ranking never reorders a shallower one),
so one query at the fusion depth serves ``bm25`` and ``dense`` at k, ``hybrid`` and any set builder.
When the retrievers offer batch rankings (``rankings(queries, n)``), ``prefetch`` uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from phenoforge.engine.bm25 import get_bm25_index

Ranking = list[tuple[str, float]]


class Retrieval:
    """Memoised BM25 and dense rankings, ``depth`` deep unless a caller asks for deeper.

    A set builder reads rankings far deeper than the reference methods' fusion depth; since the
    rankings are prefix-stable, one deep query serves every shallower request by slicing.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, dense: Any | None, depth: int) -> None:
        self.con = con
        self.dense = dense
        self.depth = depth
        self._bm25: dict[str, tuple[int, Ranking]] = {}
        self._dense: dict[str, tuple[int, Ranking]] = {}

    @staticmethod
    def _missing(memo: dict[str, tuple[int, Ranking]], queries: Sequence[str], depth: int) -> list[str]:
        return [q for q in dict.fromkeys(queries) if q not in memo or memo[q][0] < depth]

    def prefetch(self, queries: Sequence[str], dense: bool = True, depth: int | None = None) -> None:
        """Rank every query up front (dense too, when asked), in one batch where the retriever supports it."""
        depth = max(depth or self.depth, self.depth)
        todo = self._missing(self._bm25, queries, depth)
        if todo:
            index = get_bm25_index(self.con)
            batch = getattr(index, "rankings", None)
            results = batch(todo, depth) if batch else [index.ranking(q, depth) for q in todo]
            self._bm25.update((q, (depth, ranked)) for q, ranked in zip(todo, results, strict=True))
        if dense and self.dense is not None:
            todo = self._missing(self._dense, queries, depth)
            if todo:
                batch = getattr(self.dense, "rankings", None)
                results = batch(todo, depth) if batch else [self.dense.ranking(q, depth) for q in todo]
                self._dense.update((q, (depth, ranked)) for q, ranked in zip(todo, results, strict=True))

    def bm25(self, query: str, depth: int | None = None) -> Ranking:
        """The BM25 ranking of ``query``, ``depth`` deep (the run's depth by default)."""
        depth = depth or self.depth
        if query not in self._bm25 or self._bm25[query][0] < depth:
            self._bm25[query] = (depth, get_bm25_index(self.con).ranking(query, depth))
        return self._bm25[query][1][:depth]

    def dense_ranking(self, query: str, depth: int | None = None) -> Ranking | None:
        """The dense ranking ``depth`` deep, or None without a dense retriever."""
        if self.dense is None:
            return None
        depth = depth or self.depth
        if query not in self._dense or self._dense[query][0] < depth:
            self._dense[query] = (depth, self.dense.ranking(query, depth))
        return self._dense[query][1][:depth]
