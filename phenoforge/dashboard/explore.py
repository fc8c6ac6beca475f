"""The Explore page: search side by side, and everything known about one code."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from pydantic import BaseModel

from phenoforge.engine.curated import Library, load_curated_concept_set
from phenoforge.engine.db import build_id
from phenoforge.engine.expansion import get_hierarchy, lookup
from phenoforge.engine.hybrid import search_concepts
from phenoforge.engine.models import Concept, SearchResult
from phenoforge.errors import PhenoforgeError

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever


def search_side_by_side(
    con: duckdb.DuckDBPyConnection,
    query: str,
    methods: list[str],
    k: int = 10,
    dense: DenseRetriever | None = None,
    dense_weight: float = 0.5,
) -> dict[str, SearchResult]:
    return {
        method: search_concepts(con, query, method=method, k=k, dense=dense, dense_weight=dense_weight)
        for method in methods
    }


class Note(BaseModel):
    note_type: str
    text: str


class CohortRef(BaseModel):
    library_id: str
    cohort_id: str
    cohort_name: str


class CodeDetails(BaseModel):
    concept: Concept
    ancestors: list[Concept]
    children: list[Concept]
    notes: list[Note]
    cohorts: list[CohortRef]


class CohortMembership:
    """code -> cohorts whose curated set holds it, per library and vocabulary build.

    Resolving a whole library is seconds of work, so it is done once per (build, library,
    manifest mtime) and shared by every session.
    """

    def __init__(self) -> None:
        self._index: dict[tuple[str, str, float], dict[str, list[CohortRef]]] = {}
        self._errors: dict[tuple[str, str, float], list[str]] = {}
        self._lock = threading.Lock()

    def _key(self, con: duckdb.DuckDBPyConnection, library: Library) -> tuple[str, str, float]:
        manifest = Path(library.path) / "manifest.json"
        mtime = manifest.stat().st_mtime if manifest.exists() else 0.0
        return (build_id(con), str(library.path), mtime)

    def index(self, con: duckdb.DuckDBPyConnection, library: Library) -> dict[str, list[CohortRef]]:
        key = self._key(con, library)
        with self._lock:
            known = self._index.get(key)
            if known is not None:
                return known
            by_code: dict[str, list[CohortRef]] = {}
            errors: list[str] = []
            for entry in library.manifest.cohorts:
                try:
                    curated = load_curated_concept_set(con, library, entry.cohort_id)
                except PhenoforgeError as error:
                    errors.append(str(error))
                    continue
                ref = CohortRef(library_id=library.library_id, cohort_id=entry.cohort_id, cohort_name=entry.cohort_name)
                for code in curated.codes:
                    by_code.setdefault(code, []).append(ref)
            self._index[key] = by_code
            self._errors[key] = errors
            return by_code

    def cohorts_with(self, con: duckdb.DuckDBPyConnection, libraries: list[Library], code: str) -> list[CohortRef]:
        refs: list[CohortRef] = []
        for library in libraries:
            refs.extend(self.index(con, library).get(code, []))
        return refs


def code_details(
    con: duckdb.DuckDBPyConnection,
    code: str,
    libraries: list[Library],
    membership: CohortMembership,
) -> CodeDetails | None:
    """The concept, its ancestors (nearest first), children, notes and containing cohorts."""
    concept = lookup(con, code)
    if concept is None:
        return None
    hierarchy = get_hierarchy(con)
    chain = hierarchy.chain(concept.concept_id)
    ancestors = [hierarchy.concept(node) for node in chain[1:]]
    children = [hierarchy.concept(node) for node in hierarchy.children.get(concept.concept_id, ())]
    notes = [
        Note(note_type=note_type, text=text)
        for note_type, text in con.execute(
            "SELECT note_type, text FROM concept_note WHERE concept_id = ? ORDER BY note_type, text",
            [concept.concept_id],
        ).fetchall()
    ]
    cohorts = membership.cohorts_with(con, libraries, concept.code)
    return CodeDetails(concept=concept, ancestors=ancestors, children=children, notes=notes, cohorts=cohorts)


DENSE_SUPPORT_THRESHOLD = 0.5614
"""Top dense score (all-MiniLM-L6-v2, the real model) below which nothing in the vocabulary supports a query.

Calibrated by bench/query_support/calibrate.py on 40 clinical and 40 nonsense queries written for it:
chosen on the even lines of each set (0/20 errors each way), and on the odd lines, held out, 0 of 20
clinical queries are flagged and 0 of 20 nonsense queries pass. The scores leave a wide margin: clinical
queries score 0.663 to 1.000 at the top, nonsense ones 0.216 to 0.427 (bench/query_support/calibration.json).
"""
EMPTY_QUERY_HINT = (
    "Type a condition, a symptom or a procedure as a clinician would write it, e.g. "
    "'type 2 diabetes with kidney disease', 'heart failure', 'hip fracture after a fall'; or a code such as "
    "E11.22 in 'Look a code up' below."
)


def top_score(result: SearchResult | None) -> float | None:
    return max((hit.score for hit in result.hits), default=None) if result is not None else None


def unsupported(bm25_empty: bool, dense_top: float | None, threshold: float | None) -> bool:
    """Nothing in the vocabulary supports the query. With the calibrated dense model: its best score is
    under the threshold (BM25 is no judge: half the nonsense queries share a word with some code's
    description). Without one (a stand-in embedder, no dense index): BM25 matches no description."""
    if threshold is not None and dense_top is not None:
        return dense_top < threshold
    return bm25_empty


def support_warning(results: dict[str, SearchResult], threshold: float | None) -> str | None:
    """The warning every method's results sit under when the query is unsupported, else None.

    Dense and hybrid always return their k nearest codes, however far; this says so instead of
    letting them look confident. ``threshold`` is None where the embedder is not the calibrated one.
    """
    bm25 = results.get("bm25")
    dense_top = top_score(results.get("dense"))
    if not unsupported(bm25 is None or not bm25.hits, dense_top, threshold):
        return None
    if threshold is not None and dense_top is not None:
        why = (
            f"the nearest code by meaning scores {dense_top:.3f}, under the {threshold:.3f} that clinical queries clear"
        )
    else:
        why = "no code description contains its words"
    return (
        f"Nothing in the vocabulary supports this query: {why}. Every method's codes below are the nearest "
        "anyway, not matches."
    )


def support_threshold() -> float | None:
    """The calibrated threshold where the dense model is the calibrated one (the real model); None
    under a stand-in embedder (tests), whose scores mean something else."""
    from phenoforge.dashboard.resources import EMBEDDER_ENV

    return None if os.environ.get(EMBEDDER_ENV) else DENSE_SUPPORT_THRESHOLD
