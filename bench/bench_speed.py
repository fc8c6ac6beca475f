"""Speed figures, each beside the approach it replaces, measured in the same run.

Every figure is printed as median / min / max over ``--runs`` runs, with the competing approach
timed in the same run, so the ratio holds on a noisy shared machine even when the absolute
numbers do not:

- BM25 query latency: the bm25s engine (``BM25Index``) beside rank-bm25's ``BM25Okapi``;
- dense search: the stored path (the int8 copy scanned through ONNX Runtime, or the usearch graph,
  with exact fp32 re-scoring) beside an exact numpy scan of the same memory-mapped fp32 vectors,
  with recall@10/100/200 against the exact scan;
- dense query end to end (embed + search): ONNX Runtime one-thread + the stored path beside torch +
  exact scan (the previous path);
- encoder throughput on a seeded sample of the texts a build embeds: onnx-fp32 and onnx-int8 beside
  torch-fp32 (the previous default), with the mean/min cosine of each to torch-fp32.

    python bench/bench_speed.py                 # needs data/ with a built dense index
    python bench/bench_speed.py --runs 5 --sample 1000 --skip bm25
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phenoforge.engine import dense  # noqa: E402
from phenoforge.engine.bm25 import document_texts, get_bm25_index  # noqa: E402
from phenoforge.engine.db import connect  # noqa: E402
from phenoforge.engine.query import tokenize  # noqa: E402

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


def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """``median (min-max)`` of ``values`` times ``scale``."""
    v = [x * scale for x in values]
    return f"{statistics.median(v):.{digits}f} ({min(v):.{digits}f}-{max(v):.{digits}f})"


def p50_ms(function: Callable[[str], object], queries: list[str]) -> float:
    times = []
    for query in queries:
        started = time.perf_counter()
        function(query)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def compare(label: str, ours: str, theirs: str, ours_runs: list[float], their_runs: list[float], unit: str) -> None:
    ratios = [t / o for o, t in zip(ours_runs, their_runs, strict=True) if o > 0]
    print(f"{label}")
    print(f"  {ours:<34} {spread(ours_runs)} {unit}")
    print(f"  {theirs:<34} {spread(their_runs)} {unit}")
    print(f"  ratio {theirs} / {ours}: {spread(ratios)} (median (min-max) over {len(ratios)} runs)")


def bench_bm25(con, runs: int) -> None:  # noqa: ANN001
    from rank_bm25 import BM25Okapi

    index = get_bm25_index(con)
    okapi = BM25Okapi([tokenize(text) or ["_empty_"] for _c, _n, text in document_texts(con)], k1=1.5, b=0.75)
    ours, theirs, batch, loop = [], [], [], []
    for _run in range(runs):
        ours.append(p50_ms(lambda q: index.ranking(q, 100), QUERIES))
        theirs.append(p50_ms(lambda q: np.argsort(-okapi.get_scores(tokenize(q)))[:100], QUERIES[:15]))
        started = time.perf_counter()
        index.rankings(QUERIES, 100)
        batch.append(time.perf_counter() - started)
        started = time.perf_counter()
        [index.ranking(q, 100) for q in QUERIES]
        loop.append(time.perf_counter() - started)
    compare("BM25 query p50, top 100 (ms)", "bm25s engine (BM25Index)", "rank-bm25 BM25Okapi", ours, theirs, "ms")
    compare(f"BM25 {len(QUERIES)} queries (s)", "BM25Index.rankings (batch)", "ranking() per query", batch, loop, "s")


def bench_dense_search(retriever: dense.DenseRetriever, runs: int) -> None:
    """The stored search path (int8 scan + fp32 re-score, or the graph) beside the exact fp32 scan."""
    vectors = retriever._vectors
    assert vectors is not None and retriever.manifest is not None
    path = retriever.status.search or "exact"
    print(
        f"\nindex: {len(vectors)} x {vectors.shape[1]} fp32 (memory-mapped), search path: {path} "
        f"(graph: {retriever.manifest.ann_kind}, int8 copy: {retriever.manifest.coarse_kind})"
    )
    if path == "exact":
        print("no graph and no int8 copy stored: exact scan only (`python -m phenoforge build` adds the copy)")
        return
    queries = retriever._query_vectors(QUERIES)
    started = time.perf_counter()
    retriever._top_many(queries[:1], 100)  # a process's first search scans exactly
    first = time.perf_counter() - started
    started = time.perf_counter()
    retriever._top_many(queries[:1], 100)  # the second opens the graph or the int8 session
    print(
        f"first search (exact scan): {first:.3f} s; second (opens the {path} structures): "
        f"{time.perf_counter() - started:.3f} s"
    )
    exact = retriever._top_many(queries, 200, exact=True)
    approx = retriever._top_many(queries, 200)
    for depth in (10, 100, 200):
        recall = [
            len(set(a[0][:depth].tolist()) & set(e[0][:depth].tolist())) / depth
            for a, e in zip(approx, exact, strict=True)
        ]
        print(
            f"recall@{depth} of {path} vs the exact scan: mean {np.mean(recall):.4f}, min {min(recall):.2f} "
            f"over {len(QUERIES)} clinical queries"
        )
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), 300, replace=False))
    stored = np.asarray(vectors[rows], dtype=np.float32)  # code descriptions as queries: their own vectors
    exact_codes = retriever._top_many(stored, 100, exact=True)
    approx_codes = retriever._top_many(stored, 100)
    recall = [
        len(set(a[0].tolist()) & set(e[0].tolist())) / 100 for a, e in zip(approx_codes, exact_codes, strict=True)
    ]
    print(
        f"recall@100 of {path} vs the exact scan: mean {np.mean(recall):.4f}, min {min(recall):.2f} "
        "over 300 stored code vectors used as queries"
    )
    by_query = dict(zip(QUERIES, queries, strict=True))
    ours, theirs = [], []
    for _run in range(runs):
        ours.append(p50_ms(lambda q: retriever._top_many(by_query[q][None, :], 100), QUERIES))
        theirs.append(p50_ms(lambda q: retriever._top_many(by_query[q][None, :], 100, exact=True), QUERIES))
    label = "dense search p50, top 100, one query (ms)"
    compare(label, f"{path} (stored)", "exact numpy fp32 scan", ours, theirs, "ms")
    ours, theirs = [], []
    for _run in range(runs):
        started = time.perf_counter()
        retriever._top_many(queries, 100)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        retriever._top_many(queries, 100, exact=True)
        theirs.append(time.perf_counter() - started)
    label = f"dense search of {len(QUERIES)} queries at once (s)"
    compare(label, f"{path} (batch)", "exact scan (batch)", ours, theirs, "s")


def bench_dense_query(retriever: dense.DenseRetriever, runs: int) -> None:
    onnx = dense.default_embed_fn(precision="fp32", runtime="onnx")
    torch_fp32 = dense.default_embed_fn(precision="fp32", runtime="torch")
    for fn in (onnx, torch_fp32):
        fn(["warm up"])

    path = retriever.status.search or "exact"

    def new_path(query: str) -> object:
        return retriever._top_many(dense.model.normalise(onnx([query])), 10)

    def old_path(query: str) -> object:
        return retriever._top_many(dense.model.normalise(torch_fp32([query])), 10, exact=True)

    ours, theirs = [], []
    for _run in range(runs):
        ours.append(p50_ms(new_path, QUERIES))
        theirs.append(p50_ms(old_path, QUERIES))
    compare(
        "dense query p50 end to end, top 10 (ms)",
        f"onnx-fp32 1 thread + {path}",
        "torch-fp32 + exact scan",
        ours,
        theirs,
        "ms",
    )
    retriever._embed_fn = onnx
    public = []
    for _run in range(runs):
        public.append(p50_ms(lambda q: retriever.ranking(q, 10), QUERIES))
    print(f"DenseRetriever.ranking(q, 10) p50 with the default runtime: {spread(public)} ms")


def bench_query_embedding(runs: int) -> None:
    """One-text embedding (what a query costs before the search); needs no index."""
    onnx = dense.default_embed_fn(precision="fp32", runtime="onnx")
    torch_fp32 = dense.default_embed_fn(precision="fp32", runtime="torch")
    for fn in (onnx, torch_fp32):
        fn(["warm up"])
    ours, theirs = [], []
    for _run in range(runs):
        ours.append(p50_ms(lambda q: onnx([q]), QUERIES))
        theirs.append(p50_ms(lambda q: torch_fp32([q]), QUERIES))
    cos = [float(np.dot(onnx([q])[0], torch_fp32([q])[0])) for q in QUERIES[:10]]
    compare("query embedding alone p50 (ms)", "onnx-fp32 1 thread", "torch-fp32 (1 thread)", ours, theirs, "ms")
    print(f"  cosine onnx vs torch on 10 queries: min {min(cos):.6f}")


def bench_exact_scan_cost(runs: int, rows: int = 98_186, dim: int = 384) -> None:
    """An exact scan's time does not depend on the values: a same-size fp32 matrix shows its cost."""
    matrix = np.random.default_rng(0).standard_normal((rows, dim), dtype=np.float32)
    query = matrix[0] / np.linalg.norm(matrix[0])
    values = []
    for _run in range(runs):
        values.append(p50_ms(lambda _q: np.argpartition(matrix @ query, -100)[-100:], QUERIES))
    print(f"exact numpy scan of a {rows} x {dim} fp32 matrix + top-100, p50 (ms): {spread(values)}")


