"""The Benchmark page's logic: run, summarise with intervals and paired tests, export, save.

Pages only lay these numbers out, so the AppTest suite can compare what a page shows with what
these functions compute for the same inputs.
"""

from __future__ import annotations

import io
import json
import math
import os
import threading
from pathlib import Path
from urllib.parse import urlencode

import altair as alt
import duckdb
from pydantic import BaseModel

from phenoforge import app_state
from phenoforge.app_state import BenchmarkParameters
from phenoforge.caches import ProcessCache
from phenoforge.config import ProgressCallback
from phenoforge.csv_safe import SafeWriter
from phenoforge.dashboard.wording import direction_text, p_text
from phenoforge.engine.curated import Library
from phenoforge.engine.db import vocabulary_info
from phenoforge.eval.agreement import LibraryAgreement, agreement_lines
from phenoforge.eval.harness import run_benchmark, run_methods
from phenoforge.eval.measures import DEFAULT_MEASURES, measure
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult
from phenoforge.eval.qrels import load_qrels
from phenoforge.eval.runs import Run, parse_run_csv, parse_run_json
from phenoforge.eval.stats import MethodComparison, bootstrap_ci, compare_methods
from phenoforge.methods import available_methods as registered_methods
from phenoforge.methods.registry import MethodError

USER_METHODS_ENV = "PHENOFORGE_DASHBOARD_USER_METHODS"
"""Set to 1 on the server to let the Benchmark page run ``module:function`` methods (off by default:
anyone who can open the page could otherwise import any module and call any callable on the server)."""

METRIC_LABELS: dict[str, str] = {m.key: m.label for m in DEFAULT_MEASURES}
"""Labels come from the measures themselves (phenoforge.eval.measures), nowhere else."""
HIGHER_IS_BETTER: dict[str, bool] = {m.key: m.higher_is_better for m in DEFAULT_MEASURES}
DRILLDOWN_PAGE = "Cohort_drilldown"


def metric_value(result: CohortEvalResult, metric: str) -> float:
    """One cohort's value of a measure, by its key."""
    return measure(metric).value(result)


def available_methods(dense_ready: bool, builders_ready: bool = True) -> list[str]:
    """Every registered method; those that need the dense index only once it is ready, the set builders'
    only once their fits are stored (a page never starts a fit: Home's first-run build fits them)."""
    from phenoforge.setbuild.builders import builder_names

    waiting = set() if builders_ready else set(builder_names())
    return [
        name
        for name, m in registered_methods().items()
        if (dense_ready or "dense" not in m.needs) and name not in waiting
    ]


def user_methods_enabled() -> bool:
    """Whether this server lets the dashboard run ``module:function`` methods (see USER_METHODS_ENV)."""
    return os.environ.get(USER_METHODS_ENV, "").strip() == "1"


def checked_methods(methods: list[str], allow_user_methods: bool | None = None) -> list[str]:
    """``methods`` when each is registered (a built-in or an installed entry point); a
    ``module:function`` only when the server allows it. Checked before anything is imported."""
    allowed = user_methods_enabled() if allow_user_methods is None else allow_user_methods
    registered = registered_methods()
    refused = [m for m in methods if m not in registered and not (allowed and ":" in m)]
    if refused:
        raise MethodError(
            f"{', '.join(repr(m) for m in refused)}: not a registered method. The dashboard runs the built-in "
            f"and installed methods ({', '.join(registered)}); run your own module:function with the CLI, or "
            f"start the dashboard with {USER_METHODS_ENV}=1."
        )
    return methods


def method_help() -> dict[str, str]:
    """One line per registered method, from the method's own description."""
    return {name: m.description for name, m in registered_methods().items()}


def progress_text(done: int, total: int, message: str) -> tuple[float, str]:
    """A progress callback's arguments as a bar fraction and its caption."""
    fraction = min(1.0, done / total) if total else 1.0
    return fraction, ("done" if done >= total else f"{done + 1}/{total} · {message}")


