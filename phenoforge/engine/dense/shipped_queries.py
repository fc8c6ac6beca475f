"""Query vectors shipped with the project: the same cohort-name vectors on every CPU.

The set builders are fitted, and the bundled benchmark is scored, on the dense rankings of the bundled
cohorts' names. ONNX Runtime embeds a text with other kernels on another CPU (AVX2, AVX-512, AMX, ARM), so
the vector differs in its last bits, a near tie among codes turns, and a fit chooses otherwise. So every
text those runs embed as a query is shipped here in fp32, exactly as the pinned model gave it when
``scripts/ship_fits.py`` made the fits; a retriever whose embed function has the same recipe
(``engine.dense.model.embed_recipe``: model files, runtime, precision, versions, batch and thread settings;
not the CPU) takes a text's vector from here and embeds only the texts not found (a user's own queries).
A file that is missing, edited or of another recipe is not used: every query is then embedded here.
"""

from __future__ import annotations

import io
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME, MODEL_PACKAGE, embed_recipe
from phenoforge.engine.dense.shipped import (
    SHIPPED_DIR,
    SHIPPED_RUNTIME,
    ShippedUnavailable,
    checked_shipped_file,
    installed_model_version,
    read_shipped_manifest,
    takes_shipped,
    text_key,
)
from phenoforge.storage import sha256_file, write_atomically

QUERIES_MANIFEST = "queries.json"
QUERIES_FILE = "queries.npz.xz"
QUERIES_FORMAT = "fp32-exact-lzma-v1"
"""``keys`` (uint64, sorted: :func:`~phenoforge.engine.dense.shipped.text_key`) and ``vectors`` (float32, the
model's own unit rows, unchanged) in an ``.npz`` compressed with LZMA."""


class ShippedQueriesManifest(BaseModel):
    """``queries.json`` beside the shipped query vectors."""

    model: str
    model_package: str
    model_package_version: str
    runtime: str
    recipe: str
    """the embed function's recipe (``embed_recipe``): only one with the same recipe takes these vectors"""
    format: str
    count: int
    dim: int
    vectors_file: str
    vectors_sha256: str
    made_by: str


@dataclass
class ShippedQueries:
    """The verified shipped query vectors."""

    manifest: ShippedQueriesManifest
    keys: np.ndarray
    vectors: np.ndarray

    def lookup(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(found, vectors)``: which texts are shipped, and their vectors (rows of the found ones)."""
        keys = text_key(texts)
        if not len(self.keys):
            return np.zeros(len(keys), dtype=bool), np.zeros((0, self.manifest.dim), np.float32)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[at] == keys
        return found, self.vectors[at[found]]


def write_shipped_queries(
    texts: Sequence[str], vectors: np.ndarray, recipe: str, directory: Path | None = None
) -> ShippedQueriesManifest:
    """Store ``vectors`` (one per text, as the embed function of ``recipe`` gave them) and their manifest."""
    directory = SHIPPED_DIR if directory is None else directory
    vectors = np.asarray(vectors, dtype=np.float32)
    if not len(texts):
        raise ValueError("no query texts to ship (nothing was recorded)")
    if vectors.ndim != 2 or len(vectors) != len(texts) or vectors.shape[1] == 0:
        raise ValueError(f"{len(texts)} texts and vectors of shape {vectors.shape}")
    keys = text_key(texts)
    order = np.argsort(keys, kind="stable")
    keys, vectors = keys[order], vectors[order]
    if len(keys) > 1 and not np.all(keys[1:] > keys[:-1]):
        raise ValueError("two texts share a key (a text given twice, or a 64-bit collision)")
    buffer = io.BytesIO()
    np.savez(buffer, keys=keys, vectors=vectors)
    path = directory / QUERIES_FILE
    directory.mkdir(parents=True, exist_ok=True)
    packed = lzma.compress(buffer.getvalue(), preset=9)
    write_atomically(path, lambda handle: handle.write(packed))
    manifest = ShippedQueriesManifest(
        model=DEFAULT_MODEL_NAME,
        model_package=MODEL_PACKAGE,
        model_package_version=installed_model_version() or "absent",
        runtime=SHIPPED_RUNTIME,
        recipe=recipe,
        format=QUERIES_FORMAT,
        count=len(keys),
        dim=int(vectors.shape[1]) if len(vectors) else 0,
        vectors_file=QUERIES_FILE,
        vectors_sha256=sha256_file(path),
        made_by="scripts/ship_fits.py",
    )
    text = (manifest.model_dump_json(indent=1) + "\n").encode()
    write_atomically(directory / QUERIES_MANIFEST, lambda handle: handle.write(text))
    load_shipped_queries.cache_clear()
    return manifest


@cache
def load_shipped_queries(directory: Path | None = None) -> ShippedQueries:
    """Read and verify the shipped query vectors (once per process); ``ShippedUnavailable`` says what is wrong."""
    directory = SHIPPED_DIR if directory is None else directory
    what = "shipped query vectors"
    manifest = read_shipped_manifest(directory / QUERIES_MANIFEST, ShippedQueriesManifest, what)
    if manifest.format != QUERIES_FORMAT:
        raise ShippedUnavailable(f"the {what} are stored as {manifest.format}, not {QUERIES_FORMAT}")
    vectors_path = checked_shipped_file(directory, manifest.vectors_file, manifest.vectors_sha256, what)
    try:
        with np.load(io.BytesIO(lzma.decompress(vectors_path.read_bytes())), allow_pickle=False) as arrays:
            keys, vectors = np.asarray(arrays["keys"]), np.asarray(arrays["vectors"])
    except (OSError, ValueError, KeyError, EOFError, lzma.LZMAError) as error:
        raise ShippedUnavailable(f"the shipped query vectors file is unreadable ({type(error).__name__})") from None
    if (
        keys.dtype != np.uint64
        or vectors.dtype != np.float32
        or manifest.count == 0
        or manifest.dim == 0
        or keys.shape != (manifest.count,)
        or vectors.shape != (manifest.count, manifest.dim)
        or not np.all(np.isfinite(vectors))
        or (len(keys) > 1 and not np.all(keys[1:] > keys[:-1]))
    ):
        raise ShippedUnavailable("the shipped query vectors do not have the shape their manifest declares")
    return ShippedQueries(manifest, keys, vectors)


def shipped_queries_for(embed_fn: object, model_name: str = DEFAULT_MODEL_NAME) -> ShippedQueries | None:
    """The shipped query vectors when ``embed_fn`` may take them (the pinned model, ONNX fp32, the same recipe
    and model package version as made them); None otherwise or when none can be read."""
    if not takes_shipped(embed_fn, model_name):
        return None
    try:
        shipped = load_shipped_queries()
    except ShippedUnavailable:
        return None
    manifest = shipped.manifest
    if manifest.recipe != embed_recipe(embed_fn) or manifest.model_package_version != installed_model_version():
        return None
    return shipped


def shipped_queries_identity() -> list[str] | None:
    """What the shipped query vectors are (recipe and checksum), for the shipped fits' content signature;
    None when none can be read."""
    try:
        manifest = load_shipped_queries().manifest
    except ShippedUnavailable:
        return None
    return [manifest.recipe, manifest.vectors_sha256]
