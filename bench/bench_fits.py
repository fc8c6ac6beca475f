"""The CPU seconds of every set-builder fit a fresh ``build`` makes, and the scores they give (issues 31 and 39).

    python bench/bench_fits.py --data /path/to/data [--reference before.json] [--runs 3] [--shipped]
        [--choose] [--as-avx2]

``--choose`` makes the fits choose the membership models' rules and tree variants out of fold here, as
``scripts/ship_fits.py`` does (``PHENOFORGE_FIT_CHOICES=choose``); by default a local fit takes the choices
shipped with the fits and fits each model once. ``--as-avx2`` runs the build and the benchmark as an AVX2
laptop would (its CPU flags, numpy and OpenBLAS on their AVX2 kernels, ONNX Runtime's unfused kernels; see
``tests/setbuild/test_shipped_fits_other_cpu.py``).

Copies the data folder's vocabulary, libraries, BM25 and dense index (not ``models/``, except the sentence
model's ONNX export, which is the dense index's and not a fit) into a temporary folder, runs
``python -m phenoforge build`` there (which finds everything but the fits current, so it fits), and reads the
child's own CPU time, system time, peak RSS and minor page faults from ``wait4``. Then runs
``python -m phenoforge benchmark --json`` on the result and, given a reference report from before, prints
the largest change of each library's mean hierarchical score and exact F1 per method (out of sample: each
library is scored by builders fitted without its group).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEFORE = {"cpu_s": 895.0, "sys_s": 291.0, "wall_s": 1413.0, "rss_gb": 1.56}
"""The issue's figures for the same fits before (AVX-512 + bf16 machine of this kind)."""
TARGET_CPU_S = 120.0
TARGET_SYS_SHARE = 0.10