def method_flags(report: BenchmarkReport) -> dict[str, str]:
    """Per method, what the reader must know beside its numbers (degraded, trained on, skipped)."""
    flags: dict[str, str] = {}
    for name, record in report.methods.items():
        parts = []
        if record.degraded:
            parts.append(f"degraded: {record.degraded}")
        if record.trained_on:
            parts.append(f"trained on {', '.join(record.trained_on)}")
        if record.fits:
            parts.append(record.fits)
        parts += [note for note in record.notes if note.startswith("skipped")]
        if record.source not in ("built-in", ""):
            parts.append(f"from {record.source}")
        if parts:
            flags[name] = "; ".join(parts)
    return flags


class HeldOutView(BaseModel):
    """What the near-copy guard held out of what scored a run's library, as the page shows it."""

    methods: list[str]
    summary: str
    rows: list[dict[str, str | float]]
    """per held-out pair: the scored cohort, the bundled library and cohort, the Jaccard, how it was held out"""
    whole_groups: bool


def held_out_view(report: BenchmarkReport) -> HeldOutView | None:
    """The guard's held-out pairs and groups, once for the methods that share them (the set builders);
    None when no method ran the guard (a bundled library, no set builder)."""
    found = [(name, record.held_out) for name, record in report.methods.items() if record.held_out is not None]
    if not found:
        return None
    holdout = found[0][1]
    assert holdout is not None
    rows: list[dict[str, str | float]] = [
        {
            "scored cohort": pair.scored_cohort,
            "bundled library": pair.library_id,
            "bundled cohort": pair.cohort_id,
            "Jaccard": pair.jaccard,
            "held out": "with its whole group" if set(pair.groups) & set(holdout.groups) else "this cohort",
            "scored cohort answered by builders fitted without": ", ".join(
                holdout.fitted_without.get(pair.scored_cohort, [])
            ),
        }
        for pair in holdout.pairs
    ]
    return HeldOutView(
        methods=[name for name, _h in found], summary=holdout.summary(), rows=rows, whole_groups=bool(holdout.groups)
    )


class MethodSummary(BaseModel):
    """One method's means with bootstrap intervals, and its delta to the baseline."""

    method: str
    n_cohorts: int
    mean_hierarchical: float
    ci_hierarchical: tuple[float, float]
    mean_coverage: float
    ci_coverage: tuple[float, float]
    mean_over_inclusion: float
    ci_over_inclusion: tuple[float, float]
    mean_precision: float
    mean_exact_f1: float
    delta_hierarchical: float | None = None
    delta_coverage: float | None = None
    delta_over_inclusion: float | None = None


def _by_method(report: BenchmarkReport) -> dict[str, list[CohortEvalResult]]:
    grouped: dict[str, list[CohortEvalResult]] = {}
    for result in report.results:
        grouped.setdefault(result.method, []).append(result)
    return grouped


def method_summaries(
    report: BenchmarkReport, baseline: str | None = None, n_resamples: int = 2000
) -> list[MethodSummary]:
    """Per method: means (the harness's own), 95 % bootstrap intervals, deltas to ``baseline``."""
    summaries: list[MethodSummary] = []
    grouped = _by_method(report)
    for method, results in grouped.items():
        cis = {
            metric: bootstrap_ci([metric_value(r, metric) for r in results], n_resamples=n_resamples)
            for metric in ("hierarchical", "coverage", "over_inclusion")
        }
        summaries.append(
            MethodSummary(
                method=method,
                n_cohorts=len(results),
                mean_hierarchical=report.mean_hierarchical_score_by_method[method],
                ci_hierarchical=(cis["hierarchical"].low, cis["hierarchical"].high),
                mean_coverage=report.mean_coverage_by_method[method],
                ci_coverage=(cis["coverage"].low, cis["coverage"].high),
                mean_over_inclusion=report.mean_over_inclusion_by_method[method],
                ci_over_inclusion=(cis["over_inclusion"].low, cis["over_inclusion"].high),
                mean_precision=1.0 - report.mean_over_inclusion_by_method[method],
                mean_exact_f1=sum(r.exact_f1 for r in results) / len(results),
            )
        )
    if baseline is not None:
        base = next((s for s in summaries if s.method == baseline), None)
        if base is not None:
            for summary in summaries:
                summary.delta_hierarchical = summary.mean_hierarchical - base.mean_hierarchical
                summary.delta_coverage = summary.mean_coverage - base.mean_coverage
                summary.delta_over_inclusion = summary.mean_over_inclusion - base.mean_over_inclusion
    return summaries


