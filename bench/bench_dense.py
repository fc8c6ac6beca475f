"""Dense index build time and throughput, query latency, and what the fast build modes cost.

Builds the index of the real vocabulary (``data/vocab.duckdb``) into temporary directories, once
per requested configuration (``--mode`` x ``--precision``), and prints for each: wall time,
codes/s (index rows per second), texts embedded and texts/s. With the exact fp32 build among them,
prints each other configuration's top-10 agreement with it (mean overlap of the top-10 code sets)
over clinical queries plus a seeded sample of code descriptions, and how close its vectors of the
7th-character codes are. Then query latency p50/p95 of ``DenseRetriever.search(q, k=10)`` over a
few dozen queries, medians over ``--query-runs`` runs, split into embedding and scoring.

    python bench/bench_dense.py                       # composed onnx-fp32 (the default build here)
    python bench/bench_dense.py --mode both --precision all --build-runs 1   # every configuration
                                                      # beside the exact torch fp32 reference
    python bench/bench_dense.py --precision auto-paths --build-runs 3   # onnx-fp32 against torch-bf16:
                                                      # is auto's pick the faster one on this CPU?
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from phenoforge.engine import dense
from phenoforge.engine.db import connect, ensure_vocabulary
from phenoforge.engine.dense import DenseRetriever, default_embed_fn

QUERIES = [
    "heart failure",
    "congestive heart failure",
    "type 2 diabetes with kidney complications",
    "type 1 diabetes",
    "chronic kidney disease stage 4",
    "end stage renal disease",
    "hypertension",
    "atrial fibrillation",
    "acute myocardial infarction",
    "stroke",
    "chronic obstructive pulmonary disease",
    "asthma",
    "pneumonia",
    "sepsis",
    "major depressive disorder",
    "schizophrenia",
    "bipolar disorder",
    "alcohol abuse",
    "opioid dependence",
    "dementia",
    "parkinson disease",
    "epilepsy",
    "multiple sclerosis",
    "rheumatoid arthritis",
    "osteoarthritis of knee",
    "hip fracture",
    "fracture of femur",
    "breast cancer",
    "lung cancer",
    "colon cancer",
    "metastatic cancer",
    "lymphoma",
    "leukemia",
    "hiv disease",
    "hepatitis c",
    "cirrhosis of liver",
    "obesity",
    "morbid obesity",
    "hypothyroidism",
    "anemia",
    "coagulation defect",
    "peptic ulcer",
    "peripheral vascular disease",
    "pulmonary embolism",
    "deep vein thrombosis",
    "pressure ulcer",
    "paralysis",
    "weight loss",
    "fluid and electrolyte disorders",
]

CONFIGS = {"composed": ["composed"], "exact": ["exact"], "both": ["exact", "composed"]}
RUNTIMES = {  # name: (precision, runtime); "fp32" is the torch fp32 reference
    "fp32": ("fp32", "torch"),
    "bf16": ("bf16", "torch"),
    "onnx-fp32": ("fp32", "onnx"),
    "onnx-int8": ("int8", "onnx"),
}
PRECISIONS = {
    **{name: [name] for name in RUNTIMES},
    "both": ["fp32", "bf16"],
    "auto-paths": ["onnx-fp32", "bf16"],  # the two builds precision="auto" picks between, same run
    "all": ["fp32", "onnx-fp32", "onnx-int8", "bf16"],
}


def top_sets(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> list[set[int]]:
    scores = queries @ vectors.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    return [set(row.tolist()) for row in top]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def query_latency(retrievers: dict[str, DenseRetriever], runs: int, n_codes: int) -> None:
    """p50/p95 of search(q, k=10) per run, medians over runs, split into embed and scoring."""
    print("\n== query latency: search(q, k=10), ms ==")
    retriever = next(iter(retrievers.values()))
    for query in QUERIES[:5]:
        retriever.search(query)
    totals, embeds, scores = [], [], []
    for _run in range(runs):
        t_total, t_embed, t_score = [], [], []
        for query in QUERIES:
            started = time.perf_counter()
            retriever.search(query, k=10)
            t_total.append(time.perf_counter() - started)
            started = time.perf_counter()
            vector = retriever._query_vector(query)
            t_embed.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert retriever._vectors is not None
            values = retriever._vectors @ vector
            np.argpartition(values, -10)[-10:]
            t_score.append(time.perf_counter() - started)
        totals.append((percentile(t_total, 50), percentile(t_total, 95)))
        embeds.append(percentile(t_embed, 50))
        scores.append(percentile(t_score, 50))
    p50 = statistics.median(p for p, _ in totals) * 1000
    p95 = statistics.median(p for _, p in totals) * 1000
    print(
        f"{len(QUERIES)} queries x {runs} runs over {n_codes} codes "
        f"({retriever.manifest.mode if retriever.manifest else '?'} index)"
    )
    print(
        f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} "
        "(other processes share these CPUs: wall figures are upper bounds; 'cpu s' is the "
        "build's own CPU time, both threads summed)"
    )
    print(
        f"search p50 {p50:.2f}  p95 {p95:.2f}   (embed p50 {statistics.median(embeds) * 1000:.2f}, "
        f"score+top-k p50 {statistics.median(scores) * 1000:.2f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", type=Path, default=None, help="vocabulary database (default: data/vocab.duckdb, built if missing)"
    )
    parser.add_argument(
        "--mode", choices=sorted(CONFIGS), default="composed", help="build mode(s) to time (default: composed)"
    )
    parser.add_argument(
        "--precision",
        choices=sorted(PRECISIONS),
        default="onnx-fp32",
        help="runtime/precision(s) for the build: fp32 and bf16 are torch (fp32 is the "
        "reference); onnx-fp32 is what precision=auto builds on every CPU",
    )
    parser.add_argument(
        "--build-runs", type=int, default=1, help="builds per configuration; the median is printed (default 1: minutes)"
    )
    parser.add_argument("--query-runs", type=int, default=5, help="query latency runs (default 5)")
    parser.add_argument(
        "--sample", type=int, default=300, help="code descriptions sampled as extra agreement queries (default 300)"
    )
    parser.add_argument(
        "--query-only",
        action="store_true",
        help="skip the timed builds: query latency on the default index "
        "(data/dense; built once with the default settings if missing)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="build into (and keep) this directory instead of a deleted temporary one",
    )
    args = parser.parse_args()

    db = Path(args.db) if args.db else ensure_vocabulary()
    con = connect(db, build=False)
    n_codes = len(dense.concept_texts(con).codes)
    print(f"vocabulary: {db} ({n_codes} retrievable codes)")
    embedders = {
        name: default_embed_fn(precision=RUNTIMES[name][0], runtime=RUNTIMES[name][1], num_threads=args.threads)  # type: ignore[arg-type]
        for name in PRECISIONS[args.precision]
    }
    import torch

    print(
        f"torch threads: {torch.get_num_threads()}; load average before: "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    if args.query_only:
        started = time.perf_counter()
        retriever = dense.ensure_dense_index(
            con,
            embed_fn=default_embed_fn(num_threads=args.threads),
            progress=lambda done, total, msg: print(f"\r{msg}: {done}/{total}", end="", flush=True),
        )
        print(f"\nindex ready in {time.perf_counter() - started:.1f} s at {retriever.index_dir}")
        query_latency({"default": retriever}, args.query_runs, n_codes)
        return 0
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-dense-"))
    retrievers: dict[str, DenseRetriever] = {}
    print("\n== full index build ==")
    print(f"{'config':<16}{'seconds':>9}{'codes/s':>9}{'texts':>8}{'texts/s':>9}{'cpu s':>9}")
    for mode in CONFIGS[args.mode]:
        for precision, embed_fn in embedders.items():
            name = f"{mode}-{precision}"
            times, cpu = [], []
            for _run in range(args.build_runs):
                retriever = DenseRetriever(con, embed_fn, root / name, mode=mode)  # type: ignore[arg-type]
                started, cpu_started = time.perf_counter(), time.process_time()
                retriever.build(mode=mode)  # type: ignore[arg-type]
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - cpu_started)
            seconds = statistics.median(times)
            spread = f"{min(times):.1f}-{max(times):.1f}"
            assert retriever.manifest is not None
            texts = retriever.manifest.n_texts_embedded
            print(
                f"{name:<16}{seconds:>9.1f}{n_codes / seconds:>9.0f}{texts:>8}"
                f"{texts / seconds:>9.0f}{statistics.median(cpu):>9.1f}   (min-max {spread} s)",
                flush=True,
            )
            retrievers[name] = retriever

    if "exact-fp32" in retrievers and len(retrievers) > 1:
        print("\n== agreement with exact fp32 (mean top-10 overlap) ==")
        reference = retrievers["exact-fp32"]
        items = dense.concept_texts(con)
        rng = random.Random(0)
        sample = rng.sample(items.names, min(args.sample, len(items.names)))
        ext_rows = [i for i, stem in enumerate(items.stem_of) if stem >= 0]
        ext_sample = rng.sample(ext_rows, min(args.sample, len(ext_rows)))
        fp32 = embedders.get("fp32") or default_embed_fn(precision="fp32", runtime="torch")
        sets = {
            "clinical queries": fp32(QUERIES),
            "code descriptions": fp32(sample),
            "7th-char descriptions": fp32([items.names[i] for i in ext_sample]),
        }
        assert reference._vectors is not None
        ref_tops = {label: top_sets(reference._vectors, q) for label, q in sets.items()}
        for name, retriever in retrievers.items():
            if name == "exact-fp32":
                continue
            assert retriever._vectors is not None
            parts = []
            for label, queries in sets.items():
                tops = top_sets(retriever._vectors, queries)
                overlap = [len(a & b) / 10 for a, b in zip(tops, ref_tops[label], strict=True)]
                parts.append(f"{label} {np.mean(overlap):.3f} (min {min(overlap):.1f})")
            cos = np.sum(retriever._vectors[ext_rows] * reference._vectors[ext_rows], axis=1)
            print(f"{name:<16}" + "; ".join(parts))
            print(
                f"{'':<16}7th-char vectors vs exact: cosine mean {cos.mean():.4f}, "
                f"p5 {np.percentile(cos, 5):.4f}, min {cos.min():.4f}"
            )

    query_latency(retrievers, args.query_runs, n_codes)
    if args.keep:
        print(f"\nindexes kept under {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
