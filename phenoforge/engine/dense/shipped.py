"""Text vectors shipped with the project, so a first build embeds only what they lack.

Embedding the ~48k texts of a dense index takes minutes on two cores (about three times longer on a
CPU without AVX-512). ``scripts/ship_embeddings.py`` embeds them once with the pinned model (ONNX
fp32) and stores each text's vector in 11 bits per component (a scale per dimension; cosine to the
fp32 vector >= 0.99999; the two bytes of each component apart, then LZMA: 23 MB for 48k texts) beside a
manifest: model package and version, text recipe, count, checksum. A build whose
embed function is that model in fp32 looks each text up here and embeds only the texts not found
(another vocabulary release, another recipe): never a vector of another model or recipe. A shipped
file that is missing, truncated, edited or of another model version is not used, and the build says
why and embeds every text itself, with progress, as before.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import lzma
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME, MODEL_PACKAGE, EmbedFn, describe_embed_fn, normalise
from phenoforge.engine.dense.texts import TEXT_RECIPE_VERSION
from phenoforge.storage import sha256_file

_log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).resolve().parent / "shipped"
MANIFEST_FILE = "manifest.json"
QUANTIZATION = "int11-per-dimension-lzma-v1"
"""``vector[:, d] ~= codes[:, d] * scales[d] / LEVELS``, renormalised to unit length; ``codes`` (int16) is stored
as its high and low bytes, each array whole, in an ``.npz`` compressed with LZMA. int8 was tried first (17 MB):
cosine >= 0.9999, but a code's score moved by up to 0.002, which reordered near-tied codes in the top 10 of 22%
of the bundled cohorts' names; 11 bits move it 8 times less."""
LEVELS = 1023
"""Largest code magnitude: 11 bits with the sign."""
SHIPPED_RUNTIME = "onnx-fp32"
"""What the shipped vectors were embedded with; only an embed function that is the same model in the same
runtime and precision may take them (``describe_embed_fn``)."""
ARRAYS = ("keys", "codes_high", "codes_low", "scales")


class ShippedManifest(BaseModel):
    """``manifest.json`` beside the shipped vectors: what made them and the checksum of the arrays."""

    model: str
    model_package: str
    model_package_version: str
    runtime: str
    text_recipe: str
    quantization: str
    count: int
    dim: int
    vectors_file: str
    vectors_sha256: str
    made_by: str
    vocabulary_release: str
    """The release whose texts were embedded (texts of another release are still found when unchanged)."""


