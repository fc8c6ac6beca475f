"""Build time of the bundled cohort libraries and of a large CSV import, as medians over runs.

    python bench/bench_libraries.py            # uses data/vocab.duckdb (built if missing)
    python bench/bench_libraries.py --runs 5

Prints: a forced build of all three bundled libraries (Elixhauser, CMS-HCC V28, V24) into a
temporary folder, each library's share of it, the up-to-date check that every later start pays,
an import of a 50,000-row CSV, and the cohort / code / not-in-FY2026 counts of the build. The
machines are shared and noisy: read medians, not single runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def report(name: str, seconds: list[float]) -> None:
    print(
        f"{name:<46} median {statistics.median(seconds):8.3f} s   "
        f"min {min(seconds):8.3f}   max {max(seconds):8.3f}   (n={len(seconds)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from phenoforge.engine.db import connect
    from phenoforge.engine.expansion import get_hierarchy
    from phenoforge.libraries import (
        build_bundled_libraries,
        import_library_csv,
        read_cms_hcc,
        read_elixhauser,
    )

    con = connect()
    hierarchy = get_hierarchy(con)  # warm: the hierarchy is shared by every later call
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "libraries"
        builds = [timed(lambda: build_bundled_libraries(con, root=root, force=True)) for _ in range(args.runs)]
        report("bundled libraries, forced build (all 3)", builds)
        report("  read Elixhauser xlsx", [timed(read_elixhauser) for _ in range(args.runs)])
        report("  read CMS-HCC V28 csv", [timed(lambda: read_cms_hcc("V28")) for _ in range(args.runs)])
        report("  read CMS-HCC V24 csv", [timed(lambda: read_cms_hcc("V24")) for _ in range(args.runs)])
        report(
            "bundled libraries, up-to-date check",
            [timed(lambda: build_bundled_libraries(con, root=root)) for _ in range(args.runs)],
        )
        manifests = build_bundled_libraries(con, root=root)

        rng = random.Random(0)
        codes = [code for code in hierarchy.code.values() if "-" not in code and code[0].isalpha()]
        csv_path = Path(tmp) / "big.csv"
        with open(csv_path, "w", encoding="utf-8") as handle:
            handle.write("cohort_id,cohort_name,code,description\n")
            for row in range(50_000):
                cohort = row % 500
                handle.write(f"c{cohort},Cohort {cohort},{rng.choice(codes)},\n")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imports = [
                timed(lambda run=run: import_library_csv(con, csv_path, Path(tmp) / f"imp{run}"))
                for run in range(args.runs)
            ]
        report("CSV import, 50,000 rows / 500 cohorts", imports)

    print()
    print(f"{'library':<22}{'cohorts':>8}{'codes':>8}{'pairs':>8}{'not in FY2026':>15}")
    for manifest in manifests:
        stats = manifest.stats
        print(
            f"{manifest.library_id:<22}{stats.n_cohorts:>8}{stats.n_listed_codes:>8}"
            f"{manifest.report['n_cohort_code_pairs']:>8}{stats.n_codes_not_in_vocabulary:>15}"
            f"  {', '.join(stats.codes_not_in_vocabulary[:10])}"
        )
    con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