def bench_graph_cost(runs: int, rows: int = 98_186, dim: int = 384) -> None:
    """Graph build and search time on a same-size random unit matrix, beside the exact scan.

    Latency only: recall on random vectors says nothing about text embeddings (their worst case).
    """
    import tempfile

    from phenoforge.engine.dense import store
    from phenoforge.engine.dense.retriever import ANN_CANDIDATES

    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((rows, dim), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.usearch"
        started = time.perf_counter()
        store.build_ann(matrix, path)
        print(f"graph build over {rows} x {dim} random unit vectors: {time.perf_counter() - started:.1f} s")
        graph = store.open_ann(path)
        queries = matrix[rng.choice(rows, 50, replace=False)]

        def graph_search(row: int) -> None:
            candidates = np.sort(graph.search(queries[row], ANN_CANDIDATES).keys.astype(np.int64))
            np.argsort(-(matrix[candidates] @ queries[row]))[:100]

        def exact_search(row: int) -> None:
            np.argpartition(matrix @ queries[row], -100)[-100:]

        ours, theirs = [], []
        for _run in range(runs):
            ours.append(p50_ms(graph_search, list(range(len(queries)))))  # type: ignore[arg-type]
            theirs.append(p50_ms(exact_search, list(range(len(queries)))))  # type: ignore[arg-type]
        compare(
            "graph vs exact on random vectors, top 100, p50 (ms)",
            "usearch graph + re-score",
            "exact numpy scan",
            ours,
            theirs,
            "ms",
        )


def bench_encoder(con, runs: int, sample_size: int) -> None:  # noqa: ANN001
    items = dense.concept_texts(con)
    texts = list(dict.fromkeys(items.texts[i] for i in range(len(items.codes)) if items.stem_of[i] < 0))
    texts += list(dict.fromkeys(items.names[i] for i in {s for s in items.stem_of if s >= 0}))
    sample = random.Random(0).sample(texts, min(sample_size, len(texts)))
    configs = {
        "torch-fp32": dense.default_embed_fn(precision="fp32", runtime="torch"),
        "onnx-fp32": dense.default_embed_fn(precision="fp32", runtime="onnx"),
        "onnx-int8": dense.default_embed_fn(precision="int8", runtime="onnx"),
    }
    rates: dict[str, list[float]] = {name: [] for name in configs}
    vectors: dict[str, np.ndarray] = {}
    for _run in range(runs):
        for name, fn in configs.items():
            started = time.perf_counter()
            vectors[name] = fn(sample)
            rates[name].append(len(sample) / (time.perf_counter() - started))
    print(
        f"\nencoder throughput on {len(sample)} sampled build texts (texts/s, higher is better); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for name in configs:
        cos = np.sum(vectors[name] * vectors["torch-fp32"], axis=1)
        ratio = [r / t for r, t in zip(rates[name], rates["torch-fp32"], strict=True)]
        print(
            f"  {name:<12} {spread(rates[name], digits=0)} texts/s   x{spread(ratio)} vs torch-fp32   "
            f"cosine to torch-fp32 mean {cos.mean():.4f} min {cos.min():.4f}"
        )


def bench_cold_cli(runs: int) -> None:
    """Wall time of ``python -m phenoforge search --method dense`` in a fresh process."""
    seconds = []
    for _run in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "phenoforge", "search", "heart failure", "--method", "dense"],
            check=True,
            capture_output=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        seconds.append(time.perf_counter() - started)
    print(f"\ncold `python -m phenoforge search --method dense` (s): {spread(seconds)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", type=int, default=500, help="texts for the encoder throughput (default 500)")
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["bm25", "search", "query", "embed", "scan", "encoder", "cold", "graph-cost"],
    )
    args = parser.parse_args()
    con = connect()
    print(f"CPU: {dense.describe_auto_choice()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if "bm25" not in args.skip:
        bench_bm25(con, args.runs)
    if "embed" not in args.skip:
        bench_query_embedding(args.runs)
    if "scan" not in args.skip:
        bench_exact_scan_cost(args.runs)
    if "graph-cost" not in args.skip:
        bench_graph_cost(args.runs)
    retriever, status = dense.load_dense(con)
    if retriever is None:
        print(f"dense figures skipped: {status.message()}")
    else:
        if "search" not in args.skip:
            bench_dense_search(retriever, args.runs)
        if "query" not in args.skip:
            bench_dense_query(retriever, args.runs)
        if "cold" not in args.skip:
            bench_cold_cli(args.runs)
    if "encoder" not in args.skip:
        bench_encoder(con, args.runs, args.sample)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
