"""Time and peak memory of the Athena loader on a generated download of a few million rows.

    python bench/bench_athena_load.py                       # 4M relationship rows, 3 runs
    python bench/bench_athena_load.py --relationships 8000000 --memory-limit 512MB

Generates, under /tmp (or --dir), tab-delimited CONCEPT / CONCEPT_RELATIONSHIP / CONCEPT_ANCESTOR /
VOCABULARY files shaped like Athena's: SNOMED, ICD10CM and other vocabularies (dropped by the
loader), 'Is a' / 'Subsumes' / 'Maps to' / 'Mapped from' and noise relationships, a share of
deprecated rows. Each load runs in a fresh child process, so its peak RSS (ru_maxrss of the child)
is the loader's alone, not the generator's. Prints the median time and the largest peak RSS, plus
the input size, so "streams within stated memory" is a number: peak RSS stays near DuckDB's
memory_limit plus the interpreter, however large the files are.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def generate(folder: Path, n_relationships: int, n_ancestors: int) -> dict[str, int]:
    """Write the synthetic download with DuckDB's COPY (fast, and not what is measured)."""
    import duckdb

    folder.mkdir(parents=True, exist_ok=True)
    n_snomed, n_icd, n_other = 350_000, 100_000, 550_000
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    options = "(FORMAT csv, DELIMITER '\t', HEADER true, QUOTE '', ESCAPE '')"
    # concept ids: SNOMED 1..n_snomed, ICD10CM next, then LOINC / RxNorm-like others
    con.execute(f"""
        COPY (
            SELECT i AS concept_id,
                   CASE WHEN i <= {n_snomed} THEN 'SNOMED finding "' || i || '"'
                        WHEN i <= {n_snomed + n_icd} THEN 'ICD-10-CM code ' || i
                        ELSE 'other concept ' || i END AS concept_name,
                   CASE WHEN i <= {n_snomed + n_icd} THEN 'Condition' ELSE 'Drug' END
                       AS domain_id,
                   CASE WHEN i <= {n_snomed} THEN 'SNOMED'
                        WHEN i <= {n_snomed + n_icd} THEN 'ICD10CM'
                        WHEN i % 2 = 0 THEN 'RxNorm' ELSE 'LOINC' END AS vocabulary_id,
                   CASE WHEN i <= {n_snomed} THEN 'Clinical Finding'
                        WHEN i <= {n_snomed + n_icd} THEN
                            CASE (i % 5) WHEN 0 THEN '3-char nonbill code'
                                         WHEN 1 THEN '4-char billing code'
                                         WHEN 2 THEN '5-char billing code'
                                         WHEN 3 THEN '6-char billing code'
                                         ELSE '7-char billing code' END
                        ELSE 'Ingredient' END AS concept_class_id,
                   CASE WHEN i <= {n_snomed} OR i > {n_snomed + n_icd} THEN 'S' ELSE '' END
                       AS standard_concept,
                   CASE WHEN i <= {n_snomed} OR i > {n_snomed + n_icd} THEN CAST(i AS VARCHAR)
                        ELSE chr(CAST(65 + (i % 26) AS INTEGER)) || lpad(CAST(i % 100 AS VARCHAR), 2, '0') ||
                             '.' || CAST(i AS VARCHAR) END AS concept_code,
                   '19700101' AS valid_start_date,
                   CASE WHEN i % 50 = 0 THEN '20200101' ELSE '20991231' END AS valid_end_date,
                   CASE WHEN i % 50 = 0 THEN 'D' ELSE '' END AS invalid_reason
            FROM range(1, {n_snomed + n_icd + n_other + 1}) t(i)
        ) TO '{folder / "CONCEPT.csv"}' {options}
    """)
    icd_lo, icd_hi = n_snomed + 1, n_snomed + n_icd
    con.execute(f"""
        COPY (
            SELECT CASE kind WHEN 0 THEN {icd_lo} + ((i // 40) % {n_icd})
                             WHEN 1 THEN {icd_lo} + ((i // 40) % {n_icd})
                             WHEN 2 THEN 1 + (i % {n_snomed})
                             ELSE {icd_hi} + 1 + (i % 500000) END AS concept_id_1,
                   CASE kind WHEN 0 THEN {icd_lo} + (((i // 40) % {n_icd}) // 7)
                             WHEN 1 THEN 1 + (i * 7919 % {n_snomed})
                             WHEN 2 THEN 1 + ((i % {n_snomed}) // 3)
                             ELSE {icd_hi} + 1 + (i * 31 % 500000) END AS concept_id_2,
                   CASE kind WHEN 0 THEN 'Is a' WHEN 1 THEN 'Maps to' WHEN 2 THEN 'Is a'
                             ELSE (['Has ingredient', 'RxNorm has dose form', 'Mapped from',
                                    'Subsumes'])[1 + i % 4] END AS relationship_id,
                   '19700101' AS valid_start_date,
                   '20991231' AS valid_end_date,
                   CASE WHEN i % 97 = 0 THEN 'D' ELSE '' END AS invalid_reason
            FROM (SELECT i, CASE WHEN i % 40 = 0 THEN 0 WHEN i % 40 = 1 THEN 1
                                 WHEN i % 4 = 2 THEN 2 ELSE 3 END AS kind
                  FROM range({n_relationships}) t(i))
        ) TO '{folder / "CONCEPT_RELATIONSHIP.csv"}' {options}
    """)
    con.execute(f"""
        COPY (
            SELECT CASE WHEN i % 3 = 0 THEN {icd_hi} + 1 + (i % 500000)
                        ELSE 1 + ((i % {n_snomed}) // 5) END AS ancestor_concept_id,
                   CASE WHEN i % 3 = 0 THEN {icd_hi} + 1 + (i * 13 % 500000)
                        ELSE 1 + (i % {n_snomed}) END AS descendant_concept_id,
                   CAST(i % 6 AS INTEGER) AS min_levels_of_separation,
                   CAST(i % 6 + i % 2 AS INTEGER) AS max_levels_of_separation
            FROM range({n_ancestors}) t(i)
        ) TO '{folder / "CONCEPT_ANCESTOR.csv"}' {options}
    """)
    (folder / "VOCABULARY.csv").write_text(
        "vocabulary_id\tvocabulary_name\tvocabulary_reference\tvocabulary_version\t"
        "vocabulary_concept_id\nNone\tOMOP Standardized Vocabularies\tOMOP generated\t"
        "v5.0 BENCH\t44819096\n"
    )
    con.close()
    return {
        "concepts": n_snomed + n_icd + n_other,
        "relationships": n_relationships,
        "ancestors": n_ancestors,
        "bytes": sum(path.stat().st_size for path in folder.iterdir()),
    }


