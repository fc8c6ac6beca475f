"""The hybrid-weight slider's fast path: re-fuse cached rankings, never re-query.

Rankings are collected once per (library, cohorts); every slider position is then a pure
re-fusion and re-scoring. Reports are memoised per weight, so returning to a position is free.
A set builder cannot be re-fused (each weight rebuilds its sets), so it is swept on a grid in one
run, as ``python -m phenoforge sweep --method`` does, and the result is shown whole.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import duckdb
from pydantic import BaseModel

from phenoforge.config import ProgressCallback
from phenoforge.engine.db import build_id
from phenoforge.engine.hybrid import fusion_depth
from phenoforge.eval.harness import RankingCache, collect_rankings, rescore_hybrid
from phenoforge.eval.models import BenchmarkReport
from phenoforge.eval.sweep import LibrarySweep, sweep_library

CURVE_WEIGHTS: tuple[float, ...] = tuple(round(i / 20, 2) for i in range(21))
SWEEP_WEIGHTS: tuple[float, ...] = CURVE_WEIGHTS[::2]
"""The set-builder grid by default: the CLI's ``sweep`` default (0, 0.1, ..., 1)."""


def collect(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    cohort_ids: list[str],
    dense: object | None,
    k: int = 25,
    progress: ProgressCallback | None = None,
) -> RankingCache:
    """Query every retriever once, deep enough for ``k`` at any weight."""
    return collect_rankings(con, library_dir, cohort_ids, dense=dense, depth=fusion_depth(k), progress=progress)


class WeightScorer:
    """Reports per weight for one ranking cache, memoised; safe to share between threads."""

    def __init__(self, cache: RankingCache, k: int = 25) -> None:
        self.cache = cache
        self.k = k
        self._reports: dict[float, BenchmarkReport] = {}
        self._lock = threading.Lock()

    def report(self, con: duckdb.DuckDBPyConnection, weight: float) -> BenchmarkReport:
        key = round(float(weight), 4)
        with self._lock:
            cached = self._reports.get(key)
        if cached is not None:
            return cached
        report = rescore_hybrid(con, self.cache, key, k=self.k)
        with self._lock:
            self._reports[key] = report
        return report

    def curve(
        self, con: duckdb.DuckDBPyConnection, weights: tuple[float, ...] = CURVE_WEIGHTS
    ) -> list[tuple[float, float]]:
        """(weight, mean hierarchical score) along the grid."""
        return [(w, self.report(con, w).mean_hierarchical_score_by_method.get("hybrid", 0.0)) for w in weights]


class CohortShift(BaseModel):
    cohort_id: str
    cohort_name: str
    reference: float
    current: float
    delta: float


def cohort_shifts(reference: BenchmarkReport, current: BenchmarkReport) -> list[CohortShift]:
    """Per cohort, hierarchical score at the current weight minus at the reference weight,
    largest gain first."""
    before = {r.cohort_id: r for r in reference.results}
    shifts = [
        CohortShift(
            cohort_id=r.cohort_id,
            cohort_name=r.cohort_name,
            reference=before[r.cohort_id].hierarchical_score,
            current=r.hierarchical_score,
            delta=r.hierarchical_score - before[r.cohort_id].hierarchical_score,
        )
        for r in current.results
        if r.cohort_id in before
    ]
    return sorted(shifts, key=lambda s: (-s.delta, s.cohort_id))


def means(report: BenchmarkReport) -> dict[str, float]:
    return {
        "hierarchical": report.mean_hierarchical_score_by_method.get("hybrid", 0.0),
        "coverage": report.mean_coverage_by_method.get("hybrid", 0.0),
        "over_inclusion": report.mean_over_inclusion_by_method.get("hybrid", 0.0),
    }


def scorer_key(
    con: duckdb.DuckDBPyConnection, library_path: Path, cohort_ids: list[str], k: int, dense: object | None
) -> tuple[object, ...]:
    """What a cached :class:`WeightScorer` depends on: vocabulary build, library file, cohorts, k, retriever."""
    manifest = Path(library_path) / "manifest.json"
    return ("weights", build_id(con), str(library_path), manifest.stat().st_mtime_ns, tuple(cohort_ids), k, id(dense))


def gaining_and_losing(shifts: list[CohortShift], n: int = 8) -> tuple[list[CohortShift], list[CohortShift]]:
    """The ``n`` cohorts gaining most and the ``n`` losing most (largest loss first)."""
    gaining = [s for s in shifts if s.delta > 1e-12][:n]
    losing = [s for s in reversed(shifts) if s.delta < -1e-12][:n]
    return gaining, losing


def sweep_key(
    con: duckdb.DuckDBPyConnection,
    library_path: Path,
    method: str,
    cohort_ids: list[str],
    weights: list[float],
    n_folds: int,
    dense: object | None,
) -> tuple[object, ...]:
    """What a cached :class:`LibrarySweep` depends on: vocabulary build, library file, method, cohorts,
    weights, folds and retriever."""
    manifest = Path(library_path) / "manifest.json"
    return (
        "sweep",
        build_id(con),
        str(library_path),
        manifest.stat().st_mtime_ns,
        method,
        tuple(cohort_ids),
        tuple(weights),
        n_folds,
        id(dense),
    )


def run_sweep(
    con: duckdb.DuckDBPyConnection,
    library_path: Path,
    method: str,
    cohort_ids: list[str],
    weights: list[float],
    dense: object | None,
    n_folds: int = 5,
    progress: ProgressCallback | None = None,
) -> LibrarySweep:
    """Sweep ``method`` over the chosen cohorts on the sorted, de-duplicated ``weights``, as the CLI does."""
    grid = sorted({round(float(w), 4) for w in weights})
    return sweep_library(
        con, Path(library_path), method, grid, dense, cohort_ids=cohort_ids, n_folds=n_folds, progress=progress
    )


def sweep_rows(swept: LibrarySweep) -> list[dict[str, float | bool]]:
    """The per-weight table, with the in-sample best weight marked."""
    best = swept.choice.in_sample_choice if swept.choice is not None else None
    return [
        {
            "dense_weight": row.dense_weight,
            "coverage": row.coverage,
            "precision": 1.0 - row.over_inclusion,
            "hierarchical": row.hierarchical_score,
            "in_sample_best": row.dense_weight == best,
        }
        for row in swept.rows
    ]


_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{12,}\b")
_LONG_NUMBER = re.compile(r"\d+\.\d{4,}")


def readable_note(note: str) -> str:
    """A builder's note for a caption: internal hashes dropped, long numbers cut to 3 decimals."""
    text = _HASH.sub("…", note)
    return _LONG_NUMBER.sub(lambda m: f"{float(m.group()):.3f}", text)
