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
    ``compute_index`` also returns the distinct-text layout."""
    vectors, n_unique, _layout = compute_index(items, embed_fn, mode, progress, message)
    return vectors, n_unique


def compute_index(
    items: ConceptTexts,
    embed_fn: EmbedFn,
    mode: BuildMode,
    progress: ProgressCallback = no_progress,
    message: str = "embedding codes",
) -> tuple[np.ndarray, int, DistinctLayout | None]:
    """All index vectors in ``items`` order, the number of distinct texts embedded, and (composed
    builds) the distinct-text layout that scores the same vectors from the embedded rows alone.

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
        return out, n_unique, distinct_layout(items, out, composed_rows, stem_vec, offsets)
    return out, n_unique, None


LAYOUT_TOLERANCE = 2e-5
"""Largest difference allowed between a stored composed vector and ``(stem + offset) / norm``
recomputed from the layout (fp32 rounding of a 384-term sum stays far below it)."""


@dataclass
class DistinctLayout:
    """The index vectors as distinct embedded rows plus, per composed row, (stem, offset, norm).

    Row ``r`` of the full matrix is ``distinct[row_distinct[r]]`` when ``row_offset[r] < 0``, else
    ``(distinct[row_distinct[r]] + offsets[row_offset[r]]) / row_norm[r]``. ``distinct[p]`` is the
    stored row ``distinct_row[p]`` or, for a stem that is no row of its own (a parent whose text
    carries synonyms), ``stems[p - n_backed]``: those come last. A query then scores the ~48k
    distinct rows and composes the other ~51k scores exactly from them.
    """

    distinct_row: np.ndarray
    """int32 ``(n_distinct,)``: the full-matrix row holding the vector, -1 for an extra stem."""
    stems: np.ndarray
    """float32 ``(n_extra_stems, dim)``."""
    offsets: np.ndarray
    """float32 ``(n_suffixes, dim)``."""
    row_distinct: np.ndarray
    """int32 ``(count,)``."""
    row_offset: np.ndarray
    """int32 ``(count,)``, -1 for a row that is a distinct vector itself."""
    row_norm: np.ndarray
    """float32 ``(count,)``: ``|stem + offset|`` for composed rows, 1 for the others."""

    @property
    def n_backed(self) -> int:
        return int(len(self.distinct_row) - len(self.stems))

    def distinct_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """float32 ``(n_distinct, dim)``: the rows the int8 scan scores."""
        backed = np.asarray(vectors[self.distinct_row[: self.n_backed]], dtype=np.float32)
        return np.concatenate([backed, self.stems.astype(np.float32)]) if len(self.stems) else backed

    def max_error(self, vectors: np.ndarray) -> float:
        """Largest difference between ``vectors`` and the rows the layout reproduces."""
        distinct = self.distinct_vectors(vectors)
        worst = 0.0
        for start in range(0, len(self.row_distinct), 8192):
            stop = start + 8192
            rebuilt = distinct[self.row_distinct[start:stop]]
            offset_rows = self.row_offset[start:stop]
            composed = offset_rows >= 0
            rebuilt[composed] += self.offsets[offset_rows[composed]]
            rebuilt /= self.row_norm[start:stop, None]
            worst = max(worst, float(np.abs(rebuilt - np.asarray(vectors[start:stop])).max(initial=0.0)))
        return worst


