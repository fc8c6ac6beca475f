"""Issue 31, target 3: a ~2,000-cohort library x every method, whole CLI and warm, before beside after.

Each figure is a fresh child process, so its peak RSS is its own: wall time, user and system CPU seconds
(``os.wait4``), peak RSS, and the size of the report it wrote. Trees are timed alternately (``--tree``
names each one: a checkout of the code before the change and this one), medians (min-max) over
``--runs``.

* ``cli``: ``python -m phenoforge benchmark --library LIB --json > report.json`` (every method, the
  default), what a user runs; the report's bytes are compared between trees (``cmp``: the same scores).
* ``warm``: one process runs the library once (fits read, indexes loaded, pages cached), then times
  ``--warm-runs`` more runs through the reference API (``run_benchmark``), the report written as the
  CLI writes it; the figure is the median timed run, with the CPU seconds of that run and the process's
  peak RSS.

    python -m phenoforge library build-scale          # the test set: every ICD-10-CM category (~1,900)
    python bench/bench_scale.py --tree before=/path/to/old/checkout --tree after=. --runs 3
    python bench/bench_scale.py --tree after=. --runs 1 --skip cli   # the warm figure only
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_speed import cpu_flags, spread  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

WARM_CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from phenoforge.memory import fix_mmap_threshold
fix_mmap_threshold()
from phenoforge.engine.curated import load_library
from phenoforge.engine.db import connect
from phenoforge.engine.dense import load_dense_if_ready
from phenoforge.eval.harness import registered_methods, run_benchmark
from phenoforge.libraries.resolve import resolve_library_dirs

library_arg, out_path, runs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
con = connect()
dense = load_dense_if_ready(con)
(path,) = resolve_library_dirs([library_arg])
library = load_library(path)
methods = registered_methods()
try:
    from phenoforge.eval.report_stream import JsonReportWriter
except ImportError:
    JsonReportWriter = None

def one_run():
    with open(out_path, "w", encoding="utf-8") as out:
        if JsonReportWriter is None:  # the code before streaming: the whole report, then its JSON
            report = run_benchmark(con, path, library.cohort_ids, methods=methods, dense=dense)
            text = json.dumps(report.model_dump(), indent=1).replace("\n", "\n ")
            out.write("{\n " + json.dumps(library.library_id) + ": " + text + "\n}\n")
            return
        writer = JsonReportWriter(out)
        writer.begin(library.library_id)
        report = run_benchmark(con, path, library.cohort_ids, methods=methods, dense=dense, sink=writer.add)
        writer.end(report)
        writer.close()

one_run()  # warm-up
for _ in range(runs):
    if dense is not None:
        dense.clear_query_cache()  # the query embedding stays in every timed run
    before = os.times()
    started = time.perf_counter()
    one_run()
    wall = time.perf_counter() - started
    after = os.times()
    print(json.dumps({"wall": wall, "user": after.user - before.user, "sys": after.system - before.system,
                      "size": out_path.stat().st_size}), flush=True)
print(json.dumps({"peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
"""


def child(command: list[str], cwd: Path, stdout: Path) -> dict[str, float]:
    """Wall, user, sys seconds and peak RSS (MiB) of one fresh process writing ``stdout``."""
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    started = time.perf_counter()
    with open(stdout, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.PIPE, env=env)
        assert process.stderr is not None
        err = process.stderr.read()
        _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status != 0:
        raise SystemExit(f"{' '.join(command)} in {cwd} failed ({status}):\n{err.decode()[-2000:]}")
    return {
        "wall": wall,
        "user": usage.ru_utime,
        "sys": usage.ru_stime,
        "peak_mib": usage.ru_maxrss / 1024,
        "size": stdout.stat().st_size,
    }


def show(label: str, figures: list[dict[str, float]]) -> None:
    def column(key: str, scale: float = 1.0) -> list[float]:
        return [f[key] / scale for f in figures]

    cpu = [f["user"] + f["sys"] for f in figures]
    print(
        f"  {label}: wall {spread(column('wall'))} s; CPU user {spread(column('user'))} s + sys "
        f"{spread(column('sys'))} s = {spread(cpu)} s; peak RSS {spread(column('peak_mib'), digits=0)} MiB; "
        f"report {spread(column('size', 1 << 20))} MiB ({len(figures)} run(s))"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default="icd10cm-categories", help="library id or folder (default: build-scale's)")
    parser.add_argument(
        "--tree", action="append", required=True, metavar="NAME=PATH", help="a checkout to time (repeatable)"
    )
    parser.add_argument("--runs", type=int, default=3, help="fresh CLI processes per tree")
    parser.add_argument("--warm-runs", type=int, default=2, help="timed runs in the warm process (after a warm-up)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["cli", "warm"])
    parser.add_argument("--keep", type=Path, help="copy each tree's CLI report here (for bench/compare_reports.py)")
    parser.add_argument(
        "--warm-trees",
        nargs="*",
        help="the trees given the warm figure (default: every tree; the code before "
        "streaming takes ~3x a whole CLI run for it on a busy 2-core machine)",
    )
    args = parser.parse_args()
    trees = dict(spec.split("=", 1) for spec in args.tree)
    print(f"CPU: {cpu_flags()}")
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"library {args.library}; data {os.environ.get('PHENOFORGE_DATA_DIR', '(default)')}")
    with tempfile.TemporaryDirectory() as tmp:
        reports = {name: Path(tmp) / f"{name}.json" for name in trees}
        if "cli" not in args.skip:
            print("\nwhole CLI: `python -m phenoforge benchmark --library LIB --json > report.json`, every method")
            figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _run in range(args.runs):
                for name, tree in trees.items():
                    command = [sys.executable, "-m", "phenoforge", "benchmark", "--library", args.library, "--json"]
                    figures[name].append(child(command, Path(tree).resolve(), reports[name]))
                    print(f"    {name}: {figures[name][-1]}", flush=True)
            for name in trees:
                show(name, figures[name])
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(reports[name], args.keep / f"{name}.json")
            names = list(trees)
            for other in names[1:]:
                same = filecmp.cmp(reports[names[0]], reports[other], shallow=False)
                print(f"  report of {other} {'identical to' if same else 'DIFFERS from'} {names[0]}'s (byte for byte)")
        if "warm" not in args.skip:
            print(f"\nwarm: one process, a warm-up run, then {args.warm_runs} timed run(s) (query vectors cleared)")
            for name, tree in trees.items():
                if args.warm_trees is not None and name not in args.warm_trees:
                    continue
                lines = Path(tmp) / f"{name}-warm.txt"
                command = [sys.executable, "-c", WARM_CHILD, args.library, str(reports[name]), str(args.warm_runs)]
                outer = child(command, Path(tree).resolve(), lines)
                parsed = [json.loads(line) for line in lines.read_text().splitlines() if line.startswith("{")]
                timed = [p for p in parsed if "wall" in p]
                peak = next(p["peak_mib"] for p in parsed if "peak_mib" in p)
                for item in timed:
                    item["peak_mib"] = peak
                show(f"{name} (whole process {outer['wall']:.0f} s)", timed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
