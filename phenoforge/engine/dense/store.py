"""The dense index on disk: files, manifest, checksums, and whether they may be used.

The vectors are kept under ``config.dense_index_dir()`` as a ``.npy`` file plus ``manifest.json``
(model, vocabulary build id and release, text recipe, count, checksums). The manifest is the commit
point: vectors are written under a fresh file name first and the manifest is replaced atomically
afterwards, so a reader sees the old index or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import duckdb
import numpy as np
from pydantic import BaseModel, Field, ValidationError

from phenoforge.caches import ProcessCache
from phenoforge.config import dense_index_dir
from phenoforge.engine.db import read_metadata
from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME
from phenoforge.engine.dense.texts import LAYOUT_TOLERANCE, TEXT_RECIPE_VERSION, BuildMode, DistinctLayout
from phenoforge.locks import file_lock
from phenoforge.storage import sha256_file

FORMAT_VERSION = 3
"""2: vectors memory-mapped, optional nearest-neighbour graph (``ann_file``) and int8 search copy
(``coarse_file``) beside them. Both are optional, so an index written before they existed stays
ready; ``ensure_dense_index`` adds the int8 copy to it from the verified vectors (no re-embedding).
3: optional distinct-text layout (``distinct_file``, see ``texts.DistinctLayout``). A format-2
index is still read (it scans all rows) and ``ensure_dense_index`` gives it the layout, embedding
only the ~1k stems that are no row of it; any other format is stale (rebuild)."""
READABLE_FORMAT_VERSIONS = (2, 3)
REBUILD_COMMAND = "python -m phenoforge build"

StaleCause = Literal["format", "model", "vocabulary_build", "text_recipe", "mode"]
CorruptCause = Literal["manifest", "checksum", "truncated", "shape", "codes", "nonfinite", "missing_file"]


class DenseIndexStatus(BaseModel):
    """What is on disk, and whether it may be used for this vocabulary.

    ``state`` says missing / stale / corrupt / ready; ``causes`` says why in machine-readable
    words (stale: another vocabulary build, model, format, text recipe or mode; corrupt: a cut-off
    manifest, a checksum mismatch, truncated vectors...), ``reason`` in a sentence, and
    ``rebuild_command`` what fixes it. ``message()`` is the one line a CLI or Home shows.
    """

    state: Literal["ready", "missing", "stale", "corrupt"]
    reason: str | None = None
    causes: list[str] = Field(default_factory=list)
    rebuild_command: str = REBUILD_COMMAND
    count: int | None = None
    model: str | None = None
    built_at: str | None = None
    mode: str | None = None
    search: str | None = None
    """``ann`` when a nearest-neighbour graph is stored, ``distinct-int8+rescore`` when the
    distinct-text layout's int8 copy proposes candidates, ``int8+rescore`` when the int8 copy of all
    rows does (either re-scored in fp32), ``exact`` when queries scan every fp32 row."""
    index_dir: str = ""
    runtime: str | None = None
    """How the stored vectors were embedded (``onnx-fp32``, ``torch-bf16``, ...), from the manifest."""

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def message(self) -> str:
        """One line for a person: what is wrong and the command that fixes it."""
        if self.state == "ready":
            return f"dense index ready ({self.count} codes, {self.mode} build, {self.runtime}, {self.search} search)"
        what = {
            "missing": "is not built",
            "stale": "is stale",
            "corrupt": "is corrupt",
        }[self.state]
        detail = f" ({self.reason})" if self.reason and self.state != "missing" else ""
        return f"the dense index {what}{detail}: rebuild it with `{self.rebuild_command}`"

    def precision_note(self) -> str | None:
        """For a ready index embedded otherwise than the default (ONNX fp32, since ``precision="auto"`` is fp32
        on every CPU): what it is and the command that rebuilds it in fp32. It stays usable, not stale."""
        if self.state != "ready" or not (self.runtime or "").endswith(("-bf16", "-int8")):
            return None  # fp32, or an embed function of the caller's own (``unknown``)
        return (
            f"the dense index was embedded in {self.runtime}; the default is now ONNX fp32 on every CPU (code lists "
            f"that do not depend on the CPU): `{self.rebuild_command} --force` rebuilds it in fp32"
        )


class DenseManifest(BaseModel):
    """``manifest.json``: everything needed to decide whether the vectors may be reused."""

    format_version: int
    model: str
    text_recipe: str
    mode: BuildMode
    precision: str
    vocabulary_build_id: str
    vocabulary_release: str
    count: int
    dim: int
    vectors_file: str
    vectors_sha256: str
    codes_file: str
    codes_sha256: str
    built_at: str
    build_seconds: float
    n_texts_embedded: int
    ann_file: str | None = None
    ann_sha256: str | None = None
    ann_kind: str | None = None
    runtime: str | None = None
    """How the texts were embedded (e.g. ``onnx-fp32``, ``torch-bf16``): printed by the build."""
    coarse_file: str | None = None
    """int8 copy of the vectors, transposed to ``(dim, count)``: what a query scans first."""
    coarse_sha256: str | None = None
    coarse_kind: str | None = None
    coarse_scales: list[float] | None = None
    """Per dimension: ``vectors[:, d] ~= coarse[d, :] * coarse_scales[d] / 127``."""
    distinct_file: str | None = None
    """``.npz`` with the distinct-text layout and its own int8 copy (``DISTINCT_ARRAYS``)."""
    distinct_sha256: str | None = None
    distinct_kind: str | None = None
    distinct_count: int | None = None
    """Distinct rows (embedded texts plus the stems that are no row of their own)."""
    shipped_texts: int | None = None
    """Texts whose vectors came from the shipped vectors (``shipped.py``) rather than being embedded here."""
    distinct_max_error: float | None = None
    """Largest difference between a stored vector and the layout's reconstruction of it, when written."""