def distinct_layout(
    items: ConceptTexts,
    vectors: np.ndarray,
    composed_rows: list[int],
    stem_vec: dict[int, np.ndarray],
    offsets: dict[str, np.ndarray],
) -> DistinctLayout:
    """The layout of a composed build: one distinct row per embedded text (rows with the same text
    and the same vector share one), each stem found among them by its text or added as an extra."""
    count = len(items.codes)
    composed = np.zeros(count, bool)
    composed[composed_rows] = True
    distinct_row: list[int] = []
    position_of_text: dict[str, int] = {}
    row_distinct = np.zeros(count, np.int32)
    for row in range(count):
        if composed[row]:
            continue
        text = items.texts[row]
        known = position_of_text.get(text)
        if known is not None and np.array_equal(vectors[distinct_row[known]], vectors[row]):
            row_distinct[row] = known
            continue
        position_of_text.setdefault(text, len(distinct_row))
        row_distinct[row] = len(distinct_row)
        distinct_row.append(row)
    stem_position: dict[int, int] = {}
    extra: list[np.ndarray] = []
    for stem in sorted(stem_vec):
        known = position_of_text.get(items.names[stem])
        if known is not None and np.array_equal(vectors[distinct_row[known]], stem_vec[stem]):
            stem_position[stem] = known
        else:
            stem_position[stem] = -1 - len(extra)
            extra.append(np.asarray(stem_vec[stem], np.float32))
    n_backed = len(distinct_row)
    suffix_names = sorted(offsets)
    suffix_index = {suffix: i for i, suffix in enumerate(suffix_names)}
    offset_matrix = np.asarray([offsets[s] for s in suffix_names], np.float32).reshape(len(suffix_names), -1)
    row_offset = np.full(count, -1, np.int32)
    row_norm = np.ones(count, np.float32)
    dim = vectors.shape[1]
    stems = np.asarray(extra, np.float32).reshape(len(extra), dim)
    for row in composed_rows:
        position = stem_position[items.stem_of[row]]
        row_distinct[row] = position if position >= 0 else n_backed + (-1 - position)
        row_offset[row] = suffix_index[items.suffixes[row]]
        stem_vector = stem_vec[items.stem_of[row]]
        row_norm[row] = np.linalg.norm((stem_vector + offset_matrix[row_offset[row]])[None, :], axis=-1)[0]
    return DistinctLayout(
        distinct_row=np.asarray(distinct_row + [-1] * len(extra), np.int32),
        stems=stems,
        offsets=offset_matrix,
        row_distinct=row_distinct,
        row_offset=row_offset,
        row_norm=row_norm,
    )


def recover_layout(
    items: ConceptTexts,
    vectors: np.ndarray,
    embed_fn: EmbedFn,
    progress: ProgressCallback = no_progress,
) -> tuple[DistinctLayout | None, int]:
    """The layout of a stored composed index, re-embedding only the stems that are no row of it.

    A stem whose name is the text of a stored (not composed) row is that row's vector, as in the
    build, which embedded each distinct text once; the others (parents with synonyms, ~1k of
    ~13k on ICD-10-CM) are embedded now. The offsets are re-learned from the stored training rows
    exactly as ``compute_index`` does. Returns (layout, texts embedded), no layout when no row is
    composed; the caller checks ``layout.max_error(vectors)`` before trusting it.
    """
    n = len(items.codes)
    training = offset_training_rows(items)
    trained = {row for rows in training.values() for row in rows}
    composed_rows = [i for i in range(n) if items.stem_of[i] >= 0 and i not in trained]
    if not composed_rows:  # nothing composed: no layout (``compute_index`` writes none either)
        return None, 0
    composed = set(composed_rows)
    stem_rows = sorted({items.stem_of[i] for i in composed_rows} | {items.stem_of[i] for i in trained})
    row_of_text: dict[str, int] = {}
    for row in range(n):
        if row not in composed:
            row_of_text.setdefault(items.texts[row], row)
    stem_vec: dict[int, np.ndarray] = {}
    missing: list[int] = []
    for stem in stem_rows:
        source = row_of_text.get(items.names[stem])
        if source is None:
            missing.append(stem)
        else:
            stem_vec[stem] = np.asarray(vectors[source], np.float32)
    if missing:
        embedded, _calls = embed_unique([items.names[s] for s in missing], embed_fn, progress, "embedding stems")
        for stem, vector in zip(missing, embedded, strict=True):
            stem_vec[stem] = vector
    offsets = {
        suffix: np.mean([np.asarray(vectors[row]) - stem_vec[items.stem_of[row]] for row in rows], axis=0)
        for suffix, rows in training.items()
    }
    return distinct_layout(items, vectors, composed_rows, stem_vec, offsets), len(missing)
