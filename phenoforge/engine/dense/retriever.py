"""The dense retriever: cosine search over the stored code vectors, and the entry points.

Not-ready policy: ``DenseRetriever.search`` returns an empty ``SearchResult`` whose ``reason`` says
how to build the index (a user typed a query; they get an answer, not a traceback), while
``DenseRetriever.ranking`` raises ``DenseIndexNotReady`` (a program asked for a ranking it cannot
have; silently returning nothing would corrupt a benchmark). A query never builds.
"""

from __future__ import annotations

import logging
import mmap
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import duckdb
import numpy as np

from phenoforge.config import ProgressCallback, dense_index_dir, no_progress
from phenoforge.engine.dense.model import (
    DEFAULT_MODEL_NAME,
    DenseIndexNotReady,
    EmbedFn,
    default_embed_fn,
    describe_embed_fn,
    normalise,
)
from phenoforge.engine.dense.shipped import ShippedFirst, shipped_first
from phenoforge.engine.dense.shipped_queries import shipped_queries_for
from phenoforge.engine.dense.store import (
    DISTINCT_LEVELS,
    FORMAT_VERSION,
    DenseIndexStatus,
    DenseManifest,
    DistinctArrays,
    _build_lock,
    _inspect,
    _vocabulary_identity,
    _write_index,
    add_coarse,
    add_distinct,
    open_ann,
)
from phenoforge.engine.dense.texts import (
    DEFAULT_BUILD_MODE,
    TEXT_RECIPE_VERSION,
    BuildMode,
    compute_index,
    concept_texts,
    recover_layout,
)
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.query import query_problem
from phenoforge.engine.schema import ICD10CM, RETRIEVABLE_KINDS
from phenoforge.engine.topk import top_indices

ScanPath = Literal["best", "distinct", "int8", "exact"]

_log = logging.getLogger(__name__)

_RECORDINGS: list[set[str]] = []
"""The sets of every :func:`recording_queries` running now (in any thread): each gets every query text asked for."""
_RECORDINGS_LOCK = threading.Lock()


@contextmanager
def recording_queries() -> Iterator[set[str]]:
    """Collect every query text any retriever embeds (or finds cached) within: what ``scripts/ship_fits.py``
    ships as query vectors, so the fits and the bundled benchmark read the same vectors on every CPU. Recordings
    may overlap (nested, or in other threads): each collects what was asked while it ran."""
    texts: set[str] = set()
    with _RECORDINGS_LOCK:
        _RECORDINGS.append(texts)
    try:
        yield texts
    finally:
        with _RECORDINGS_LOCK:
            _RECORDINGS.remove(texts)


def _record(texts: list[str]) -> None:
    if _RECORDINGS:
        with _RECORDINGS_LOCK:
            for recording in _RECORDINGS:
                recording.update(texts)


RESCORE_MARGIN = 64
"""Rows past the ``n`` an exact fp32 scan keeps for the float64 re-scoring: a near tie at the cut that fp32
rounding turns on this CPU is still inside them."""
RESCORE_BAND = 1e-5
"""And every row whose fp32 score is within this of the last one kept (fp32 cosines err by ~1e-7): a cluster of
near-duplicate texts at the cut is re-scored whole, so a shallow ranking stays a prefix of a deeper one."""


