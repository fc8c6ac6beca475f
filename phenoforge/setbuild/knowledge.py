"""Curated cohorts of other library groups as knowledge: their names matched against a query.

A :class:`CuratedKnowledge` holds every bundled library's curated cohorts (codes, name words, name
embeddings); a :class:`KnowledgeView` is that knowledge minus some library groups, and refuses to serve
a query for a group it contains (:meth:`KnowledgeView.check_excludes`): leakage is excluded by
construction. Matching is the dense cosine of the names when an embedding is available, and word overlap.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from phenoforge.engine.curated import Library
from phenoforge.engine.query import tokenize
from phenoforge.errors import PhenoforgeError
from phenoforge.setbuild.groups import library_group

TRANSFER_VERSION = "2"
"""Bumped when the transfer features change: fitted models that read them are then refitted."""
MATCH_DEPTH = 8
"""Best-matching cohorts per query whose membership becomes features (the rest match too weakly)."""
MATCH_FLOOR = 0.5
"""Name similarity at which an other-group cohort counts as naming the query's condition."""
POLARITY_WORDS = frozenset({"without", "uncomplicated", "no", "not", "non", "except", "other"})
"""Words that turn a name into its complement ("diabetes without complications"): two names that
differ in them name different conditions however close their embeddings are."""
POLARITY_PENALTY = 0.3

EmbedFn = Callable[[list[str]], np.ndarray]
log = logging.getLogger(__name__)


class KnowledgeLeakError(PhenoforgeError):
    """A knowledge view would show a scored cohort its own library group's curated lists."""


@dataclass(frozen=True)
class KnownCohort:
    """One curated cohort of a bundled library, as knowledge."""

    library_id: str
    groups: frozenset[str]
    cohort_id: str
    cohort_name: str
    ids: np.ndarray
    """sorted concept ids of its curated codes"""
    categories: Counter[int]
    """category concept id -> how many of its curated codes sit under it"""
    words: frozenset[str]
    polarity: frozenset[str] = frozenset()


def name_words(name: str) -> frozenset[str]:
    return frozenset(tokenize(name))


_LETTERS = re.compile(r"[a-z]+")


def polarity(name: str) -> frozenset[str]:
    """The complement-making words of a name (tokenize drops some of them as stop words).

    Words are runs of letters, so "(without complications)" and "w/o complications" count as
    "without"; splitting on spaces alone missed a word beside a bracket or slash.
    """
    text = re.sub(r"\bw/o\b", "without", name.lower())
    return frozenset(_LETTERS.findall(text)) & POLARITY_WORDS


def dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b)) if a and b else 0.0


def library_groups(library: Library) -> frozenset[str]:
    """Every group name a library answers to: its declared group and its id's family (as ``groups_of``)."""
    return frozenset({library_group(library.manifest), library_group({"library_id": library.library_id})})


RECENT_QUERIES = 64
"""Queries whose similarities a view keeps (287 floats each)."""
QUERY_CACHE_SIZE = 4096
"""Query vectors a knowledge keeps (a benchmark of every bundled cohort needs 287)."""


@dataclass
class CuratedKnowledge:
    """Curated cohorts of bundled libraries, with their names embedded once (when an embedding exists)."""

    cohorts: list[KnownCohort]
    vectors: np.ndarray | None = None
    embed: EmbedFn | None = None
    digest: str = ""
    problems: list[str] = field(default_factory=list)
    single_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    """cohort name -> ``embed([name])[0]``, stored beside the knowledge: what ``query_vector`` would embed
    for a query that is a cohort name (every query of a bundled benchmark)"""
    _query_vectors: dict[str, np.ndarray] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def view(
        self,
        excluded_groups: Iterable[str],
        excluded_cohorts: Iterable[tuple[str, str]] = (),
        query_groups: Mapping[str, Iterable[str]] | None = None,
    ) -> KnowledgeView:
        """The knowledge minus every cohort of ``excluded_groups``, minus the single cohorts ``excluded_cohorts``
        names (library id, cohort id: near copies of a scored library's lists), and, for a query that
        ``query_groups`` names, minus those groups too (the scored cohort that nearly copies one of their lists)."""
        excluded = frozenset(g for g in excluded_groups if g)
        hidden = frozenset(excluded_cohorts)
        keep = np.array(
            [not (c.groups & excluded) and (c.library_id, c.cohort_id) not in hidden for c in self.cohorts],
            dtype=bool,
        )
        per_query = {query: frozenset(groups) for query, groups in (query_groups or {}).items() if groups}
        return KnowledgeView(self, excluded, keep, hidden, per_query)

    def query_vector(self, query: str) -> np.ndarray | None:
        if self.embed is None or self.vectors is None:
            return None
        with self._lock:
            cached = self._query_vectors.get(query)
        if cached is None:
            cached = self.single_vectors.get(query)
            if cached is None:
                cached = np.asarray(self.embed([query]), dtype=np.float32)[0]
            with self._lock:
                self._remember({query: cached})
        return cached

    def warm(self, queries: Sequence[str]) -> None:
        """Embed many queries in one model call (training embeds every cohort name at once)."""
        if self.embed is None or self.vectors is None:
            return
        missing = [q for q in dict.fromkeys(queries) if q not in self._query_vectors]
        if missing:
            vectors = np.asarray(self.embed(missing), dtype=np.float32)
            with self._lock:
                self._remember(dict(zip(missing, vectors, strict=True)))

    def _remember(self, vectors: dict[str, np.ndarray]) -> None:
        """Keep at most ``QUERY_CACHE_SIZE`` query vectors, dropping the oldest (a dashboard runs for days)."""
        self._query_vectors.update(vectors)
        excess = len(self._query_vectors) - QUERY_CACHE_SIZE
        for stale in list(self._query_vectors)[: max(0, excess)]:
            del self._query_vectors[stale]