CHILD = """
import json, resource, sys, time
from pathlib import Path
from phenoforge.athena.loader import load_athena
started = time.perf_counter()
report = load_athena(Path({folder!r}), Path({db!r}), memory_limit={limit!r}, threads={threads!r})
print(json.dumps({{"seconds": time.perf_counter() - started,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "report": report.model_dump()}}))
"""


def run_once(folder: Path, db: Path, limit: str, threads: int | None) -> dict:
    db.unlink(missing_ok=True)
    code = CHILD.format(folder=str(folder), db=str(db), limit=limit, threads=threads)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"load failed (memory_limit={limit}):\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_rss_kb() -> int:
    """Peak RSS of a child that only imports the loader: the interpreter + DuckDB + pydantic."""
    code = "import resource; import phenoforge.athena.loader; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    return int(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--relationships", type=int, default=4_000_000)
    parser.add_argument("--ancestors", type=int, default=3_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memory-limit", default="1GB", help="DuckDB memory_limit for the load")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: all)")
    parser.add_argument("--dir", type=Path, default=None, help="where to generate (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="phenoforge-athena-bench-", dir=args.dir))
    try:
        started = time.perf_counter()
        sizes = generate(work / "athena", args.relationships, args.ancestors)
        print(
            f"generated {sizes['concepts']:,} concepts, {sizes['relationships']:,} "
            f"relationship rows, {sizes['ancestors']:,} ancestor rows "
            f"({sizes['bytes'] / 1e6:,.0f} MB) in {time.perf_counter() - started:.1f} s "
            f"under {work}"
        )
        runs = [
            run_once(work / "athena", work / "vocab.duckdb", args.memory_limit, args.threads) for _ in range(args.runs)
        ]
        seconds = [run["seconds"] for run in runs]
        peak_mb = max(run["maxrss_kb"] for run in runs) / 1024
        base_mb = baseline_rss_kb() / 1024
        report = runs[-1]["report"]
        print(
            f"load_athena x{args.runs} (memory_limit={args.memory_limit}, "
            f"threads={args.threads or 'all'}): median {statistics.median(seconds):.2f} s "
            f"(min {min(seconds):.2f}, max {max(seconds):.2f})"
        )
        print(
            f"peak RSS of the loading process: {peak_mb:,.0f} MB "
            f"(interpreter + imports alone: {base_mb:,.0f} MB; input "
            f"{sizes['bytes'] / 1e6:,.0f} MB)"
        )
        print(
            f"loaded: {report['n_icd10cm_concepts']:,} ICD-10-CM, "
            f"{report['n_snomed_concepts']:,} SNOMED concepts, {report['n_is_a_edges']:,} "
            f"'Is a' edges, {report['n_maps_to']:,} 'Maps to' edges, "
            f"{report['n_ancestor_rows']:,} ancestor rows; database "
            f"{(work / 'vocab.duckdb').stat().st_size / 1e6:,.0f} MB"
        )
        print(
            f"bench process peak RSS (generator): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB"
        )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
