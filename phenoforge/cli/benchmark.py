"""``benchmark`` (every method against curated cohorts) and ``methods`` (what it can run)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from phenoforge.cli.common import _connect, _dense_or_none, _dense_problem, _seconds, _unit_interval
from phenoforge.config import DEFAULT_PLUGIN_TIMEOUT
from phenoforge.console import positive_int, progress_bar
from phenoforge.errors import PhenoforgeError
from phenoforge.libraries.resolve import resolve_library_dirs

TABLE_MEASURES = ("coverage", "over_inclusion", "hierarchical", "exact_f1")


class _Tally:
    """What the text table needs from a run's results, gathered chunk by chunk (the results themselves
    are not kept): per method its count, each table measure's values in order, its empty answers."""

    def __init__(self, measures: tuple[str, ...] = TABLE_MEASURES) -> None:
        from phenoforge.eval.measures import measure

        self.columns = [measure(key) for key in measures]
        self.counts: dict[str, int] = {}
        self.values: dict[str, list[list[float]]] = {}
        self.empty: dict[str, list[str]] = {}

    def add(self, results) -> None:  # noqa: ANN001 - CohortEvalResult objects
        for result in results:
            self.counts[result.method] = self.counts.get(result.method, 0) + 1
            columns = self.values.setdefault(result.method, [[] for _ in self.columns])
            for column, m in zip(columns, self.columns, strict=True):
                column.append(m.value(result))
            if not result.predicted_codes:
                self.empty.setdefault(result.method, []).append(result.cohort_id)


def _benchmark_table(report, measures: tuple[str, ...] = TABLE_MEASURES, tally: _Tally | None = None) -> str:  # noqa: ANN001
    """Means per method; column headers are the measures' own labels, with their direction. ``tally``:
    the results as gathered while they streamed (``report.results`` is read when it is None)."""
    if tally is None:
        tally = _Tally(measures)
        tally.add(report.results)
    columns = tally.columns
    heads = [f"{m.label} {'↑' if m.higher_is_better else '↓'}" for m in columns]
    width = max([20, *(len(method) + 2 for method in report.mean_hierarchical_score_by_method)])
    lines = [f"{'method':<{width}}{'cohorts':>8}" + "".join(f"{h:>{len(h) + 2}}" for h in heads)]
    counts = tally.counts
    for method in report.mean_hierarchical_score_by_method:
        values = [sum(column) / counts[method] for column in tally.values[method]]
        lines.append(
            f"{method:<{width}}{counts[method]:>8}"
            + "".join(f"{v:>{len(h) + 2}.3f}" for v, h in zip(values, heads, strict=True))
        )
    lines += _held_out_lines(report)
    for name, record in report.methods.items():
        if record.degraded:
            lines.append(f"  ! {name} is degraded: {record.degraded}")
        if record.status.startswith("failed"):
            lines.append(f"  ! {name} {record.status}")
        if record.trained_on:
            lines.append(f"  {name} trained on: {', '.join(record.trained_on)}")
        if record.fits:
            lines.append(f"  {name} fits: {record.fits}")
        empty = tally.empty.get(name, [])
        if empty:
            # an empty answer scores zero: say which cohorts, and why when the method said so
            lines.append(f"  ! {name} answered {len(empty)} of {counts.get(name, 0)} cohorts with no codes:")
            for cohort_id in empty[:5]:
                prefix = f"{cohort_id}: "
                why = [note.removeprefix(prefix) for note in record.notes if note.startswith(prefix)]
                lines.append(f"      {cohort_id}: {'; '.join(why) or 'no reason given'}")
            if len(empty) > 5:
                lines.append(f"      ... and {len(empty) - 5} more (see --json)")
    return "\n".join(lines)


HELD_OUT_SHOWN = 10
"""Held-out pairs the text table names (``--json`` lists every one)."""


