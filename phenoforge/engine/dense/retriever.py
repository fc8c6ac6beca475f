"""The dense retriever: cosine search over the stored code vectors, and the entry points.

Not-ready policy: ``DenseRetriever.search`` returns an empty ``SearchResult`` whose ``reason`` says
how to build the index (a user typed a query; they get an answer, not a traceback), while
``DenseRetriever.ranking`` raises ``DenseIndexNotReady`` (a program asked for a ranking it cannot
have; silently returning nothing would corrupt a benchmark). A query never builds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np

from phenoforge.config import ProgressCallback, dense_index_dir, no_progress
from phenoforge.engine.dense.model import (
    DEFAULT_MODEL_NAME,
    DenseIndexNotReady,
    EmbedFn,
    default_embed_fn,
    normalise,
)
from phenoforge.engine.dense.store import (
    FORMAT_VERSION,
    DenseIndexStatus,
    DenseManifest,
    _build_lock,
    _inspect,
    _vocabulary_identity,
    _write_index,
)
from phenoforge.engine.dense.texts import (
    DEFAULT_BUILD_MODE,
    TEXT_RECIPE_VERSION,
    BuildMode,
    compute_vectors,
    concept_texts,
)
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.query import query_problem
from phenoforge.engine.schema import ICD10CM, RETRIEVABLE_KINDS
from phenoforge.engine.topk import top_indices

MAX_QUERY_CHARS = 2000
"""Longer queries are cut (the model would truncate them at ``MAX_SEQ_LENGTH`` tokens anyway)."""


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

    def _build(self, progress: ProgressCallback | None, mode: BuildMode | None, only_if_unusable: bool) -> None:
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
            raise DenseIndexNotReady(f"the dense index just written is not usable: {self.status.reason}")
        progress(len(items.codes), len(items.codes), "dense index ready")

    # -- querying

    def _query_vector(self, query: str) -> np.ndarray:
        vector = np.asarray(self.embed_fn([query]), dtype=np.float32).reshape(-1)
        self.embed_calls += 1
        return normalise(vector)

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
            raise DenseIndexNotReady(f"dense index not ready ({self.status.state}): {self.status.reason}")
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
                    provenance=[Provenance(retriever="dense", query=text, rank=rank, score=float(score))],
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
