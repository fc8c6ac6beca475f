"""``python -m phenoforge``: build, search, look up, benchmark, sweep, and the library commands.

Sub-command groups owned by other modules register themselves here (``register_cli``), so this file
only wires them in. Every handler returns an exit code; user errors print one line, no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from phenoforge.config import ProgressCallback, vocab_db_path
from phenoforge.errors import PhenoforgeError

DEFAULT_SWEEP_WEIGHTS = [round(step / 10, 1) for step in range(11)]


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[ProgressCallback]:
    """A tqdm bar on stderr driven by ``progress(done, total, message)`` calls."""
    from tqdm import tqdm

    bar: dict[str, tqdm] = {}

    def update(done: int, total: int, message: str) -> None:
        if not enabled:
            return
        current = bar.get("bar")
        # a new bar per stage: a stage starts at done == 0 or changes its total
        if current is None or done == 0 or current.total != total:
            if current is not None:
                current.close()
            current = bar["bar"] = tqdm(total=total, desc=message, file=sys.stderr, leave=False)
        current.set_description(message, refresh=False)
        current.n = done
        current.refresh()

    try:
        yield update
    finally:
        if "bar" in bar:
            bar["bar"].close()


def _connect():  # noqa: ANN202 - a DuckDB connection
    from phenoforge.engine.db import connect

    return connect()


def _dense_or_none(con, wanted: bool, build: bool = False, progress: ProgressCallback | None = None):  # noqa: ANN001, ANN202
    """The dense retriever when its index is ready (or built on request); None otherwise."""
    if not wanted:
        return None
    from phenoforge.engine import dense as dense_module

    if build:
        return dense_module.ensure_dense_index(con, progress=progress)
    retriever = dense_module.load_dense_if_ready(con)
    if retriever is None:
        print("note: the dense index is not built; dense methods are skipped "
              "(build it with `python -m phenoforge build`)", file=sys.stderr)
    return retriever


def resolve_library_dirs(names: list[str] | None) -> list[Path]:
    """Library folders by id, folder name or path; every installed library when none is named."""
    from phenoforge.engine.curated import list_libraries

    if names and all((Path(name) / "manifest.json").is_file() for name in names):
        return [Path(name) for name in names]
    broken: list[str] = []
    installed = list_libraries(errors=broken)
    if not names:
        if broken:
            raise PhenoforgeError(broken[0])
        if not installed:
            raise PhenoforgeError("no cohort library is installed: run `python -m phenoforge build`")
        return [library.path for library in installed]
    found = []
    for name in names:
        match = [lib.path for lib in installed if name in (lib.library_id, lib.path.name)]
        if match:
            found.append(match[0])
        elif (Path(name) / "manifest.json").is_file():
            found.append(Path(name))
        else:
            known = ", ".join(lib.path.name for lib in installed) or "none"
            hint = f"; broken: {broken[0]}" if broken else ""
            raise PhenoforgeError(f"no library {name!r} (installed: {known}){hint}")
    return found


def cmd_build(args: argparse.Namespace) -> int:
    from phenoforge.engine.db import connect, ensure_vocabulary, vocabulary_info

    started = time.perf_counter()
    with progress_bar(not args.quiet) as progress:
        if args.athena:
            from phenoforge.athena.loader import load_athena

            report = load_athena(Path(args.athena), vocab_db_path(), progress=progress)
            print(report.summary())
        else:
            ensure_vocabulary(progress=progress, force=args.force)
        con = connect()
        info = vocabulary_info(con)
        print(f"vocabulary: {info.vocabulary_release}, {info.n_icd10cm:,} ICD-10-CM nodes "
              f"({info.n_billable:,} billable), built {info.built_at}")
        if not args.skip_libraries:
            from phenoforge.engine.libraries import build_bundled_libraries

            for manifest in build_bundled_libraries(con, progress=progress, force=args.force):
                print(f"library {manifest.library_id}: {manifest.stats.n_cohorts} cohorts, "
                      f"{manifest.stats.n_listed_codes:,} codes, "
                      f"{manifest.stats.n_codes_not_in_vocabulary} not in the vocabulary")
        if not args.no_dense:
            retriever = _dense_or_none(con, True, build=True, progress=progress)
            status = retriever.status
            print(f"dense index: {status.state}, {status.count:,} codes ({status.model}, {status.mode}), "
                  f"built {status.built_at}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from phenoforge.engine.hybrid import search_concepts

    con = _connect()
    methods = ["bm25", "dense", "hybrid"] if args.method == "all" else [args.method]
    dense = _dense_or_none(con, any(method in ("dense", "hybrid") for method in methods))
    output = {}
    for method in methods:
        result = search_concepts(con, args.query, method=method, k=args.k, dense=dense,
                                 dense_weight=args.dense_weight)
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
    print(f"descendants: {len(children)}" + (f" ({', '.join(children[:10])}{' ...' if len(children) > 10 else ''})"
                                            if children else ""))
    return 0


def _benchmark_table(report) -> str:  # noqa: ANN001
    lines = [f"{'method':<20}{'cohorts':>8}{'coverage':>10}{'over-incl':>11}{'hier.':>8}{'exact F1':>10}"]
    counts: dict[str, int] = {}
    for result in report.results:
        counts[result.method] = counts.get(result.method, 0) + 1
    for method in report.mean_hierarchical_score_by_method:
        lines.append(
            f"{method:<20}{counts[method]:>8}{report.mean_coverage_by_method[method]:>10.3f}"
            f"{report.mean_over_inclusion_by_method[method]:>11.3f}"
            f"{report.mean_hierarchical_score_by_method[method]:>8.3f}"
            f"{report.mean_exact_f1_by_method.get(method, 0.0):>10.3f}"
        )
    return "\n".join(lines)


def cmd_benchmark(args: argparse.Namespace) -> int:
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import ALL_METHODS, run_benchmark

    con = _connect()
    methods = args.methods or ALL_METHODS
    dense = _dense_or_none(con, not args.no_dense and any(m in ("dense", "hybrid") for m in methods))
    reports = {}
    with progress_bar(not args.quiet and not args.json) as progress:
        for library_dir in resolve_library_dirs(args.library):
            library = load_library(library_dir)
            cohort_ids = args.cohorts or library.cohort_ids
            started = time.perf_counter()
            report = run_benchmark(con, library_dir, cohort_ids, methods=methods, dense=dense, k=args.k,
                                   fanout_threshold=args.fanout_threshold, dense_weight=args.dense_weight,
                                   progress=progress)
            reports[library.library_id] = report
            if not args.json:
                print(f"\n{library.manifest.name} ({library.library_id}): {len(cohort_ids)} cohorts, "
                      f"k={args.k}, dense_weight={args.dense_weight}, {time.perf_counter() - started:.1f} s")
                print(_benchmark_table(report))
                if report.skipped:
                    print(f"skipped: {len(report.skipped)} (e.g. {report.skipped[0]})")
    if args.json:
        print(json.dumps({name: report.model_dump() for name, report in reports.items()}, indent=1))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from phenoforge.engine.curated import load_library
    from phenoforge.eval.harness import collect_rankings, rescore_hybrid

    con = _connect()
    dense = _dense_or_none(con, True)
    if dense is None:
        print("the sweep compares dense weights: it needs the dense index (`python -m phenoforge build`)",
              file=sys.stderr)
        return 1
    rows = []
    with progress_bar(not args.quiet) as progress:
        for library_dir in resolve_library_dirs(args.library):
            library = load_library(library_dir)
            cache = collect_rankings(con, library_dir, args.cohorts or library.cohort_ids, dense=dense,
                                     fanout_threshold=args.fanout_threshold, progress=progress)
            for weight in args.weights:
                report = rescore_hybrid(con, cache, weight, k=args.k)
                rows.append((library.library_id, weight, report.mean_coverage_by_method["hybrid"],
                             report.mean_over_inclusion_by_method["hybrid"],
                             report.mean_hierarchical_score_by_method["hybrid"]))
    if args.json:
        print(json.dumps([dict(zip(["library", "dense_weight", "coverage", "over_inclusion",
                                    "hierarchical_score"], row, strict=True)) for row in rows], indent=1))
        return 0
    print(f"{'library':<22}{'weight':>7}{'coverage':>10}{'over-incl':>11}{'hier.':>8}")
    for library_id, weight, coverage, penalty, score in rows:
        print(f"{library_id:<22}{weight:>7.2f}{coverage:>10.3f}{penalty:>11.3f}{score:>8.3f}")
    for library_id in dict.fromkeys(row[0] for row in rows):
        best = max((row for row in rows if row[0] == library_id), key=lambda row: row[4])
        print(f"best for {library_id}: dense_weight={best[1]:.2f} (hierarchical {best[4]:.3f})")
    return 0


def _weights(text: str) -> list[float]:
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("weights are comma-separated numbers, e.g. 0,0.25,0.5") from None
    if not weights or any(not 0.0 <= weight <= 1.0 for weight in weights):
        raise argparse.ArgumentTypeError("every weight must be between 0 and 1")
    return weights


def _unit_interval(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return value


def build_parser() -> argparse.ArgumentParser:
    from phenoforge.agent.cli import register_cli as register_agent_commands
    from phenoforge.athena import register_cli as register_athena_commands
    from phenoforge.engine.libraries import register_cli as register_library_commands

    parser = argparse.ArgumentParser(prog="python -m phenoforge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build the vocabulary, the bundled libraries and the dense index")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build.add_argument("--athena", metavar="DIR", help="load an Athena vocabulary download instead")
    build.add_argument("--no-dense", action="store_true", help="skip the dense index (about a minute)")
    build.add_argument("--skip-libraries", action="store_true", help="skip the bundled cohort libraries")
    build.add_argument("--quiet", action="store_true", help="no progress bars")
    build.set_defaults(func=cmd_build)

    search = sub.add_parser("search", help="search the vocabulary")
    search.add_argument("query")
    search.add_argument("--method", choices=["bm25", "dense", "hybrid", "all"], default="hybrid")
    search.add_argument("-k", type=_positive_int, default=10)
    search.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    lookup = sub.add_parser("lookup", help="look a code up: name, ancestors, descendants")
    lookup.add_argument("code")
    lookup.set_defaults(func=cmd_lookup)

    bench = sub.add_parser("benchmark", help="score every method against curated cohorts")
    bench.add_argument("--library", action="append", help="library id or folder (repeatable; default: all)")
    bench.add_argument("--cohorts", nargs="+", help="only these cohort ids")
    bench.add_argument("--methods", nargs="+", choices=["bm25", "dense", "hybrid", "expand_descendants"])
    bench.add_argument("-k", type=_positive_int, default=25)
    bench.add_argument("--dense-weight", type=_unit_interval, default=0.5)
    bench.add_argument("--fanout-threshold", type=_positive_int, default=100)
    bench.add_argument("--no-dense", action="store_true", help="run without the dense index")
    bench.add_argument("--json", action="store_true", help="the full report as JSON")
    bench.add_argument("--quiet", action="store_true")
    bench.set_defaults(func=cmd_benchmark)

    sweep = sub.add_parser("sweep", help="sweep hybrid dense_weight against curated ground truth")
    sweep.add_argument("--library", action="append")
    sweep.add_argument("--cohorts", nargs="+")
    sweep.add_argument("--weights", type=_weights, default=DEFAULT_SWEEP_WEIGHTS)
    sweep.add_argument("-k", type=_positive_int, default=25)
    sweep.add_argument("--fanout-threshold", type=_positive_int, default=100)
    sweep.add_argument("--json", action="store_true")
    sweep.add_argument("--quiet", action="store_true")
    sweep.set_defaults(func=cmd_sweep)

    library = sub.add_parser("library", help="cohort libraries: import, list, fetch-ohdsi")
    library_sub = library.add_subparsers(dest="library_command", required=True)
    # sub-command groups owned by other modules add their own commands
    register_agent_commands(sub)
    register_library_commands(library_sub)
    register_athena_commands(library_sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
