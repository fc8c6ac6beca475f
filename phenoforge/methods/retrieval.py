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
    """Memoised BM25 and dense rankings at a fixed depth."""

    def __init__(self, con: duckdb.DuckDBPyConnection, dense: Any | None, depth: int) -> None:
        self.con = con
        self.dense = dense
        self.depth = depth
        self._bm25: dict[str, Ranking] = {}
        self._dense: dict[str, Ranking] = {}

    def prefetch(self, queries: Sequence[str], dense: bool = True) -> None:
        """Rank every query up front (dense too, when asked), in one batch where the retriever supports it."""
        todo = [q for q in dict.fromkeys(queries) if q not in self._bm25]
        if todo:
            index = get_bm25_index(self.con)
            batch = getattr(index, "rankings", None)
            results = batch(todo, self.depth) if batch else [index.ranking(q, self.depth) for q in todo]
            self._bm25.update(zip(todo, results, strict=True))
        if dense and self.dense is not None:
            todo = [q for q in dict.fromkeys(queries) if q not in self._dense]
            if todo:
                batch = getattr(self.dense, "rankings", None)
                results = batch(todo, self.depth) if batch else [self.dense.ranking(q, self.depth) for q in todo]
                self._dense.update(zip(todo, results, strict=True))

    def bm25(self, query: str) -> Ranking:
        if query not in self._bm25:
            self._bm25[query] = get_bm25_index(self.con).ranking(query, self.depth)
        return self._bm25[query]

    def dense_ranking(self, query: str) -> Ranking | None:
        """The dense ranking, or None without a dense retriever."""
        if self.dense is None:
            return None
        if query not in self._dense:
            self._dense[query] = self.dense.ranking(query, self.depth)
        return self._dense[query]
