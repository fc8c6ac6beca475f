"""Library context: the other cohort names built in the same run, as evidence of what a name is *not*.

A library's cohorts divide conditions between them ("Diabetes with Acute Complications", "Diabetes with
Chronic Complications"): a code that another cohort's name matches better than this one's probably
belongs to that other cohort. The features here compare each candidate's match to its own cohort name
with its best match among the library's other names. They read the names only (the queries a user
types), never a curated list, so a scored library's names are fair evidence for its own cohorts, and a
model fitted on other libraries learns how far to trust them.

A query built on its own (a search, the Assemble workflow) has no context; the membership model fitted
without these columns answers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import tokenize
from phenoforge.setbuild.candidates import CandidateTable, RankedIds, dense_floor, ranked_ids
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.nodes import hierarchy_stats

CONTEXT_FEATURES: list[str] = ["ctx_cos_margin", "ctx_n_closer", "ctx_cat_margin", "ctx_lex_margin"]
"""Per candidate: its dense cosine to its own name minus the best among the other names; how many other
names it is closer to (log1p); the same margin for the best cosine within its 3-character category; the
share of its own name's words on the code's path (itself and its ancestors) minus the best other name's
share."""


@dataclass(frozen=True)
class NameSignature:
    """What one cohort name says about every code: its dense ranking (concept ids, cosines) and its words."""

    query: str
    tokens: tuple[str, ...]
    dense_ids: np.ndarray
    dense_scores: np.ndarray
    floor: float
    """the cosine of a code outside the ranking (its last cosine, as the features read it)"""


def signature_of(table: CandidateTable) -> NameSignature:
    """The signature of the name a candidate table was built for (the table holds its dense ranking)."""
    return NameSignature(
        query=table.query,
        tokens=tuple(table.query_tokens),
        dense_ids=np.asarray(table.dense.ids, dtype=np.int64),
        dense_scores=np.asarray(table.dense.scores, dtype=np.float64),
        floor=float(table.floor_dense),
    )


def name_signature(
    hierarchy: Hierarchy,
    query: str,
    searched_as: str | None,
    dense: list[tuple[str, float]] | None,
    dense_ids: RankedIds | None = None,
) -> NameSignature:
    """The signature of ``query`` from its dense ranking, without building its candidate table: equal to
    ``signature_of`` the table ``build_candidates`` would build from the same rankings."""
    ranked = dense_ids if dense_ids is not None else ranked_ids(hierarchy, dense)
    return NameSignature(
        query=query,
        tokens=tuple(dict.fromkeys(tokenize(searched_as or query))),
        dense_ids=np.asarray(ranked.ids, dtype=np.int64),
        dense_scores=np.asarray(ranked.scores, dtype=np.float64),
        floor=dense_floor(ranked),
    )


class LibraryContext:
    """The distinct names of a run's cohorts, ready to compare a candidate table against the others.

    Holds each name's cosines where its dense ranking reached (5,000 a name: a 1,918-name library ~80 MB).
    """

    def __init__(self, hierarchy: Hierarchy, signatures: Sequence[NameSignature]) -> None:
        unique: dict[str, NameSignature] = {}
        for signature in signatures:
            unique.setdefault(signature.query, signature)
        self.hierarchy = hierarchy
        self.signatures = list(unique.values())
        self.index = {signature.query: i for i, signature in enumerate(self.signatures)}
        nodes = hierarchy_stats(hierarchy).node_table()
        self._nodes = nodes
        size = len(nodes.ids)
        n = len(self.signatures)
        self._floor = np.array([s.floor for s in self.signatures], dtype=np.float32)
        # each name's cosine to a node is its floor but where its ranking reached the node: those cosines
        # are kept by node (a names x nodes matrix was 750 MB for a 1,918-name library; this ~80 MB)
        hit_rows = []
        reached: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for i, signature in enumerate(self.signatures):
            rows = nodes.rows(signature.dense_ids) if len(signature.dense_ids) else np.zeros(0, np.int64)
            nodes.fill(rows)
            hit_rows.append(rows)
            if len(rows):
                _unique, first = np.unique(rows[::-1], return_index=True)
                last = len(rows) - 1 - first  # a node reached twice keeps its last cosine, as an assignment does
                scores = np.asarray(signature.dense_scores, dtype=np.float64)[last].astype(np.float32)
                reached.append((rows[last], np.full(len(last), i, dtype=np.int64), scores))
        reached_rows = np.concatenate([r for r, _n, _s in reached]) if reached else np.zeros(0, np.int64)
        order = np.argsort(reached_rows, kind="stable")
        self._reached_name = (np.concatenate([n for _r, n, _s in reached]) if reached else np.zeros(0, np.int64))[order]
        self._reached_cosine = (np.concatenate([c for _r, _n, c in reached]) if reached else np.zeros(0, np.float32))[
            order
        ]
        self._reached_start = np.concatenate([[0], np.cumsum(np.bincount(reached_rows, minlength=size))]).astype(
            np.int64
        )
        # each name's best cosine within each 3-character category (its floor where it reaches none)
        categories = np.unique(np.concatenate([nodes.own_category[rows] for rows in hit_rows] or [np.zeros(0, int)]))
        categories = categories[categories >= 0]
        self._category_column = np.full(size, -1, dtype=np.int64)
        self._category_column[categories] = np.arange(len(categories))
        self._category_best = np.repeat(self._floor[:, None], len(categories) + 1, axis=1)
        for i, rows in enumerate(hit_rows):
            columns = self._category_column[nodes.own_category[rows]] if len(rows) else np.zeros(0, np.int64)
            inside = (nodes.own_category[rows] >= 0) if len(rows) else np.zeros(0, bool)
            best = np.full(len(categories) + 1, -np.inf, dtype=np.float32)
            np.maximum.at(best, columns[inside], self.signatures[i].dense_scores[inside].astype(np.float32))
            self._category_best[i] = np.maximum(best, self._floor[i])
        # the names' words as bits: one bit per distinct word, a mask per name, a bit row per node
        words = sorted({token for s in self.signatures for token in s.tokens})
        self._word = {word: j for j, word in enumerate(words)}
        width = max(1, -(-len(words) // 64))
        self._masks = np.zeros((n, width), dtype=np.uint64)
        for i, signature in enumerate(self.signatures):
            for token in set(signature.tokens):
                j = self._word[token]
                self._masks[i, j // 64] |= np.uint64(1 << (j % 64))
        self._lengths = np.array([max(len(set(s.tokens)), 1) for s in self.signatures], dtype=np.float64)
        self._has_words = np.array([bool(s.tokens) for s in self.signatures])
        self._bits = np.zeros((size, width), dtype=np.uint64)
        for word, j in self._word.items():
            worded = nodes.rows_with_word.get(word)
            if worded:
                self._bits[np.asarray(worded, dtype=np.int64), j // 64] |= np.uint64(1 << (j % 64))
        self._bits_known = nodes.worded.copy()
        """rows whose words were read into ``_bits`` (a node table filled later gains rows: read on first use)"""
        # which names hold each word (word j's names: ``_word_names[_word_names_start[j]:_word_names_start[j + 1]]``)
        holders: list[list[int]] = [[] for _ in words]
        for i, signature in enumerate(self.signatures):
            for token in set(signature.tokens):
                holders[self._word[token]].append(i)
        self._word_names = np.array([i for names in holders for i in names], dtype=np.int64)
        self._word_names_start = np.concatenate([[0], np.cumsum([len(names) for names in holders])]).astype(np.int64)
        # bits past the last word (the mask's width is whole 64-bit words) are never set: no name to look up
        self._word_names_start = np.concatenate(
            [self._word_names_start, np.full(width * 64 - len(words), self._word_names_start[-1], np.int64)]
        )

    def __len__(self) -> int:
        return len(self.signatures)

    def applies_to(self, query: str) -> bool:
        """Whether ``query`` is one of the names and at least one other name is there to compare with."""
        return query in self.index and len(self.signatures) >= 2

    def features(self, table: CandidateTable) -> np.ndarray:
        """One row of ``CONTEXT_FEATURES`` per candidate of ``table`` (built for one of the names).

        Each margin needs the own name's value and the best among the others, never every other name's
        value side by side: the others' maxima are read from slices around the own row (no copy of the
        names x candidates block) and from the categories' per-column maxima, and the word shares from an
        index of which names hold each word (a candidate's path holds few words). On a 1,918-name library
        the all-pairs word-share block was ~1.8 GB and ~0.4 s per name, and two copies of the names x
        candidates block ~50 MB per name. The values are the same, to the bit
        (``tests/setbuild/test_context.py`` keeps the all-pairs computation as the definition)."""
        if not self.applies_to(table.query):
            raise ValueError(f"{table.query!r} has no library context: build it with the model fitted without one")
        out = np.zeros((len(table), len(CONTEXT_FEATURES)), dtype=np.float64)
        if not len(table):
            return out
        own = self.index[table.query]
        nodes = self._nodes
        rows = nodes.rows(np.asarray(table.ids, dtype=np.int64))
        nodes.fill(rows)
        cosine = self._cosines(rows)
        own_cos = cosine[own]
        other_cos = _max_but(cosine, own)
        own_category = nodes.own_category[rows]
        # a candidate without a category, or in one no name reached, compares the floors (the last column)
        columns = np.where(own_category >= 0, self._category_column[own_category], -1)
        own_share, other_share = self._path_shares(rows, own)
        out[:, 0] = own_cos - other_cos
        out[:, 1] = np.log1p((cosine > own_cos).sum(axis=0))  # the own row is never above itself
        out[:, 2] = self._category_best[own, columns] - _max_but(self._category_best, own)[columns]
        out[:, 3] = own_share - other_share
        return out

    def _cosines(self, rows: np.ndarray) -> np.ndarray:
        """Every name's dense cosine to each node of ``rows``, names x rows (float32): its floor, or the cosine
        its ranking gave the node."""
        block = np.empty((len(self.signatures), len(rows)), dtype=np.float32)
        block[:] = self._floor[:, None]
        starts = self._reached_start[rows]
        counts = self._reached_start[rows + 1] - starts
        reached = _ranges(starts, counts)
        block[self._reached_name[reached], np.repeat(np.arange(len(rows)), counts)] = self._reached_cosine[reached]
        return block

    def _path_shares(self, rows: np.ndarray, own: int) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate row, the share of the own name's words its own name or an ancestor's holds, and
        the best such share among the other names (0 where none shares a word: a name's share is 0 then)."""
        nodes = self._nodes
        chains = nodes.chain[rows]
        valid = chains >= 0
        on_chains = np.unique(chains[valid])
        unknown = on_chains[~self._bits_known[on_chains]]
        for row in unknown.tolist():  # filled after this context was made (a lazily filled node table)
            for word in nodes.stats.tokens(int(nodes.ids[row])):
                j = self._word.get(word)
                if j is not None:
                    self._bits[row, j // 64] |= np.uint64(1 << (j % 64))
            self._bits_known[row] = True
        path = np.bitwise_or.reduce(np.where(valid[..., None], self._bits[np.where(valid, chains, 0)], 0), axis=1)
        held_own = np.bitwise_count(path & self._masks[own]).sum(axis=-1)
        own_share = held_own / self._lengths[own] if self._has_words[own] else np.zeros(len(rows))
        # the other names' shares from the words on each path: (candidate, word) -> the names with that word
        bits = np.unpackbits(np.ascontiguousarray(path, dtype="<u8").view(np.uint8), axis=1, bitorder="little")
        candidate, word_bit = np.nonzero(bits)
        starts, ends = self._word_names_start[word_bit], self._word_names_start[word_bit + 1]
        counts = ends - starts
        n = len(self.signatures)
        hits = np.repeat(candidate, counts) * n + self._word_names[_ranges(starts, counts)]
        held = np.bincount(hits, minlength=len(rows) * n).reshape(len(rows), n)
        shares = np.where(self._has_words, held / self._lengths, 0.0)
        return own_share, _max_but(shares.T, own)


def _max_but(values: np.ndarray, row: int) -> np.ndarray:
    """``values[rows other than row].max(axis=0)`` from the slices on either side (no copy of the rest)."""
    before, after = values[:row], values[row + 1 :]
    if not len(before):
        return after.max(axis=0)
    if not len(after):
        return before.max(axis=0)
    return np.maximum(before.max(axis=0), after.max(axis=0))


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(s, s + c) for s, c in zip(starts, counts)])`` without the loop."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    offsets = np.repeat(ends - counts, counts)
    return np.repeat(starts, counts) + (np.arange(total, dtype=np.int64) - offsets)


def with_context_features(hierarchy: Hierarchy, examples: Sequence[Example]) -> list[Example]:
    """Copies of the examples whose libraries have at least two distinct names, with the context columns
    appended; each library's cohorts are each other's context (as a scored library's are when it is built).

    Examples of a library with a single name are left out: they have no context to learn from.
    """
    by_library: dict[str, list[Example]] = {}
    for ex in examples:
        by_library.setdefault(ex.library_id, []).append(ex)
    out: list[Example] = []
    for members in by_library.values():
        context = LibraryContext(hierarchy, [signature_of(ex.table) for ex in members])
        if len(context) < 2:
            continue
        for ex in members:
            out.append(replace(ex, features=np.hstack([ex.features, context.features(ex.table)])))
    return out


__all__ = [
    "CONTEXT_FEATURES",
    "LibraryContext",
    "NameSignature",
    "name_signature",
    "signature_of",
    "with_context_features",
]