MANIFEST_NAME = "manifest.json"


_SHA_CACHE: ProcessCache[tuple[str, int, int, int], str] = ProcessCache("file checksums")


def _sha256(path: Path) -> str:
    """File checksum, remembered per (path, inode, size, mtime) so repeated status checks in one
    process (the dashboard asks often) do not re-read 150 MB. Only files untouched for a few
    seconds are remembered: a rewrite within one coarse mtime tick could otherwise go unseen."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _SHA_CACHE:
        return _SHA_CACHE[key]
    digest = sha256_file(path)
    if time.time_ns() - stat.st_mtime_ns > 5_000_000_000:
        _SHA_CACHE[key] = digest
    return digest


def _vocabulary_identity(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    metadata = read_metadata(con.cursor())
    return metadata.get("build_id", ""), metadata.get("vocabulary_release", "unknown")


@dataclass
class _Loaded:
    manifest: DenseManifest
    vectors: np.ndarray
    """Memory-mapped, read-only, float32 ``(count, dim)``."""
    codes: list[str]
    ann_path: Path | None
    coarse: np.ndarray | None = None
    """Memory-mapped int8 ``(dim, count)``, or None for an index written without it."""
    coarse_scales: np.ndarray | None = None
    distinct: DistinctArrays | None = None


class _Corrupt(ValueError):
    def __init__(self, cause: CorruptCause, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def _expected_npy_bytes(path: Path) -> tuple[int, tuple[int, ...], np.dtype]:
    """(bytes the file must have, shape, dtype) from the ``.npy`` header alone."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(handle)
        offset = handle.tell()
    return offset + int(np.prod(shape)) * dtype.itemsize, shape, dtype


