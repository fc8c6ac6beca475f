"""Rankings shared by every method of one benchmark run: each retriever is queried once per query.

``bm25`` and ``dense`` rankings are prefix-stable (a deeper ranking never reorders a shallower one),
so one query at the fusion depth serves ``bm25`` and ``dense`` at k, ``hybrid`` and any set builder.
When the retrievers offer batch rankings (``rankings(queries, n)``), ``prefetch`` uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.bm25 import get_bm25_index

Ranking = list[tuple[str, float]]
PREFETCH_BLOCK = 32
"""BM25 queries ranked per prefetch call: each block's (code, score) lists are packed before the
next is ranked, so a library's 5,000-deep rankings never exist as Python tuples all at once."""


class _Packed:
    """One memoised ranking: its codes (the retriever's own strings) and its scores as one float64
    array, about a fifth of a list of (code, float) tuples; unpacked on each read (the same values).

    A retriever that answers with rows of its code list (``rankings_rows``) is kept as those rows
    and the list itself (``source``): the codes are looked up on a read, and a set builder maps the
    rows to concept ids in one gather instead of a dictionary lookup per code.
    """

    __slots__ = ("depth", "codes", "scores", "as_given", "rows", "source")

    @classmethod
    def of_arrays(cls, depth: int, codes: list[str], scores: np.ndarray) -> _Packed:
        """From a retriever's packed answer (``rankings_packed``): no tuples made at all."""
        packed = cls(depth, [])
        packed.codes, packed.scores = codes, scores
        return packed

    @classmethod
    def of_rows(cls, depth: int, rows: np.ndarray, scores: np.ndarray, source: list[str]) -> _Packed:
        """From rows of the retriever's code list ``source`` (``rankings_rows``) and their scores.

        Kept in half the bytes where that loses nothing: rows as int32 (a code list is far shorter than
        2**31), scores as float32 when every one is a float32 value (the dense scan's cosines are; a
        float64 BM25 score that is not stays float64). Read back as int64 and float64, the same values:
        a library's 5,000-deep rankings of both retrievers were ~300 MB of a 2,000-cohort run."""
        packed = cls(depth, [])
        rows = np.asarray(rows)
        if len(source) < 2**31 and rows.dtype != np.int32:
            rows = rows.astype(np.int32)
        values = np.asarray(scores, dtype=np.float64)
        narrow = values.astype(np.float32)
        kept: np.ndarray = narrow if np.array_equal(narrow.astype(np.float64), values, equal_nan=True) else values
        packed.rows, packed.scores, packed.source = rows, kept, source
        return packed

    def __init__(self, depth: int, ranking: Ranking) -> None:
        self.depth = depth
        self.rows: np.ndarray | None = None
        self.source: list[str] | None = None
        if all(type(score) is float for _code, score in ranking):
            self.codes: list[str] = [code for code, _score in ranking]
            self.scores: np.ndarray | None = np.fromiter(
                (score for _code, score in ranking), dtype=np.float64, count=len(ranking)
            )
            self.as_given: Ranking | None = None
        else:  # a retriever of another kind (numpy or int scores): kept as it answered
            self.codes, self.scores, self.as_given = [], None, list(ranking)

    def ranking(self, depth: int) -> Ranking:
        if self.as_given is not None or self.scores is None:
            return list((self.as_given or [])[:depth])
        if self.rows is not None and self.source is not None:
            codes = list(map(self.source.__getitem__, self.rows[:depth].tolist()))
            return list(zip(codes, self.scores[:depth].tolist(), strict=True))
        return list(zip(self.codes[:depth], self.scores[:depth].tolist(), strict=True))


