"""The candidate table: every billable code a builder may choose, with the evidence for it.

Candidates come from the fused ranking of BM25 and dense: each top hit's billable descendants (a
billable hit is its own only one), and for the best hits, the billable codes of the subcategory and
category above them (the siblings a curated list usually takes along). Each candidate records the
nearest hit at or above it, which is its provenance when a builder keeps it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from phenoforge.caches import ProcessCache
from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.hybrid import rrf_fuse
from phenoforge.engine.query import tokenize
from phenoforge.setbuild.nodes import billable_below, hierarchy_stats, scratch_array

RETRIEVAL_DEPTH = 5000
"""How deep a builder wants each retriever's ranking (scores of deep codes are features too).

5,000 of the ~98,000 retrievable codes: deep enough that 94% of the curated codes among the
candidates carry their own cosine (64% of all candidates), and the rankings stay cheap."""
AGREEMENT_DEPTH = 1000
"""The rule builders put cosines on a 0..1 scale between the best and the cosine at this rank: a
deeper floor squeezes every top hit towards 1 (measured: subtree fell from 0.55 to 0.47 on V28)."""
HIT_DEPTH = 100
"""Fused hits whose billable descendants become candidates."""
ROLLUP_DEPTH = 30
"""Fused hits whose subcategory and category siblings become candidates too."""
MAX_ROLLUP_SIZE = 400
"""A node with more billable codes than this is never rolled up wholesale (S72 has thousands)."""
MAX_CANDIDATES = 5000
VOTE_DEPTH = 30
"""Hits that vote for the category, block and parent of a candidate."""
FUSION_DEPTH = 200
"""How deep each ranking enters the fused ranking the hits come from."""


@dataclass
class Retrieval:
    """One query's rankings from both retrievers, best first, with their scores."""

    query: str
    bm25: list[tuple[str, float]]
    dense: list[tuple[str, float]] | None = None
    dense_weight: float = 0.5
    searched_as: str | None = None
    """the query the retrievers actually ran (typo-corrected), when it differs from ``query``"""
    umbrellas: dict[str, str] = field(default_factory=dict)
    """code of a block or category the vocabulary names as an umbrella of the query -> its text"""
    bm25_ids: RankedIds | None = None
    """the BM25 ranking as concept ids when the caller has it (``ranked_rows``); then ``bm25`` need only
    be as deep as the fusion reads (``FUSION_DEPTH``)"""
    dense_ids: RankedIds | None = None
    """the dense ranking as concept ids, likewise; then ``dense`` need only reach ``AGREEMENT_DEPTH``"""

    def fused(self, depth: int = FUSION_DEPTH) -> list[tuple[str, float]]:
        """Weighted RRF of the two rankings cut at ``depth`` each (BM25 alone without dense)."""
        if self.dense is None:
            return rrf_fuse([[c for c, _ in self.bm25[:depth]]], [1.0])
        return rrf_fuse(
            [[c for c, _ in self.bm25[:depth]], [c for c, _ in self.dense[:depth]]],
            [1.0 - self.dense_weight, self.dense_weight],
        )


