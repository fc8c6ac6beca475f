"""Per vocabulary build: node statistics, the node table every candidate table reads, and scratch arrays.

Kept apart from :mod:`~phenoforge.setbuild.candidates` and :mod:`~phenoforge.setbuild.features`,
which both build on them (the two used to import each other).
"""

from __future__ import annotations

import logging
import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from phenoforge.caches import ProcessCache
from phenoforge.config import data_dir
from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import tokenize
from phenoforge.storage import write_atomically

log = logging.getLogger(__name__)


def billable_below(hierarchy: Hierarchy, concept_id: int) -> list[int]:
    """The billable codes a selected node stands for: itself when billable, else its billable descendants."""
    return list(hierarchy.billable_descendants(concept_id))


def ancestor_of_kind(hierarchy: Hierarchy, concept_id: int, kind: str) -> int | None:
    """The nearest node of ``kind`` at or above ``concept_id`` (``category``, ``block``...)."""
    return hierarchy.ancestor_of_kind(concept_id, kind)


class _HierarchyStats:
    """Per-build memo of billable counts and name tokens (both cost a subtree walk or a regex)."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        self._billable: dict[int, int] = {}
        self._tokens: dict[int, frozenset[str]] = {}
        self._nodes: _NodeTable | None = None

    def node_table(self) -> _NodeTable:
        if self._nodes is None:
            self._nodes = stored_node_table(self.hierarchy, self)
        return self._nodes

    def billable_nodes(self, node: int) -> tuple[int, ...]:
        return self.hierarchy.billable_descendants(node)

    def billable_count(self, node: int) -> int:
        count = self._billable.get(node)
        if count is None:
            count = len(billable_below(self.hierarchy, node))
            self._billable[node] = count
        return count

    def tokens(self, node: int) -> frozenset[str]:
        words = self._tokens.get(node)
        if words is None:
            words = frozenset(tokenize(self.hierarchy.name.get(node, "")))
            self._tokens[node] = words
        return words


_STATS: ProcessCache[str, _HierarchyStats] = ProcessCache("node statistics")
_LOCK = threading.Lock()


def hierarchy_stats(hierarchy: Hierarchy) -> _HierarchyStats:
    with _LOCK:
        stats = _STATS.get(hierarchy.build_id)
        if stats is None or stats.hierarchy is not hierarchy:
            stats = _HierarchyStats(hierarchy)
            _STATS[hierarchy.build_id] = stats
        return stats


class _NodeTable:
    """Per build: each node's row, its chain as rows (self first, padded with -1) and the facts the
    features read per node, filled the first time a query touches the node (a benchmark touches a
    few thousand per cohort, the same ones again and again)."""

    def __init__(self, hierarchy: Hierarchy, stats: _HierarchyStats) -> None:
        self.hierarchy = hierarchy
        self.stats = stats
        nodes = sorted(set(hierarchy.code) | set(hierarchy.parents) | set(hierarchy.children))
        self.row = {node: i for i, node in enumerate(nodes)}
        self.ids = np.array(nodes, dtype=np.int64)
        self._row_of: np.ndarray | None = None
        size = len(nodes)
        self.filled = np.zeros(size, dtype=bool)
        self.chain = np.full((size, 8), -1, dtype=np.int64)
        self.levels = np.zeros((size, 8), dtype=np.int64)
        self.upper = np.zeros((size, 8), dtype=bool)
        """chain positions holding a subcategory or category above the node"""
        self.parent = np.zeros(size, dtype=np.int64)
        self.category = np.zeros(size, dtype=np.int64)
        """the nearest category, else the parent (the features' fallback)"""
        self.block = np.zeros(size, dtype=np.int64)
        self.own_category = np.full(size, -1, dtype=np.int64)
        """the nearest category at or above the node, -1 when there is none"""
        self.depth = np.zeros(size, dtype=np.float64)
        self.is_extension = np.zeros(size, dtype=np.float64)
        self.billable = np.full(size, -1, dtype=np.int64)
        self.n_tokens = np.zeros(size, dtype=np.int64)
        self.worded = np.zeros(size, dtype=bool)
        self.rows_with_word: dict[str, list[int]] = {}

    def rows(self, nodes: Iterable[int]) -> np.ndarray:
        """The rows of concept ids: one gather where the ids span a small range (a vocabulary built here
        numbers its concepts 1..n), else one binary search (``ids`` is sorted; Athena's ids are sparse)."""
        wanted = nodes.astype(np.int64, copy=False) if isinstance(nodes, np.ndarray) else np.fromiter(nodes, np.int64)
        if not len(wanted):
            return np.zeros(0, dtype=np.int64)
        row_of = self._row_of_offset()
        if row_of is not None:
            offset = wanted - self.ids[0]
            inside = (offset >= 0) & (offset < len(row_of))
            found = row_of[np.where(inside, offset, 0)]
            if inside.all() and (found >= 0).all():
                return found
        else:
            found = np.searchsorted(self.ids, wanted)
            if found.max() < len(self.ids) and (self.ids[found] == wanted).all():
                return found
        raise KeyError(f"concept ids not in the hierarchy: {sorted(set(wanted.tolist()) - set(self.row))[:5]}")

    def _row_of_offset(self) -> np.ndarray | None:
        """Row per ``id - ids[0]`` (-1: no such concept) when the ids span at most four times their
        number; None otherwise (a table that large would cost more memory than the search saves)."""
        if self._row_of is None and len(self.ids):
            span = int(self.ids[-1] - self.ids[0]) + 1
            if span <= 4 * len(self.ids):
                row_of = np.full(span, -1, dtype=np.int64)
                row_of[self.ids - self.ids[0]] = np.arange(len(self.ids))
                self._row_of = row_of
            else:
                self._row_of = np.zeros(0, dtype=np.int64)
        return self._row_of if self._row_of is not None and len(self._row_of) else None

    def _widen(self, width: int) -> None:
        extra = width - self.chain.shape[1]
        size = len(self.ids)
        self.chain = np.hstack([self.chain, np.full((size, extra), -1, dtype=np.int64)])
        self.levels = np.hstack([self.levels, np.zeros((size, extra), dtype=np.int64)])
        self.upper = np.hstack([self.upper, np.zeros((size, extra), dtype=bool)])

    def _add_words(self, position: int, node: int) -> None:
        self.worded[position] = True
        words = self.stats.tokens(node)
        self.n_tokens[position] = len(words)
        for word in words:
            self.rows_with_word.setdefault(word, []).append(position)

    def fill(self, rows: np.ndarray) -> None:
        """Make sure every row of ``rows`` (and the words of every node on its chain) is known."""
        missing = np.unique(rows[~self.filled[rows]])
        if not len(missing):
            return
        hierarchy, row = self.hierarchy, self.row
        for position in missing.tolist():
            node = int(self.ids[position])
            chain = hierarchy.chain(node)
            if len(chain) > self.chain.shape[1]:
                self._widen(len(chain))
            chain_rows = [row[a] for a in chain]
            self.chain[position, : len(chain)] = chain_rows
            self.levels[position, : len(chain)] = hierarchy.chain_levels(node)
            self.upper[position, 1 : len(chain)] = [
                hierarchy.kind.get(a) in ("subcategory", "category") for a in chain[1:]
            ]
            parent = chain[1] if len(chain) > 1 else node
            category = ancestor_of_kind(hierarchy, node, "category")
            own_category = category
            category = category or parent
            block = ancestor_of_kind(hierarchy, node, "block") or category
            self.parent[position] = row[parent]
            self.category[position] = row[category]
            self.block[position] = row[block]
            self.own_category[position] = row[own_category] if own_category is not None else -1
            self.depth[position] = float(len(chain))
            self.is_extension[position] = float(hierarchy.kind.get(node) == "extension")
            for a, a_row in zip(chain, chain_rows, strict=True):
                if not self.worded[a_row]:
                    self._add_words(a_row, a)
            self.filled[position] = True

    def billable_counts(self, rows: np.ndarray) -> np.ndarray:
        unknown = np.unique(rows[self.billable[rows] < 0])
        for position in unknown.tolist():
            self.billable[position] = self.stats.billable_count(int(self.ids[position]))
        return self.billable[rows]

    def query_bits(self, query_tokens: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per row, one bit per query position whose word is among the node's words (rows whose
        words are known), and the mask of each word's first position. The rows' bits are this
        thread's scratch array: read them before the next call."""
        words = max(1, -(-len(query_tokens) // 64))
        bits = scratch_array("query_bits", (len(self.ids), words), 0, np.uint64)
        first = np.zeros(words, dtype=np.uint64)
        seen: set[str] = set()
        for position, token in enumerate(query_tokens):
            bit = np.uint64(1 << (position % 64))
            if token not in seen:
                seen.add(token)
                first[position // 64] |= bit
            hits = self.rows_with_word.get(token)
            if hits is not None and len(hits):
                bits[np.asarray(hits, dtype=np.int64), position // 64] |= bit
        return bits, first


NODE_TABLE_FORMAT = 1
_TABLE_ARRAYS: tuple[str, ...] = ("chain", "levels", "upper", "parent", "category", "block", "own_category")
_TABLE_ARRAYS += ("depth", "is_extension", "billable", "n_tokens")


def node_table_path(build: str) -> Path:
    """Where the complete node table of vocabulary build ``build`` is kept (its name says the build)."""
    return data_dir() / "models" / f"node-table-{build}-v{NODE_TABLE_FORMAT}.npz"


def complete_node_table(hierarchy: Hierarchy, stats: _HierarchyStats) -> _NodeTable:
    """Every node's row filled, words and billable counts included (seconds: done once per build, then read)."""
    table = _NodeTable(hierarchy, stats)
    everything = np.arange(len(table.ids))
    table.fill(everything)
    table.billable_counts(everything)
    return table


def save_node_table(table: _NodeTable, path: Path) -> None:
    """Write a complete table atomically (a temporary sibling, then a rename); plain arrays, no pickles."""
    words = sorted(table.rows_with_word)
    lengths = np.array([len(table.rows_with_word[word]) for word in words], dtype=np.int64)
    arrays = {name: getattr(table, name) for name in _TABLE_ARRAYS}
    arrays |= {
        "build_id": np.array(table.hierarchy.build_id),
        "format": np.array(NODE_TABLE_FORMAT),
        "ids": table.ids,
        "words": np.array(words, dtype=str),
        "word_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "word_rows": np.array([row for word in words for row in table.rows_with_word[word]], dtype=np.int64),
    }
    write_atomically(path, lambda handle: np.savez(handle, **arrays))


class NodeTableError(ValueError):
    """A stored node table that cannot be used (corrupt, another build, another format)."""


def load_node_table(path: Path, hierarchy: Hierarchy, stats: _HierarchyStats) -> _NodeTable:
    """The stored complete table of ``hierarchy``'s build, or ``NodeTableError`` saying why not."""
    table = _NodeTable(hierarchy, stats)
    size = len(table.ids)
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise NodeTableError(f"{path}: cannot be read ({type(error).__name__}: {error})") from None
    missing = {*_TABLE_ARRAYS, "build_id", "format", "ids", "words", "word_offsets", "word_rows"} - set(arrays)
    if missing:
        raise NodeTableError(f"{path}: lacks {', '.join(sorted(missing))}")
    if arrays["format"].shape != () or int(arrays["format"]) != NODE_TABLE_FORMAT:
        raise NodeTableError(f"{path}: format {arrays['format']}, this version reads {NODE_TABLE_FORMAT}")
    if str(arrays["build_id"]) != hierarchy.build_id or not np.array_equal(arrays["ids"], table.ids):
        raise NodeTableError(f"{path}: made for vocabulary build {arrays['build_id']}, not {hierarchy.build_id}")
    width = arrays["chain"].shape[1:]
    for name in _TABLE_ARRAYS:
        fresh, stored_array = getattr(table, name), arrays[name]
        shape = (size, *width) if fresh.ndim == 2 else (size,)
        if stored_array.dtype != fresh.dtype or stored_array.shape != shape:
            raise NodeTableError(f"{path}: {name} is {stored_array.dtype} {stored_array.shape}, not {shape}")
    rows_arrays = (arrays[name] for name in ("chain", "parent", "category", "block", "word_rows"))
    if any(len(rows) and (rows.min() < -1 or rows.max() >= size) for rows in rows_arrays):
        raise NodeTableError(f"{path}: a row index outside the table")
    if (arrays["billable"] < 0).any() or not len(width) or (arrays["chain"][:, 0] != np.arange(size)).any():
        raise NodeTableError(f"{path}: incomplete (a billable count or a chain is missing)")
    offsets, word_rows = arrays["word_offsets"], arrays["word_rows"]
    words = arrays["words"].tolist()
    if (
        len(offsets) != len(words) + 1
        or offsets[0] != 0
        or offsets[-1] != len(word_rows)
        or (np.diff(offsets) < 0).any()
    ):
        raise NodeTableError(f"{path}: word index does not add up")
    for name in _TABLE_ARRAYS:
        setattr(table, name, arrays[name])
    bounds = offsets.tolist()
    table.rows_with_word = {word: word_rows[bounds[i] : bounds[i + 1]].tolist() for i, word in enumerate(words)}
    table.worded[:] = True
    table.filled[:] = True
    return table


def stored_node_table(hierarchy: Hierarchy, stats: _HierarchyStats) -> _NodeTable:
    """The complete node table, read from ``data/models`` (written there the first time, e.g. by ``build``).

    A corrupt or stale file is logged, built again and replaced; an unwritable folder keeps the table for
    this process only. Either way the features read the same values as a table filled on demand.
    """
    path = node_table_path(hierarchy.build_id)
    if path.is_file():
        try:
            return load_node_table(path, hierarchy, stats)
        except NodeTableError as error:
            log.warning("node table unusable, built again: %s", error)
    table = complete_node_table(hierarchy, stats)
    try:
        save_node_table(table, path)
    except OSError as error:
        log.warning("node table not stored (%s): built again by the next process", error.strerror or error)
    return table


class _Scratch(threading.local):
    """Arrays the size of the node table, reused query after query (one set per thread).

    ``candidate_features`` needs about fifteen of them per query (~100k rows each). Allocated fresh,
    each is mapped, faulted in page by page and unmapped again (the CLI keeps glibc's mmap threshold
    at 128 kB): that was half the features' time. Filling a kept array is a memset.
    Nothing handed out leaves the call that asked: every value read from these is a gathered copy.
    """

    def __init__(self) -> None:
        self.arrays: dict[tuple[str, tuple[int, ...], np.dtype], np.ndarray] = {}

    def full(self, name: str, shape: int | tuple[int, ...], value: object, dtype: type = np.float64) -> np.ndarray:
        """The thread's array ``name`` of ``shape`` and ``dtype``, every entry set to ``value``."""
        key = (name, (shape,) if isinstance(shape, int) else tuple(shape), np.dtype(dtype))
        array = self.arrays.get(key)
        if array is None:
            if len(self.arrays) >= _SCRATCH_ARRAYS:  # tables of many builds (tests): start over
                self.arrays.clear()
            array = self.arrays[key] = np.empty(key[1], dtype=key[2])
        array.fill(value)
        return array


_SCRATCH_ARRAYS = 64
_SCRATCH = _Scratch()


def scratch_array(name: str, shape: int | tuple[int, ...], value: object, dtype: type = np.float64) -> np.ndarray:
    """This thread's reusable array ``name`` filled with ``value``: valid until the next ask for ``name``."""
    return _SCRATCH.full(name, shape, value, dtype)
