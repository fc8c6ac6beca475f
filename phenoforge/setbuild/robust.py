"""Query robustness: misspelt rare words, and umbrella names whose members use other words.

- ``TypoCorrector`` replaces a query word the vocabulary never uses by the nearest word it does use
  (Damerau-Levenshtein distance 1, or 2 for words of eight letters or more; the more frequent word
  wins a tie), so "diabetis" searches as "diabetes". Words the vocabulary knows are never touched, nor
  are words typed with two or more capitals ("ARDS" is an abbreviation, not a misspelt "rads").
- ``umbrella_nodes`` finds blocks and categories whose own name, or whose ``includes`` /
  ``inclusion_term`` / ``notes`` text, holds every word of the query: "inflammatory bowel disease"
  is a note of block K50-K52 (Crohn's disease, ulcerative colitis), which neither retriever can
  return because blocks are not retrievable codes.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from phenoforge.caches import ProcessCache
from phenoforge.config import data_dir
from phenoforge.engine.bm25 import document_texts
from phenoforge.engine.db import build_id
from phenoforge.engine.expansion import Hierarchy
from phenoforge.engine.query import STOPWORDS, abbreviations_typed, tokenize
from phenoforge.engine.schema import ICD10CM
from phenoforge.storage import write_atomically

log = logging.getLogger(__name__)

UMBRELLA_NOTE_TYPES = ("includes", "inclusion_term", "notes")
UMBRELLA_KINDS = ("block", "category")
MAX_EXTRA_WORDS = 2
"""An umbrella text may hold at most this many words beyond the query's (so it is about the query)."""


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance, giving up (``limit + 1``) once it must exceed ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[-1]


def _trigrams(word: str) -> set[str]:
    padded = f"^{word}$"
    return {padded[i : i + 3] for i in range(len(padded) - 2)}


@dataclass
class Correction:
    query: str
    corrected: str
    replaced: dict[str, str]


class TypoCorrector:
    """Nearest known word for each unknown query word, from the vocabulary's searchable text."""

    def __init__(self, document_frequency: Counter[str]) -> None:
        self.frequency = document_frequency
        self._trigram_index: dict[str, list[str]] | None = None

    @property
    def _by_trigram(self) -> dict[str, list[str]]:
        """Known words by trigram, built the first time a query word is unknown (most queries have none)."""
        if self._trigram_index is None:
            by_trigram: dict[str, list[str]] = defaultdict(list)
            for word in self.frequency:
                if len(word) >= 4 and word.isalpha():
                    for gram in _trigrams(word):
                        by_trigram[gram].append(word)
            self._trigram_index = by_trigram
        return self._trigram_index

    def nearest(self, word: str) -> str | None:
        if word in self.frequency or len(word) < 4 or not word.isalpha() or word in STOPWORDS:
            return None
        limit = 1 if len(word) < 8 else 2
        shared: Counter[str] = Counter()
        by_trigram = self._by_trigram
        for gram in _trigrams(word):
            shared.update(by_trigram.get(gram, ()))
        best: tuple[int, int, str] | None = None
        for candidate, _count in shared.most_common(200):
            distance = edit_distance(word, candidate, limit)
            if distance <= limit:
                key = (distance, -self.frequency[candidate], candidate)
                if best is None or key < best:
                    best = key
        return best[2] if best else None

    def correct(self, query: str) -> Correction:
        replaced: dict[str, str] = {}
        typed_as_abbreviation = abbreviations_typed(query)
        for word in tokenize(query):
            fix = None if word in typed_as_abbreviation else self.nearest(word)
            if fix is not None:
                replaced[word] = fix
        words = [replaced.get(word, word) for word in tokenize(query)]
        return Correction(query=query, corrected=" ".join(words) if replaced else query, replaced=replaced)


_CORRECTORS: ProcessCache[str, TypoCorrector] = ProcessCache("typo correctors")
_LOCK = threading.Lock()


def get_typo_corrector(con: duckdb.DuckDBPyConnection, build: str | None = None) -> TypoCorrector:
    """The corrector of ``con``'s vocabulary build (its word counts read from ``data/models``, else
    counted, about two seconds, and kept there; then shared by the process).

    ``build``: the build id when the caller holds it already (its hierarchy's): a query per call to read
    it cost a millisecond per cohort of a benchmark.
    """
    if build is not None:
        with _LOCK:
            corrector = _CORRECTORS.get(build)
        if corrector is not None:
            return corrector
    cursor = con.cursor()
    try:
        build = build or build_id(cursor)
        with _LOCK:
            corrector = _CORRECTORS.get(build)
            if corrector is None:
                corrector = TypoCorrector(_stored_frequency(cursor, build))
                _CORRECTORS[build] = corrector
    finally:
        cursor.close()
    return corrector