def _held_out_lines(report) -> list[str]:  # noqa: ANN001 - a BenchmarkReport
    """The near-copy guard's answer, once for the methods that share it: how many bundled cohorts were held
    out, which pairs, why, and the groups held out whole."""
    found = [(name, record.held_out) for name, record in report.methods.items() if record.held_out is not None]
    if not found:
        return []
    holdout = found[0][1]
    names = ", ".join(name for name, _h in found)
    lines = [f"  {'!' if holdout.groups else '-'} near-copy guard ({names}): {holdout.summary()}"]
    for pair in holdout.pairs[:HELD_OUT_SHOWN]:
        how = "whole group" if set(pair.groups) & set(holdout.groups) else "cohort"
        without = holdout.fitted_without.get(pair.scored_cohort)
        how += f"; answered by builders fitted without {', '.join(without)}" if without else ""
        bundled = f"{pair.library_id}/{pair.cohort_id}"
        lines.append(f"      {pair.scored_cohort} ~ {bundled}: Jaccard {pair.jaccard:.2f} (held out: {how})")
    if len(holdout.pairs) > HELD_OUT_SHOWN:
        lines.append(f"      ... and {len(holdout.pairs) - HELD_OUT_SHOWN} more pairs (see --json)")
    return lines


def _cohorts_in_every_library(library_dirs: list[Path], cohorts: list[str] | None) -> list[str]:
    """``--cohorts`` once each, checked against every library before any is scored (not an error after
    the first library's minutes); [] when not given."""
    from phenoforge.engine.curated import load_library

    wanted = list(dict.fromkeys(cohorts or []))  # a cohort named twice is scored (and counted) once
    lacking: dict[tuple[str, ...], list[str]] = {}  # the missing ids -> the libraries that lack them
    for library_dir in library_dirs if wanted else []:
        library = load_library(library_dir)
        missing = tuple(cohort_id for cohort_id in wanted if cohort_id not in library.cohort_ids)
        if missing:
            lacking.setdefault(missing, []).append(repr(library.library_id))
    if lacking:
        parts = [
            f"{', '.join(map(repr, missing))} not in librar{'y' if len(ids) == 1 else 'ies'} {', '.join(ids)}"
            for missing, ids in lacking.items()
        ]
        raise PhenoforgeError(f"--cohorts applies to every library given: cohort(s) {'; '.join(parts)}")
    return wanted


def cmd_benchmark(args: argparse.Namespace) -> int:
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import registered_methods, resolve_methods, run_benchmark
    from phenoforge.eval.report_stream import JsonReportWriter

    con = _connect()
    methods = args.methods or registered_methods()
    declared = resolve_methods(methods)  # unknown names and bad module:function fail here, before any work
    wants_dense = any(m.retrieves_dense for m in declared)
    dense = _dense_or_none(con, not args.no_dense and wants_dense)
    dense_problem = (
        "switched off (--no-dense)"
        if args.no_dense
        else (None if dense is not None or not wants_dense else _dense_problem(con))
    )
    library_dirs = resolve_library_dirs(args.library, bundled_only=True)
    wanted = _cohorts_in_every_library(library_dirs, args.cohorts)
    writer = JsonReportWriter(sys.stdout) if args.json else None  # each result printed once it is scored
    with progress_bar(not args.quiet and not args.json) as progress:
        for library_dir in library_dirs:
            library = load_library(library_dir)
            cohort_ids = wanted or library.cohort_ids
            started = time.perf_counter()
            tally = _Tally()
            if writer is not None:
                writer.begin(library.library_id)
            sink = writer.add if writer is not None else tally.add
            saver = _saver(args, con, library, methods, cohort_ids) if args.save else None
            report = run_benchmark(
                con,
                library_dir,
                cohort_ids,
                methods=methods,
                dense=dense,
                k=args.k,
                fanout_threshold=args.fanout_threshold,
                dense_weight=args.dense_weight,
                progress=progress,
                measures=args.measures,
                dense_problem=dense_problem,
                method_timeout=args.method_timeout or None,
                sink=sink if saver is None else saver.sink(sink),
            )
            if saver is not None:
                run_id = saver.finish(report)
                said = f"saved as run {run_id} ({saver.count} results; `python -m phenoforge run export {run_id}`)"
                if args.json:
                    print(said, file=sys.stderr)  # standard output holds only the JSON document
                else:
                    print(f"\n{said}")
            if writer is not None:
                writer.end(report)
            else:
                print(
                    f"\n{library.manifest.name} ({library.library_id}): {len(cohort_ids)} cohorts, "
                    f"k={args.k}, dense_weight={args.dense_weight}, {time.perf_counter() - started:.1f} s"
                )
                print(_benchmark_table(report, tally=tally))
                if report.skipped:
                    print(f"skipped: {len(report.skipped)} (e.g. {report.skipped[0]})")
            del report, tally  # not alive while the next library runs
    if writer is not None:
        writer.close()
    return 0


