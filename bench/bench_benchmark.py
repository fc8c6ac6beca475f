"""Benchmark speed: bundled libraries x the four reference methods and x every method (with the
set builders), the scale library x the four, warm; cold one-cohort CLI runs; peak RSS.

Each warm figure is median (min-max) over ``--runs`` after one warm-up run. The four reference
methods and every method are timed alternately in the same runs, so the ratio (issue 9: <= 2x) holds on
a noisy machine. ``--one-at-a-time`` also times the competing approach of issue 11's first pass: the
same benchmark with every query retrieved one at a time (no batched prefetch). The cold figures are
the wall time of fresh ``python -m phenoforge benchmark`` processes on one cohort, with the four
reference methods and with the default (every method). Peak RSS is printed for this process and for
each fresh process (those run first, while this process is small: a child's peak starts at its
parent's).

Warm runs start without remembered query vectors (``DenseRetriever.clear_query_cache`` before each
timed run: the query embedding stays in every figure; ``--keep-query-cache`` times it as a
long-running process, e.g. the dashboard, sees it). ``--builders-one-at-a-time`` also times every
method with the set builders asked one cohort at a time (no ``predict_batch``: the competing
approach to the batch step), alternately with the default. ``--whole-cli`` times the issue-9
figure itself: fresh ``python -m phenoforge benchmark --quiet`` processes over every bundled
library, the four reference methods and all methods alternately, each with its own peak RSS.

    python bench/bench_benchmark.py                 # needs data/ built (vocabulary, libraries, dense)
    python bench/bench_benchmark.py --runs 3 --skip scale
    python bench/bench_benchmark.py --runs 3 --skip scale cold --whole-cli --builders-one-at-a-time
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_speed import compare, cpu_flags, spread  # noqa: E402
from phenoforge.engine.curated import list_libraries, load_library  # noqa: E402
from phenoforge.engine.db import connect  # noqa: E402
from phenoforge.engine.dense import load_dense_if_ready  # noqa: E402
from phenoforge.eval.harness import ALL_METHODS, registered_methods, run_benchmark  # noqa: E402
from phenoforge.libraries.bundled import BUNDLED_DIRS  # noqa: E402
from phenoforge.libraries.scale import build_scale_library  # noqa: E402
from phenoforge.memory import fix_mmap_threshold  # noqa: E402
from phenoforge.methods import retrieval as retrieval_module  # noqa: E402
from phenoforge.methods.registry import builtin_methods  # noqa: E402
from phenoforge.setbuild.builders import builder_names  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class _OneAtATime:
    """Hides a retriever's batch ``rankings``: what every query cost before batched prefetch."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        return self._inner.ranking(query, n)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        if name == "rankings":
            raise AttributeError(name)
        return getattr(self._inner, name)


@contextmanager
def one_query_at_a_time():  # noqa: ANN201
    original = retrieval_module.get_bm25_index
    retrieval_module.get_bm25_index = lambda con: _OneAtATime(original(con))  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        retrieval_module.get_bm25_index = original


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def warm_pair(label: str, run: Callable[[object], object], dense: object, runs: int) -> None:
    run(dense)  # warm: hierarchy, BM25 index, model, int8 session, cohort files in the page cache
    ours, theirs = [], []
    for _run in range(runs):
        ours.append(timed(lambda: run(dense)))
        with one_query_at_a_time():
            theirs.append(timed(lambda: run(_OneAtATime(dense) if dense is not None else None)))
    compare(label, "batched prefetch (default)", "one query at a time", ours, theirs, "s")


@contextmanager
def builders_one_at_a_time():  # noqa: ANN201
    """The set builders without their batch step: what a run cost before ``predict_batch``."""
    methods = builtin_methods()
    saved = {name: methods[name].predict_batch for name in builder_names()}
    for name in builder_names():
        methods[name].predict_batch = None
    try:
        yield
    finally:
        for name, batch in saved.items():
            methods[name].predict_batch = batch


def warm_four_and_seven(
    label: str,
    run: Callable[[list[str]], object],
    runs: int,
    forget: Callable[[], None],
    one_at_a_time: bool = False,
) -> None:
    """The four reference methods and every registered method, alternately in the same runs
    (``forget`` runs before each timed run); optionally also every method with the set builders
    asked one cohort at a time."""
    every = registered_methods()
    run(every)  # warm-up: also fits or reads the set builders once per held-out group
    four, seven, single = [], [], []
    for _run in range(runs):
        forget()
        four.append(timed(lambda: run(ALL_METHODS)))
        forget()
        seven.append(timed(lambda: run(every)))
        if one_at_a_time:
            forget()
            with builders_one_at_a_time():
                single.append(timed(lambda: run(every)))
    compare(label, f"{len(ALL_METHODS)} reference methods", f"all {len(every)} methods", four, seven, "s")
    if one_at_a_time:
        compare(
            f"{label}, all {len(every)} methods",
            "set builders batched (default)",
            "set builders one cohort at a time",
            seven,
            single,
            "s",
        )