class RankedIds:
    """One retriever's ranking as concept ids: each resolvable code once (its first place), best first.

    Arrays, not dictionaries: a builder's rankings are 5,000 deep and the features read them as
    arrays over the node table, so dictionaries of them were made only to be turned back into
    arrays (about a second of a benchmark). ``rank_of``/``score_of`` answer the few single lookups.
    """

    __slots__ = ("ids", "ranks", "scores", "_sorted")

    def __init__(self, ids: np.ndarray, ranks: np.ndarray, scores: np.ndarray) -> None:
        self.ids = ids
        """concept ids, int64, in ranking order, each once"""
        self.ranks = ranks
        """each id's 1-based place in the retriever's list (unresolvable codes took places too)"""
        self.scores = scores
        """each id's score, float64"""
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def of(cls, ranks: dict[int, int], scores: dict[int, float]) -> RankedIds:
        """From a rank and a score per concept id (the same keys), in rank order (tests, hand-made tables)."""
        ids = sorted(ranks, key=ranks.__getitem__)
        return cls(
            np.asarray(ids, dtype=np.int64),
            np.asarray([ranks[i] for i in ids], dtype=np.int64),
            np.asarray([scores[i] for i in ids], dtype=np.float64),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def _position(self, concept_id: int) -> int | None:
        if self._sorted is None:
            order = np.argsort(self.ids, kind="stable")
            self._sorted = (self.ids[order], order)
        keys, order = self._sorted
        at = int(np.searchsorted(keys, concept_id))
        return int(order[at]) if at < len(keys) and keys[at] == concept_id else None

    def score_of(self, concept_id: int, default: float) -> float:
        at = self._position(concept_id)
        return default if at is None else float(self.scores[at])

    def rank_of(self, concept_id: int) -> int | None:
        at = self._position(concept_id)
        return None if at is None else int(self.ranks[at])

    def rank_dict(self) -> dict[int, int]:
        return dict(zip(self.ids.tolist(), self.ranks.tolist(), strict=True))

    def score_dict(self) -> dict[int, float]:
        return dict(zip(self.ids.tolist(), self.scores.tolist(), strict=True))


_NO_RANKING = RankedIds(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


@dataclass
class CandidateTable:
    """Billable candidates of one query with the per-hit evidence the builders and features read."""

    query: str
    query_tokens: list[str]
    fused: list[tuple[str, float]]
    hit_rank: dict[int, int]
    """concept id -> 1-based fused rank, for hits within ``HIT_DEPTH``"""
    fused_score: dict[int, float]
    bm25: RankedIds = _NO_RANKING
    dense: RankedIds = _NO_RANKING
    umbrellas: dict[int, str] = field(default_factory=dict)
    ids: list[int] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)
    """per candidate: the best-ranked hit at or above it, else the rolled-up node it came from"""
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def bm25_rank(self) -> dict[int, int]:
        """concept id -> BM25 rank (a dictionary made on each read: for tests and reference code)"""
        return self.bm25.rank_dict()

    @property
    def bm25_score(self) -> dict[int, float]:
        return self.bm25.score_dict()

    @property
    def dense_rank(self) -> dict[int, int]:
        return self.dense.rank_dict()

    @property
    def dense_score(self) -> dict[int, float]:
        return self.dense.score_dict()

    top_bm25: float = 0.0
    top_dense: float = 0.0
    floor_dense: float = 0.0
    agreement_floor_dense: float = 0.0
    """cosine at rank ``AGREEMENT_DEPTH``: the bottom of the scale the rule builders' agreement uses"""
    top_fused: float = 0.0


def _ranks(hierarchy: Hierarchy, ranking: Sequence[tuple[str, float]] | None) -> RankedIds:
    """A ranking's resolvable codes as concept ids, each at its first place, with their ranks and scores."""
    direct = hierarchy.ids_by_display_code()  # what ``resolve`` answers first, without a call per code
    ranking = ranking or []
    if not ranking:
        return _NO_RANKING
    codes, given = (list(column) for column in zip(*ranking, strict=True))
    if set(map(type, codes)) <= {str}:
        ids = list(map(direct.get, codes))
        if None not in ids and len(set(ids)) == len(ids):
            # the usual case (every code known, each once): the arrays the loop below makes, made in C
            return RankedIds(
                np.asarray(ids, dtype=np.int64),
                np.arange(1, len(ids) + 1, dtype=np.int64),
                np.asarray(list(map(float, given)), dtype=np.float64),
            )
    seen: set[int] = set()
    rows: list[tuple[int, int, float]] = []
    for rank, (code, score) in enumerate(ranking, start=1):
        concept_id = direct.get(code) if isinstance(code, str) else None
        if concept_id is None:
            concept_id = hierarchy.resolve(code)
        if concept_id is not None and concept_id not in seen:
            seen.add(concept_id)
            rows.append((concept_id, rank, float(score)))
    if not rows:
        return _NO_RANKING
    ids_column, ranks_column, scores_column = zip(*rows, strict=True)
    return RankedIds(
        np.asarray(ids_column, dtype=np.int64),
        np.asarray(ranks_column, dtype=np.int64),
        np.asarray(scores_column, dtype=np.float64),
    )


def ranked_ids(hierarchy: Hierarchy, ranking: list[tuple[str, float]] | None) -> RankedIds:
    """A (code, score) ranking as the concept ids a candidate table holds (``build_candidates`` reads it so)."""
    return _ranks(hierarchy, ranking)


def dense_floor(dense: RankedIds) -> float:
    """The cosine a candidate table gives a code outside its dense ranking: the ranking's lowest number."""
    return _extreme(dense.scores, np.min)


_ROW_ID_LISTS = 8

_ROW_IDS: ProcessCache[int, tuple[list[str], str, np.ndarray | None]] = ProcessCache(
    "ranking row ids", max_entries=_ROW_ID_LISTS
)
_ROW_IDS_LOCK = threading.Lock()


def _row_ids(hierarchy: Hierarchy, source: list[str]) -> np.ndarray | None:
    """Per row of a retriever's code list, its concept id; None when a code is unknown or listed twice
    (then a ranking's rows are not its concept ids one to one). Kept per list and build: a list is the
    retriever's own, alive as long as its index, and held here so its id is never reused."""
    key = id(source)
    with _ROW_IDS_LOCK:
        known = _ROW_IDS.get(key)
    if known is not None and known[0] is source and known[1] == hierarchy.build_id:
        return known[2]
    direct = hierarchy.ids_by_display_code()
    found = [direct.get(code) if isinstance(code, str) else None for code in source]
    ids = None
    if None not in found and len(set(found)) == len(found):
        ids = np.asarray(found, dtype=np.int64)
    with _ROW_IDS_LOCK:
        _ROW_IDS.remember(key, (source, hierarchy.build_id, ids))
    return ids


def ranked_rows(hierarchy: Hierarchy, rows: np.ndarray, scores: np.ndarray, source: list[str]) -> RankedIds | None:
    """A ranking given as rows of ``source`` (a retriever's code list) as concept ids: one gather.

    The same ``RankedIds`` that ``_ranks`` makes of the (code, score) list, or None when ``source`` has
    a code the vocabulary does not know or lists one twice (read the list then).
    """
    ids = _row_ids(hierarchy, source)
    if ids is None:
        return None
    if not len(rows):
        return _NO_RANKING
    return RankedIds(ids[rows], np.arange(1, len(rows) + 1, dtype=np.int64), np.asarray(scores, dtype=np.float64))


def build_candidates(
    hierarchy: Hierarchy,
    retrieval: Retrieval,
    hit_depth: int = HIT_DEPTH,
    rollup_depth: int = ROLLUP_DEPTH,
) -> CandidateTable:
    """The candidate table of one query: hits' billable descendants plus the best hits' siblings."""
    bm25 = retrieval.bm25_ids if retrieval.bm25_ids is not None else _ranks(hierarchy, retrieval.bm25)
    dense = retrieval.dense_ids if retrieval.dense_ids is not None else _ranks(hierarchy, retrieval.dense)
    fused = retrieval.fused()
    hit_rank: dict[int, int] = {}
    fused_score: dict[int, float] = {}
    for rank, (code, score) in enumerate(fused[:hit_depth], start=1):
        concept_id = hierarchy.resolve(code)
        if concept_id is not None and concept_id not in hit_rank:
            hit_rank[concept_id] = rank
            fused_score[concept_id] = score
    table = CandidateTable(
        query=retrieval.query,
        query_tokens=list(dict.fromkeys(tokenize(retrieval.searched_as or retrieval.query))),
        fused=fused,
        hit_rank=hit_rank,
        fused_score=fused_score,
        bm25=bm25,
        dense=dense,
    )
    table.top_bm25 = _extreme(bm25.scores, np.max)
    table.top_dense = _extreme(dense.scores, np.max)
    table.floor_dense = dense_floor(dense)
    shallow = [score for _code, score in (retrieval.dense or [])[:AGREEMENT_DEPTH]]
    table.agreement_floor_dense = min(shallow, default=0.0)
    table.top_fused = fused[0][1] if fused else 0.0
    for code, text in retrieval.umbrellas.items():
        concept_id = hierarchy.resolve(code)
        if concept_id is not None:
            table.umbrellas[concept_id] = text
    if not hit_rank and not table.umbrellas:
        table.notes.append("no retriever returned a code for this query")
        return table
    origin: dict[int, int] = {}

    def add(nodes: list[int], source: int) -> None:
        for node in nodes:
            if node not in origin and len(origin) < MAX_CANDIDATES:
                origin[node] = source

    ordered_hits = sorted(hit_rank, key=hit_rank.__getitem__)
    for hit in ordered_hits:
        add(billable_below(hierarchy, hit), hit)
    for hit in ordered_hits[:rollup_depth]:
        for node in hierarchy.chain(hit)[1:]:
            if hierarchy.kind.get(node) not in ("subcategory", "category"):
                break
            below = billable_below(hierarchy, node)
            if len(below) <= MAX_ROLLUP_SIZE:
                add(below, node)
    for node in table.umbrellas:
        below = billable_below(hierarchy, node)
        if len(below) <= 2 * MAX_ROLLUP_SIZE:
            add(below, node)
    if len(origin) >= MAX_CANDIDATES:
        table.notes.append(f"candidates capped at {MAX_CANDIDATES}")
    table.ids = list(origin)
    table.origin = _provenance(hierarchy, table.ids, [origin[node] for node in table.ids], hit_rank)
    return table


def _extreme(scores: np.ndarray, pick: Callable[[np.ndarray], np.floating]) -> float:
    """The best (``np.max``) or floor (``np.min``) of the scores that are numbers, 0.0 without one: a NaN
    score a caller's ranking carries stays its code's own and does not become every candidate's scale."""
    nan = np.isnan(scores)
    numbers = scores[~nan] if nan.any() else scores
    return float(pick(numbers)) if len(numbers) else 0.0


def _provenance(hierarchy: Hierarchy, ids: list[int], origin: list[int], hit_rank: dict[int, int]) -> list[int]:
    """Per candidate, the best-ranked hit at or above it (its chain holds each node once and every hit has
    its own rank, so that hit is unique), else its ``origin`` as given: read from the node table's chains."""
    if not ids or not hit_rank:
        return origin
    nodes = hierarchy_stats(hierarchy).node_table()
    chain = nodes.chain[nodes.rows(ids)]
    no_hit = np.iinfo(np.int64).max
    rank_of_row = scratch_array("rank_of_row", len(nodes.ids) + 1, no_hit, np.int64)  # the last answers -1 padding
    rank_of_row[nodes.rows(hit_rank)] = list(hit_rank.values())
    ranks = rank_of_row[chain]
    at = ranks.argmin(axis=1)
    every = np.arange(len(ids))
    best = nodes.ids[chain[every, at]]
    return np.where(ranks[every, at] != no_hit, best, np.asarray(origin, dtype=np.int64)).tolist()


def lexical_overlap(query_tokens: Sequence[str], text: str) -> float:
    """Share of the query's words found in ``text`` (0 when the query has none)."""
    if not query_tokens:
        return 0.0
    words = set(tokenize(text))
    return sum(1 for token in query_tokens if token in words) / len(query_tokens)


def log_rank(rank: int | None, missing: int) -> float:
    return math.log1p(rank if rank is not None else missing)
