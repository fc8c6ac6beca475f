"""BM25 over ICD-10-CM descriptions and the notes that carry their synonyms.

bm25s (sparse-matrix BM25) rather than rank-bm25: about 2 ms a query over the full vocabulary
against about 42 ms, with the same Okapi scoring (``method="robertson"``, k1=1.5, b=0.75); a test
keeps its rankings in agreement with rank-bm25's BM25Okapi.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from phenoforge.caches import ProcessCache
from phenoforge.config import data_dir
from phenoforge.engine.db import build_id
from phenoforge.engine.models import Hit, Provenance, SearchResult
from phenoforge.engine.query import query_problem, tokenize
from phenoforge.engine.schema import ICD10CM, RETRIEVABLE_KINDS, SEARCHABLE_NOTE_TYPES
from phenoforge.engine.topk import top_indices
from phenoforge.storage import remove_stale_temporaries, sha256_file, temporary_sibling

log = logging.getLogger(__name__)

K1 = 1.5
B = 0.75


def document_texts(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """(code, name, searchable text) for every retrievable ICD-10-CM concept, in vocabulary order."""
    kinds = ", ".join("?" for _ in RETRIEVABLE_KINDS)
    notes = ", ".join("?" for _ in SEARCHABLE_NOTE_TYPES)
    rows = con.execute(
        f"""
        SELECT c.code, c.name,
               c.name || coalesce(' ' || string_agg(n.text, ' ' ORDER BY n.text), '')
        FROM concept c
        LEFT JOIN concept_note n ON n.concept_id = c.concept_id AND n.note_type IN ({notes})
        WHERE c.vocabulary_id = ? AND c.kind IN ({kinds})
        GROUP BY c.concept_id, c.code, c.name
        ORDER BY c.concept_id
        """,
        [*SEARCHABLE_NOTE_TYPES, ICD10CM, *RETRIEVABLE_KINDS],
    ).fetchall()
    return [(str(code), str(name), str(text)) for code, name, text in rows]


def top_n(scores: np.ndarray, codes: list[str], n: int) -> list[tuple[str, float]]:
    """The ``n`` best positive scores, ties broken by vocabulary order (prefix-stable)."""
    return [(codes[index], float(scores[index])) for index in top_indices(scores, n, positive_only=True)]


class BM25Index:
    """A BM25 index over one vocabulary build."""

    def __init__(self, documents: list[tuple[str, str, str]], build: str = "", scorer: Any = None) -> None:
        """Index ``documents``; ``scorer`` is a bm25s index of the same documents read back from
        disk (:func:`load_index`), which skips the tokenising and scoring (seconds per process)."""
        self.build_id = build
        self.codes = [code for code, _name, _text in documents]
        self.names = {code: name for code, name, _text in documents}
        self._texts = [text for _code, _name, text in documents]
        self._tokens: list[list[str]] | None = None
        if scorer is None:
            import bm25s  # with scipy, about a second to import: only once an index is built or read

            scorer = bm25s.BM25(k1=K1, b=B, method="robertson")
            scorer.index(self.tokens, show_progress=False)
        self._bm25: Any = scorer
        self._vocab = self._bm25.vocab_dict

    @property
    def tokens(self) -> list[list[str]]:
        """Each document's tokens, in ``codes`` order (what was indexed)."""
        if self._tokens is None:
            self._tokens = [tokenize(text) or ["_empty_"] for text in self._texts]
        return self._tokens

    def __len__(self) -> int:
        return len(self.codes)

    def ranking(self, query: str, n: int) -> list[tuple[str, float]]:
        """Top ``n`` (code, score) pairs with a positive score; ``[]`` for an unsearchable query."""
        rows, scores = self.ranking_rows(query, n)
        return list(zip(map(self.codes.__getitem__, rows.tolist()), scores.tolist(), strict=True))

    def ranking_rows(self, query: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``ranking`` as rows of ``self.codes`` and their scores (float64): no (code, score) tuple per row,
        for a caller keeping deep rankings or mapping rows to concept ids in one gather."""
        nothing = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))
        if query_problem(query) is not None or n <= 0:
            return nothing
        terms = [token for token in tokenize(query) if token in self._vocab]
        if not terms:
            return nothing
        scores = self._bm25.get_scores(terms)
        rows = top_indices(scores, n, positive_only=True)
        return rows.astype(np.int64, copy=False), scores[rows].astype(np.float64)

    def rankings(self, queries: list[str], n: int) -> list[list[tuple[str, float]]]:
        """``[self.ranking(q, n) for q in queries]``, scoring each distinct query once (a benchmark
        of many cohorts repeats few queries, and the harness asks for all of them at once)."""
        distinct = {query: self.ranking(query, n) for query in dict.fromkeys(queries)}
        return [list(distinct[query]) for query in queries]

    def rankings_rows(self, queries: list[str], n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """``[self.ranking_rows(q, n) for q in queries]``, each distinct query scored once (a repeated
        query shares its arrays: read them, do not change them)."""
        distinct = {query: self.ranking_rows(query, n) for query in dict.fromkeys(queries)}
        return [distinct[query] for query in queries]

    def search(self, query: str, k: int = 10) -> SearchResult:
        problem = query_problem(query)
        if problem is not None:
            return SearchResult(query=str(query)[:200], method="bm25", reason=problem)
        ranked = self.ranking(query, k)
        if not ranked:
            return SearchResult(query=query, method="bm25", reason="no ICD-10-CM description matches these words")
        return SearchResult(
            query=query,
            method="bm25",
            hits=[
                Hit(
                    code=code,
                    name=self.names[code],
                    rank=rank,
                    score=score,
                    provenance=[Provenance(retriever="bm25", query=query, rank=rank, score=score)],
                )
                for rank, (code, score) in enumerate(ranked, start=1)
            ],
        )


_INDEXES: ProcessCache[str, BM25Index] = ProcessCache("bm25 indexes")
_LOCK = threading.Lock()
CACHE_FORMAT = 1
_MANIFEST = "manifest.json"


def _documents_digest(documents: list[tuple[str, str, str]]) -> str:
    digest = hashlib.sha256()
    for code, _name, text in documents:
        digest.update(f"{code}\t{text}\n".encode())
    return digest.hexdigest()


def _file_digests(folder: Path) -> dict[str, str]:
    return {path.name: sha256_file(path) for path in sorted(folder.iterdir()) if path.name != _MANIFEST}


_SAFE_FOLDER = re.compile(r"[0-9A-Za-z_-][0-9A-Za-z._-]{0,63}")


def index_cache_dir(build: str) -> Path:
    """Where the BM25 index of vocabulary build ``build`` is kept between processes.

    Always one folder directly under ``<data>/bm25``: a build id that is no plain file name (empty,
    ``..``, a path, too long; a foreign database may hold anything) is named by its digest instead,
    since saving removes the folder's siblings.
    """
    name = build if _SAFE_FOLDER.fullmatch(build) else "id-" + hashlib.sha256(build.encode()).hexdigest()[:32]
    return data_dir() / "bm25" / name


def _expected_manifest(build: str, documents: list[tuple[str, str, str]]) -> dict[str, object]:
    import bm25s

    return {
        "format": CACHE_FORMAT,
        "vocabulary_build_id": build,
        "n_documents": len(documents),
        "documents_sha256": _documents_digest(documents),
        "k1": K1,
        "b": B,
        "method": "robertson",
        "bm25s_version": bm25s.__version__,
    }


def load_index(build: str, documents: list[tuple[str, str, str]]) -> BM25Index | None:
    """The index stored for ``build`` when it matches these documents and its files their checksums,
    else None (the caller builds it again): a stale or damaged copy is never used."""
    folder = index_cache_dir(build)
    try:
        manifest = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    import bm25s

    try:
        expected = _expected_manifest(build, documents)
        if {key: manifest.get(key) for key in expected} != expected or manifest.get("files") != _file_digests(folder):
            log.info("BM25 index in %s is stale or damaged: building it again", folder)
            return None
        scorer = bm25s.BM25.load(str(folder), mmap=False, show_progress=False)
    except Exception as error:  # an unreadable copy is rebuilt, whatever bm25s raised
        log.warning("BM25 index in %s cannot be read (%s): building it again", folder, type(error).__name__)
        return None
    return BM25Index(documents, build, scorer=scorer)


def save_index(index: BM25Index, documents: list[tuple[str, str, str]]) -> Path | None:
    """Store ``index`` for the next process (atomically; older builds' copies are removed).
    None when the data directory cannot take it: the index still works, it is just not kept."""
    folder = index_cache_dir(index.build_id)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(folder.parent)
        tmp = temporary_sibling(folder)
        try:
            index._bm25.save(str(tmp), show_progress=False)
            manifest = {**_expected_manifest(index.build_id, documents), "files": _file_digests(tmp)}
            (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for other in folder.parent.iterdir():
            if other.is_dir() and other.name != folder.name and not other.name.startswith("."):
                shutil.rmtree(other, ignore_errors=True)
    except OSError as error:
        log.warning("BM25 index not stored in %s (%s): it will be built again next time", folder, error)
        return None
    return folder


def get_bm25_index(con: duckdb.DuckDBPyConnection) -> BM25Index:
    """The BM25 index of ``con``'s vocabulary build: read from ``<data>/bm25`` when stored there,
    else built (a few seconds) and stored; shared by every connection of the process."""
    cursor = con.cursor()
    try:
        build = build_id(cursor)
        with _LOCK:
            index = _INDEXES.get(build)
            if index is None:
                documents = document_texts(cursor)
                index = load_index(build, documents)
                if index is None:
                    index = BM25Index(documents, build)
                    save_index(index, documents)
                _INDEXES[build] = index
    finally:
        cursor.close()
    return index


def bm25_search(con: duckdb.DuckDBPyConnection, query: str, k: int = 10) -> SearchResult:
    return get_bm25_index(con).search(query, k)