def cpu_flags() -> str:
    text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    name = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    flags = set(re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    wanted = sorted(f for f in flags if f.startswith(("avx", "amx")) or f in {"fma", "f16c"})
    return f"{name.group(1).strip() if name else 'unknown CPU'}, {os.cpu_count()} cores; {' '.join(wanted)}"


def fresh_copy(source: Path, target: Path) -> None:
    for entry in source.iterdir():
        if entry.name == "models":
            (target / "models").mkdir(parents=True)
            for export in entry.glob("*.onnx"):  # the sentence model's export: made by the dense index step
                shutil.copy2(export, target / "models" / export.name)
        elif entry.is_dir():
            shutil.copytree(entry, target / entry.name)
        else:
            shutil.copy2(entry, target / entry.name)


def run_measured(command: list[str], env: dict[str, str], log: Path) -> dict[str, float]:
    started = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed; see {log}")
    return {
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_gb": usage.ru_maxrss / 1e6,
        "minor_faults": float(usage.ru_minflt),
    }


def means(report: dict) -> dict[tuple[str, str, str], float]:  # type: ignore[type-arg]
    out = {}
    for library, part in report.items():
        for measure in ("mean_hierarchical_score_by_method", "mean_exact_f1_by_method"):
            for method, value in part[measure].items():
                out[(library, method, measure.split("_by_")[0].removeprefix("mean_"))] = float(value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=REPO / "data", help="a built data folder (vocabulary, libraries, dense)"
    )
    parser.add_argument(
        "--reference", type=Path, help="a `benchmark --json` report from before, to compare scores with"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="keep the last run's data folder here")
    parser.add_argument(
        "--shipped", action="store_true", help="let the build install the shipped fits (default: fit everything here)"
    )
    parser.add_argument(
        "--choose", action="store_true", help="choose rules and variants out of fold here (as scripts/ship_fits.py)"
    )
    parser.add_argument("--as-avx2", action="store_true", help="run as an AVX2 laptop would (simulated)")
    args = parser.parse_args()
    print(f"CPU: {cpu_flags()}")
    runs: list[dict[str, float]] = []
    report: dict | None = None  # type: ignore[type-arg]
    for number in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-fits-") as tmp:
            data = Path(tmp) / "data"
            fresh_copy(args.data.resolve(), data)
            env = os.environ | {"PHENOFORGE_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
            # the fits themselves, not the shipped ones a fresh build would install (--shipped: that path)
            env["PHENOFORGE_SHIPPED_FITS"] = "1" if args.shipped else "0"
            env["PHENOFORGE_FIT_CHOICES"] = "choose" if args.choose else "shipped"
            if args.as_avx2:
                from phenoforge.simulated_cpu import as_avx2_laptop

                env = as_avx2_laptop(env, Path(tmp) / "cpuinfo")
            figures = run_measured(
                [sys.executable, "-m", "phenoforge", "build", "--keep-stale"], env, Path(tmp) / "build.log"
            )
            runs.append(figures)
            print(
                f"run {number + 1}: {figures['cpu_s']:.0f} CPU-s ({figures['user_s']:.0f} user + "
                f"{figures['sys_s']:.0f} system), {figures['wall_s']:.0f} s wall, peak RSS {figures['rss_gb']:.2f} GB, "
                f"{figures['minor_faults'] / 1e6:.1f} M minor page faults",
                flush=True,
            )
            if number == args.runs - 1:
                bench = subprocess.run(
                    [sys.executable, "-m", "phenoforge", "benchmark", "--json", "--quiet"],
                    cwd=REPO,
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                report = json.loads(bench.stdout)
                if args.keep:
                    shutil.rmtree(args.keep, ignore_errors=True)
                    shutil.copytree(data, args.keep)
    cpu = statistics.median(r["cpu_s"] for r in runs)
    system = statistics.median(r["sys_s"] for r in runs)
    how = "installed from the shipped bundles" if args.shipped else "fitted here (PHENOFORGE_SHIPPED_FITS=0)"
    how += ", choices made here" if args.choose else ", the shipped choices"
    how += ", as an AVX2 laptop (simulated)" if args.as_avx2 else ""
    print(f"\nfits of a fresh build, {how}, median of {len(runs)}:")
    print(f"  CPU seconds   {cpu:7.0f}   (before {BEFORE['cpu_s']:.0f}; target <= {TARGET_CPU_S:.0f})")
    print(
        f"  system share  {system / cpu:7.1%}   (before {BEFORE['sys_s'] / BEFORE['cpu_s']:.0%}; "
        f"target <= {TARGET_SYS_SHARE:.0%})"
    )
    print(f"  wall seconds  {statistics.median(r['wall_s'] for r in runs):7.0f}   (before {BEFORE['wall_s']:.0f})")
    print(f"  peak RSS GB   {statistics.median(r['rss_gb'] for r in runs):7.2f}   (before {BEFORE['rss_gb']:.2f})")
    if args.reference and report is not None:
        before, after = means(json.loads(args.reference.read_text())), means(report)
        print("\nout-of-sample means, change against the reference (library, method, measure):")
        worst = 0.0
        for key in sorted(set(before) & set(after)):
            change = after[key] - before[key]
            worst = max(worst, abs(change))
            if abs(change) >= 0.0005:
                print(f"  {key[0]:22} {key[1]:18} {key[2]:20} {before[key]:.4f} -> {after[key]:.4f} ({change:+.4f})")
        print(f"largest change {worst:.4f} (target: within 0.005, or explained)")
        print("\nmean(hierarchical, exact F1) of each library's best set builder, reference -> this run:")
        builders = ("adaptive_cutoff", "curated_transfer", "learned", "subtree")
        libraries = sorted({key[0] for key in before})
        totals = [0.0, 0.0]
        for library in libraries:
            row = []
            for side in (before, after):
                objective = {
                    m: (side[(library, m, "hierarchical_score")] + side[(library, m, "exact_f1")]) / 2
                    for m in builders
                    if (library, m, "exact_f1") in side
                }
                best = max(objective, key=objective.__getitem__)
                row.append((best, objective[best]))
            totals[0] += row[0][1] / len(libraries)
            totals[1] += row[1][1] / len(libraries)
            change = row[1][1] - row[0][1]
            print(f"  {library:22} {row[0][0]:17} {row[0][1]:.4f} -> {row[1][0]:17} {row[1][1]:.4f} ({change:+.4f})")
        change = totals[1] - totals[0]
        print(f"  {'mean over libraries':22} {'':17} {totals[0]:.4f} -> {'':17} {totals[1]:.4f} ({change:+.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