def _saver(args: argparse.Namespace, con, library, methods: list[str], cohort_ids: list[str]):  # noqa: ANN001, ANN202
    """A saved run being written (``--save``): its results stored as they are scored."""
    from phenoforge import app_state
    from phenoforge.engine.db import vocabulary_info

    info = vocabulary_info(con)
    parameters = app_state.BenchmarkParameters(
        methods=list(methods),
        k=args.k,
        dense_weight=args.dense_weight,
        fanout_threshold=args.fanout_threshold,
        cohort_ids=list(cohort_ids),
    )
    return app_state.BenchmarkRunWriter(
        parameters,
        library_id=library.library_id,
        library_path=library.path,
        vocabulary_release=info.vocabulary_release,
        vocabulary_build_id=info.build_id,
        label=args.label or "",
    )


def cmd_methods(args: argparse.Namespace) -> int:
    """Every method the benchmark can run: built-ins, then entry-point plug-ins."""
    from phenoforge.methods import available_methods

    for name, declared in available_methods().items():
        needs = ", ".join(sorted(declared.needs)) or "-"
        uses = f" (uses {', '.join(sorted(declared.uses))})" if declared.uses else ""
        print(f"{name:<22} needs: {needs:<14}{uses} {declared.description}")
    print("\nyour own: --methods my_module:my_function  (a function (context, task) -> codes)")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("benchmark", help="score every method against curated cohorts")
    bench.add_argument(
        "--library",
        action="append",
        help="library id or folder (repeatable; default: the bundled libraries, not imported ones)",
    )
    bench.add_argument("--cohorts", nargs="+", help="only these cohort ids")
    bench.add_argument(
        "--methods",
        nargs="+",
        metavar="METHOD",
        help="registered method names (see `python -m phenoforge methods`) or your own as "
        "module:function (default: every built-in method, as `python -m phenoforge methods` lists them)",
    )
    bench.add_argument(
        "--measures",
        nargs="+",
        metavar="MEASURE",
        help="measures to record, e.g. hierarchical 'coverage(max_distance=4)' (default: all)",
    )
    bench.add_argument("-k", type=positive_int("k"), default=25)
    bench.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    bench.add_argument("--fanout-threshold", type=positive_int("fanout-threshold"), default=100)
    bench.add_argument("--no-dense", action="store_true", help="run without the dense index")
    bench.add_argument(
        "--method-timeout",
        type=_seconds,
        default=DEFAULT_PLUGIN_TIMEOUT,
        metavar="SECONDS",
        help=f"a plug-in method's time limit per cohort; past it that method fails there and the run goes on "
        f"(default {DEFAULT_PLUGIN_TIMEOUT:g}; 0: no limit; built-ins have none)",
    )
    bench.add_argument("--json", action="store_true", help="the full report as JSON")
    bench.add_argument(
        "--save",
        action="store_true",
        help="also save each library's run (results stored as they are scored): the Benchmark page opens it "
        "and `run export` reads it",
    )
    bench.add_argument("--label", help="the saved run's label (with --save)")
    bench.add_argument("--quiet", action="store_true")
    bench.set_defaults(func=cmd_benchmark)

    methods = sub.add_parser("methods", help="list the methods the benchmark can run and what each needs")
    methods.set_defaults(func=cmd_methods)
