"""Where a drilldown's results come from: a saved run, or a live one-cohort run."""

from __future__ import annotations

from pathlib import Path

import duckdb

from phenoforge import app_state
from phenoforge.dashboard.benchmark import BenchmarkRun, checked_methods
from phenoforge.dashboard.markdown import plain
from phenoforge.engine.curated import Library
from phenoforge.eval.harness import run_benchmark
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult


def results_for(
    con: duckdb.DuckDBPyConnection,
    library: Library,
    cohort_id: str,
    methods: list[str],
    run: BenchmarkRun | None = None,
    dense: object | None = None,
    k: int = 25,
    dense_weight: float = 0.5,
) -> tuple[list[CohortEvalResult], list[str]]:
    """The cohort's results per method: from ``run`` when given, else computed now."""
    if run is not None:
        found = {r.method: r for r in run.report.results if r.cohort_id == cohort_id}
        results = [found[m] for m in methods if m in found]
        missing = [f"{cohort_id}/{m}: not in run {run.run_id}" for m in methods if m not in found]
        skipped = [s for s in run.report.skipped if s.startswith(f"{cohort_id}/")]
        return results, missing + skipped
    checked_methods(methods)  # a live run from the browser: registered methods only
    report = run_benchmark(
        con, Path(library.path), [cohort_id], methods=methods, dense=dense, k=k, dense_weight=dense_weight
    )
    return report.results, report.skipped


def method_means(library_id: str, run: BenchmarkRun | None = None) -> dict[str, dict[str, object]]:
    """Per method, its means over a whole run: ``run`` if given, else the latest saved run of
    the library that scored the method."""
    means: dict[str, dict[str, object]] = {}
    sources: list[tuple[str, BenchmarkReport | None]]
    if run is not None:
        sources = [(run.run_id, run.report)]
    else:
        sources = [
            (s.run_id, None)
            for s in app_state.list_benchmark_runs(limit=50)
            if s.library_id == library_id and s.complete  # an unfinished run has no means to show
        ]
    for run_id, report in sources:
        if report is None:
            report = app_state.load_benchmark_run(run_id).report
        for method, hierarchical in report.mean_hierarchical_score_by_method.items():
            if method in means:
                continue
            means[method] = {
                "run_id": run_id,
                "n_cohorts": sum(1 for r in report.results if r.method == method),
                "coverage": report.mean_coverage_by_method[method],
                "over_inclusion": report.mean_over_inclusion_by_method[method],
                "hierarchical": hierarchical,
            }
    return means


def deep_link_notices(
    wanted_library: str | None,
    shown_library: str,
    installed: list[str],
    wanted_cohort: str | None,
    shown_cohort: str | None,
    cohort_ids: list[str],
) -> list[str]:
    """What a deep link asked for and could not get, so another cohort is never shown silently.

    The cohort is checked only against the library the link named: once the reader picks another
    library, the link's cohort no longer applies. Link values are user text, escaped for Markdown.
    """
    notices: list[str] = []
    if wanted_library and wanted_library not in installed:
        notices.append(
            f"The link asks for library '{plain(wanted_library)}', which is not installed; "
            f"showing '{plain(shown_library)}' instead."
        )
    elif wanted_cohort and wanted_library in (None, "", shown_library) and wanted_cohort not in cohort_ids:
        notices.append(
            f"The link asks for cohort '{plain(wanted_cohort)}', which library "
            f"'{plain(shown_library)}' does not have; showing '{plain(shown_cohort or '')}' instead."
        )
    return notices
