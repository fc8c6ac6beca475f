"""Speed figures, each beside the approach it replaces, measured in the same run.

Every figure is printed as median / min / max over ``--runs`` runs, with the competing approach
timed in the same run, so the ratio holds on a noisy shared machine even when the absolute
numbers do not:

- BM25 query latency: the bm25s engine (``BM25Index``) beside rank-bm25's ``BM25Okapi``;
- dense search: each stored path (the int8 scan of the distinct rows with the composed rows'
  scores derived, the int8 scan of all rows, the usearch graph if stored; all with exact fp32
  re-scoring) beside an exact numpy scan of the same memory-mapped fp32 vectors, with
  recall@10/100/200 against the exact scan;
- query embedding per ONNX Runtime session configuration (optimisation level, threads, fused
  graph, int8 weights), with each one's top-10 agreement against the fp32 query vectors;
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


def cpu_flags() -> str:
    """The SIMD flags that decide the int8 and bf16 kernels, from ``/proc/cpuinfo``."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    return f"{model}: " + " ".join(f"{flag}={'yes' if flag in flags else 'no'}" for flag in wanted)


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


def _recall(approx: list, exact: list, depth: int) -> list[float]:
    return [
        len(set(a[0][:depth].tolist()) & set(e[0][:depth].tolist())) / depth for a, e in zip(approx, exact, strict=True)
    ]


def bench_dense_search(retriever: dense.DenseRetriever, runs: int) -> None:
    """Every stored search path beside the exact fp32 scan, timed in the same runs: the int8 scan
    of the distinct rows (composed scores derived), the int8 scan of all rows, and (if stored) the
    graph; each re-scores its candidates in fp32. Recall@10/100/200 against the exact scan."""
    vectors = retriever._vectors
    assert vectors is not None and retriever.manifest is not None
    manifest = retriever.manifest
    print(
        f"\nindex: {len(vectors)} x {vectors.shape[1]} fp32 (memory-mapped), format {manifest.format_version}, "
        f"default search path: {retriever.status.search} (graph: {manifest.ann_kind}, int8 copy: "
        f"{manifest.coarse_kind}, distinct layout: {manifest.distinct_kind}, {manifest.distinct_count} distinct rows)"
    )
    paths: list[dense.retriever.ScanPath] = []
    if retriever._distinct is not None:
        paths.append("distinct")
    if retriever._coarse is not None:
        paths.append("int8")
    if not paths:
        print("no int8 copy stored: exact scan only (`python -m phenoforge build` adds it)")
        return
    queries = retriever._query_vectors(QUERIES)
    started = time.perf_counter()
    retriever._top_many(queries[:1], 100)  # a process's first search scans exactly
    print(f"first search (exact scan, no int8 session opened): {time.perf_counter() - started:.3f} s")
    for path in paths:
        started = time.perf_counter()
        retriever._top_many(queries[:1], 100, path=path)
        print(f"first search through {path} (opens its int8 session): {time.perf_counter() - started:.3f} s")
    exact = retriever._top_many(queries, 200, exact=True)
    rows = np.sort(np.random.default_rng(0).choice(len(vectors), 300, replace=False))
    stored = np.asarray(vectors[rows], dtype=np.float32)  # code descriptions as queries: their own vectors
    exact_codes = retriever._top_many(stored, 100, exact=True)
    for path in paths:
        approx = retriever._top_many(queries, 200, path=path)
        figures = []
        for depth in (10, 100, 200):
            recall = _recall(approx, exact, depth)
            figures.append(f"@{depth} {np.mean(recall):.4f} (min {min(recall):.2f})")
        same = sum(a[0][:100].tolist() == e[0][:100].tolist() for a, e in zip(approx, exact, strict=True))
        codes = _recall(retriever._top_many(stored, 100, path=path), exact_codes, 100)
        print(
            f"recall of {path} vs the exact scan, {len(QUERIES)} clinical queries: {', '.join(figures)}; "
            f"identical top-100 lists {same}/{len(QUERIES)}; 300 stored code vectors as queries: "
            f"@100 {np.mean(codes):.4f} (min {min(codes):.2f})"
        )
    by_query = dict(zip(QUERIES, queries, strict=True))
    times: dict[str, list[float]] = {path: [] for path in [*paths, "exact"]}
    batch: dict[str, list[float]] = {path: [] for path in [*paths, "exact"]}
    for _run in range(runs):
        for path in times:
            times[path].append(p50_ms(lambda q: retriever._top_many(by_query[q][None, :], 100, path=path), QUERIES))  # noqa: B023
            started = time.perf_counter()
            retriever._top_many(queries, 100, path=path)
            batch[path].append(time.perf_counter() - started)
    names = {"distinct": "int8 distinct rows + composed", "int8": "int8 all rows", "exact": "exact numpy fp32 scan"}
    print(f"dense search p50, top 100, one query at a time, {runs} runs (load {os.getloadavg()[0]:.1f}):")
    for path in times:
        ratio = [e / t for t, e in zip(times[path], times["exact"], strict=True)]
        print(f"  {names[path]:<32} {spread(times[path])} ms   exact / this: {spread(ratio)}")
    if "distinct" in times and "int8" in times:
        ratio = [i / d for d, i in zip(times["distinct"], times["int8"], strict=True)]
        print(f"  int8 all rows / distinct: {spread(ratio)}")
    print(f"dense search of {len(QUERIES)} queries at once (s):")
    for path in batch:
        print(f"  {names[path]:<32} {spread(batch[path], digits=3)} s")


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
    public, encode = [], []
    for _run in range(runs):
        # the retriever remembers query vectors: without this, runs after the first time no embedding at all
        retriever.clear_query_cache()
        public.append(p50_ms(lambda q: retriever.ranking(q, 10), QUERIES))
        encode.append(p50_ms(lambda q: onnx([q]), QUERIES))
    print(
        f"DenseRetriever.ranking(q, 10) p50 end to end with the default runtime and search path "
        f"({retriever.status.search}): {spread(public)} ms; its query embedding alone {spread(encode)} ms "
        f"(load {os.getloadavg()[0]:.1f})"
    )


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


