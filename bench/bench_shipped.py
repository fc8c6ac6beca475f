"""Issue 31, target 2: the dense index built from the shipped vectors, against one embedded here in full.

    python bench/bench_shipped.py --data data                       # builds both (the full one takes minutes)
    python bench/bench_shipped.py --data data --reference-index D   # D: an index folder built here in full

Builds the index from the shipped vectors into a temporary folder (timed), and, unless given one, an index
with every text embedded on this machine (timed: the before figure). Then compares them row by row (cosine
of every code's vector) and query by query (top 10 of the bundled cohorts' names and some clinical phrases:
how many queries rank the same ten codes in the same order, and the same ten as a set).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_fits import cpu_flags  # noqa: E402
from phenoforge.engine.curated import list_libraries, load_curated_concept_set  # noqa: E402
from phenoforge.engine.db import connect  # noqa: E402
from phenoforge.engine.dense import shipped  # noqa: E402
from phenoforge.engine.dense.model import default_embed_fn  # noqa: E402
from phenoforge.engine.dense.retriever import DenseRetriever  # noqa: E402

PHRASES = ("heart failure", "type 2 diabetes", "high blood pressure", "gout", "hip fracture", "copd", "depression")


def build(con, directory: Path, use_shipped: bool, embed) -> tuple[DenseRetriever, float, float]:  # noqa: ANN001
    """The retriever, wall seconds and this process's CPU seconds of one build."""
    saved = shipped.SHIPPED_DIR
    if not use_shipped:  # no shipped folder: every text is embedded here
        shipped.SHIPPED_DIR = directory / "no-shipped-vectors"
    try:
        retriever = DenseRetriever(con, embed, index_dir=directory)
        started, cpu = time.perf_counter(), time.process_time()
        retriever.build()
        return retriever, time.perf_counter() - started, time.process_time() - cpu
    finally:
        shipped.SHIPPED_DIR = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, required=True, help="a data folder with the vocabulary and libraries built"
    )
    parser.add_argument("--reference-index", type=Path, help="an index folder embedded here in full (skips that build)")
    args = parser.parse_args()
    os.environ["PHENOFORGE_DATA_DIR"] = str(args.data.resolve())
    print(f"CPU: {cpu_flags()}")
    con = connect()
    embed = default_embed_fn()
    with tempfile.TemporaryDirectory(prefix="bench-shipped-") as tmp:
        fast, fast_wall, fast_cpu = build(con, Path(tmp) / "shipped", True, embed)
        print(
            f"from shipped vectors: {fast_wall:.1f} s wall, {fast_cpu:.1f} CPU-s "
            f"({fast.manifest.shipped_texts} texts shipped, "
            f"{fast.manifest.n_texts_embedded - (fast.manifest.shipped_texts or 0)} embedded here)",
            flush=True,
        )
        if args.reference_index:
            full_dir = Path(tmp) / "reference"
            shutil.copytree(args.reference_index, full_dir)
            full = DenseRetriever(con, embed, index_dir=full_dir)
            print(f"every text embedded here: {full.manifest.build_seconds:.0f} s wall (from its manifest)")
        else:
            full, full_wall, full_cpu = build(con, Path(tmp) / "full", False, embed)
            print(f"every text embedded here: {full_wall:.1f} s wall, {full_cpu:.1f} CPU-s", flush=True)
        assert full.is_ready and fast.is_ready and full._codes == fast._codes
        cosine = np.sum(np.asarray(full._vectors) * np.asarray(fast._vectors), axis=1)
        print(
            f"cosine per code ({len(cosine)}): min {cosine.min():.5f}, 0.1th percentile "
            f"{np.percentile(cosine, 0.1):.5f}, median {np.median(cosine):.6f}"
        )
        queries = list(PHRASES)
        for library in list_libraries(errors=[]):
            for cohort_id in library.cohort_ids:
                queries.append(load_curated_concept_set(con, library, cohort_id).cohort_name)
        queries = list(dict.fromkeys(queries))
        same_order = same_set = 0
        for query in queries:
            one = [h.code for h in full.search(query, k=10).hits]
            two = [h.code for h in fast.search(query, k=10).hits]
            same_order += one == two
            same_set += set(one) == set(two)
        print(f"top 10 of {len(queries)} queries: {same_order} in the same order, {same_set} the same set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