def run_child(command: list[str]) -> tuple[float, float]:
    """Wall time (s) and peak RSS (MiB) of one fresh process. Run these before this process grows:
    a child's peak RSS starts from its parent's at the fork."""
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed ({status})")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def fresh_processes(label: str, commands: dict[str, list[str]], runs: int) -> None:
    """Two commands alternately in fresh processes: times, same-run ratio, each one's peak RSS."""
    (ours, ours_command), (theirs, theirs_command) = commands.items()
    times: dict[str, list[float]] = {ours: [], theirs: []}
    peaks: dict[str, list[float]] = {ours: [], theirs: []}
    for _run in range(runs):
        for name, command in ((ours, ours_command), (theirs, theirs_command)):
            seconds, peak = run_child(command)
            times[name].append(seconds)
            peaks[name].append(peak)
    compare(label, ours, theirs, times[ours], times[theirs], "s")
    ours_peak, theirs_peak = spread(peaks[ours], digits=0), spread(peaks[theirs], digits=0)
    print(f"  peak RSS of each process (MiB): {ours} {ours_peak}; {theirs} {theirs_peak}")


def cold_cli(library: str, cohort: str, runs: int) -> None:
    base = [sys.executable, "-m", "phenoforge", "benchmark", "--library", library, "--cohorts", cohort, "--quiet"]
    fresh_processes(
        f"cold one-cohort CLI benchmark ({library} {cohort}), wall time of a fresh process (s)",
        {f"--methods {' '.join(ALL_METHODS)}": [*base, "--methods", *ALL_METHODS], "default (all methods)": base},
        runs,
    )


def whole_cli(runs: int) -> None:
    """Issue 9's figure: whole ``benchmark --quiet`` processes, 4 reference methods and all, alternately."""
    base = [sys.executable, "-m", "phenoforge", "benchmark", "--quiet"]
    fresh_processes(
        "whole CLI benchmark, every bundled library, fresh processes (s)",
        {f"--methods {' '.join(ALL_METHODS)}": [*base, "--methods", *ALL_METHODS], "all methods (default)": base},
        runs,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], choices=["bundled", "scale", "cold"])
    parser.add_argument(
        "--one-at-a-time", action="store_true", help="also time every query retrieved one at a time (4 methods)"
    )
    parser.add_argument(
        "--builders-one-at-a-time",
        action="store_true",
        help="also time all methods with the set builders asked one cohort at a time (no batch step)",
    )
    parser.add_argument("--keep-query-cache", action="store_true", help="keep query vectors between warm runs")
    parser.add_argument("--whole-cli", action="store_true", help="time whole `benchmark --quiet` processes (issue 9)")
    args = parser.parse_args()
    fix_mmap_threshold()  # as the CLI does
    print(f"CPU: {cpu_flags()}")
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    # fresh processes first, while this one is small (a child's peak RSS starts from its parent's)
    if args.whole_cli:
        whole_cli(args.runs)
    if "cold" not in args.skip:
        library = next(lib for lib in list_libraries() if lib.path.name in BUNDLED_DIRS)
        cold_cli(library.library_id, library.cohort_ids[0], args.runs)
    con = connect()
    dense = load_dense_if_ready(con)
    if dense is None:
        print("no ready dense index: the dense method is skipped (build it with `python -m phenoforge build`)")
    else:
        print(f"dense index: {dense.status.message()}")
    bundled = [library for library in list_libraries() if library.path.name in BUNDLED_DIRS]
    n_bundled = sum(len(library.cohort_ids) for library in bundled)

    def bundled_run(retriever: object, methods: list[str] = ALL_METHODS) -> None:
        for library in bundled:
            run_benchmark(con, library.path, library.cohort_ids, methods=methods, dense=retriever)

    def forget() -> None:
        if dense is not None and not args.keep_query_cache:
            dense.clear_query_cache()

    if "bundled" not in args.skip:
        names = ", ".join(library.library_id for library in bundled)
        warm_four_and_seven(
            f"bundled libraries ({names}): {n_bundled} cohorts, warm (s)",
            lambda methods: bundled_run(dense, methods),
            args.runs,
            forget,
            args.builders_one_at_a_time,
        )
        if args.one_at_a_time:
            warm_pair(f"bundled libraries: {n_bundled} cohorts x 4 methods, warm (s)", bundled_run, dense, args.runs)
        print(f"  peak RSS of this process so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if "scale" not in args.skip:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            path = build_scale_library(con, Path(tmp) / "scale")
            scale = load_library(path)
            print(f"\nscale library: {len(scale.cohort_ids)} cohorts written in {time.perf_counter() - started:.1f} s")

            def scale_run(retriever: object) -> None:
                run_benchmark(con, scale.path, scale.cohort_ids, methods=ALL_METHODS, dense=retriever)

            label = f"scale library: {len(scale.cohort_ids)} cohorts x 4 methods, warm (s)"
            if args.one_at_a_time:
                warm_pair(label, scale_run, dense, args.runs)
            else:
                scale_run(dense)
                times = []
                for _run in range(args.runs):
                    forget()
                    times.append(timed(lambda: scale_run(dense)))
                print(f"{label}\n  {spread(times)} s (median (min-max) over {len(times)} runs)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of this process (warm runs above): {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