def _query_encoder(path: Path, threads: int, level: str, spinning: bool = False) -> Callable[[str], np.ndarray]:
    """One query through an ONNX Runtime session built with these options: tokenised without
    padding (one text), mean-pooled and normalised like ``default_embed_fn``."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(dense.model_path() / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=dense.MAX_SEQ_LENGTH)
    tokenizer.no_padding()  # tokenizer.json pads to 128 tokens by itself
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(query: str) -> np.ndarray:
        encoding = tokenizer.encode(query)
        inputs = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
        }
        hidden = session.run(None, inputs)[0][0]
        pooled = hidden.mean(axis=0)  # one text, no padding: every token counts
        return (pooled / max(float(np.linalg.norm(pooled)), 1e-12)).astype(np.float32)

    return encode


def _fused_onnx(source: Path, target: Path) -> Path:
    """ONNX Runtime's transformer optimizer (fused attention, skip-layer-norm, GELU) on the export."""
    from onnxruntime.transformers.optimizer import optimize_model

    if not target.is_file():
        model = optimize_model(str(source), model_type="bert", num_heads=12, hidden_size=384, opt_level=1)
        model.save_model_to_file(str(target))
    return target


def bench_query_encoders(retriever: dense.DenseRetriever, runs: int) -> None:
    """One query's embedding under each session configuration, beside the current one (fp32,
    ENABLE_ALL, one thread), with the top-10 agreement of the rankings its vectors give against
    the current fp32 query vectors on the clinical queries (a default needs >= 0.95)."""
    import tempfile

    from phenoforge.engine.dense.model import export_onnx, quantized_onnx_file

    fp32, int8 = export_onnx(), quantized_onnx_file()
    with tempfile.TemporaryDirectory() as tmp:
        fused = _fused_onnx(fp32, Path(tmp) / "fused.onnx")
        configs = {
            "fp32 ENABLE_ALL 1 thread (current)": _query_encoder(fp32, 1, "ORT_ENABLE_ALL"),
            "fp32 ENABLE_EXTENDED 1 thread": _query_encoder(fp32, 1, "ORT_ENABLE_EXTENDED"),
            "fp32 ENABLE_BASIC 1 thread": _query_encoder(fp32, 1, "ORT_ENABLE_BASIC"),
            "fp32 ENABLE_ALL 2 threads": _query_encoder(fp32, 2, "ORT_ENABLE_ALL"),
            "fp32 ENABLE_ALL 2 threads spinning": _query_encoder(fp32, 2, "ORT_ENABLE_ALL", spinning=True),
            "fp32 fused (transformers optimizer) 1 thread": _query_encoder(fused, 1, "ORT_ENABLE_ALL"),
            "int8 dynamic (per-channel) 1 thread": _query_encoder(int8, 1, "ORT_ENABLE_ALL"),
        }
        current = dense.default_embed_fn(precision="fp32", runtime="onnx")
        reference = {q: current([q])[0] for q in QUERIES}
        for encode in configs.values():
            encode("warm up")
        times: dict[str, list[float]] = {name: [] for name in configs}
        for _run in range(runs):
            for name, encode in configs.items():
                times[name].append(p50_ms(encode, QUERIES))
        reference_tops = retriever._top_many(np.stack([reference[q] for q in QUERIES]), 10)
        print(f"\nquery embedding p50 (ms) per session configuration, {len(QUERIES)} clinical queries, {runs} runs")
        baseline = times["fp32 ENABLE_ALL 1 thread (current)"]
        for name, encode in configs.items():
            vectors = np.stack([encode(q) for q in QUERIES])
            cosine = np.sum(vectors * np.stack([reference[q] for q in QUERIES]), axis=1)
            tops = retriever._top_many(vectors, 10)
            agreement = np.mean(
                [len(set(a[0].tolist()) & set(b[0].tolist())) / 10 for a, b in zip(tops, reference_tops, strict=True)]
            )
            ratio = [b / t for t, b in zip(times[name], baseline, strict=True)]
            print(
                f"  {name:<46} {spread(times[name])} ms   x{spread(ratio)} vs current   "
                f"cosine to current min {cosine.min():.6f}   top-10 agreement {agreement:.3f}"
            )
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(dense.model_path() / "tokenizer.json"))
        tokenize_ms = [p50_ms(tokenizer.encode, QUERIES) for _run in range(runs)]
        print(f"  of which tokenising one query (tokenizers, Rust): {spread(tokenize_ms, digits=3)} ms")


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
        choices=["bm25", "search", "query", "embed", "scan", "encoder", "cold", "graph-cost", "encoders"],
    )
    args = parser.parse_args()
    con = connect()
    print(f"CPU: {dense.describe_auto_choice()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"CPU flags: {cpu_flags()}")
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
        if "encoders" not in args.skip:
            bench_query_encoders(retriever, args.runs)
        if "query" not in args.skip:
            bench_dense_query(retriever, args.runs)
        if "cold" not in args.skip:
            bench_cold_cli(args.runs)
    if "encoder" not in args.skip:
        bench_encoder(con, args.runs, args.sample)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
