"""Shared by every builder: selected nodes become billable codes, each keeping its first reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import duckdb

from phenoforge.caches import ProcessCache
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.eval.matching import NearestIndex, normalise_codes
from phenoforge.eval.scoring import score_cohort
from phenoforge.setbuild.candidates import CandidateTable
from phenoforge.setbuild.models import BuiltCode, BuiltSet, CodeProvenance, Source
from phenoforge.setbuild.nodes import billable_below
from phenoforge.trusted import trusted


class SetAssembler:
    """Collects selections in priority order; a code selected twice keeps its first provenance."""

    def __init__(self, hierarchy: Hierarchy, method: str, query: str) -> None:
        self.hierarchy = hierarchy
        self.result = BuiltSet(method=method, query=query)
        self._seen: set[int] = set()
        # (code id, source, via, via_rank, score, rule): provenance objects are only made by finish(),
        # so tuning, which builds thousands of sets and reads only their codes, stays cheap
        self._rows: list[tuple[int, Source, int, int | None, float, str]] = []

    def add_node(
        self, node: int, source: Source, score: float, rule: str, via: int | None = None, via_rank: int | None = None
    ) -> int:
        """Add ``node`` expanded to its billable codes; returns how many codes were new."""
        via = node if via is None else via
        added = 0
        for code_id in billable_below(self.hierarchy, node):
            if code_id in self._seen:
                continue
            self._seen.add(code_id)
            kind: Source = source if source != "hit" or code_id == node else "rollup"
            self._rows.append((code_id, kind, via, via_rank, score, rule))
            added += 1
        return added

    def codes(self) -> list[str]:
        return [self.hierarchy.code[row[0]] for row in self._rows]

    def finish(self) -> BuiltSet:
        """The built set, every code with its provenance record.

        The records are constructed without validation (tens of thousands per benchmark): every value
        is already of its declared type (the vocabulary's strings, a source literal, a rank made an
        ``int``, a rounded ``float``, the rule's string), so they equal validated ones field for field.
        """
        code, name = self.hierarchy.code, self.hierarchy.name
        self.result.codes = [
            trusted(
                BuiltCode,
                code=code[code_id],
                name=name[code_id],
                provenance=trusted(
                    CodeProvenance,
                    source=kind,
                    via_code=code[via],
                    via_rank=None if via_rank is None else int(via_rank),
                    score=round(float(score), 6),
                    rule=str(rule),
                ),
            )
            for code_id, kind, via, via_rank, score, rule in self._rows
        ]
        return self.result

    def __len__(self) -> int:
        return len(self._seen)


def agreement(table: CandidateTable, node: int, dense_weight: float = 0.5) -> float:
    """How strongly both retrievers back ``node``, each relative to its own best (0..1).

    BM25 scores are unbounded and cosines cluster, so each is put on its own top-relative scale
    (cosine between the one at rank ``AGREEMENT_DEPTH`` and the best) before they are averaged.
    """
    bm25 = table.bm25.score_of(node, 0.0) / table.top_bm25 if table.top_bm25 > 0 else 0.0
    if not len(table.dense):
        return bm25
    floor = table.agreement_floor_dense
    span = max(table.top_dense - floor, 1e-6)
    dense = max(table.dense.score_of(node, floor) - floor, 0.0) / span
    return (1.0 - dense_weight) * bm25 + dense_weight * dense


def ranked_hits(table: CandidateTable, limit: int) -> list[int]:
    return sorted(table.hit_rank, key=table.hit_rank.__getitem__)[:limit]


_SCORES: ProcessCache[tuple[str, str, tuple[str, ...], tuple[str, ...]], tuple[float, float]] = ProcessCache(
    "tuning scores", max_entries=200_000
)


_TRUTH_INDEXES: ProcessCache[tuple[str, tuple[str, ...]], NearestIndex] = ProcessCache(
    "tuning truth indexes", max_entries=5_000
)


def _cached_score(
    con: duckdb.DuckDBPyConnection, cohort_id: str, name: str, truth: tuple[str, ...], predicted: tuple[str, ...]
) -> tuple[float, float]:
    """Tuning scores the same (truth, prediction) pair many times across a grid: score it once."""
    hierarchy = get_hierarchy(con)
    key = (hierarchy.build_id, cohort_id, truth, predicted)
    if key not in _SCORES:
        # the truth side's index (and its nearest-code answers) serve every prediction scored against it
        index_key = (hierarchy.build_id, truth)
        truth_index = _TRUTH_INDEXES.get(index_key)
        if truth_index is None:
            truth_index = NearestIndex(
                hierarchy, [cid for _, cid in normalise_codes(hierarchy, truth) if cid is not None]
            )
            _TRUTH_INDEXES.remember(index_key, truth_index)
        result = score_cohort(con, cohort_id, name, list(truth), list(predicted), "tuning", truth_index)
        _SCORES.remember(key, (result.hierarchical_score, result.exact_f1))
    return _SCORES[key]


def mean_objective(
    con: duckdb.DuckDBPyConnection,
    cases: Sequence[tuple[str, str, list[str]]],
    predict: Callable[[int], list[str]],
) -> tuple[float, float]:
    """Mean hierarchical score and mean exact F1 of ``predict(i)`` over ``cases`` (id, name, truth)."""
    if not cases:
        return 0.0, 0.0
    hier = f1 = 0.0
    for i, (cohort_id, name, truth) in enumerate(cases):
        hierarchical, exact = _cached_score(con, cohort_id, name, tuple(truth), tuple(predict(i)))
        hier += hierarchical
        f1 += exact
    return hier / len(cases), f1 / len(cases)
