"""Dense build configurations on the real vocabulary, without rebuilding the index for each one.

For every encoder configuration (torch fp32, ONNX Runtime fp32, ONNX int8, a shorter
``max_seq_length``, batches that are not length-bucketed) this prints, all timed in the same run:

- throughput on a seeded sample of the distinct texts a build embeds (texts/s, median (min-max)
  over ``--runs``), its ratio to torch fp32 in the same run, and the build seconds it implies for
  all of them (``n_texts / rate``: an extrapolation from the sample, not a timed full build);
- top-10 agreement with the exact fp32 build (torch fp32, every code's own text embedded) on
  clinical queries and on code descriptions used as queries, for the configuration's composed
  build (what ``build`` would store) and for its exact build (the encoder's effect alone).

Agreement is computed inside a candidate pool: the union over queries of the top ``--pool`` codes
of the stored index (``data/dense``). Every configuration and the reference are scored on the same
pool, so a code outside it can enter no one's top 10; with a pool of 100 per query and top-10
agreement this is the rows that matter (the 10th and the 100th scores are far apart).

    python bench/bench_build_configs.py                  # needs data/ with a built dense index
    python bench/bench_build_configs.py --runs 3 --sample 2000 --pool 100 --descriptions 50
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_speed import QUERIES, spread  # noqa: E402
from phenoforge.engine import dense  # noqa: E402
from phenoforge.engine.db import connect  # noqa: E402
from phenoforge.engine.dense.model import normalise  # noqa: E402
from phenoforge.engine.dense.texts import BUILD_CHUNK, offset_training_rows  # noqa: E402

EmbedFn = Callable[[list[str]], np.ndarray]


def build_texts(items: dense.ConceptTexts) -> list[str]:
    """The distinct texts a composed build embeds (own texts of non-composed rows, stem names)."""
    texts = [items.texts[i] for i in range(len(items.codes)) if items.stem_of[i] < 0]
    texts += [items.names[i] for i in sorted({s for s in items.stem_of if s >= 0})]
    return list(dict.fromkeys(texts))


def embed_bucketed(fn: EmbedFn, texts: list[str]) -> np.ndarray:
    """What a build does: shortest first, ``BUILD_CHUNK`` texts a call (the embed fn batches by 64)."""
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), texts[i]))
    out = np.zeros((len(texts), 384), np.float32)
    for start in range(0, len(texts), BUILD_CHUNK):
        rows = order[start : start + BUILD_CHUNK]
        out[rows] = fn([texts[i] for i in rows])
    return out


def embed_unbucketed(fn: EmbedFn, texts: list[str]) -> np.ndarray:
    """Batches of 64 texts in a seeded random order: each call pads to its longest text."""
    order = list(range(len(texts)))
    random.Random(1).shuffle(order)
    out = np.zeros((len(texts), 384), np.float32)
    for start in range(0, len(texts), 64):
        rows = order[start : start + 64]
        out[rows] = fn([texts[i] for i in rows])
    return out


def configurations() -> dict[str, tuple[EmbedFn, Callable[[EmbedFn, list[str]], np.ndarray]]]:
    bucketed = embed_bucketed
    return {
        "torch-fp32": (dense.default_embed_fn(precision="fp32", runtime="torch"), embed_bucketed),
        "onnx-fp32": (dense.default_embed_fn(precision="fp32", runtime="onnx"), embed_bucketed),
        "onnx-int8": (dense.default_embed_fn(precision="int8", runtime="onnx"), embed_bucketed),
        "onnx-fp32-seq32": (dense.default_embed_fn(precision="fp32", runtime="onnx", max_seq_length=32), bucketed),
        "onnx-int8-seq32": (dense.default_embed_fn(precision="int8", runtime="onnx", max_seq_length=32), bucketed),
        "onnx-fp32-unbucketed": (dense.default_embed_fn(precision="fp32", runtime="onnx"), embed_unbucketed),
    }


def throughput(configs: dict, texts: list[str], runs: int, n_build_texts: int) -> None:
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for _run in range(runs):
        for name, (fn, feeder) in configs.items():
            started = time.perf_counter()
            feeder(fn, texts)
            rates[name].append(len(texts) / (time.perf_counter() - started))
    print(
        f"\n== encoder throughput on {len(texts)} sampled build texts, {runs} runs "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs) =="
    )
    header = f"{'config':<22}{'texts/s median (min-max)':<28}{'x torch-fp32 same run':<26}"
    print(f"{header}implied build s for {n_build_texts}")
    for name in configs:
        ratio = [r / t for r, t in zip(rates[name], rates["torch-fp32"], strict=True)]
        implied = [n_build_texts / r for r in rates[name]]
        print(f"{name:<22}{spread(rates[name], digits=0):<28}{spread(ratio):<26}{spread(implied, digits=0)}")


def pool_rows(vectors: np.ndarray, queries: np.ndarray, depth: int) -> list[np.ndarray]:
    return [np.argpartition(-(vectors @ q), depth)[:depth] for q in queries]


def composed_vectors(
    items: dense.ConceptTexts, rows: list[int], embed: Callable[[list[str]], np.ndarray]
) -> dict[int, np.ndarray]:
    """Each pool row's vector as a composed build with this encoder would store it."""
    training = offset_training_rows(items)
    trained = {row for rows_ in training.values() for row in rows_}
    texts: list[str] = []
    for row in rows:
        if items.stem_of[row] >= 0 and row not in trained:
            texts.append(items.names[items.stem_of[row]])
        else:
            texts.append(items.texts[row])
    for rows_ in training.values():
        for row in rows_:
            texts += [items.texts[row], items.names[items.stem_of[row]]]
    unique = list(dict.fromkeys(texts))
    vec = dict(zip(unique, embed(unique), strict=True))
    offsets = {
        suffix: np.mean([vec[items.texts[r]] - vec[items.names[items.stem_of[r]]] for r in rows_], axis=0)
        for suffix, rows_ in training.items()
    }
    out: dict[int, np.ndarray] = {}
    for row in rows:
        if items.stem_of[row] >= 0 and row not in trained:
            out[row] = normalise(vec[items.names[items.stem_of[row]]] + offsets[items.suffixes[row]])
        else:
            out[row] = vec[items.texts[row]]
    return out


