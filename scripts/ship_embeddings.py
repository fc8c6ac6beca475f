"""Make the shipped text vectors (``phenoforge/engine/dense/shipped/``) from the pinned model.

    python scripts/ship_embeddings.py            # needs the vocabulary built (python -m phenoforge build)

Embeds every text a default (composed) dense-index build embeds, with the pinned model in ONNX fp32,
stores each vector in 11 bits per component with a scale per dimension, and writes the manifest (model package and
version, text recipe, count, checksum) that ``shipped.load_shipped`` verifies on every build.
Re-run it when the model package, the text recipe or the bundled ICD-10-CM release changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from phenoforge.engine.db import connect, read_metadata  # noqa: E402
from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME, MODEL_PACKAGE, default_embed_fn, describe_embed_fn  # noqa: E402
from phenoforge.engine.dense.shipped import (  # noqa: E402
    MANIFEST_FILE,
    QUANTIZATION,
    SHIPPED_DIR,
    SHIPPED_RUNTIME,
    ShippedManifest,
    installed_model_version,
    quantize,
    text_key,
    write_vectors,
)
from phenoforge.engine.dense.texts import DEFAULT_BUILD_MODE, TEXT_RECIPE_VERSION, compute_index, concept_texts  # noqa: E402
from phenoforge.storage import sha256_file  # noqa: E402

VECTORS_FILE = "vectors.npz.xz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED_DIR)
    args = parser.parse_args()
    con = connect()
    embed = default_embed_fn(precision="fp32")
    if describe_embed_fn(embed) != SHIPPED_RUNTIME:
        raise SystemExit(f"the default embed function is {describe_embed_fn(embed)}, not {SHIPPED_RUNTIME}")
    texts: list[str] = []
    rows: list[np.ndarray] = []

    def recording(batch: list[str]) -> np.ndarray:
        vectors = np.asarray(embed(batch), dtype=np.float32)
        texts.extend(batch)
        rows.append(vectors)
        return vectors

    started = time.perf_counter()
    items = concept_texts(con)
    compute_index(
        items,
        recording,
        DEFAULT_BUILD_MODE,
        lambda done, total, message: print(f"\r{message} {done}/{total}", end="", flush=True),
    )
    print(f"\nembedded {len(texts)} texts in {time.perf_counter() - started:.0f} s")
    keys = text_key(texts)
    order = np.argsort(keys, kind="stable")
    keys, vectors = keys[order], np.vstack(rows)[order]
    distinct = np.r_[True, keys[1:] != keys[:-1]]
    keys, vectors = keys[distinct], vectors[distinct]
    codes, scales = quantize(vectors)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / VECTORS_FILE
    write_vectors(path, keys, codes, scales)
    release = read_metadata(con.cursor()).get("vocabulary_release", "unknown")
    manifest = ShippedManifest(
        model=DEFAULT_MODEL_NAME,
        model_package=MODEL_PACKAGE,
        model_package_version=installed_model_version() or "unknown",
        runtime=SHIPPED_RUNTIME,
        text_recipe=TEXT_RECIPE_VERSION,
        quantization=QUANTIZATION,
        count=int(len(keys)),
        dim=int(codes.shape[1]),
        vectors_file=VECTORS_FILE,
        vectors_sha256=sha256_file(path),
        made_by="scripts/ship_embeddings.py",
        vocabulary_release=str(release),
    )
    (args.out / MANIFEST_FILE).write_text(json.dumps(manifest.model_dump(), indent=2) + "\n", encoding="utf-8")
    print(f"{len(keys)} vectors, {path.stat().st_size / 1e6:.1f} MB -> {path}")


if __name__ == "__main__":
    main()
