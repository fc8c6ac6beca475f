"""The dense index on disk: files, manifest, checksums, and whether they may be used.

The vectors are kept under ``config.dense_index_dir()`` as a ``.npy`` file plus ``manifest.json``
(model, vocabulary build id and release, text recipe, count, checksums). The manifest is the commit
point: vectors are written under a fresh file name first and the manifest is replaced atomically
afterwards, so a reader sees the old index or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb
import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.config import dense_index_dir
from phenoforge.engine.db import read_metadata
from phenoforge.engine.dense.model import DEFAULT_MODEL_NAME
from phenoforge.engine.dense.texts import TEXT_RECIPE_VERSION, BuildMode
from phenoforge.locks import file_lock

FORMAT_VERSION = 1


class DenseIndexStatus(BaseModel):
    """What is on disk, and whether it may be used for this vocabulary."""

    state: Literal["ready", "missing", "stale", "corrupt"]
    reason: str | None = None
    count: int | None = None
    model: str | None = None
    built_at: str | None = None
    mode: str | None = None
    index_dir: str = ""


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


MANIFEST_NAME = "manifest.json"


_SHA_CACHE: dict[tuple[str, int, int, int], str] = {}


def _sha256(path: Path) -> str:
    """File checksum, remembered per (path, inode, size, mtime) so repeated status checks in one
    process (the dashboard asks often) do not re-read 150 MB. Only files untouched for a few
    seconds are remembered: a rewrite within one coarse mtime tick could otherwise go unseen."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _SHA_CACHE:
        return _SHA_CACHE[key]
    digest = _sha256_uncached(path)
    if time.time_ns() - stat.st_mtime_ns > 5_000_000_000:
        _SHA_CACHE[key] = digest
    return digest


