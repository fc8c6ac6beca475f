"""What the dense index embeds for each code, and how the vectors of a build are computed.

Texts are de-duplicated and sorted by length before batching (little padding). In
``mode="composed"`` (the default) the ~51k 7th-character codes, whose names are always
``<parent name>, <suffix>`` with one of 60 suffixes, are mostly not embedded: a code's vector is
``normalise(v(parent name) + offset[suffix])`` where the suffix's offset is the mean
``v(code) - v(parent name)`` over a few codes with that suffix that are embedded exactly
(``OFFSET_SAMPLES``). ``mode="exact"`` embeds every text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb
import numpy as np

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.dense.model import DenseIndexNotReady, EmbedFn, normalise
from phenoforge.engine.schema import ICD10CM, RETRIEVABLE_KINDS

BuildMode = Literal["exact", "composed"]

TEXT_RECIPE_VERSION = "name+synonyms-v1"
"""Bump when ``concept_texts`` changes: every index built with another recipe becomes stale."""
MAX_SYNONYMS = 5
"""Inclusion terms appended to a code's name (more dilute the vector of a short name)."""
SYNONYM_NOTE_TYPES: tuple[str, ...] = ("inclusion_term", "includes")
"""Notes that name the code itself; ``notes`` is instructional prose and left to BM25."""
DEFAULT_BUILD_MODE: BuildMode = "composed"
BUILD_CHUNK = 512
"""Texts per ``embed_fn`` call during a build: the progress granularity."""
EXTENSION_KIND = "extension"
_COMPOSE_SEPARATOR = ", "
OFFSET_SAMPLES = 8
"""7th-character codes per suffix embedded exactly to learn the suffix's offset vector."""


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
                stem, suffix = parent_row, name[len(prefix) :]
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
        batch_rows = order[start : start + chunk]
        vectors = np.asarray(embed_fn([unique[i] for i in batch_rows]), dtype=np.float32)
        calls += 1
        if vectors.ndim != 2 or vectors.shape[0] != len(batch_rows):
            raise DenseIndexNotReady(f"the embed function returned shape {vectors.shape} for {len(batch_rows)} texts")
        if out is None:
            out = np.zeros((total, vectors.shape[1]), np.float32)
        out[batch_rows] = vectors
        progress(min(start + chunk, total), total, message)
    if out is None:
        out = np.zeros((0, 0), np.float32)
    position = {text: i for i, text in enumerate(unique)}
    return normalise(out[[position[text] for text in texts]] if texts else out), calls


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
    message: str = "embedding codes",
) -> tuple[np.ndarray, int]:
    """All index vectors in ``items`` order; returns (vectors, number of distinct texts embedded).

    ``composed``: a 7th-character code's vector is ``normalise(stem + offset[suffix])``, where
    ``stem`` is the vector of its parent's name and ``offset[suffix]`` the mean of
    ``exact - stem`` over ``OFFSET_SAMPLES`` codes with that suffix that are embedded exactly.
    """
    n = len(items.codes)
    training = offset_training_rows(items) if mode == "composed" else {}
    trained = {row for rows in training.values() for row in rows}
    composed_rows = [i for i in range(n) if mode == "composed" and items.stem_of[i] >= 0 and i not in trained]
    composed = set(composed_rows)
    exact_rows = [i for i in range(n) if i not in composed]
    stem_rows = sorted({items.stem_of[i] for i in composed_rows} | {items.stem_of[i] for i in trained})
    all_texts = [items.texts[i] for i in exact_rows] + [items.names[i] for i in stem_rows]
    vectors, _calls = embed_unique(all_texts, embed_fn, progress, message)
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
        out[composed_rows] = normalise(out[composed_rows])
    return out, n_unique