def text_key(texts: Sequence[str]) -> np.ndarray:
    """64 bits of each text's SHA-256: what the shipped rows are looked up by (sorted, so a search finds them)."""
    return np.array(
        [int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") for text in texts],
        dtype=np.uint64,
    )


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int16 rows of 11-bit codes and the per-dimension scales (``QUANTIZATION``)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    scales = np.maximum(np.abs(vectors).max(axis=0), 1e-12).astype(np.float32)
    codes = np.clip(np.rint(vectors / scales * LEVELS), -LEVELS, LEVELS).astype(np.int16)
    return codes, scales


def dequantize(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return normalise(codes.astype(np.float32) * (scales / LEVELS))


def write_vectors(path: Path, keys: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> None:
    """The arrays as an LZMA-compressed ``.npz``: high bytes and low bytes of the codes apart (they compress
    far better so than interleaved)."""
    buffer = io.BytesIO()
    high = (codes >> 8).astype(np.int8)
    low = (codes & 0xFF).astype(np.uint8)
    np.savez(buffer, keys=keys, codes_high=high, codes_low=low, scales=scales)
    path.write_bytes(lzma.compress(buffer.getvalue(), preset=9))


def read_vectors(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, codes, scales)`` from :func:`write_vectors`'s file."""
    with np.load(io.BytesIO(lzma.decompress(path.read_bytes())), allow_pickle=False) as arrays:
        keys, high, low, scales = (np.asarray(arrays[name]) for name in ARRAYS)
    if high.dtype != np.int8 or low.dtype != np.uint8 or high.shape != low.shape:
        raise ValueError("the codes' bytes do not pair up")
    return keys, (high.astype(np.int16) << 8) | low.astype(np.int16), scales


def installed_model_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(MODEL_PACKAGE)
    except PackageNotFoundError:
        return None


@dataclass
class ShippedVectors:
    """The verified shipped vectors: sorted keys and their int8 rows."""

    manifest: ShippedManifest
    keys: np.ndarray
    codes: np.ndarray
    scales: np.ndarray

    def lookup(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(found, vectors)``: which texts are shipped, and their unit vectors (rows of the found ones)."""
        keys = text_key(texts)
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        found = (self.keys[at] == keys) if len(self.keys) else np.zeros(len(keys), dtype=bool)
        return found, dequantize(self.codes[at[found]], self.scales)


class ShippedUnavailable(Exception):
    """Why the shipped vectors are not used (the build then embeds every text itself)."""


_Manifest = TypeVar("_Manifest", bound=BaseModel)


def read_shipped_manifest(path: Path, model: type[_Manifest], what: str) -> _Manifest:
    """A shipped file's manifest, or ``ShippedUnavailable`` naming ``what`` is missing or unreadable."""
    if not path.is_file():
        raise ShippedUnavailable(f"no {what} ({path} is missing)")
    try:
        return model.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as error:
        raise ShippedUnavailable(f"the {what}' manifest is unreadable ({type(error).__name__})") from None


def checked_shipped_file(directory: Path, name: str, sha256: str, what: str) -> Path:
    """``directory / name`` when it is a file beside its manifest with that checksum; else ``ShippedUnavailable``."""
    path = directory / name
    if Path(name).name != name or not path.is_file():
        raise ShippedUnavailable(f"the {what} file {name} is missing")
    if sha256_file(path) != sha256:
        raise ShippedUnavailable(f"the {what} file {name} does not match its checksum")
    return path


def load_shipped(directory: Path | None = None) -> ShippedVectors:
    """Read and verify the shipped vectors (``SHIPPED_DIR`` unless ``directory``); ``ShippedUnavailable`` says
    what is wrong with them."""
    directory = SHIPPED_DIR if directory is None else directory
    manifest = read_shipped_manifest(directory / MANIFEST_FILE, ShippedManifest, "shipped vectors")
    installed = installed_model_version()
    if manifest.model != DEFAULT_MODEL_NAME or manifest.model_package != MODEL_PACKAGE:
        raise ShippedUnavailable(f"the shipped vectors are of another model ({manifest.model_package})")
    if manifest.model_package_version != installed:
        raise ShippedUnavailable(
            f"the shipped vectors were made with {MODEL_PACKAGE} {manifest.model_package_version}, "
            f"{installed or 'no version'} is installed"
        )
    if manifest.text_recipe != TEXT_RECIPE_VERSION:
        raise ShippedUnavailable(
            f"the shipped vectors are of text recipe {manifest.text_recipe}, not {TEXT_RECIPE_VERSION}"
        )
    if manifest.quantization != QUANTIZATION or manifest.runtime != SHIPPED_RUNTIME:
        raise ShippedUnavailable(
            f"the shipped vectors are stored as {manifest.quantization}, which this version does not read"
        )
    vectors_path = checked_shipped_file(directory, manifest.vectors_file, manifest.vectors_sha256, "shipped vectors")
    try:
        keys, codes, scales = read_vectors(vectors_path)
    except (OSError, ValueError, KeyError, lzma.LZMAError) as error:
        raise ShippedUnavailable(f"the shipped vectors file is unreadable ({type(error).__name__})") from None
    if (
        keys.dtype != np.uint64
        or codes.dtype != np.int16
        or keys.shape != (manifest.count,)
        or codes.shape != (manifest.count, manifest.dim)
        or scales.shape != (manifest.dim,)
        or not np.all(np.isfinite(scales))
        or (len(keys) > 1 and not np.all(keys[1:] > keys[:-1]))
    ):
        raise ShippedUnavailable("the shipped vectors do not have the shape their manifest declares")
    return ShippedVectors(manifest, keys, codes, scales.astype(np.float32))


def takes_shipped(embed_fn: object, model_name: str) -> bool:
    """Only the pinned model in ONNX fp32 (what made the shipped vectors) may take them: a test's embed function,
    bf16, int8 or another model embeds every text itself."""
    return (
        model_name == DEFAULT_MODEL_NAME
        and getattr(embed_fn, "model_name", None) == DEFAULT_MODEL_NAME
        and describe_embed_fn(embed_fn) == SHIPPED_RUNTIME
    )


class ShippedFirst:
    """An embed function that answers from the shipped vectors and embeds only the texts they lack.

    ``found`` and ``embedded`` count the texts of each kind (for the manifest and the build's message).
    """

    def __init__(self, embed_fn: EmbedFn, shipped: ShippedVectors) -> None:
        self._embed_fn = embed_fn
        self._shipped = shipped
        self.found = 0
        self.embedded = 0
        for name in ("precision", "runtime", "model_name", "choice"):
            if hasattr(embed_fn, name):
                setattr(self, name, getattr(embed_fn, name))

    def __call__(self, texts: list[str]) -> np.ndarray:
        found, vectors = self._shipped.lookup(texts)
        out = np.zeros((len(texts), self._shipped.manifest.dim), np.float32)
        out[found] = vectors
        missing = np.flatnonzero(~found)
        if len(missing):
            out[missing] = normalise(np.asarray(self._embed_fn([texts[i] for i in missing]), dtype=np.float32))
        self.found += int(found.sum())
        self.embedded += len(missing)
        return out


def shipped_first(embed_fn: EmbedFn, model_name: str, directory: Path | None = None) -> tuple[EmbedFn, str | None]:
    """``(embed function for a build, note)``: the shipped vectors first when they may be used; else the embed
    function itself and, when shipped vectors exist but are unusable, why (for the build's log)."""
    if not takes_shipped(embed_fn, model_name):
        return embed_fn, None
    try:
        shipped = load_shipped(directory)
    except ShippedUnavailable as error:
        _log.warning("dense index: %s; embedding every text", error)
        return embed_fn, f"{error}; every text is embedded here"
    return ShippedFirst(embed_fn, shipped), None