@dataclass
class Match:
    cohort: KnownCohort
    similarity: float


@dataclass
class KnowledgeView:
    """The knowledge minus ``excluded`` groups: what one scored (or training) cohort may see."""

    knowledge: CuratedKnowledge
    excluded: frozenset[str]
    keep: np.ndarray
    excluded_cohorts: frozenset[tuple[str, str]] = frozenset()
    """single cohorts (library id, cohort id) hidden besides the excluded groups' (near copies of scored lists)"""
    query_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """query -> groups hidden from that query alone: a scored cohort whose list nearly copies one of a group's
    sees none of the group, as the group's own cohorts see none of it in the bundled benchmark"""
    _recent: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict, repr=False, compare=False)
    """the latest queries' similarities: the learned features, its provenance note and curated_transfer
    each match the same query (three times per cohort in a benchmark)"""

    @property
    def cohorts(self) -> list[KnownCohort]:
        return [c for c, k in zip(self.knowledge.cohorts, self.keep.tolist(), strict=True) if k]

    def without(
        self,
        groups: Iterable[str] = (),
        cohorts: Iterable[tuple[str, str]] = (),
        query_groups: Mapping[str, Iterable[str]] | None = None,
    ) -> KnowledgeView:
        """This view minus further ``groups``, single ``cohorts`` (library id, cohort id) and, per query, the
        groups ``query_groups`` names for it."""
        per_query: dict[str, set[str]] = {query: set(hidden) for query, hidden in self.query_groups.items()}
        for query, hidden in (query_groups or {}).items():
            per_query.setdefault(query, set()).update(hidden)
        return self.knowledge.view(self.excluded | set(groups), self.excluded_cohorts | set(cohorts), per_query)

    def visible_for(self, query: str) -> np.ndarray:
        """Which of the knowledge's cohorts ``query`` may see: the view's, less the groups hidden from it alone."""
        hidden = self.query_groups.get(query)
        if not hidden:
            return self.keep
        return self.keep & ~np.array([bool(c.groups & hidden) for c in self.knowledge.cohorts], dtype=bool)

    @property
    def groups(self) -> list[str]:
        return sorted({g for c in self.cohorts for g in c.groups})

    def check_excludes(self, groups: Iterable[str | None]) -> None:
        """Raise ``KnowledgeLeakError`` when a cohort of one of ``groups`` is visible in this view."""
        wanted = {g for g in groups if g}
        for cohort in self.cohorts:
            if cohort.groups & wanted:
                raise KnowledgeLeakError(
                    f"curated cohort {cohort.library_id}/{cohort.cohort_id} would inform a query of its own "
                    f"library group ({', '.join(sorted(cohort.groups & wanted))}): refused"
                )

    def similarities(self, query: str) -> np.ndarray:
        """Name similarity of ``query`` to every cohort of the view: mean of dense cosine and word Dice
        when names are embedded, word Dice alone otherwise, less ``POLARITY_PENALTY`` when one name is
        a complement ("without ...") and the other not; -1 for cohorts outside the view."""
        words = name_words(query)
        out = np.array([dice(words, c.words) for c in self.knowledge.cohorts], dtype=np.float64)
        vector = self.knowledge.query_vector(query)
        if vector is not None and self.knowledge.vectors is not None:
            # float64 products: a float32 BLAS kernel rounds the last bit otherwise on another CPU
            cosines = np.asarray(self.knowledge.vectors, dtype=np.float64) @ np.asarray(vector, dtype=np.float64)
            out = 0.5 * out + 0.5 * cosines.astype(np.float32).astype(np.float64)
        sign = polarity(query)
        out -= POLARITY_PENALTY * np.array([c.polarity != sign for c in self.knowledge.cohorts], dtype=np.float64)
        out[~self.visible_for(query)] = -1.0
        return out

    def matches(self, query: str, depth: int = MATCH_DEPTH) -> list[Match]:
        """The ``depth`` best-matching cohorts of the view ``query`` may see, best first."""
        visible = self.visible_for(query)
        if not visible.any():
            return []
        sims = self._recent.get(query)
        if sims is None:
            sims = self.similarities(query)
            self._recent[query] = sims
            while len(self._recent) > RECENT_QUERIES:
                self._recent.popitem(last=False)
        order = np.argsort(-sims, kind="stable")[: min(depth, int(visible.sum()))]
        return [Match(self.knowledge.cohorts[i], float(sims[i])) for i in order]
