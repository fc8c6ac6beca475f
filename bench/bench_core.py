"""Speed and memory figures of the engine and the evaluation core, as medians over runs.

    python bench/bench_core.py            # everything (uses data/ under the repo, builds what is missing)
    python bench/bench_core.py --runs 5   # more runs per figure

Prints: vocabulary build, BM25 index build, BM25 query latency p50/p95, hybrid and dense query
latency (when the dense index is ready), a full benchmark over every installed library with every
method, the slider's re-scoring path, and the process's peak RSS. The machines are shared and
noisy: read medians and ratios, not single runs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

QUERIES = [
    "heart failure",
    "type 2 diabetes mellitus",
    "chronic kidney disease",
    "asthma",
    "major depressive disorder",
    "atrial fibrillation",
    "acute myocardial infarction",
    "sepsis",
    "rheumatoid arthritis",
    "epilepsy",
    "migraine",
    "obesity",
    "hyperlipidemia",
    "liver cirrhosis",
    "community acquired pneumonia",
    "diabetic ketoacidosis",
    "gestational diabetes",
    "diabetic retinopathy",
    "generalized anxiety disorder",
    "crohn disease",
    "ulcerative colitis",
    "hypertension",
    "fracture of neck of femur",
    "chronic obstructive pulmonary disease",
    "dementia",
    "alcohol dependence",
    "hypothyroidism",
    "peptic ulcer",
    "metastatic cancer",
    "lymphoma",
]


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def fresh_process_build(path: Path) -> float:
    """Seconds of one build in a new interpreter: simple-icd-10-cm parses its XML once per process."""
    script = (
        "import sys, time; started = time.perf_counter(); "
        "from phenoforge.engine.vocab_build import build_icd10cm; from pathlib import Path; "
        "build_icd10cm(Path(sys.argv[1])); print(time.perf_counter() - started)"
    )
    repo = Path(__file__).resolve().parents[1]
    output = subprocess.run(
        [sys.executable, "-c", script, str(path)], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    return float(output.strip().splitlines()[-1])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def report(name: str, seconds: list[float], unit: str = "s") -> None:
    scale = 1000.0 if unit == "ms" else 1.0
    values = [value * scale for value in seconds]
    print(
        f"{name:<46} median {statistics.median(values):9.2f} {unit}   "
        f"min {min(values):9.2f}   max {max(values):9.2f}   (n={len(values)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from phenoforge.engine.bm25 import BM25Index, document_texts, get_bm25_index
    from phenoforge.engine.curated import list_libraries
    from phenoforge.engine.db import connect, ensure_vocabulary
    from phenoforge.engine.hybrid import hybrid_search
    from phenoforge.eval.harness import ALL_METHODS, collect_rankings, rescore_hybrid, run_benchmark
    from phenoforge.libraries import build_bundled_libraries

    with tempfile.TemporaryDirectory() as tmp:
        report(
            "vocabulary build, fresh process (98,466 nodes)",
            [fresh_process_build(Path(tmp) / f"vocab{run}.duckdb") for run in range(args.runs)],
        )

    ensure_vocabulary()
    con = connect()
    documents = document_texts(con)
    report("BM25 index build", [timed(lambda: BM25Index(documents)) for _ in range(args.runs)])
    index = get_bm25_index(con)
    latencies = [timed(lambda q=query: index.ranking(q, 10)) for _ in range(args.runs) for query in QUERIES]
    report("BM25 query p50 (top 10)", [statistics.median(latencies)], "ms")
    report("BM25 query p95 (top 10)", [percentile(latencies, 0.95)], "ms")

    dense = None
    try:
        from phenoforge.engine.dense import load_dense_if_ready

        dense = load_dense_if_ready(con)
    except ImportError:
        pass
    if dense is not None:
        dense.ranking("warm up", 10)
        latencies = [timed(lambda q=query: dense.ranking(q, 10)) for _ in range(args.runs) for query in QUERIES]
        report("dense query p50 (top 10)", [statistics.median(latencies)], "ms")
        report("dense query p95 (top 10)", [percentile(latencies, 0.95)], "ms")
    latencies = [
        timed(lambda q=query: hybrid_search(con, q, k=10, dense=dense)) for _ in range(args.runs) for query in QUERIES
    ]
    label = "hybrid" if dense is not None else "hybrid (BM25 only, no dense index)"
    report(f"{label} query p50", [statistics.median(latencies)], "ms")
    report(f"{label} query p95", [percentile(latencies, 0.95)], "ms")

    build_bundled_libraries(con)
    libraries = list_libraries()
    n_cohorts = sum(len(library.cohort_ids) for library in libraries)
    methods = ALL_METHODS if dense is not None else [m for m in ALL_METHODS if m != "dense"]

    def full_benchmark() -> None:
        for library in libraries:
            run_benchmark(con, library.path, library.cohort_ids, methods=methods, dense=dense)

    full_benchmark()  # warm: hierarchy, chains, cohort files in the page cache
    report(
        f"full benchmark ({n_cohorts} cohorts x {len(methods)} methods)",
        [timed(full_benchmark) for _ in range(args.runs)],
    )

    caches = [collect_rankings(con, library.path, library.cohort_ids, dense=dense) for library in libraries]
    for cache in caches:
        rescore_hybrid(con, cache, 0.5)
    weights = [0.0, 0.25, 0.5, 0.75, 1.0] * max(1, args.runs)
    report(
        f"re-score all {n_cohorts} cohorts for a new dense_weight",
        [timed(lambda w=weight: [rescore_hybrid(con, cache, w) for cache in caches]) for weight in weights],
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'peak RSS of this process':<46} {peak_mib:9.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