def _inspect(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path,
    model_name: str,
    mode: BuildMode | None,
    load: bool,
) -> tuple[DenseIndexStatus, _Loaded | None]:
    """Check the index at ``index_dir`` against ``con``; with ``load``, return its arrays too
    (the vectors memory-mapped, so loading costs the checksum read and no copy)."""
    status = DenseIndexStatus(state="missing", index_dir=str(index_dir))
    manifest_path = index_dir / MANIFEST_NAME
    if not manifest_path.exists():
        status.reason = f"no dense index at {index_dir}: run `{REBUILD_COMMAND}`"
        status.causes = ["missing"]
        return status, None
    try:
        manifest = DenseManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as error:
        status.state = "corrupt"
        status.causes = ["manifest"]
        status.reason = f"cut-off or unreadable {manifest_path.name}: {str(error).splitlines()[0]}"
        return status, None
    status.count, status.model = manifest.count, manifest.model
    status.built_at, status.mode = manifest.built_at, manifest.mode
    status.runtime = manifest.runtime or manifest.precision
    status.search = (
        "ann"
        if manifest.ann_file
        else "distinct-int8+rescore"
        if manifest.distinct_file
        else "int8+rescore"
        if manifest.coarse_file
        else "exact"
    )
    build, _release = _vocabulary_identity(con)
    stale: list[tuple[StaleCause, str]] = []
    if manifest.format_version not in READABLE_FORMAT_VERSIONS:
        readable = "-".join(str(v) for v in (READABLE_FORMAT_VERSIONS[0], READABLE_FORMAT_VERSIONS[-1]))
        stale.append(("format", f"format {manifest.format_version} (this version reads {readable})"))
    if manifest.model != model_name:
        stale.append(("model", f"model {manifest.model!r} (wanted {model_name!r})"))
    if manifest.vocabulary_build_id != build:
        stale.append(("vocabulary_build", f"vocabulary build {manifest.vocabulary_build_id[:8]} (current {build[:8]})"))
    if manifest.text_recipe != TEXT_RECIPE_VERSION:
        stale.append(("text_recipe", f"text recipe {manifest.text_recipe!r} (current {TEXT_RECIPE_VERSION!r})"))
    if mode is not None and manifest.mode != mode:
        stale.append(("mode", f"mode {manifest.mode!r} (wanted {mode!r})"))
    if stale:
        status.state = "stale"
        status.causes = [cause for cause, _text in stale]
        status.reason = "built for another " + "; ".join(text for _cause, text in stale)
        return status, None
    try:
        loaded = _check_files(index_dir, manifest, load)
    except _Corrupt as error:
        status.state = "corrupt"
        status.causes = [error.cause]
        status.reason = str(error)
        return status, None
    status.state = "ready"
    return status, loaded