def agreement(configs: dict, items: dense.ConceptTexts, stored: np.ndarray, depth: int, n_descriptions: int) -> None:
    onnx = configs["onnx-fp32"][0]
    sample = random.Random(0).sample(range(len(items.codes)), n_descriptions)
    query_sets = {"clinical queries": QUERIES, "code descriptions": [items.names[i] for i in sample]}
    pools = {label: pool_rows(stored, onnx(qs), depth) for label, qs in query_sets.items()}
    all_rows = sorted({int(r) for pools_ in pools.values() for pool in pools_ for r in pool})
    print(
        f"\n== top-10 agreement with the exact torch-fp32 build, inside each query's top-{depth} pool of the "
        f"stored index ({len(all_rows)} distinct codes; {len(QUERIES)} clinical queries, {n_descriptions} code "
        "descriptions) =="
    )
    reference_fn = configs["torch-fp32"][0]
    reference_texts = list(dict.fromkeys(items.texts[r] for r in all_rows))
    ref_vec = dict(zip(reference_texts, embed_bucketed(reference_fn, reference_texts), strict=True))
    reference = {r: ref_vec[items.texts[r]] for r in all_rows}
    ref_queries = {label: reference_fn(list(qs)) for label, qs in query_sets.items()}

    def top10(vectors: dict[int, np.ndarray], q: np.ndarray, pool: np.ndarray) -> set[int]:
        rows = sorted(int(r) for r in pool)
        scores = np.stack([vectors[r] for r in rows]) @ q
        return {rows[i] for i in np.argsort(-scores, kind="stable")[:10]}

    def report(name: str, vectors: dict[int, np.ndarray], queries: dict[str, np.ndarray]) -> None:
        parts = []
        for label in query_sets:
            overlap = [
                len(top10(vectors, q, pool) & top10(reference, rq, pool)) / 10
                for q, rq, pool in zip(queries[label], ref_queries[label], pools[label], strict=True)
            ]
            parts.append(f"{label} {np.mean(overlap):.3f} (min {min(overlap):.1f})")
        print(f"{name:<30}" + "; ".join(parts))

    stored_rows = {r: np.asarray(stored[r], dtype=np.float32) for r in all_rows}
    report("stored index (composed)", stored_rows, {label: onnx(list(qs)) for label, qs in query_sets.items()})
    for name, (fn, _feeder) in configs.items():
        queries = {label: fn(list(qs)) for label, qs in query_sets.items()}
        if name != "torch-fp32":
            texts = list(dict.fromkeys(items.texts[r] for r in all_rows))
            exact_vec = dict(zip(texts, embed_bucketed(fn, texts), strict=True))
            report(f"{name} exact", {r: exact_vec[items.texts[r]] for r in all_rows}, queries)
        composed = composed_vectors(items, all_rows, functools.partial(embed_bucketed, fn))
        report(f"{name} composed", composed, queries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", type=int, default=2000, help="build texts timed per configuration")
    parser.add_argument("--pool", type=int, default=100, help="candidate codes per query for the agreement")
    parser.add_argument("--descriptions", type=int, default=50, help="code descriptions used as queries")
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "agreement"])
    args = parser.parse_args()
    con = connect()
    flags = " ".join(
        flag
        for flag in ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16")
        if f" {flag}" in Path("/proc/cpuinfo").read_text()
    )
    print(f"CPU flags: {flags}; auto choice: {dense.describe_auto_choice()}")
    items = dense.concept_texts(con)
    texts = build_texts(items)
    configs = configurations()
    for fn, _feeder in configs.values():
        fn(["warm up", "a warm up batch of two"])
    if "throughput" not in args.skip:
        sample = random.Random(0).sample(texts, min(args.sample, len(texts)))
        throughput(configs, sample, args.runs, len(texts))
    if "agreement" not in args.skip:
        retriever, status = dense.load_dense(con)
        if retriever is None or retriever._vectors is None:
            print(f"agreement skipped: {status.message()}")
        else:
            agreement(configs, items, retriever._vectors, args.pool, args.descriptions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
