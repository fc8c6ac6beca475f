"""``run import`` (score your own run beside the built-ins) and ``run export`` (a saved run's codes)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from phenoforge.cli.benchmark import _benchmark_table
from phenoforge.cli.common import _connect, _dense_or_none, _unit_interval, write_or_print
from phenoforge.console import positive_int, progress_bar
from phenoforge.errors import PhenoforgeError
from phenoforge.libraries.resolve import resolve_library_dirs


def _library_for_run(con, name: str):  # noqa: ANN001, ANN202 - connection in, Library out
    from phenoforge.engine.curated import load_library

    (path,) = resolve_library_dirs([name])
    return load_library(path)


def cmd_run_import(args: argparse.Namespace) -> int:
    """Validate a run file, score it beside built-in methods with paired tests, and save it."""
    from phenoforge import app_state
    from phenoforge.app_state import BenchmarkParameters
    from phenoforge.engine.db import vocabulary_info
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.eval.harness import resolve_methods, run_methods
    from phenoforge.eval.qrels import load_qrels
    from phenoforge.eval.runs import read_run
    from phenoforge.eval.stats import bootstrap_ci, compare_methods

    con = _connect()
    library = _library_for_run(con, args.library)
    qrels = load_qrels(con, library.path)
    run = read_run(Path(args.file), qrels, get_hierarchy(con), name=args.name)
    declared = resolve_methods(args.compare)
    dense = _dense_or_none(con, any(m.retrieves_dense for m in declared))
    answered = qrels.subset(list(run.cohorts))
    started = app_state.now_iso()
    with progress_bar(not args.quiet and not args.json) as progress:
        report = run_methods(
            con, answered, args.compare, dense, args.k, args.dense_weight, progress=progress, extra_runs=[run]
        )
    info = vocabulary_info(con)
    parameters = BenchmarkParameters(
        methods=[*args.compare, run.name], k=args.k, dense_weight=args.dense_weight, cohort_ids=list(answered.cohorts)
    )
    run_id = app_state.save_benchmark_run(
        report,
        parameters,
        library_id=library.library_id,
        library_path=library.path,
        vocabulary_release=info.vocabulary_release,
        vocabulary_build_id=info.build_id,
        started_at=started,
        finished_at=app_state.now_iso(),
        label=f"imported run {run.name}",
    )
    if args.json:
        print(json.dumps({"run_id": run_id, "report": report.model_dump()}, indent=1))
        return 0
    print(
        f"imported run {run.name!r} ({args.file}): {len(run.cohorts)} of {len(qrels.cohorts)} cohorts of "
        f"{library.library_id}; saved as run {run_id}"
    )
    for note in run.notes:
        print(f"note: {note}")
    print(_benchmark_table(report))
    scores: dict[str, dict[str, float]] = {}
    for result in report.results:
        scores.setdefault(result.method, {})[result.cohort_id] = result.hierarchical_score
    for method, by_cohort in scores.items():
        interval = bootstrap_ci(list(by_cohort.values()))
        print(f"{method:<24} hierarchical {interval.mean:.3f} (95% CI {interval.low:.3f}-{interval.high:.3f})")
    for comparison in compare_methods(scores, baseline=run.name):
        verdict = "real difference" if comparison.significant else "not shown"
        print(
            f"{comparison.method_b} vs {run.name}: mean diff {comparison.mean_diff:+.3f}, "
            f"p (Holm) {comparison.p_holm:.4f}: {verdict}" + (f" ({comparison.note})" if comparison.note else "")
        )
    return 0


def cmd_run_export(args: argparse.Namespace) -> int:
    """A saved run's codes for one method, in the run import format."""
    from phenoforge import app_state
    from phenoforge.cli.agent import check_output_path
    from phenoforge.eval.runs import run_from_results, run_to_csv, run_to_json

    # a folder or a missing folder: one line before any work, not a traceback after it
    check_output_path("--output", args.output, f"{args.method or 'run'}.{args.format}")
    methods = app_state.saved_methods(args.run_id)  # both saved forms; an unfinished run is refused, saying so
    method = args.method or (methods[0] if len(methods) == 1 else None)
    if method not in methods:
        raise PhenoforgeError(f"run {args.run_id} has methods {', '.join(methods)}: choose one with --method")
    run = run_from_results(app_state.iter_saved_results(args.run_id, method), method)  # its rows only
    text = run_to_json(run) if args.format == "json" else run_to_csv(run)
    write_or_print(
        text, args.output, f"wrote {sum(len(v) for v in run.cohorts.values())} codes of {method} to {args.output}"
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="bring your own run: import and score it, or export a saved run")
    run_sub = run.add_subparsers(dest="run_command", required=True)
    run_import = run_sub.add_parser(
        "import", help="score a run file (CSV cohort_id,code[,rank,score] or JSON) beside built-in methods"
    )
    run_import.add_argument("file")
    run_import.add_argument("--library", required=True, help="library id or folder the run answers")
    run_import.add_argument("--name", help="the run's name (default: the file name)")
    run_import.add_argument(
        "--compare",
        nargs="*",
        default=["hybrid"],
        metavar="METHOD",
        help="built-in methods scored on the same cohorts, with paired tests (default: hybrid)",
    )
    run_import.add_argument("-k", type=positive_int("k"), default=25)
    run_import.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    run_import.add_argument("--json", action="store_true")
    run_import.add_argument("--quiet", action="store_true")
    run_import.set_defaults(func=cmd_run_import)
    run_export = run_sub.add_parser("export", help="a saved run's codes in the import format")
    run_export.add_argument("run_id")
    run_export.add_argument("--method", help="which method's codes (needed when the run has several)")
    run_export.add_argument("--format", choices=["csv", "json"], default="csv")
    run_export.add_argument("-o", "--output", help="write to this file (default: standard output)")
    run_export.set_defaults(func=cmd_run_export)