_AGREEMENT: ProcessCache[tuple[object, ...], dict[str, LibraryAgreement]] = ProcessCache(
    "expert agreement", max_entries=1
)
_AGREEMENT_LOCK = threading.Lock()


def expert_agreement_lines(con: duckdb.DuckDBPyConnection, libraries: list[Library]) -> dict[str, LibraryAgreement]:
    """Per library id, how well two expert lists for the same condition agree: the ceiling a method
    can be expected to reach (computed once per vocabulary build and set of library files)."""
    key = (
        vocabulary_info(con).build_id,
        tuple(sorted((str(lib.path), (Path(lib.path) / "manifest.json").stat().st_mtime_ns) for lib in libraries)),
    )
    with _AGREEMENT_LOCK:
        cached = _AGREEMENT.get(key)
    if cached is None:
        cached = agreement_lines(con, libraries)
        with _AGREEMENT_LOCK:
            _AGREEMENT.remember(key, cached)  # one set of libraries at a time: the page shows the installed ones
    return cached


def coverage_precision_chart(report: BenchmarkReport) -> alt.Chart:
    """Per cohort and method, coverage against precision (colour and shape per method); clicking a
    method in the legend (or a point) highlights its cohorts, and a brushed region filters the list below."""
    rows = [
        {
            "method": r.method,
            "cohort": f"{r.cohort_id} · {r.cohort_name}",
            "coverage": r.coverage,
            "precision": 1.0 - r.over_inclusion_penalty,
            "hierarchical": r.hierarchical_score,
        }
        for r in report.results
    ]
    data = alt.Data(values=rows)
    pick = alt.selection_point(fields=["method"], bind="legend")
    brush = alt.selection_interval(encodings=["x", "y"])
    points = (
        alt.Chart(data)
        .mark_circle(size=70)
        .encode(
            x=alt.X("coverage:Q", scale=alt.Scale(domain=[0, 1]), title="coverage"),
            y=alt.Y("precision:Q", scale=alt.Scale(domain=[0, 1]), title="precision = 1 − over-inclusion"),
            color=alt.Color(
                "method:N", scale=alt.Scale(scheme="tableau10"), legend=alt.Legend(orient="right", labelLimit=220)
            ),
            shape=alt.Shape("method:N"),
            opacity=alt.condition(pick, alt.value(0.9), alt.value(0.08)),
            tooltip=["cohort:N", "method:N", alt.Tooltip("hierarchical:Q", format=".3f")],
        )
        .add_params(pick, brush)
        .properties(
            title="Coverage vs precision per cohort (click a method in the legend; drag to select cohorts)",
            width=560,
            height=340,
        )
    )
    listing = (
        alt.Chart(data)
        .mark_text(align="left")
        .encode(y=alt.Y("row_number:O", axis=None), text="label:N", color="method:N")
        .transform_filter(brush)
        .transform_filter(pick)
        .transform_calculate(label="datum.cohort + ' (' + datum.method + ')'")
        .transform_window(row_number="row_number()")
        .transform_filter("datum.row_number <= 20")
        .properties(title="Selected cohorts (first 20)", width=560, height=300)
    )
    # Stacked, not side by side: side by side the legend and the list fell off a 1,280 px window.
    return alt.vconcat(points, listing)  # type: ignore[return-value]  # a VConcatChart renders like a Chart


def scores_by_method(report: BenchmarkReport, metric: str = "hierarchical") -> dict[str, dict[str, float]]:
    scores: dict[str, dict[str, float]] = {}
    for result in report.results:
        scores.setdefault(result.method, {})[result.cohort_id] = metric_value(result, metric)
    return scores


def significance(
    report: BenchmarkReport, baseline: str, metric: str = "hierarchical", alpha: float = 0.05
) -> list[MethodComparison]:
    """Every method against the baseline: paired permutation tests over cohorts, Holm-corrected."""
    return compare_methods(scores_by_method(report, metric), baseline=baseline, alpha=alpha)


def drilldown_link(library_id: str, cohort_id: str, method: str, run_id: str | None = None) -> str:
    """The Cohort drilldown page's URL for one cohort and method (relative to the app root)."""
    params = {"library": library_id, "cohort": cohort_id, "method": method}
    if run_id:
        params["run"] = run_id
    return f"/{DRILLDOWN_PAGE}?{urlencode(params)}"


