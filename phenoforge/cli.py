"""``python -m phenoforge``: build, search, look up, benchmark, sweep, and the library commands.

Sub-command groups owned by other modules register themselves here (``register_cli``), so this file
only wires them in. Every handler returns an exit code; user errors print one line, no traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from phenoforge.config import DEFAULT_PLUGIN_TIMEOUT, ProgressCallback, vocab_db_path
from phenoforge.console import dense_unavailable_message, positive_int, progress_bar
from phenoforge.errors import PhenoforgeError
from phenoforge.libraries.resolve import resolve_library_dirs
from phenoforge.memory import fix_mmap_threshold
from phenoforge.setbuild.builders import builder_names

DEFAULT_SWEEP_WEIGHTS = [round(step / 10, 1) for step in range(11)]


def _connect():  # noqa: ANN202 - a DuckDB connection
    from phenoforge.engine.db import connect

    return connect()


def _dense_or_none(  # noqa: ANN202
    con,  # noqa: ANN001
    wanted: bool,
    build: bool = False,
    progress: ProgressCallback | None = None,
    precision_note: bool = True,
):
    """The dense retriever when its index is ready (or built on request); None otherwise. A ready index
    embedded in bf16 or int8 gets a note on stderr (``precision_note``: unless the caller printed it)."""
    if not wanted:
        return None
    from phenoforge.engine import dense as dense_module

    if build:
        return dense_module.ensure_dense_index(con, progress=progress)
    retriever = dense_module.load_dense_if_ready(con)
    if retriever is None:
        print(f"note: {dense_unavailable_message(dense_module.dense_index_status(con))}", file=sys.stderr)
    elif precision_note and (note := retriever.status.precision_note()) is not None:
        print(f"note: {note}", file=sys.stderr)  # a bf16 index is used as it is: say so
    return retriever


def _dense_problem(con) -> str:  # noqa: ANN001 - a DuckDB connection
    """Why the dense index cannot be used, as the report records it: 'corrupt (checksum ...)', 'missing'."""
    from phenoforge.engine.dense import dense_index_status

    status = dense_index_status(con)
    return f"{status.state} ({status.reason}); rebuild: {status.rebuild_command}" if status.reason else status.state


def cmd_build(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect, database_state, ensure_vocabulary, vocabulary_info

    started = time.perf_counter()
    with progress_bar(not args.quiet) as progress:
        if args.athena:
            from phenoforge.athena.loader import load_athena

            report = load_athena(Path(args.athena), vocab_db_path(), progress=progress)
            print(report.summary())
        else:
            was_corrupt = database_state(vocab_db_path()) == "corrupt"
            ensure_vocabulary(progress=progress, force=args.force)
            if was_corrupt:
                print(
                    "note: the vocabulary database was corrupt and has been rebuilt with a new build id; "
                    + (
                        "run `python -m phenoforge build` without --no-dense to rebuild the dense index"
                        if args.no_dense
                        else "the bundled libraries and the dense index are rebuilt next"
                    )
                )
        con = connect()
        info = vocabulary_info(con)
        print(
            f"vocabulary: {info.vocabulary_release}, {info.n_icd10cm:,} ICD-10-CM nodes "
            f"({info.n_billable:,} billable), built {info.built_at}"
        )
        if not args.skip_libraries:
            from phenoforge.libraries import build_bundled_libraries

            for manifest in build_bundled_libraries(con, progress=progress, force=args.force):
                print(
                    f"library {manifest.library_id}: {manifest.stats.n_cohorts} cohorts, "
                    f"{manifest.stats.n_listed_codes:,} codes, "
                    f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary"
                )
        if not args.no_dense:
            retriever = _dense_or_none(con, True, build=True, progress=progress)
            status = retriever.status
            print(
                f"dense index: {status.state}, {status.count:,} codes ({status.model}, {status.mode}, "
                f"{status.runtime}), built {status.built_at}"
            )
            note = status.precision_note()
            if note:
                print(f"note: {note}")
        if not args.skip_libraries and not args.no_fit:
            from phenoforge.methods.set_building import fit_for_installed_libraries

            retriever = None if args.no_dense else _dense_or_none(con, True, precision_note=False)  # said above
            for scored, fitted in fit_for_installed_libraries(con, retriever, progress):
                model = "membership model" if fitted.model is not None else "no membership model"
                print(
                    f"set builders for {scored}: fitted on {', '.join(fitted.training_libraries) or 'nothing'} "
                    f"({model})"
                )
    if not args.keep_stale:
        # everything current is written now: what no current state reads goes (a failure is a warning)
        _prune_models(con, dry_run=False, verbose=False, prefix="stale: ")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _prune_models(con, dry_run: bool, verbose: bool, prefix: str = "") -> bool:  # noqa: ANN001
    """Prune data/models against the state later commands load (the dense index when it is ready) and print what
    went (``phenoforge.prune``); False when something could not be removed."""
    from phenoforge.engine.dense import load_dense_if_ready
    from phenoforge.prune import PruneError, describe, prune

    try:
        result = prune(con, load_dense_if_ready(con), dry_run=dry_run)
    except (PruneError, PhenoforgeError) as error:  # after a build, a warning: what it built stands
        print(f"{prefix}data/models not pruned: {error}", file=sys.stderr)
        return False
    lines = describe(result, verbose=verbose)
    quiet = not verbose and not result.removed and not result.failed
    for line in lines[:-1]:
        print(f"{prefix}{line}", file=sys.stderr if line.startswith("could not") else sys.stdout)
    if not quiet:
        print(f"{prefix}{lines[-1]}")
    return not result.failed


def cmd_clean(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect, database_state

    state = database_state(vocab_db_path())
    if state != "current":  # never built here: clean does not build, and cannot tell what is current without it
        raise PhenoforgeError(
            f"the vocabulary database ({vocab_db_path()}) is {state}: which files under data/models are current "
            "cannot be told, nothing was removed; `python -m phenoforge build` builds it and then prunes"
        )
    return 0 if _prune_models(connect(build=False), dry_run=args.dry_run, verbose=True) else 1


def cmd_search(args: argparse.Namespace) -> int:
    from phenoforge.agent.lay_terms import spell_out_for_search
    from phenoforge.engine.codes import single_code_token
    from phenoforge.engine.hybrid import search_concepts

    con = _connect()
    query, notes = spell_out_for_search(con, args.query)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.method in builder_names():
        return _search_set_builder(con, args, query)
    methods = ["bm25", "dense", "hybrid"] if args.method == "all" else [args.method]
    dense = _dense_or_none(con, any(method in ("dense", "hybrid") for method in methods))
    if single_code_token(args.query) is not None:  # the hierarchy is read only for a query that may be a code
        from phenoforge.engine.expansion import get_hierarchy
        from phenoforge.methods.set_building import code_typed_as_query

        typed_code = code_typed_as_query(get_hierarchy(con), args.query)
        if typed_code is not None:  # its digits match unrelated descriptions as words: say what the code is
            code, name = typed_code
            print(
                f"note: {code} is the code of {name!r}; the rankings match description words, not "
                f"codes: `python -m phenoforge lookup {code}` shows it, `--method learned` builds "
                "a list from its name",
                file=sys.stderr,
            )
    unavailable = None
    if dense is None and "dense" in methods:  # say why in its own words: corrupt or stale is not "not built"
        from phenoforge.engine.dense import dense_index_status

        unavailable = dense_unavailable_message(dense_index_status(con), "no dense results")
    output = {}
    for method in methods:
        result = search_concepts(
            con,
            query,
            method=method,
            k=args.k,
            dense=dense,
            dense_weight=args.dense_weight,
            dense_unavailable=unavailable,
        )
        output[method] = result
        if args.json:
            continue
        print(f"== {method}" + (" (BM25 only: no dense index)" if result.degraded and method == "hybrid" else ""))
        if not result.hits:
            print(f"   no results: {result.reason}")
        for hit in result.hits:
            print(f"{hit.rank:>3}  {hit.code:<9} {hit.score:8.4f}  {hit.name}")
    if args.json:
        print(json.dumps({method: result.model_dump() for method, result in output.items()}, indent=1))
    return 0


def _search_set_builder(con, args: argparse.Namespace, query: str) -> int:  # noqa: ANN001
    from phenoforge.methods.set_building import FITTED_DENSE_WEIGHT, build_for_free_query, describe

    dense = _dense_or_none(con, True)
    with progress_bar(enabled=not args.json) as progress:
        built = build_for_free_query(con, args.method, query, dense, progress=progress)
    if args.dense_weight != FITTED_DENSE_WEIGHT:
        built.notes.append(
            f"set builders fuse at dense weight {FITTED_DENSE_WEIGHT} (what they were fitted at); "
            f"--dense-weight {args.dense_weight} applies to bm25/dense/hybrid only"
        )
    if args.json:
        print(built.model_dump_json(indent=1))
        return 0
    print(f"== {args.method}: {len(built.codes)} billable codes (fitted on {', '.join(built.trained_on) or 'nothing'})")
    for note in [*built.notes, *([built.fallback] if built.fallback else [])]:
        print(f"   note: {note}")
    for item in built.codes:
        print(f"  {item.code:<9} {item.name}")
        print(f"            why: {describe(item.provenance)}")
    return 0


def cmd_lookup(args: argparse.Namespace) -> int:
    from phenoforge.engine.expansion import expand_ancestors, expand_descendants, lookup

    con = _connect()
    concept = lookup(con, args.code)
    if concept is None:
        print(f"{args.code!r} is not an ICD-10-CM code in this vocabulary", file=sys.stderr)
        return 1
    print(f"{concept.code}  {concept.name}  [{concept.kind}{', billable' if concept.billable else ''}]")
    print("ancestors: " + " > ".join(reversed(expand_ancestors(con, concept.code))))
    children = expand_descendants(con, concept.code, include_self=False)
    print(
        f"descendants: {len(children)}"
        + (f" ({', '.join(children[:10])}{' ...' if len(children) > 10 else ''})" if children else "")
    )
    return 0


TABLE_MEASURES = ("coverage", "over_inclusion", "hierarchical", "exact_f1")


def _benchmark_table(report, measures: tuple[str, ...] = TABLE_MEASURES) -> str:  # noqa: ANN001
    """Means per method; column headers are the measures' own labels, with their direction."""
    from phenoforge.eval.measures import measure

    columns = [measure(key) for key in measures]
    heads = [f"{m.label} {'↑' if m.higher_is_better else '↓'}" for m in columns]
    width = max([20, *(len(method) + 2 for method in report.mean_hierarchical_score_by_method)])
    lines = [f"{'method':<{width}}{'cohorts':>8}" + "".join(f"{h:>{len(h) + 2}}" for h in heads)]
    counts: dict[str, int] = {}
    for result in report.results:
        counts[result.method] = counts.get(result.method, 0) + 1
    for method in report.mean_hierarchical_score_by_method:
        values = [sum(m.value(r) for r in report.results if r.method == method) / counts[method] for m in columns]
        lines.append(
            f"{method:<{width}}{counts[method]:>8}"
            + "".join(f"{v:>{len(h) + 2}.3f}" for v, h in zip(values, heads, strict=True))
        )
    for name, record in report.methods.items():
        if record.degraded:
            lines.append(f"  ! {name} is degraded: {record.degraded}")
        if record.status.startswith("failed"):
            lines.append(f"  ! {name} {record.status}")
        if record.trained_on:
            lines.append(f"  {name} trained on: {', '.join(record.trained_on)}")
        empty = [r.cohort_id for r in report.results if r.method == name and not r.predicted_codes]
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
    dumped: dict[str, str] = {}  # each library's JSON as soon as it is scored: no report object outlives its library
    with progress_bar(not args.quiet and not args.json) as progress:
        for library_dir in library_dirs:
            library = load_library(library_dir)
            cohort_ids = wanted or library.cohort_ids
            started = time.perf_counter()
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
            )
            if args.json:
                # the text ``json.dumps({id: report, ...}, indent=1)`` gives for this entry, made now
                dumped[library.library_id] = json.dumps(report.model_dump(), indent=1).replace("\n", "\n ")
            else:
                print(
                    f"\n{library.manifest.name} ({library.library_id}): {len(cohort_ids)} cohorts, "
                    f"k={args.k}, dense_weight={args.dense_weight}, {time.perf_counter() - started:.1f} s"
                )
                print(_benchmark_table(report))
                if report.skipped:
                    print(f"skipped: {len(report.skipped)} (e.g. {report.skipped[0]})")
            del report  # not alive while the next library runs
    if args.json:
        entries = [f" {json.dumps(name)}: {text}" for name, text in dumped.items()]
        print("{\n" + ",\n".join(entries) + "\n}" if entries else "{}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """A method's dense_weight per library: the in-sample best beside the cross-validated choice."""
    from phenoforge.eval.sweep import SweepError, check_sweepable, sweep_library

    method = args.method
    check_sweepable(method)  # before any work: an unsweepable method is a one-line error
    con = _connect()
    dense = _dense_or_none(con, True)
    if dense is None:
        print(
            "the sweep compares dense weights: it needs the dense index (`python -m phenoforge build`)", file=sys.stderr
        )
        return 1
    fits: dict[str, tuple[list[str], list[str]]] = {}  # library id -> (trained on, notes) of a set builder
    rows: list[tuple[str, float, float, float, float]] = []
    choices = {}
    skipped: dict[str, list[str]] = {}  # library id -> the cohorts it leaves out, as the benchmark lists them
    library_dirs = resolve_library_dirs(args.library, bundled_only=True)
    cohort_ids = _cohorts_in_every_library(library_dirs, args.cohorts) or None
    with progress_bar(not args.quiet and not args.json) as progress:
        for library_dir in library_dirs:
            swept = sweep_library(
                con,
                library_dir,
                method,
                args.weights,
                dense,
                cohort_ids=cohort_ids,
                k=args.k,
                fanout_threshold=args.fanout_threshold,
                n_folds=args.folds,
                progress=progress,
            )
            if swept.skipped:
                skipped[swept.library_id] = swept.skipped
            if swept.trained_on is not None:
                fits[swept.library_id] = (swept.trained_on, swept.notes)
            rows.extend(
                (swept.library_id, row.dense_weight, row.coverage, row.over_inclusion, row.hierarchical_score)
                for row in swept.rows
            )
            if swept.choice is not None:
                choices[swept.library_id] = swept.choice
    if not rows:
        left_out = "; ".join(line for lines in skipped.values() for line in lines[:3])
        raise SweepError(f"nothing to sweep: no chosen cohort has ground-truth codes to score against ({left_out})")
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [
                        dict(
                            zip(
                                ["library", "dense_weight", "coverage", "over_inclusion", "hierarchical_score"],
                                row,
                                strict=True,
                            )
                        )
                        for row in rows
                    ],
                    "cross_validated": {library_id: choice.model_dump() for library_id, choice in choices.items()},
                    "skipped": skipped,
                    **(
                        {
                            "method": method,
                            "fitted": {
                                library_id: {"trained_on": trained_on, "notes": notes}
                                for library_id, (trained_on, notes) in fits.items()
                            },
                        }
                        if method != "hybrid"
                        else {}
                    ),
                },
                indent=1,
            )
        )
        return 0
    if method != "hybrid":
        print(
            f"{method}: sweeping dense_weight of the fused ranking it builds from; its own parameters stay as "
            "fitted leave-one-library-group-out on the other libraries"
        )
        for library_id, (trained_on, _notes) in fits.items():
            print(f"  {library_id}: fitted on {', '.join(trained_on) or 'nothing (untuned defaults)'}")
    print(f"{'library':<22}{'weight':>7}{'coverage':>10}{'over-incl':>11}{'hier.':>8}")
    for library_id, weight, coverage, penalty, score in rows:
        print(f"{library_id:<22}{weight:>7.2f}{coverage:>10.3f}{penalty:>11.3f}{score:>8.3f}")
    for library_id, lines in skipped.items():
        print(f"{library_id}: skipped {len(lines)} cohort(s): {'; '.join(lines)}")
    for library_id, choice in choices.items():
        print(
            f"{library_id}: in-sample best dense_weight={choice.in_sample_choice:.2f} "
            f"(hierarchical {choice.in_sample_score:.3f}, chosen and scored on the same cohorts); "
            f"cross-validated {choice.out_of_sample_score:.3f} ({choice.n_folds} folds: chosen on the other "
            f"folds, scored on the held-out one; choices {', '.join(f'{c:.2f}' for c in choice.choices_per_fold)})"
        )
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    """Every method the benchmark can run: built-ins, then entry-point plug-ins."""
    from phenoforge.methods import available_methods

    for name, declared in available_methods().items():
        needs = ", ".join(sorted(declared.needs)) or "-"
        uses = f" (uses {', '.join(sorted(declared.uses))})" if declared.uses else ""
        print(f"{name:<22} needs: {needs:<14}{uses} {declared.description}")
    print("\nyour own: --methods my_module:my_function  (a function (context, task) -> codes)")
    return 0


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
    from phenoforge.agent.cli import check_output_path
    from phenoforge.eval.runs import run_from_results, run_to_csv, run_to_json

    # a folder or a missing folder: one line before any work, not a traceback after it
    check_output_path("--output", args.output, f"{args.method or 'run'}.{args.format}")
    saved = app_state.load_benchmark_run(args.run_id)
    methods = list(dict.fromkeys(r.method for r in saved.report.results))
    method = args.method or (methods[0] if len(methods) == 1 else None)
    if method not in methods:
        raise PhenoforgeError(f"run {args.run_id} has methods {', '.join(methods)}: choose one with --method")
    run = run_from_results(saved.report.results, method)
    text = run_to_json(run) if args.format == "json" else run_to_csv(run)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as error:
            raise PhenoforgeError(f"cannot write {args.output} ({error.strerror or error})") from None
        print(f"wrote {sum(len(v) for v in run.cohorts.values())} codes of {method} to {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def _weights(text: str) -> list[float]:
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("weights are comma-separated numbers, e.g. 0,0.25,0.5") from None
    if any(not 0.0 <= weight <= 1.0 for weight in weights):
        raise argparse.ArgumentTypeError("every weight must be between 0 and 1")
    from phenoforge.eval.selection import weights_problem

    problem = weights_problem(weights)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return weights


def _unit_interval(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError("a number of seconds, 0 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    from phenoforge.agent.cli import register_cli as register_agent_commands
    from phenoforge.athena import register_cli as register_athena_commands
    from phenoforge.eval.agreement import register_cli as register_agreement_commands
    from phenoforge.libraries.cli import register_cli as register_library_commands
    from phenoforge.libraries.scale import register_cli as register_scale_commands

    parser = argparse.ArgumentParser(prog="python -m phenoforge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build the vocabulary, the bundled libraries and the dense index")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build.add_argument("--athena", metavar="DIR", help="load an Athena vocabulary download instead")
    build.add_argument("--no-dense", action="store_true", help="skip the dense index (about a minute)")
    build.add_argument("--skip-libraries", action="store_true", help="skip the bundled cohort libraries")
    build.add_argument(
        "--no-fit",
        action="store_true",
        help="do not fit the set builders now (they are fitted on first use instead)",
    )
    build.add_argument(
        "--keep-stale",
        action="store_true",
        help="keep the files under data/models no current state reads (by default build removes them at the end "
        "and lists each one; see `clean`)",
    )
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=cmd_build)

    clean = sub.add_parser(
        "clean",
        help="remove stale files under data/models (old vocabulary builds, libraries, indexes, packages)",
        description="Removes what no current state reads under data/models: node tables, word counts and curated "
        "knowledge of other vocabulary builds or libraries, fitted set builders, membership models and tuned "
        "parameters no current fit uses, ONNX exports of other model packages or torch versions, temporaries of "
        "processes that no longer run. Current files, files another process holds the lock of, files it does "
        "not recognise and symbolic links are kept. `build` does this at its end.",
    )
    clean.add_argument(
        "--dry-run", action="store_true", help="list what would be removed and the bytes it would free; remove nothing"
    )
    clean.set_defaults(func=cmd_clean)

    search = sub.add_parser("search", help="search the vocabulary")
    search.add_argument("query")
    search.add_argument(
        "--method",
        choices=["bm25", "dense", "hybrid", *builder_names(), "all"],
        default="hybrid",
        help="a ranking (bm25, dense, hybrid: top k) or a set builder (adaptive_cutoff, subtree, learned, "
        "curated_transfer: a billable code list of its own size, each code with why it is there); all = the three "
        "rankings",
    )
    search.add_argument("-k", type=positive_int("k"), default=10)
    search.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    lookup = sub.add_parser("lookup", help="look a code up: name, ancestors, descendants")
    lookup.add_argument("code")
    lookup.set_defaults(func=cmd_lookup)

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
    bench.add_argument("--quiet", action="store_true")
    bench.set_defaults(func=cmd_benchmark)

    sweep = sub.add_parser(
        "sweep",
        help="sweep a method's dense_weight against curated ground truth, cross-validated over cohorts",
        description="Sweeps dense_weight: for hybrid, dense's share of the fused ranking cut at k; for a set "
        f"builder ({', '.join(builder_names())}), dense's share of the fused ranking it builds from. A set "
        "builder's own parameters (cut-off, subtree shares, membership model and threshold, transfer "
        "similarity) are fitted leave-one-library-group-out and are not re-chosen here.",
    )
    sweep.add_argument(
        "--method",
        default="hybrid",
        help=f"the method to sweep: hybrid (default) or a set builder ({', '.join(builder_names())}); "
        "-k applies to hybrid only",
    )
    sweep.add_argument(
        "--library",
        action="append",
        help="library id, folder name or path to sweep (repeatable; default: every bundled library, "
        "not imported ones); each library gets its own rows and cross-validated choice",
    )
    sweep.add_argument(
        "--cohorts",
        nargs="+",
        metavar="COHORT_ID",
        help="only these cohort ids (default: every cohort of each library); cross-validation needs at least two",
    )
    sweep.add_argument(
        "--weights",
        type=_weights,
        default=DEFAULT_SWEEP_WEIGHTS,
        metavar="W,W,...",
        help="comma-separated dense_weight values in [0, 1] to try, e.g. 0,0.25,0.5 "
        f"(default: {','.join(f'{w:g}' for w in DEFAULT_SWEEP_WEIGHTS)})",
    )
    sweep.add_argument("-k", type=positive_int("k"), default=25, help="hybrid's cut-off: codes kept (default: 25)")
    sweep.add_argument(
        "--folds",
        type=positive_int("folds"),
        default=5,
        help="cross-validation folds over cohorts for the out-of-sample figure (default: 5)",
    )
    sweep.add_argument(
        "--fanout-threshold",
        type=positive_int("fanout-threshold"),
        default=100,
        help="skip (and report) a curated concept more than this many ICD-10-CM codes map to (default: 100)",
    )
    sweep.add_argument("--json", action="store_true", help="rows, cross-validated choices and fits as JSON")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)

    methods = sub.add_parser("methods", help="list the methods the benchmark can run and what each needs")
    methods.set_defaults(func=cmd_methods)

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

    library = sub.add_parser("library", help="cohort libraries: import, list, fetch-ohdsi")
    library_sub = library.add_subparsers(dest="library_command", required=True)
    # sub-command groups owned by other modules add their own commands
    register_agent_commands(sub)
    register_agreement_commands(sub)
    register_library_commands(library_sub)
    register_athena_commands(library_sub)
    register_scale_commands(library_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    fix_mmap_threshold()  # batch work frees many large arrays: give them back to the system (peak RSS, issue 11)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        # every tqdm bar, the model loader's "Loading weights" included, reads TQDM_ options from the environment
        os.environ["TQDM_DISABLE"] = "1"
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        return int(args.func(args) or 0)
    except PhenoforgeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