def exact_cosines(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``rows @ query`` as float32, the same on every CPU: each product is exact in float64 (24-bit mantissas)
    and the sum's order error (~1e-16) almost never reaches float32's last bit, where a float32 BLAS kernel's
    summation order (AVX2, AVX-512, NEON) changes it and turns near ties among codes."""
    return (np.asarray(rows, dtype=np.float64) @ np.asarray(query, dtype=np.float64)).astype(np.float32)


ANN_CANDIDATES = 320
"""Rows the graph proposes per query before exact re-scoring; rankings up to this deep use it."""
COARSE_CANDIDATES = 1000
"""Rows the int8 scan proposes per query before exact fp32 re-scoring; rankings up to this deep
use it (recall@100 against the exact scan: ``bench/bench_speed.py`` prints it)."""
DISTINCT_MAX_QUERIES = 8
"""Blocks of more queries than this use the int8 copy of all rows when it is stored: its int8
product amortises over a block, the distinct scan's per-query gathers do not (49 clinical queries
at once: 0.22 s all rows against 0.28 s distinct, ``bench/bench_speed.py``), while one query is
1.7x faster through the distinct rows."""
EXACT_QUERY_CHUNK = 64
"""Queries scored together in an exact scan: one pass over the vectors for each chunk."""
MAX_QUERY_CHARS = 2000
QUERY_CACHE_SIZE = 4096
"""Query texts whose vectors a retriever remembers (384 floats each: ~6 MB at most). A benchmark of
the 287 bundled cohorts embeds each name for the dense ranking, the set builders' deep rankings and
the curated knowledge's name match: with the cache the model runs once per name."""
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
        self._names_cache: list[str] | None = None
        self._ann_path: Path | None = None
        self._ann: object | None = None
        self._coarse: np.ndarray | None = None
        self._coarse_scales: np.ndarray | None = None
        self._coarse_scan: _Int8Scan | None = None
        self._distinct: DistinctArrays | None = None
        self._distinct_scan: _DistinctScan | None = None
        self._searches = 0
        self.embed_calls = 0
        self.shipped_queries = 0
        """query texts whose vectors came from the shipped query vectors"""
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_fn: EmbedFn | None = None
        self._query_cache_lock = threading.Lock()
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
        """(Re)load the index from disk if it is valid for this vocabulary; True when ready.

        The vectors are memory-mapped and the graph opened on first use, so this costs the
        checksum read, not a copy of the index."""
        status, loaded = _inspect(self.con, self.index_dir, self.model_name, self.mode, load=True)
        self.status = status
        self._names_cache, self._ann, self._coarse_scan, self._distinct_scan = None, None, None, None
        if loaded is None:
            self._vectors, self.manifest, self._codes, self._ann_path = None, None, [], None
            self._coarse, self._coarse_scales, self._distinct = None, None, None
            return False
        self._vectors, self.manifest, self._codes = loaded.vectors, loaded.manifest, loaded.codes
        release_mapped_pages(self._vectors)  # checking the index read every page; a query needs few of them
        self._ann_path = loaded.ann_path
        self._coarse, self._coarse_scales = loaded.coarse, loaded.coarse_scales
        self._distinct = loaded.distinct
        return True

    def add_distinct_layout(self, progress: ProgressCallback | None = None) -> bool:
        """Give a ready composed index written without the distinct-text layout one; True if added.

        Embeds only the stems that are no row of the index (~1k texts on ICD-10-CM, seconds) and
        stores the layout only if it reproduces every stored vector (``store.add_distinct``);
        otherwise (say, an index embedded by another runtime) it logs why and leaves the index
        as it is, still searched through its int8 copy of all rows."""
        if not self.is_ready or self._distinct is not None or self.manifest is None or self.manifest.mode != "composed":
            return False
        with _build_lock(self.index_dir):
            status, loaded = _inspect(self.con, self.index_dir, self.model_name, self.mode, load=True)
            if loaded is None or loaded.distinct is not None or loaded.manifest.mode != "composed":
                return self.reload() and False
            items = concept_texts(self.con)
            if items.codes != loaded.codes:
                _log.warning("dense index: its codes are not the vocabulary's; no distinct-text layout added")
                return self.reload() and False
            layout, _embedded = recover_layout(items, loaded.vectors, self.embed_fn, progress or no_progress)
            if layout is None:  # nothing composed: the int8 copy of all rows is the same scan
                return self.reload() and False
            try:
                add_distinct(self.index_dir, loaded.manifest, loaded.vectors, layout)
            except ValueError as error:
                _log.warning("dense index: no distinct-text layout added: %s", error)
                self.reload()
                return False
        return self.reload()

    def add_int8_copy(self) -> bool:
        """Give a ready index written without the int8 search copy one (no re-embedding); True if added."""
        if not self.is_ready or self._coarse is not None:
            return False
        with _build_lock(self.index_dir):
            status, loaded = _inspect(self.con, self.index_dir, self.model_name, self.mode, load=True)
            if loaded is None or loaded.coarse is not None:
                return self.reload() and False
            add_coarse(self.index_dir, loaded)
        return self.reload()

    @property
    def _names(self) -> list[str]:
        """Code names in index order, read on first use (only ``search`` shows them)."""
        if self._names_cache is None:
            names = dict(
                self.con.cursor()
                .execute(
                    "SELECT code, name FROM concept WHERE vocabulary_id = ? AND kind IN "
                    f"({', '.join('?' for _ in RETRIEVABLE_KINDS)})",
                    [ICD10CM, *RETRIEVABLE_KINDS],
                )
                .fetchall()
            )
            self._names_cache = [str(names.get(code, "")) for code in self._codes]
        return self._names_cache

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
            build_embed, shipped_note = shipped_first(self.embed_fn, self.model_name)
            if shipped_note:
                progress(0, len(items.codes), f"shipped vectors not used: {shipped_note}")
            counting = _CountingEmbed(build_embed)
            runtime = describe_embed_fn(self.embed_fn)
            source = "shipped vectors first" if isinstance(build_embed, ShippedFirst) else "every text embedded here"
            vectors, n_unique, layout = compute_index(
                items,
                counting,
                mode,
                progress,
                message=f"embedding codes ({mode}, {getattr(self.embed_fn, 'choice', runtime)}, {source})",
            )
            self.embed_calls += counting.calls
            build, release = _vocabulary_identity(self.con)
            precision = getattr(self.embed_fn, "precision", "unknown")
            manifest = _write_index(
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
                    "runtime": runtime,
                    "shipped_texts": build_embed.found if isinstance(build_embed, ShippedFirst) else 0,
                },
            )
            if layout is not None:
                try:
                    add_distinct(self.index_dir, manifest, vectors, layout)
                except ValueError as error:  # the index itself is written and valid: search all rows
                    _log.warning("dense index: no distinct-text layout written: %s", error)
        if not self.reload():
            raise DenseIndexNotReady(f"the dense index just written is not usable: {self.status.reason}")
        progress(len(items.codes), len(items.codes), "dense index ready")

    # -- querying

    def _query_vector(self, query: str) -> np.ndarray:
        return self._query_vectors([query])[0]

    def _query_vectors(self, queries: list[str]) -> np.ndarray:
        """At most one ``embed_fn`` call for all queries (none when every one is cached); unit rows."""
        vectors = np.asarray(self.embed_queries(list(queries)), dtype=np.float32).reshape(len(queries), -1)
        return normalise(vectors)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """``embed_fn(texts)``, remembering each text's vector (the newest ``QUERY_CACHE_SIZE``).

        Only an embedding that declares itself batch-invariant (``embed_fn.batch_invariant``: a text's
        vector does not depend on the texts embedded with it) is cached; any other is called as is,
        so a cached answer is always the vector the model would give now. The texts missing from the
        cache are embedded in one call. Index builds call ``embed_fn`` directly and never fill it.
        """
        texts = list(texts)
        embed = self.embed_fn
        if not texts or not getattr(embed, "batch_invariant", False):
            self.embed_calls += 1
            return np.asarray(embed(texts))
        with self._query_cache_lock:
            if self._query_cache_fn is not embed:  # another model: nothing remembered applies
                self._query_cache.clear()
                self._query_cache_fn = embed
            known = {text: self._query_cache[text] for text in texts if text in self._query_cache}
            for text in known:
                self._query_cache.move_to_end(text)
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        _record(texts)
        if missing:
            fresh = self._shipped_or_embedded(embed, missing)
            with self._query_cache_lock:
                for text, row in zip(missing, fresh, strict=True):
                    known[text] = self._query_cache[text] = row.copy()  # a copy: not a view pinning the batch
                while len(self._query_cache) > QUERY_CACHE_SIZE:
                    self._query_cache.popitem(last=False)
        return np.stack([known[text] for text in texts])

    def _shipped_or_embedded(self, embed: EmbedFn, texts: list[str]) -> np.ndarray:
        """Each text's vector from the shipped query vectors when it is there and ``embed`` may take them
        (:mod:`~phenoforge.engine.dense.shipped_queries`: the same on every CPU), else from ``embed``."""
        shipped = shipped_queries_for(embed, self.model_name)
        if shipped is None:
            self.embed_calls += 1
            return np.asarray(embed(texts))
        found, vectors = shipped.lookup(texts)
        self.shipped_queries += int(found.sum())
        if found.all():
            return vectors
        self.embed_calls += 1
        embedded = np.asarray(embed([text for text, hit in zip(texts, found.tolist(), strict=True) if not hit]))
        if not found.any():
            return embedded
        out = np.zeros((len(texts), embedded.shape[1]), dtype=embedded.dtype)
        out[~found] = embedded
        out[found] = vectors
        return out

    def clear_query_cache(self) -> None:
        """Forget every remembered query vector (``bench/`` times the embedding this way)."""
        with self._query_cache_lock:
            self._query_cache.clear()

    @property
    def query_embed_fn(self) -> EmbedFn:
        """``embed_queries`` as an ``EmbedFn``: what other query-side users (the curated knowledge's
        name match) should embed with, so each text runs through the model once."""
        return self.embed_queries

    def _graph(self):  # noqa: ANN202 - a usearch Index, or None for an exact scan
        if self._ann is None and self._ann_path is not None:
            self._ann = open_ann(self._ann_path)
        return self._ann

    def _int8_scan(self) -> _Int8Scan | None:
        if self._coarse_scan is None and self._coarse is not None and self._coarse_scales is not None:
            self._coarse_scan = _Int8Scan(self._coarse, self._coarse_scales)
        return self._coarse_scan

    def _distinct_int8_scan(self) -> _DistinctScan | None:
        if self._distinct_scan is None and self._distinct is not None:
            self._distinct_scan = _DistinctScan(self._distinct)
        return self._distinct_scan

    def _scan(self, path: ScanPath) -> _Int8Scan | _DistinctScan | None:
        """The int8 scan ``path`` asks for (``best``: the distinct-text one when stored), opened on
        demand; None when that copy is not stored."""
        if path in ("best", "distinct") and self._distinct is not None:
            return self._distinct_int8_scan()
        if path in ("best", "int8"):
            return self._int8_scan()
        return None

    def _top_many(
        self, queries: np.ndarray, n: int, exact: bool = False, *, path: ScanPath = "best"
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query row, the top ``n`` rows and their exact cosine scores, best first.

        With a stored graph and ``n <= ANN_CANDIDATES``: the graph proposes ``ANN_CANDIDATES``
        rows. Else, with an int8 copy and ``n <= COARSE_CANDIDATES``: an int8 scan proposes
        ``COARSE_CANDIDATES`` rows, either of the distinct rows with the composed rows' scores
        derived from them (the distinct-text layout, preferred for blocks of up to
        ``DISTINCT_MAX_QUERIES`` queries) or of every row. Either way the
        candidates are re-scored exactly in fp32 from the stored vectors and cut prefix-stably, so
        every ``n`` up to the candidate count is a prefix of the same list. Deeper rankings (or
        ``exact``, or ``path="exact"``) scan every fp32 row, in chunks of queries so the score
        matrix stays small. ``path`` picks a scan for comparisons (``bench/bench_speed.py``).
        """
        assert self._vectors is not None
        vectors = self._vectors
        exact = exact or path == "exact"
        graph = None if exact or path != "best" or n > ANN_CANDIDATES else self._graph()
        if path == "best" and len(queries) > DISTINCT_MAX_QUERIES and self._coarse is not None:
            path = "int8"
        out: list[tuple[np.ndarray, np.ndarray]] = []
        use_scan = not exact and graph is None and n <= COARSE_CANDIDATES < len(vectors)
        # an int8 session costs more to open (~0.3 s idle) than one exact scan (~15 ms): a process's
        # first search scans exactly, so a one-shot CLI call never pays for it; later ones use it
        opened: _Int8Scan | _DistinctScan | None = None
        if path in ("best", "distinct") and self._distinct is not None:
            opened = self._distinct_scan
        elif path in ("best", "int8"):
            opened = self._coarse_scan
        scan = (opened or (self._scan(path) if self._searches else None)) if use_scan else None
        self._searches += 1
        if scan is not None:
            for start in range(0, len(queries), EXACT_QUERY_CHUNK):
                block = queries[start : start + EXACT_QUERY_CHUNK]
                approximate = scan.scores(block)
                for query, row_scores in zip(block, approximate, strict=True):
                    best = _largest(row_scores, COARSE_CANDIDATES)
                    candidates = np.sort(best if scan.rows is None else scan.rows[best])
                    scores = exact_cosines(vectors[candidates], query)
                    top = top_indices(scores, n)
                    out.append((candidates[top], scores[top]))
            if len(queries) > DISTINCT_MAX_QUERIES:  # a block re-scores rows all over the file
                release_mapped_pages(vectors)
            return out
        if graph is not None:
            count = min(ANN_CANDIDATES, len(vectors))
            matches = graph.search(queries, count)
            keys = np.atleast_2d(matches.keys)  # one query gives ``Matches``, several ``BatchMatches``
            counts = np.atleast_1d(getattr(matches, "counts", len(matches.keys)))
            for row, query in enumerate(queries):
                if int(counts[row]) < count:
                    # HNSW can leave rows unreachable (sparse or duplicate vectors, a threaded
                    # build): a short answer may miss true neighbours, so scan this query exactly
                    out.append(_rescored(vectors, vectors @ query, query, n))
                    continue
                candidates = np.sort(keys[row, : int(counts[row])].astype(np.int64))
                scores = exact_cosines(vectors[candidates], query)
                top = top_indices(scores, n)
                out.append((candidates[top], scores[top]))
            return out
        for start in range(0, len(queries), EXACT_QUERY_CHUNK):
            block = queries[start : start + EXACT_QUERY_CHUNK]
            all_scores = block @ vectors.T if len(block) > 1 else (vectors @ block[0])[None, :]
            for query, scores in zip(block, all_scores, strict=True):
                out.append(_rescored(vectors, scores, query, n))
        release_mapped_pages(vectors)
        return out

    def _top(self, query: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self._top_many(self._query_vectors([query]), n)[0]

    def _require_ready(self) -> None:
        if not self.is_ready:
            raise DenseIndexNotReady(self.status.message())

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        """The top ``n`` codes with their cosine scores; ``[]`` for an empty query.

        Raises ``DenseIndexNotReady`` when there is no valid index (it never builds one).
        """
        return self.rankings([query], n)[0]

    def rankings(self, queries: list[str], n: int) -> list[list[tuple[str, float]]]:
        """``[self.ranking(q, n) for q in queries]`` with one model call and one pass over the
        index for all of them (what a benchmark of many cohorts needs)."""
        return [list(zip(codes, scores.tolist(), strict=True)) for codes, scores in self.rankings_packed(queries, n)]

    def rankings_packed(self, queries: list[str], n: int) -> list[tuple[list[str], np.ndarray]]:
        """``rankings`` as (codes, cosine array) per query: the same codes and values without a
        (code, score) tuple per row, for callers keeping many deep rankings (a set builder's run).
        A query repeated in ``queries`` shares its cosine array: read it, do not change it."""
        codes = self._codes
        return [
            (list(map(codes.__getitem__, rows.tolist())), scores) for rows, scores in self.rankings_rows(queries, n)
        ]

    @property
    def codes(self) -> list[str]:
        """The index's code per row (what ``rankings_rows`` rows point into); empty without an index."""
        return self._codes

    def rankings_rows(self, queries: list[str], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``rankings`` as (rows of ``codes``, cosine array) per query: one gather maps the rows to
        anything kept per row (a set builder's concept ids). A repeated query shares its arrays."""
        self._require_ready()
        empty: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0))
        results: list[tuple[np.ndarray, np.ndarray]] = [empty for _ in queries]
        if n <= 0:
            return results
        wanted: list[tuple[int, str]] = []
        for position, query in enumerate(queries):
            cleaned, _notes = clean_query(query)
            if cleaned is not None and query_problem(cleaned) is None:
                wanted.append((position, cleaned))
        if not wanted:
            return results
        distinct = list(dict.fromkeys(text for _position, text in wanted))
        tops = self._top_many(self._query_vectors(distinct), n)
        by_text = {
            text: (np.asarray(top, dtype=np.int64), np.asarray(scores))
            for text, (top, scores) in zip(distinct, tops, strict=True)
        }
        for position, text in wanted:
            results[position] = by_text[text]
        return results

    def search(self, query: str, k: int = 10) -> SearchResult:
        """Top ``k`` codes as a ``SearchResult``; bad input or no index gives an empty result
        with a ``reason``, never an exception."""
        text = query if isinstance(query, str) else ""
        result = SearchResult(query=text, method="dense")
        if not self.is_ready:
            result.reason = self.status.message()
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


def _rescored(vectors: np.ndarray, scores: np.ndarray, query: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``n`` rows by :func:`exact_cosines`, from an fp32 scan's ``scores`` of every row: its top
    ``n + RESCORE_MARGIN`` rows scored again the same on every CPU, then cut prefix-stably (identical texts
    give exact ties, broken by row)."""
    kept = top_indices(scores, min(n + RESCORE_MARGIN, len(scores)))
    if not len(kept):
        return kept, np.zeros(0, dtype=np.float32)
    wide = np.flatnonzero(scores >= scores[kept[-1]] - RESCORE_BAND)  # sorted rows; NaN rows never pass
    exact = exact_cosines(vectors[wide], query)
    top = top_indices(exact, n)
    return wide[top], exact[top]


def release_mapped_pages(array: np.ndarray) -> bool:
    """Drop a memory-mapped array's pages from this process's resident set; True if it was mapped.

    Checking the index at load, an exact scan and a block of re-scored queries read most stored
    vectors (151 MB on ICD-10-CM), and the pages they touched stayed counted in the process's RSS
    for its lifetime (a single query's ~1,000 rows are left mapped: it is the latency path). The
    kernel keeps them in its page cache, so the next scan maps them back without reading the disk
    (tens of ms for the whole file).
    """
    mapped = getattr(array, "_mmap", None)
    base = array
    while mapped is None and isinstance(getattr(base, "base", None), np.ndarray):
        base = base.base  # type: ignore[assignment]
        mapped = getattr(base, "_mmap", None)
    if mapped is None or not hasattr(mapped, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    mapped.madvise(mmap.MADV_DONTNEED)
    return True


_SAMPLE_STRIDE = 16


def _largest(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest ``scores``, in no order (``np.argpartition``'s answer, ties
    aside), in about a quarter of its time on 98k scores: a threshold read off every 16th score
    keeps about ``2k`` of them, and only those are partitioned. Falls back to the full partition
    when the threshold keeps fewer than ``k`` (never seen) or the array is small."""
    if len(scores) >= 64 * k:
        sample = scores[::_SAMPLE_STRIDE]
        position = len(sample) - 1 - min(len(sample) - 1, 2 * k // _SAMPLE_STRIDE)
        threshold = np.partition(sample, position)[position]
        kept = np.flatnonzero(scores >= threshold)
        if len(kept) > k:
            return kept[np.argpartition(-scores[kept], k)[:k]]
        if len(kept) == k:
            return kept
    return np.argpartition(-scores, k)[:k]


class _Int8Scan:
    """``scores(queries)``: int8 inner products of every query with every stored row, through ONNX
    Runtime's integer matrix product (AVX2/VNNI kernels; numpy has no int8 one). The int8 copy is
    handed to the session once, so it is packed for the CPU once, not per query."""

    def __init__(self, coarse: np.ndarray, scales: np.ndarray, levels: int = 127) -> None:
        import onnxruntime as ort
        from onnx import TensorProto, helper

        dim, count = coarse.shape
        weights = TensorProto(name="rows", data_type=TensorProto.INT8, dims=[dim, count])
        weights.raw_data = np.ascontiguousarray(coarse).tobytes()
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["queries", "rows", "zero"], ["scores"])],
            "int8_scan",
            [helper.make_tensor_value_info("queries", TensorProto.UINT8, ["batch", dim])],
            [helper.make_tensor_value_info("scores", TensorProto.INT32, ["batch", count])],
            [weights, helper.make_tensor("zero", TensorProto.UINT8, [], [128])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # memory-bound: a second thread beside numpy's costs more than it saves
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        serialized = model.SerializeToString()
        del model, graph, weights
        self._session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
        self._scales = np.asarray(scales, dtype=np.float32)
        self._levels = levels
        self.rows: np.ndarray | None = None
        """Score column -> stored row; None: column ``i`` is row ``i``."""

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """``(len(queries), count)`` int32, each row proportional to the query's approximate cosines."""
        return self._products(queries)[0]

    def cosines(self, queries: np.ndarray) -> np.ndarray:
        """``(len(queries), count)`` float32 approximate cosines (the int8 products rescaled)."""
        products, peak = self._products(queries)
        return products.astype(np.float32) * (peak / (127.0 * self._levels)).astype(np.float32)

    def _products(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each query is scaled by the per-dimension scales and rounded to int8 at its own peak
        (shifted to uint8 for the operator), so ``products * peak / (127 * levels) ~= queries @ rows``."""
        scaled = np.asarray(queries, dtype=np.float32) * self._scales
        peak = np.maximum(np.abs(scaled).max(axis=1, keepdims=True), 1e-12)
        shifted = np.rint(scaled * (127.0 / peak)) + 128.0
        return self._session.run(None, {"queries": shifted.astype(np.uint8)})[0], peak


class _DistinctScan:
    """``scores(queries)``: approximate cosines of every stored row from an int8 scan of the
    distinct rows only, projected on their main directions (``store.DISTINCT_DIMS``).

    Entry ``e`` of a score row is stored row ``rows[e]``: first the rows that hold a distinct
    vector (their scanned score), then the composed rows, scored ``(q.stem + q.offset) / |stem +
    offset|`` from their stem's scanned score and the exact ``q.offset``, then the rows whose text
    repeats an earlier row's (that row's score). So no fp32 pass over the matrix and no scatter.
    """

    def __init__(self, distinct: DistinctArrays) -> None:
        layout = distinct.layout
        self._projection = np.ascontiguousarray(distinct.projection, dtype=np.float32)
        self._scan = _Int8Scan(distinct.coarse, distinct.scales, DISTINCT_LEVELS)
        self._n_backed = layout.n_backed
        backing = layout.distinct_row[: self._n_backed].astype(np.intp)
        composed = np.flatnonzero(layout.row_offset >= 0)
        is_backing = np.zeros(len(layout.row_distinct), bool)
        is_backing[backing] = True
        repeats = np.flatnonzero((layout.row_offset < 0) & ~is_backing)
        self.rows = np.concatenate([backing, composed, repeats])
        """Entry -> stored row (a permutation of all rows: ``store`` checks the layout)."""
        self._composed_position = layout.row_distinct[composed].astype(np.intp)
        self._composed_offset = layout.row_offset[composed].astype(np.intp)
        self._composed_inverse_norm = (1.0 / layout.row_norm[composed]).astype(np.float32)
        self._repeat_position = layout.row_distinct[repeats].astype(np.intp)
        self._offsets_t = np.ascontiguousarray(layout.offsets.T, dtype=np.float32)

    def scores(self, queries: np.ndarray) -> np.ndarray:
        """``(len(queries), count)`` float32 approximate cosines, in ``rows`` order. One int8
        product for the block; the gathers run per query on 1-d rows (on a 2-core AVX2 machine,
        2-d gathers over a block of 49 queries took longer than the scan itself)."""
        queries = np.asarray(queries, dtype=np.float32)
        distinct = self._scan.cosines(queries @ self._projection)
        by_offset = queries @ self._offsets_t
        n_backed, n_composed = self._n_backed, len(self._composed_position)
        out = np.empty((len(queries), len(self.rows)), np.float32)
        for scores, query_distinct, query_offsets in zip(out, distinct, by_offset, strict=True):
            scores[:n_backed] = query_distinct[:n_backed]
            composed = scores[n_backed : n_backed + n_composed]
            np.take(query_distinct, self._composed_position, out=composed)
            composed += query_offsets[self._composed_offset]
            composed *= self._composed_inverse_norm
            np.take(query_distinct, self._repeat_position, out=scores[n_backed + n_composed :])
        return out


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
    lazily, on the first query). ``load_dense`` also says why there is none; a stale or corrupt
    index is logged as a warning here, so it is never mistaken for one that was not built."""
    retriever, status = load_dense(con, index_dir, embed_fn)
    if status.state in ("stale", "corrupt"):
        _log.warning(status.message())
    return retriever


def load_dense(
    con: duckdb.DuckDBPyConnection,
    index_dir: Path | None = None,
    embed_fn: EmbedFn | None = None,
) -> tuple[DenseRetriever | None, DenseIndexStatus]:
    """(retriever or ``None``, status): the status tells a missing index from a stale one (other
    vocabulary build, other model) and a corrupt one (checksum, truncation, cut-off manifest), and
    ``status.message()`` is the line to show, with the command that rebuilds."""
    retriever = DenseRetriever(con, embed_fn, index_dir)
    return (retriever if retriever.is_ready else None), retriever.status


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
    else:
        retriever.add_int8_copy()
        retriever.add_distinct_layout(progress)
    return retriever