def cohort_rows(
    report: BenchmarkReport,
    library_id: str,
    run_id: str | None = None,
    baseline: str | None = None,
) -> list[dict[str, object]]:
    """The per-cohort table: one row per cohort and method, with its drilldown link; measures where
    higher is better only, so it fits a 1,280 px window."""
    base = {r.cohort_id: r.hierarchical_score for r in report.results if r.method == baseline} if baseline else {}
    rows: list[dict[str, object]] = []
    for r in report.results:
        delta = (r.hierarchical_score - base[r.cohort_id]) if r.cohort_id in base else None
        rows.append(
            {
                "cohort": f"{r.cohort_id} · {r.cohort_name}",
                "method": r.method,
                "hierarchical": r.hierarchical_score,
                "vs baseline": delta,
                "coverage": r.coverage,
                "precision": 1.0 - r.over_inclusion_penalty,
                "exact F1": r.exact_f1,
                "codes": f"{len(r.predicted_codes)} / {len(r.ground_truth_codes)}",
                "drilldown": drilldown_link(library_id, r.cohort_id, r.method, run_id),
            }
        )
    return rows


CSV_COLUMNS = [
    "cohort_id",
    "cohort_name",
    "method",
    "coverage",
    "over_inclusion_penalty",
    "hierarchical_score",
    "exact_precision",
    "exact_recall",
    "exact_f1",
    "n_predicted",
    "n_ground_truth",
    "predicted_codes",
    "ground_truth_codes",
    "unresolvable_ground_truth",
    "provenance",
]