def _check_files(index_dir: Path, manifest: DenseManifest, load: bool) -> _Loaded | None:
    """Sizes first (a truncated file says so), then checksums, then shapes and values."""
    files = [
        ("vectors", manifest.vectors_file, manifest.vectors_sha256),
        ("codes", manifest.codes_file, manifest.codes_sha256),
    ]
    if manifest.ann_file:
        files.append(("ann", manifest.ann_file, manifest.ann_sha256 or ""))
    if manifest.coarse_file:
        files.append(("coarse", manifest.coarse_file, manifest.coarse_sha256 or ""))
    if manifest.distinct_file:
        files.append(("distinct", manifest.distinct_file, manifest.distinct_sha256 or ""))
    for _role, name, _digest in files:
        if Path(name).name != name:
            raise _Corrupt("manifest", f"file name {name!r} in the manifest contains a directory")
        if not (index_dir / name).is_file():
            raise _Corrupt("missing_file", f"{name} named by the manifest is missing")
    vectors_path = index_dir / manifest.vectors_file
    try:
        expected, shape, dtype = _expected_npy_bytes(vectors_path)
    except (OSError, ValueError, EOFError) as error:
        raise _Corrupt("truncated", f"{vectors_path.name} has no readable header: {error}") from error
    actual = vectors_path.stat().st_size
    if actual < expected:
        raise _Corrupt("truncated", f"{vectors_path.name} is truncated ({actual} of {expected} bytes)")
    if dtype != np.float32 or tuple(shape) != (manifest.count, manifest.dim):
        raise _Corrupt(
            "shape",
            f"vectors have shape {tuple(shape)} {dtype}, manifest says ({manifest.count}, {manifest.dim}) float32",
        )
    if manifest.coarse_file:
        _check_coarse(index_dir / manifest.coarse_file, manifest)
    if manifest.distinct_file:
        _check_distinct_headers(index_dir / manifest.distinct_file, manifest)
    for _role, name, digest in files:
        if _sha256(index_dir / name) != digest:
            raise _Corrupt("checksum", f"checksum mismatch for {name}")
    if not load:
        return None
    try:
        vectors = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
        codes = json.loads((index_dir / manifest.codes_file).read_text(encoding="utf-8"))
    except (OSError, ValueError, EOFError) as error:
        raise _Corrupt("truncated", f"unreadable index files: {error}") from error
    if not isinstance(codes, list) or len(codes) != manifest.count:
        raise _Corrupt("codes", "the codes file does not match the manifest count")
    if not np.isfinite(vectors).all():
        raise _Corrupt("nonfinite", "vectors contain NaN or infinity")
    ann_path = index_dir / manifest.ann_file if manifest.ann_file else None
    coarse, scales = None, None
    if manifest.coarse_file and manifest.coarse_scales is not None:
        try:
            coarse = np.load(index_dir / manifest.coarse_file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as error:
            raise _Corrupt("truncated", f"unreadable {manifest.coarse_file}: {error}") from error
        scales = np.asarray(manifest.coarse_scales, dtype=np.float32)
    distinct = _load_distinct(index_dir / manifest.distinct_file, manifest) if manifest.distinct_file else None
    return _Loaded(manifest, vectors, [str(c) for c in codes], ann_path, coarse, scales, distinct)


def _check_coarse(path: Path, manifest: DenseManifest) -> None:
    """The int8 copy: full size, ``(dim, count)`` int8, one positive finite scale per dimension."""
    try:
        expected, shape, dtype = _expected_npy_bytes(path)
    except (OSError, ValueError, EOFError) as error:
        raise _Corrupt("truncated", f"{path.name} has no readable header: {error}") from error
    if path.stat().st_size < expected:
        raise _Corrupt("truncated", f"{path.name} is truncated ({path.stat().st_size} of {expected} bytes)")
    if dtype != np.int8 or tuple(shape) != (manifest.dim, manifest.count):
        raise _Corrupt(
            "shape", f"{path.name} has shape {tuple(shape)} {dtype}, expected ({manifest.dim}, {manifest.count}) int8"
        )
    scales = manifest.coarse_scales
    if scales is None or len(scales) != manifest.dim or not all(np.isfinite(scales)) or min(scales, default=1) <= 0:
        raise _Corrupt("manifest", "coarse_scales in the manifest are missing or not one positive number per dimension")


DISTINCT_KIND = "distinct-texts-composed-v1"
DISTINCT_ARRAYS: dict[str, str] = {
    "distinct_row": "int32",
    "stems": "float32",
    "offsets": "float32",
    "row_distinct": "int32",
    "row_offset": "int32",
    "row_norm": "float32",
    "projection": "float32",
    "coarse": "int8",
    "scales": "float32",
}
"""The arrays of the layout file and their dtypes: ``texts.DistinctLayout``'s fields, plus the
int8 copy of the distinct rows projected on their ``DISTINCT_DIMS`` main directions: the
projection ``(dim, k)``, the copy ``(k, n_distinct)`` and its per-dimension scales ``(k,)``."""
DISTINCT_LEVELS = 63
"""The distinct rows' int8 copy uses 7 bits (-63..63): on AVX2 without VNNI, ONNX Runtime's u8 x s8
product adds pairs of products in 16 bits (``vpmaddubsw``), which saturates when two 255 x 127
products meet (measured on the fixture: errors of 0.45 in a cosine); 255 x 63 x 2 fits."""
DISTINCT_DIMS = 160
"""Directions the int8 copy of the distinct rows keeps (of 384): the scan reads 0.42 of the bytes.
Only the candidates depend on it (they are re-scored on the full fp32 vectors). On the real index,
the 1000 candidates held the exact top 100 of the 49 clinical queries and 300 code vectors it was
chosen on at 128, 160 and 192 directions; on held-out queries (20 cohort-style queries, 1000 other
code vectors) recall@100 was 1.0000 (min 0.99) at 160 and 0.9997 (min 0.93) at 128, 15% faster."""


@dataclass
class DistinctArrays:
    """The loaded layout, its arrays checked against each other and the manifest."""

    layout: DistinctLayout
    projection: np.ndarray
    coarse: np.ndarray
    scales: np.ndarray


def _expected_shapes(manifest: DenseManifest, headers: dict[str, tuple[tuple[int, ...], np.dtype]]) -> dict:
    count, dim, n_distinct = manifest.count, manifest.dim, manifest.distinct_count or 0
    n_stems = headers["stems"][0][0] if headers["stems"][0] else -1
    n_offsets = headers["offsets"][0][0] if headers["offsets"][0] else -1
    shape = headers["projection"][0]
    k = shape[1] if len(shape) == 2 and 0 < shape[1] <= dim else -1
    return {
        "distinct_row": (n_distinct,),
        "stems": (n_stems, dim),
        "offsets": (n_offsets, dim),
        "row_distinct": (count,),
        "row_offset": (count,),
        "row_norm": (count,),
        "projection": (dim, k),
        "coarse": (k, n_distinct),
        "scales": (k,),
    }


def _check_distinct_headers(path: Path, manifest: DenseManifest) -> None:
    """Every array present, complete, of its dtype and of the shape the manifest implies; reads
    the zip directory and the array headers only."""
    import zipfile

    headers: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            for name in DISTINCT_ARRAYS:
                info = members.get(f"{name}.npy")
                if info is None:
                    raise _Corrupt("shape", f"{path.name} has no {name} array")
                with archive.open(info) as handle:
                    version = np.lib.format.read_magic(handle)
                    if version == (1, 0):
                        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(handle)
                    else:
                        shape, _fortran, dtype = np.lib.format.read_array_header_2_0(handle)
                    header_bytes = handle.tell()
                if info.file_size < header_bytes + int(np.prod(shape)) * dtype.itemsize:
                    raise _Corrupt("truncated", f"{path.name}: the {name} array is cut off")
                headers[name] = (tuple(shape), dtype)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise _Corrupt("truncated", f"{path.name} is truncated or unreadable: {error}") from error
    if not manifest.distinct_count:
        raise _Corrupt("manifest", "distinct_count is missing from the manifest")
    for name, expected in _expected_shapes(manifest, headers).items():
        shape, dtype = headers[name]
        if dtype != np.dtype(DISTINCT_ARRAYS[name]) or shape != expected:
            raise _Corrupt(
                "shape", f"{path.name}: {name} has shape {shape} {dtype}, expected {expected} {DISTINCT_ARRAYS[name]}"
            )


def _load_distinct(path: Path, manifest: DenseManifest) -> DistinctArrays:
    """Read the layout and check that its indices point inside it (shapes were checked already)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: np.asarray(archive[name]) for name in DISTINCT_ARRAYS}
    except (OSError, ValueError, EOFError, KeyError) as error:
        raise _Corrupt("truncated", f"unreadable {path.name}: {error}") from error
    layout = DistinctLayout(
        **{name: arrays[name] for name in DISTINCT_ARRAYS if name not in ("projection", "coarse", "scales")}
    )
    n_distinct, n_backed = len(layout.distinct_row), layout.n_backed
    problems = []
    if n_backed < 0 or (layout.distinct_row[n_backed:] != -1).any():
        problems.append("the extra stems are not the last distinct rows")
    backed = layout.distinct_row[:n_backed]
    if len(backed) and (backed.min() < 0 or backed.max() >= manifest.count):
        problems.append("a distinct row points outside the vectors")
    if len(layout.row_distinct) and (layout.row_distinct.min() < 0 or layout.row_distinct.max() >= n_distinct):
        problems.append("a row points outside the distinct rows")
    if (layout.row_offset < -1).any() or (layout.row_offset >= len(layout.offsets)).any():
        problems.append("a row points outside the offsets")
    elif not problems:
        backing = np.zeros(manifest.count, bool)
        backing[backed] = True
        if (layout.row_offset[backed] >= 0).any() or (layout.row_distinct[backed] != np.arange(n_backed)).any():
            problems.append("a distinct row is not a plain row of its own position")
        elif (layout.row_distinct[(layout.row_offset < 0) & ~backing] >= n_backed).any():
            problems.append("a plain row points at an extra stem")
    if not (np.isfinite(layout.row_norm).all() and (layout.row_norm > 0).all()):
        problems.append("a norm is not a positive number")
    if not all(np.isfinite(arrays[name]).all() for name in ("stems", "offsets", "projection")):
        problems.append("stems, offsets or projection contain NaN or infinity")
    scales = arrays["scales"]
    if not (np.isfinite(scales).all() and (scales > 0).all()):
        problems.append("the int8 scales are not positive numbers")
    if len(arrays["coarse"]) and np.abs(arrays["coarse"].astype(np.int16)).max(initial=0) > DISTINCT_LEVELS:
        problems.append(f"the int8 copy has values beyond +-{DISTINCT_LEVELS}")
    if problems:
        raise _Corrupt("shape", f"{path.name}: {'; '.join(problems)}")
    return DistinctArrays(layout, arrays["projection"], arrays["coarse"], scales)


COARSE_KIND = "int8-per-dimension-v1"
_QUANTIZE_ROWS = 8192


def quantize_coarse(vectors: np.ndarray, levels: int = 127) -> tuple[np.ndarray, list[float]]:
    """int8 copy of ``vectors`` transposed to ``(dim, count)`` (what the scan multiplies by), with
    one scale per dimension (the largest absolute value in it, stored as ``levels``). Done in row
    blocks, so a 98k-row index costs its int8 size in memory, not another fp32 copy."""
    count, dim = vectors.shape
    scales = np.zeros(dim, np.float32)
    for start in range(0, count, _QUANTIZE_ROWS):
        np.maximum(scales, np.abs(np.asarray(vectors[start : start + _QUANTIZE_ROWS])).max(axis=0), out=scales)
    scales = np.maximum(scales, 1e-12)
    coarse = np.empty((dim, count), np.int8)
    for start in range(0, count, _QUANTIZE_ROWS):
        block = np.asarray(vectors[start : start + _QUANTIZE_ROWS], dtype=np.float32) * (levels / scales)
        coarse[:, start : start + len(block)] = np.clip(np.rint(block), -levels, levels).astype(np.int8).T
    return coarse, [float(x) for x in scales]


def _build_lock(index_dir: Path) -> AbstractContextManager[None]:
    """One builder at a time across processes; the others wait and then reuse its index."""
    return file_lock(index_dir / ".build.lock")


ANN_MIN_ROWS: int | None = None
"""Store a graph when the index has at least this many rows; ``None``: never (the default).

Off by default, by measurement (docs/performance.md): on a loaded 2-core AVX2 machine, building
the graph over 98,186 x 384 same-size random vectors took 684 s (far over the 60 s build budget),
and its search plus exact re-scoring was only 1.4x faster than the exact numpy scan. Its recall
and cost on the real index are not measured yet; set this to e.g. 20_000 to try it.
"""
ANN_KIND = "usearch-hnsw-f16-ip-m16"
ANN_CONNECTIVITY = 16
ANN_EXPANSION_ADD = 96
ANN_EXPANSION_SEARCH = 320
"""Graph search breadth; with the exact re-scoring of its candidates it gives recall@100 >= 0.99
against an exact scan (``bench/bench_dense.py`` prints the figure)."""


def build_ann(vectors: np.ndarray, path: Path) -> None:
    """An HNSW graph over the (unit) vectors, half-precision, saved to ``path``.

    usearch rather than faiss/hnswlib: it can memory-map a saved index (``view``), so a cold
    process opens it without reading it, and it builds on all cores (bench figures in docs/performance.md).
    """
    from usearch.index import Index

    index = Index(
        ndim=int(vectors.shape[1]),
        metric="ip",
        dtype="f16",
        connectivity=ANN_CONNECTIVITY,
        expansion_add=ANN_EXPANSION_ADD,
        expansion_search=ANN_EXPANSION_SEARCH,
    )
    index.add(np.arange(len(vectors), dtype=np.uint64), np.ascontiguousarray(vectors, dtype=np.float32))
    index.save(str(path))


def open_ann(path: Path):  # noqa: ANN201 - a usearch Index (imported lazily)
    """The saved graph, memory-mapped (nothing is read until a query touches it)."""
    from usearch.index import Index

    index = Index.restore(str(path), view=True)
    if index is None:
        raise OSError(f"{path.name} is not a usearch index")
    index.expansion_search = ANN_EXPANSION_SEARCH
    return index


def _write_index(
    index_dir: Path,
    vectors: np.ndarray,
    codes: list[str],
    fields: dict[str, object],
    *,
    ann: bool | None = None,
    coarse: bool = True,
) -> DenseManifest:
    """Write vectors, codes, the int8 copy (and the graph) under fresh names, then atomically swap
    the manifest in."""
    index_dir.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    vectors_file, codes_file = f"vectors-{token}.npy", f"codes-{token}.json"
    with_ann = ann if ann is not None else (ANN_MIN_ROWS is not None and len(vectors) >= ANN_MIN_ROWS)
    ann_file = f"ann-{token}.usearch" if with_ann else None
    with_coarse = coarse and vectors.ndim == 2 and vectors.size > 0
    coarse_file = f"coarse-{token}.npy" if with_coarse else None
    coarse_matrix, coarse_scales = quantize_coarse(vectors) if with_coarse else (None, None)
    written = [index_dir / vectors_file, index_dir / codes_file]
    written += [index_dir / name for name in (ann_file, coarse_file) if name]
    tmp_files = []
    try:
        writers = [
            (vectors_file, lambda h: np.save(h, vectors, allow_pickle=False)),
            (codes_file, lambda h: h.write(json.dumps(codes).encode("utf-8"))),
        ]
        if coarse_file and coarse_matrix is not None:
            matrix = coarse_matrix
            writers.append((coarse_file, lambda h: np.save(h, matrix, allow_pickle=False)))
        for name, writer in writers:
            tmp = index_dir / f".{name}.tmp"
            tmp_files.append(tmp)
            with open(tmp, "wb") as handle:
                writer(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, index_dir / name)
        if ann_file:
            tmp = index_dir / f".{ann_file}.tmp"
            tmp_files.append(tmp)
            build_ann(vectors, tmp)
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, index_dir / ann_file)
        manifest = DenseManifest(
            vectors_file=vectors_file,
            vectors_sha256=_sha256(index_dir / vectors_file),
            codes_file=codes_file,
            codes_sha256=_sha256(index_dir / codes_file),
            ann_file=ann_file,
            ann_sha256=_sha256(index_dir / ann_file) if ann_file else None,
            ann_kind=ANN_KIND if ann_file else None,
            coarse_file=coarse_file,
            coarse_sha256=_sha256(index_dir / coarse_file) if coarse_file else None,
            coarse_kind=COARSE_KIND if coarse_file else None,
            coarse_scales=coarse_scales,
            count=int(vectors.shape[0]),
            dim=int(vectors.shape[1]) if vectors.ndim == 2 else 0,
            **fields,  # type: ignore[arg-type]
        )
        tmp = index_dir / f".{MANIFEST_NAME}.{token}.tmp"
        tmp_files.append(tmp)
        tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, index_dir / MANIFEST_NAME)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    finally:
        for tmp in tmp_files:
            tmp.unlink(missing_ok=True)
    keep = {path.name for path in written}
    for pattern in INDEX_FILE_PATTERNS:
        for old in index_dir.glob(pattern):
            if old.name not in keep:
                old.unlink(missing_ok=True)
    _remove_temporaries(index_dir)
    return manifest


INDEX_FILE_PATTERNS = ("vectors-*.npy", "codes-*.json", "ann-*.usearch", "coarse-*.npy", "distinct-*.npz")


def _remove_temporaries(index_dir: Path) -> None:
    """Remove the half-written files of a writer that was killed (SIGKILL skips its clean-up).

    Only called by a writer holding the build lock, so no other writer's temporary is live.
    """
    for pattern in (*INDEX_FILE_PATTERNS, f"{MANIFEST_NAME}.*"):
        for leftover in index_dir.glob(f".{pattern}.tmp"):
            leftover.unlink(missing_ok=True)


def _attach_side_file(
    index_dir: Path,
    manifest: DenseManifest,
    prefix: str,
    extension: str,
    write: Callable[[BinaryIO], None],
    update: Callable[[str], dict[str, object]],
) -> DenseManifest:
    """Write a side file of a verified index under a fresh name (``<prefix>-<token>.<extension>``,
    through a synced temporary), swap in ``manifest`` updated by ``update(file name)``, then remove
    the older files of that kind. A failure leaves the old manifest and no new file; the caller
    holds the build lock."""
    token = uuid.uuid4().hex[:12]
    side_file = f"{prefix}-{token}.{extension}"
    tmp = index_dir / f".{side_file}.tmp"
    manifest_tmp = index_dir / f".{MANIFEST_NAME}.{token}.tmp"
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, index_dir / side_file)
        upgraded = manifest.model_copy(update=update(side_file))
        manifest_tmp.write_text(upgraded.model_dump_json(indent=2), encoding="utf-8")
        os.replace(manifest_tmp, index_dir / MANIFEST_NAME)
    except BaseException:
        (index_dir / side_file).unlink(missing_ok=True)
        raise
    finally:
        tmp.unlink(missing_ok=True)
        manifest_tmp.unlink(missing_ok=True)
    for old in index_dir.glob(f"{prefix}-*.{extension}"):
        if old.name != side_file:
            old.unlink(missing_ok=True)
    _remove_temporaries(index_dir)
    return upgraded


def add_coarse(index_dir: Path, loaded: _Loaded) -> DenseManifest:
    """Give a verified index written without an int8 copy one: quantize its vectors, write the copy
    under a fresh name and swap in a manifest that names it (the vectors and codes are kept as they
    are). Seconds, against minutes for a rebuild; the caller holds the build lock."""
    matrix, scales = quantize_coarse(loaded.vectors)
    return _attach_side_file(
        index_dir,
        loaded.manifest,
        "coarse",
        "npy",
        lambda handle: np.save(handle, matrix, allow_pickle=False),
        lambda name: {
            "coarse_file": name,
            "coarse_sha256": _sha256(index_dir / name),
            "coarse_kind": COARSE_KIND,
            "coarse_scales": scales,
        },
    )


def main_directions(rows: np.ndarray, k: int) -> np.ndarray:
    """``(dim, k)`` orthonormal: the ``k`` eigenvectors of ``rows.T @ rows`` with the largest
    eigenvalues, the directions that keep the most of the rows' inner products with any query."""
    second_moment = np.zeros((rows.shape[1], rows.shape[1]), np.float64)
    for start in range(0, len(rows), _QUANTIZE_ROWS):
        block = np.asarray(rows[start : start + _QUANTIZE_ROWS], dtype=np.float64)
        second_moment += block.T @ block
    _values, vectors = np.linalg.eigh(second_moment)
    return np.ascontiguousarray(vectors[:, ::-1][:, :k], dtype=np.float32)


def add_distinct(
    index_dir: Path, manifest: DenseManifest, vectors: np.ndarray, layout: DistinctLayout
) -> DenseManifest:
    """Store ``layout`` beside a verified index: check that it reproduces every stored vector
    (``LAYOUT_TOLERANCE``), quantize its distinct rows, write the ``.npz`` under a fresh name and
    swap in a format-3 manifest naming it. The vectors and codes stay as they are; the caller
    holds the build lock. Raises ``ValueError`` when the layout does not reproduce the vectors."""
    error = layout.max_error(vectors)
    if not error <= LAYOUT_TOLERANCE:
        raise ValueError(f"the distinct-text layout misses the stored vectors by {error:.2e} (> {LAYOUT_TOLERANCE})")
    distinct = layout.distinct_vectors(vectors)
    projection = main_directions(distinct, min(DISTINCT_DIMS, distinct.shape[1]))
    coarse, scales = quantize_coarse(distinct @ projection, DISTINCT_LEVELS)
    del distinct
    arrays = {
        "distinct_row": layout.distinct_row.astype(np.int32),
        "stems": layout.stems.astype(np.float32),
        "offsets": layout.offsets.astype(np.float32),
        "row_distinct": layout.row_distinct.astype(np.int32),
        "row_offset": layout.row_offset.astype(np.int32),
        "row_norm": layout.row_norm.astype(np.float32),
        "projection": projection,
        "coarse": coarse,
        "scales": np.asarray(scales, np.float32),
    }
    return _attach_side_file(
        index_dir,
        manifest,
        "distinct",
        "npz",
        lambda handle: np.savez(handle, allow_pickle=False, **arrays),
        lambda name: {
            "format_version": FORMAT_VERSION,
            "distinct_file": name,
            "distinct_sha256": _sha256(index_dir / name),
            "distinct_kind": DISTINCT_KIND,
            "distinct_count": len(layout.distinct_row),
            "distinct_max_error": error,
        },
    )


def dense_index_status(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path | None = None,
    model_name: str = DEFAULT_MODEL_NAME,
) -> DenseIndexStatus:
    """Is the index on disk usable for this vocabulary? Checks checksums and shape; never builds."""
    index_dir = Path(index_dir) if index_dir is not None else dense_index_dir()
    status, _loaded = _inspect(con, index_dir, model_name, None, load=False)
    return status