class Retrieval:
    """Memoised BM25 and dense rankings, ``depth`` deep unless a caller asks for deeper.

    A set builder reads rankings far deeper than the reference methods' fusion depth; since the
    rankings are prefix-stable, one deep query serves every shallower request by slicing. Rankings
    are kept packed (codes and a score array), so a run's 5,000-deep rankings stay small.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, dense: Any | None, depth: int) -> None:
        self.con = con
        self.dense = dense
        self.depth = depth
        self._bm25: dict[str, _Packed] = {}
        self._dense: dict[str, _Packed] = {}

    @staticmethod
    def _missing(memo: dict[str, _Packed], queries: Sequence[str], depth: int) -> list[str]:
        return [q for q in dict.fromkeys(queries) if q not in memo or memo[q].depth < depth]

    def prefetch(
        self,
        queries: Sequence[str],
        dense: bool = True,
        depth: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        """Rank every query up front (dense too, when asked), in one batch where the retriever supports it.

        BM25 ranks each query on its own (its batch call only skips repeats), so it is asked in blocks
        of ``PREFETCH_BLOCK``; the dense retriever gets every query in one call, because its exact
        scan's float rounding depends on which queries share a matrix product. ``progress`` hears of
        each BM25 block and of the dense call's start and end (a large library takes minutes here).
        """
        progress = progress or no_progress
        depth = max(depth or self.depth, self.depth)
        todo = self._missing(self._bm25, queries, depth)
        if todo:
            index = get_bm25_index(self.con)
            by_rows = getattr(index, "rankings_rows", None)
            batch = getattr(index, "rankings", None)
            for start in range(0, len(todo), PREFETCH_BLOCK):
                progress(start, len(todo), f"BM25 rankings, {depth} deep")
                block = todo[start : start + PREFETCH_BLOCK]
                if by_rows is not None:
                    answers = by_rows(block, depth)
                    self._bm25.update(
                        (q, _Packed.of_rows(depth, rows, scores, index.codes))
                        for q, (rows, scores) in zip(block, answers, strict=True)
                    )
                    continue
                results = batch(block, depth) if batch else [index.ranking(q, depth) for q in block]
                self._bm25.update((q, _Packed(depth, ranked)) for q, ranked in zip(block, results, strict=True))
            progress(len(todo), len(todo), f"BM25 rankings, {depth} deep")
        if dense and self.dense is not None:
            todo = self._missing(self._dense, queries, depth)
            if todo:
                progress(0, len(todo), f"dense rankings of {len(todo)} queries, {depth} deep")
                self._fetch_dense(todo, depth)
                progress(len(todo), len(todo), f"dense rankings of {len(todo)} queries, {depth} deep")

    def _fetch_dense(self, queries: list[str], depth: int) -> None:
        dense = self.dense
        assert dense is not None
        by_rows = getattr(dense, "rankings_rows", None)
        if by_rows is not None and isinstance(getattr(dense, "codes", None), list):
            for q, (rows, scores) in zip(queries, by_rows(queries, depth), strict=True):
                self._dense[q] = _Packed.of_rows(depth, rows, scores, dense.codes)
            return
        packed = getattr(dense, "rankings_packed", None)
        if packed is not None:  # the real retriever: codes and a score array, no tuple per row
            for q, (codes, scores) in zip(queries, packed(queries, depth), strict=True):
                self._dense[q] = _Packed.of_arrays(depth, codes, scores)
            return
        batch = getattr(dense, "rankings", None)
        results = batch(queries, depth) if batch else [dense.ranking(q, depth) for q in queries]
        self._dense.update((q, _Packed(depth, ranked)) for q, ranked in zip(queries, results, strict=True))

    def bm25(self, query: str, depth: int | None = None) -> Ranking:
        """The BM25 ranking of ``query``, ``depth`` deep (the run's depth by default)."""
        depth = depth or self.depth
        return self._bm25_entry(query, depth).ranking(depth)

    def _bm25_entry(self, query: str, depth: int) -> _Packed:
        if query not in self._bm25 or self._bm25[query].depth < depth:
            self.prefetch([query], dense=False, depth=depth)
        return self._bm25[query]

    def _dense_entry(self, query: str, depth: int) -> _Packed:
        if query not in self._dense or self._dense[query].depth < depth:
            if any(getattr(self.dense, name, None) is not None for name in ("rankings_rows", "rankings_packed")):
                self._fetch_dense([query], depth)
            else:
                assert self.dense is not None
                self._dense[query] = _Packed(depth, self.dense.ranking(query, depth))
        return self._dense[query]

    def dense_ranking(self, query: str, depth: int | None = None) -> Ranking | None:
        """The dense ranking ``depth`` deep, or None without a dense retriever."""
        if self.dense is None:
            return None
        depth = depth or self.depth
        return self._dense_entry(query, depth).ranking(depth)

    def rows(self, query: str, depth: int, dense: bool = False) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
        """The BM25 (or dense) ranking ``depth`` deep as (rows, scores, the retriever's code list), when
        the retriever answered in rows; None otherwise (read ``bm25``/``dense_ranking`` then)."""
        if dense and self.dense is None:
            return None
        packed = self._dense_entry(query, depth) if dense else self._bm25_entry(query, depth)
        if packed.rows is None or packed.source is None or packed.scores is None:
            return None
        return packed.rows[:depth].astype(np.int64), packed.scores[:depth].astype(np.float64), packed.source