def report_csv(report: BenchmarkReport) -> str:
    """One row per cohort and method; code lists space-separated. The last column holds each
    predicted code's provenance as JSON (``{"I50.9": ["bm25 rank 1"]}``), as ``run export`` keeps it."""
    buffer = io.StringIO()
    writer = SafeWriter(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in report.results:
        writer.writerow(
            [
                r.cohort_id,
                r.cohort_name,
                r.method,
                f"{r.coverage:.6f}",
                f"{r.over_inclusion_penalty:.6f}",
                f"{r.hierarchical_score:.6f}",
                f"{r.exact_precision:.6f}",
                f"{r.exact_recall:.6f}",
                f"{r.exact_f1:.6f}",
                len(r.predicted_codes),
                len(r.ground_truth_codes),
                " ".join(r.predicted_codes),
                " ".join(r.ground_truth_codes),
                " ".join(r.unresolvable_ground_truth),
                json.dumps({code: r.provenance[code] for code in r.predicted_codes if code in r.provenance}),
            ]
        )
    return buffer.getvalue()


def report_json(
    report: BenchmarkReport, parameters: BenchmarkParameters | None = None, meta: dict[str, str] | None = None
) -> str:
    payload: dict[str, object] = {"report": json.loads(report.model_dump_json())}
    if parameters is not None:
        payload["parameters"] = json.loads(parameters.model_dump_json())
    if meta:
        payload["meta"] = meta
    return json.dumps(payload, indent=1)


class BenchmarkRun(BaseModel):
    run_id: str
    library_id: str
    library_path: str
    parameters: BenchmarkParameters
    report: BenchmarkReport
    started_at: str
    finished_at: str
    vocabulary_release: str


def import_run_and_save(
    con: duckdb.DuckDBPyConnection,
    library: Library,
    data: bytes,
    filename: str,
    compare_with: list[str],
    dense: object | None = None,
    k: int = 25,
    dense_weight: float = 0.5,
    name: str = "",
    progress: ProgressCallback | None = None,
) -> BenchmarkRun:
    """Validate a run file, score it beside ``compare_with`` built-ins on the cohorts it answers, save.

    Nothing is saved when the file has problems: :class:`~phenoforge.eval.runs.RunImportError`
    lists them with their line numbers.
    """
    checked_methods(compare_with)
    started = app_state.now_iso()
    run = parse_uploaded_run(con, library, data, filename, name)
    qrels = load_qrels(con, Path(library.path)).subset(list(run.cohorts))
    report = run_methods(con, qrels, compare_with, dense, k, dense_weight, progress=progress, extra_runs=[run])
    parameters = BenchmarkParameters(
        methods=[*compare_with, run.name], k=k, dense_weight=dense_weight, cohort_ids=list(qrels.cohorts)
    )
    return _save(con, library, report, parameters, started, label=f"imported run {run.name}")


def parse_uploaded_run(
    con: duckdb.DuckDBPyConnection, library: Library, data: bytes, filename: str, name: str = ""
) -> Run:
    """An uploaded run file, validated against the library's curated sets and the vocabulary."""
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.eval.runs import RunImportError

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise RunImportError(filename, ["the file is not UTF-8 text"]) from None
    qrels = load_qrels(con, Path(library.path))
    run_name = (name or Path(filename).stem or "imported").strip()
    parse = parse_run_json if filename.lower().endswith(".json") else parse_run_csv
    return parse(text, qrels, get_hierarchy(con), run_name, filename)


def _save(
    con: duckdb.DuckDBPyConnection,
    library: Library,
    report: BenchmarkReport,
    parameters: BenchmarkParameters,
    started: str,
    label: str = "",
) -> BenchmarkRun:
    info = vocabulary_info(con)
    finished = app_state.now_iso()
    run_id = app_state.save_benchmark_run(
        report,
        parameters,
        library_id=library.library_id,
        library_path=library.path,
        vocabulary_release=info.vocabulary_release,
        vocabulary_build_id=info.build_id,
        started_at=started,
        finished_at=finished,
        label=label,
    )
    return BenchmarkRun(
        run_id=run_id,
        library_id=library.library_id,
        library_path=str(library.path),
        parameters=parameters,
        report=report,
        started_at=started,
        finished_at=finished,
        vocabulary_release=info.vocabulary_release,
    )


def run_and_save(
    con: duckdb.DuckDBPyConnection,
    library: Library,
    parameters: BenchmarkParameters,
    dense: object | None = None,
    progress: ProgressCallback | None = None,
    label: str = "",
    dense_problem: str | None = None,
) -> BenchmarkRun:
    """Run the benchmark as asked (registered methods only, see :func:`checked_methods`) and store it
    in the app-state database before returning."""
    checked_methods(parameters.methods)
    started = app_state.now_iso()
    report = run_benchmark(
        con,
        Path(library.path),
        parameters.cohort_ids,
        methods=parameters.methods,
        dense=dense,
        k=parameters.k,
        fanout_threshold=parameters.fanout_threshold,
        dense_weight=parameters.dense_weight,
        progress=progress,
        dense_problem=dense_problem,
    )
    return _save(con, library, report, parameters, started, label)


def saved_run(run_id: str) -> BenchmarkRun:
    """A saved run, reopened in the shape a fresh run has."""
    saved = app_state.load_benchmark_run(run_id)
    return BenchmarkRun(
        run_id=saved.run_id,
        library_id=saved.library_id,
        library_path=saved.library_path,
        parameters=saved.parameters,
        report=saved.report,
        started_at=saved.started_at,
        finished_at=saved.finished_at,
        vocabulary_release=saved.vocabulary_release,
    )


def leaderboard(report: BenchmarkReport) -> list[dict[str, object]]:
    """Methods ranked by mean hierarchical score, best first."""
    ranked = sorted(report.mean_hierarchical_score_by_method.items(), key=lambda item: -item[1])
    return [
        {
            "method": method,
            "hierarchical": score,
            "coverage": report.mean_coverage_by_method.get(method, math.nan),
            "over_inclusion": report.mean_over_inclusion_by_method.get(method, math.nan),
            "n_cohorts": sum(1 for r in report.results if r.method == method),
        }
        for method, score in ranked
    ]


TABLE_MEASURES: tuple[str, ...] = ("hierarchical", "coverage", "precision", "exact_f1")
"""The summary's measures, each one where higher is better (precision rather than over-inclusion)."""
SHORT_LABELS: dict[str, str] = {
    "hierarchical": "Hierarchical",
    "coverage": "Coverage",
    "precision": "Precision",
    "exact_f1": "Exact F1",
}
METHOD_CAVEATS: dict[str, str] = {
    "expand_descendants": "starts from a curated code, so its precision is near perfect by construction",
}
"""What a reader must know to read a method's numbers, shown on the summary table itself."""


def difference_text(diff: float, low: float, high: float, comparison: MethodComparison | None) -> str:
    """The difference to the baseline with its interval and verdict, in words, in one cell."""
    verdict = ""
    if comparison is not None:
        if comparison.note:
            verdict = f", {comparison.note.split(':')[0]}"  # the whole note is in the tests' detail table
        else:
            verdict = (
                f", {'significant' if comparison.significant else 'not significant'} ({p_text(comparison.p_holm)})"
            )
    return f"{direction_text(diff)} [{low:+.3f}, {high:+.3f}]{verdict}"


class SummaryRow(BaseModel):
    """One method's line of the summary table: means per measure, intervals, and the baseline difference."""

    method: str
    n_cohorts: int
    means: dict[str, float]
    cis: dict[str, tuple[float, float]]
    best_at: list[str]
    vs_baseline: str
    note: str


def _means(results: list[CohortEvalResult], metric: str) -> list[float]:
    return [metric_value(r, metric) for r in results]


def summary_rows(
    report: BenchmarkReport, baseline: str, sort_by: str = "hierarchical", n_resamples: int = 2000
) -> list[SummaryRow]:
    """Methods best first on ``sort_by``, each measure's best marked, the paired difference to
    ``baseline`` on ``sort_by`` with its bootstrap interval and Holm-corrected permutation test."""
    grouped = _by_method(report)
    tests = {c.method_b: c for c in significance(report, baseline, sort_by)} if baseline in grouped else {}
    base_scores = {r.cohort_id: metric_value(r, sort_by) for r in grouped.get(baseline, [])}
    rows: list[SummaryRow] = []
    for method, results in grouped.items():
        means = {m: sum(_means(results, m)) / len(results) for m in TABLE_MEASURES}
        cis = {
            m: (ci.low, ci.high)
            for m in TABLE_MEASURES
            for ci in [bootstrap_ci(_means(results, m), n_resamples=n_resamples)]
        }
        if method == baseline or not base_scores:
            versus = "the baseline" if method == baseline else "no baseline"
        else:
            diffs = [metric_value(r, sort_by) - base_scores[r.cohort_id] for r in results if r.cohort_id in base_scores]
            ci = bootstrap_ci(diffs, n_resamples=n_resamples)
            versus = (
                difference_text(sum(diffs) / len(diffs), ci.low, ci.high, tests.get(method))
                if diffs
                else "no shared cohorts"
            )
        rows.append(
            SummaryRow(
                method=method,
                n_cohorts=len(results),
                means=means,
                cis=cis,
                best_at=[],
                vs_baseline=versus,
                note=METHOD_CAVEATS.get(method, ""),
            )
        )
    for m in TABLE_MEASURES:
        best = max(row.means[m] for row in rows) if rows else 0.0
        for row in rows:
            if row.means[m] >= best - 1e-12:
                row.best_at.append(SHORT_LABELS[m])
    return sorted(rows, key=lambda row: -row.means[sort_by])


def summary_table(rows: list[SummaryRow], baseline: str, sort_by: str) -> list[dict[str, object]]:
    """The summary as the page shows it: few columns, so it fits a 1,280 px window. ★ marks the best
    on the sorting measure, † a method with a caveat (see :func:`summary_notes`); a method scored on
    fewer cohorts than the most says how many."""
    n_cohorts = max((row.n_cohorts for row in rows), default=0)
    return [
        {
            "method": ("★ " if SHORT_LABELS[sort_by] in row.best_at else "")
            + row.method
            + (" †" if row.note else "")
            + ("" if row.n_cohorts == n_cohorts else f" ({row.n_cohorts} cohorts)"),
            **{SHORT_LABELS[m]: row.means[m] for m in TABLE_MEASURES},
            f"vs {baseline} ({SHORT_LABELS[sort_by]}), 95% CI": row.vs_baseline,
        }
        for row in rows
    ]


def summary_notes(rows: list[SummaryRow]) -> list[str]:
    """The caveats the † on the summary table refers to, one line per method."""
    return [f"† {row.method}: {row.note}" for row in rows if row.note]


def best_cells(rows: list[SummaryRow]) -> list[tuple[int, str]]:
    """(row index, column label) of each measure's best value, for the page to highlight."""
    return [(i, label) for i, row in enumerate(rows) for label in row.best_at]


def interval_table(rows: list[SummaryRow]) -> list[dict[str, object]]:
    """Each measure's 95 % bootstrap interval per method: the detail behind the summary."""
    return [
        {"method": row.method, **{SHORT_LABELS[m]: f"{lo:.3f} – {hi:.3f}" for m, (lo, hi) in row.cis.items()}}
        for row in rows
    ]


def expert_agreement_text(line: LibraryAgreement, rows: list[SummaryRow]) -> str:
    """The expert line, counted as what it counts (pairs), and what a method above it means."""
    text = (
        f"Expert agreement: {line.mean_hierarchical_score:.3f} hierarchical, {line.mean_exact_f1:.3f} exact F1, "
        f"the mean over {line.n_pairs} pairs of cohorts in which this library's experts and another library's "
        "experts defined the same condition: how far two expert lists agree."
    )
    above = [row for row in rows if row.means["hierarchical"] > line.mean_hierarchical_score]
    if above:
        names = ", ".join(f"{row.method} ({row.means['hierarchical']:.3f})" for row in above)
        text += (
            f" Above it: {names}. Such a method agrees with these experts more than other experts do, which is "
            "possible (for example by reusing another library's curated lists), so the line is a reference, "
            "not a ceiling."
        )
    return text


def default_methods(options: list[str]) -> list[str]:
    """Every built-in method the server can run now: the best set builders and the reference methods."""
    from phenoforge.methods.registry import builtin_methods

    return [m for m in builtin_methods() if m in options]


def significance_rows(comparisons: list[MethodComparison]) -> list[dict[str, object]]:
    """The permutation tests in words: 'significant' or 'not significant', p never printed as 0.0000."""
    return [
        {
            "method": c.method_b,
            "cohorts": c.n_cohorts,
            "difference": direction_text(c.mean_diff),
            "p (Holm)": p_text(c.p_holm),
            "p (raw)": p_text(c.p_value),
            "verdict": c.note or ("significant" if c.significant else "not significant"),
        }
        for c in comparisons
    ]


class Headline(BaseModel):
    """A library's latest full benchmark in one line: its best method and that method's score."""

    library_id: str
    run_id: str
    finished_at: str
    n_cohorts: int
    n_methods: int
    best_method: str
    best_hierarchical: float
    runner_up: str
    runner_up_hierarchical: float | None


def headlines(runs: list[app_state.BenchmarkRunSummary], cohort_counts: dict[str, int]) -> list[Headline]:
    """Per installed library, its newest run over every cohort (an upload or a subset is not a headline).

    ``runs`` come newest first, as :func:`phenoforge.app_state.list_benchmark_runs` returns them.
    """
    found: dict[str, Headline] = {}
    for run in runs:
        total = cohort_counts.get(run.library_id)
        if run.library_id in found or total is None or len(run.parameters.cohort_ids) < total:
            continue
        if run.label.startswith("imported run"):
            continue
        ranked = sorted(run.means.get("hierarchical", {}).items(), key=lambda item: -item[1])
        if not ranked:
            continue
        second = ranked[1] if len(ranked) > 1 else ("", None)
        found[run.library_id] = Headline(
            library_id=run.library_id,
            run_id=run.run_id,
            finished_at=run.finished_at,
            n_cohorts=len(run.parameters.cohort_ids),
            n_methods=len(ranked),
            best_method=ranked[0][0],
            best_hierarchical=ranked[0][1],
            runner_up=second[0],
            runner_up_hierarchical=second[1],
        )
    return [found[library_id] for library_id in cohort_counts if library_id in found]


def headline_rows(found: list[Headline]) -> list[dict[str, object]]:
    """The Home page's table: one line per library, the best method and by how much it leads."""
    return [
        {
            "library": h.library_id,
            "best method": h.best_method,
            "hierarchical": h.best_hierarchical,
            "next best": h.runner_up,
            "lead": direction_text(h.best_hierarchical - h.runner_up_hierarchical, "ahead", "behind")
            if h.runner_up_hierarchical is not None
            else "",
            "cohorts": h.n_cohorts,
            "finished": h.finished_at[:10],
        }
        for h in found
    ]