def _sha256_uncached(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _vocabulary_identity(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    metadata = read_metadata(con.cursor())
    return metadata.get("build_id", ""), metadata.get("vocabulary_release", "unknown")


@dataclass
class _Loaded:
    manifest: DenseManifest
    vectors: np.ndarray
    codes: list[str]


def _inspect(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path,
    model_name: str,
    mode: BuildMode | None,
    load: bool,
) -> tuple[DenseIndexStatus, _Loaded | None]:
    """Check the index at ``index_dir`` against ``con``; with ``load``, return its arrays too."""
    status = DenseIndexStatus(state="missing", index_dir=str(index_dir))
    manifest_path = index_dir / MANIFEST_NAME
    if not manifest_path.exists():
        status.reason = f"no dense index at {index_dir}: run `python -m phenoforge build`"
        return status, None
    try:
        manifest = DenseManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, ValidationError) as error:
        status.state = "corrupt"
        status.reason = f"unreadable {manifest_path}: {str(error).splitlines()[0]}"
        return status, None
    status.count, status.model = manifest.count, manifest.model
    status.built_at, status.mode = manifest.built_at, manifest.mode
    build, _release = _vocabulary_identity(con)
    stale = []
    if manifest.format_version != FORMAT_VERSION:
        stale.append(f"format {manifest.format_version} (current {FORMAT_VERSION})")
    if manifest.model != model_name:
        stale.append(f"model {manifest.model!r} (wanted {model_name!r})")
    if manifest.vocabulary_build_id != build:
        stale.append(f"vocabulary build {manifest.vocabulary_build_id[:8]} (current {build[:8]})")
    if manifest.text_recipe != TEXT_RECIPE_VERSION:
        stale.append(f"text recipe {manifest.text_recipe!r} (current {TEXT_RECIPE_VERSION!r})")
    if mode is not None and manifest.mode != mode:
        stale.append(f"mode {manifest.mode!r} (wanted {mode!r})")
    if stale:
        status.state = "stale"
        status.reason = "the dense index was built for another " + "; ".join(stale)
        return status, None
    vectors_path = index_dir / manifest.vectors_file
    codes_path = index_dir / manifest.codes_file
    try:
        if (
            Path(manifest.vectors_file).name != manifest.vectors_file
            or Path(manifest.codes_file).name != manifest.codes_file
        ):
            raise ValueError("file names in the manifest must not contain directories")
        if _sha256(vectors_path) != manifest.vectors_sha256:
            raise ValueError(f"checksum mismatch for {vectors_path.name}")
        if _sha256(codes_path) != manifest.codes_sha256:
            raise ValueError(f"checksum mismatch for {codes_path.name}")
        loaded = None
        if load:
            vectors = np.load(vectors_path, allow_pickle=False)
            codes = json.loads(codes_path.read_text(encoding="utf-8"))
            if vectors.dtype != np.float32 or vectors.shape != (manifest.count, manifest.dim):
                raise ValueError(
                    f"vectors have shape {vectors.shape} {vectors.dtype}, manifest says "
                    f"({manifest.count}, {manifest.dim}) float32"
                )
            if not isinstance(codes, list) or len(codes) != manifest.count:
                raise ValueError("the codes file does not match the manifest count")
            if not np.isfinite(vectors).all():
                raise ValueError("vectors contain NaN or infinity")
            loaded = _Loaded(manifest, np.ascontiguousarray(vectors), [str(c) for c in codes])
        else:
            header = np.load(vectors_path, mmap_mode="r", allow_pickle=False)
            if header.dtype != np.float32 or header.shape != (manifest.count, manifest.dim):
                raise ValueError(f"vectors have shape {header.shape} {header.dtype}")
            del header
    except (OSError, ValueError, EOFError) as error:
        status.state = "corrupt"
        status.reason = f"corrupt dense index at {index_dir}: {error}; it will be rebuilt"
        return status, None
    status.state = "ready"
    return status, loaded


def _build_lock(index_dir: Path) -> AbstractContextManager[None]:
    """One builder at a time across processes; the others wait and then reuse its index."""
    return file_lock(index_dir / ".build.lock")


def _write_index(index_dir: Path, vectors: np.ndarray, codes: list[str], fields: dict[str, object]) -> DenseManifest:
    """Write vectors and codes under fresh names, then atomically swap the manifest in."""
    index_dir.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex[:12]
    vectors_file, codes_file = f"vectors-{token}.npy", f"codes-{token}.json"
    tmp_files = []
    try:
        for name, writer in (
            (vectors_file, lambda h: np.save(h, vectors, allow_pickle=False)),
            (codes_file, lambda h: h.write(json.dumps(codes).encode("utf-8"))),
        ):
            tmp = index_dir / f".{name}.tmp"
            tmp_files.append(tmp)
            with open(tmp, "wb") as handle:
                writer(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, index_dir / name)
        manifest = DenseManifest(
            vectors_file=vectors_file,
            vectors_sha256=_sha256(index_dir / vectors_file),
            codes_file=codes_file,
            codes_sha256=_sha256(index_dir / codes_file),
            count=int(vectors.shape[0]),
            dim=int(vectors.shape[1]) if vectors.ndim == 2 else 0,
            **fields,  # type: ignore[arg-type]
        )
        tmp = index_dir / f".{MANIFEST_NAME}.{token}.tmp"
        tmp_files.append(tmp)
        tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, index_dir / MANIFEST_NAME)
    except BaseException:
        for path in (index_dir / vectors_file, index_dir / codes_file):
            path.unlink(missing_ok=True)
        raise
    finally:
        for tmp in tmp_files:
            tmp.unlink(missing_ok=True)
    for old in index_dir.glob("vectors-*.npy"):
        if old.name != vectors_file:
            old.unlink(missing_ok=True)
    for old in index_dir.glob("codes-*.json"):
        if old.name != codes_file:
            old.unlink(missing_ok=True)
    return manifest


def dense_index_status(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path | None = None,
    model_name: str = DEFAULT_MODEL_NAME,
) -> DenseIndexStatus:
    """Is the index on disk usable for this vocabulary? Checks checksums and shape; never builds."""
    index_dir = Path(index_dir) if index_dir is not None else dense_index_dir()
    status, _loaded = _inspect(con, index_dir, model_name, None, load=False)
    return status