WORD_COUNTS_FORMAT = 1


def word_counts_path(build: str) -> Path:
    """Where the document frequency of every searchable word of vocabulary build ``build`` is kept."""
    return data_dir() / "models" / f"word-counts-{build}-v{WORD_COUNTS_FORMAT}.json"


def count_words(con: duckdb.DuckDBPyConnection) -> Counter[str]:
    """In how many searchable texts each word occurs (what the corrector prefers on a tie)."""
    frequency: Counter[str] = Counter()
    for _code, _name, text in document_texts(con):
        frequency.update(set(tokenize(text)))
    return frequency


def _stored_frequency(con: duckdb.DuckDBPyConnection, build: str) -> Counter[str]:
    """The build's word counts from their file; counted and written when missing, stale or corrupt."""
    path = word_counts_path(build)
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("format") == WORD_COUNTS_FORMAT and stored.get("build_id") == build:
            counts = stored["counts"]
            if isinstance(counts, dict) and all(type(n) is int and n > 0 for n in counts.values()):
                return Counter({str(word): n for word, n in counts.items()})
        log.warning("%s: another build or format: counted again", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as error:
        log.warning("%s: unreadable (%s): counted again", path, type(error).__name__)
    frequency = count_words(con)
    try:
        stored = {"format": WORD_COUNTS_FORMAT, "build_id": build, "counts": dict(frequency)}
        write_atomically(path, lambda handle: handle.write(json.dumps(stored).encode("utf-8")))
    except OSError as error:
        log.warning("word counts not stored (%s): counted again by the next process", error.strerror or error)
    return frequency


@dataclass
class UmbrellaIndex:
    """Block and category texts (names and inclusion notes) as word sets, per node."""

    texts: list[tuple[int, frozenset[str], str]]
    _with_word: dict[str, list[int]] = field(default_factory=dict, init=False, repr=False)
    """word -> the positions in ``texts`` holding it, ascending: only texts holding every query word
    are compared (scanning all of them took a millisecond per query)"""

    def __post_init__(self) -> None:
        for position, (_node, text_words, _text) in enumerate(self.texts):
            for word in text_words:
                self._with_word.setdefault(word, []).append(position)

    def match(self, query: str) -> dict[int, str]:
        """Node -> the text that names it as an umbrella of every query word (the first such text)."""
        words = set(tokenize(query))
        if not words:
            return {}
        postings = sorted((self._with_word.get(word, []) for word in words), key=len)
        holding = set(postings[0]).intersection(*postings[1:]) if postings[0] else set()
        found: dict[int, str] = {}
        for position in sorted(holding):
            node, text_words, text = self.texts[position]
            if len(text_words - words) <= MAX_EXTRA_WORDS and node not in found:
                found[node] = text
        return found


_UMBRELLAS: ProcessCache[str, UmbrellaIndex] = ProcessCache("umbrella indexes")


def get_umbrella_index(con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy) -> UmbrellaIndex:
    with _LOCK:
        index = _UMBRELLAS.get(hierarchy.build_id)
        if index is not None:
            return index
    kinds = ", ".join("?" for _ in UMBRELLA_KINDS)
    notes = ", ".join("?" for _ in UMBRELLA_NOTE_TYPES)
    rows = (
        con.cursor()
        .execute(
            f"SELECT c.concept_id, n.text FROM concept_note n JOIN concept c ON c.concept_id = n.concept_id "
            f"WHERE c.vocabulary_id = ? AND c.kind IN ({kinds}) AND n.note_type IN ({notes}) ORDER BY c.concept_id",
            [ICD10CM, *UMBRELLA_KINDS, *UMBRELLA_NOTE_TYPES],
        )
        .fetchall()
    )
    texts = [
        (node, frozenset(tokenize(name.split("(")[0])), name)
        for node, name in hierarchy.name.items()
        if hierarchy.kind.get(node) in UMBRELLA_KINDS
    ]
    texts += [(int(node), frozenset(tokenize(text)), str(text)) for node, text in rows]
    index = UmbrellaIndex(texts)
    with _LOCK:
        _UMBRELLAS[hierarchy.build_id] = index
    return index


def umbrella_nodes(con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, query: str) -> dict[int, str]:
    """Blocks and categories the vocabulary itself names as umbrellas of ``query``: node -> its text."""
    return get_umbrella_index(con, hierarchy).match(query)
