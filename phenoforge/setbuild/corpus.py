"""Labelled examples from curated libraries: one per cohort, its candidates, features and truth.

Builders are fitted on these and scored on them, always on different library groups: every example
remembers its library and group, so the leave-one-group-out split and the leakage check can see it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import numpy as np
from pydantic import BaseModel

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.bm25 import get_bm25_index
from phenoforge.engine.curated import Library, load_curated_concept_set
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.setbuild.candidates import RETRIEVAL_DEPTH, CandidateTable, Retrieval, build_candidates
from phenoforge.setbuild.features import candidate_features
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.robust import get_typo_corrector, umbrella_nodes


class RobustOptions(BaseModel):
    """Which query-robustness steps run before retrieval (each measured on its own in the bench)."""

    typos: bool = True
    umbrellas: bool = True


def retrieve(
    con: duckdb.DuckDBPyConnection,
    query: str,
    dense: object | None,
    depth: int = RETRIEVAL_DEPTH,
    dense_weight: float = 0.5,
    robust: RobustOptions | None = None,
) -> Retrieval:
    """Both retrievers' rankings of ``query``, ``depth`` deep (BM25 alone when ``dense`` is None).

    With ``robust.typos`` an unknown, misspelt word is replaced before both retrievers run; with
    ``robust.umbrellas`` blocks and categories whose notes name the query are recorded too.
    """
    robust = robust or RobustOptions()
    searched = query
    if robust.typos:
        searched = get_typo_corrector(con).correct(query).corrected
    bm25 = get_bm25_index(con).ranking(searched, depth)
    ranked = dense.ranking(searched, depth) if dense is not None else None  # type: ignore[attr-defined]
    umbrellas: dict[str, str] = {}
    if robust.umbrellas:
        hierarchy = get_hierarchy(con)
        umbrellas = {hierarchy.code[node]: text for node, text in umbrella_nodes(con, hierarchy, searched).items()}
    return Retrieval(
        query=query,
        bm25=bm25,
        dense=ranked,
        dense_weight=dense_weight,
        searched_as=searched if searched != query else None,
        umbrellas=umbrellas,
    )


@dataclass
class Example:
    """One curated cohort as a training or scoring case."""

    library_id: str
    group: str
    cohort_id: str
    cohort_name: str
    truth: list[str]
    retrieval: Retrieval
    table: CandidateTable
    features: np.ndarray
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))

    @property
    def key(self) -> str:
        return f"{self.library_id}/{self.cohort_id}"


def make_example(
    hierarchy: Hierarchy,
    library_id: str,
    group: str,
    cohort_id: str,
    cohort_name: str,
    truth: list[str],
    retrieval: Retrieval,
) -> Example:
    table = build_candidates(hierarchy, retrieval)
    truth_ids = {hierarchy.resolve(code) for code in truth}
    labels = np.array([node in truth_ids for node in table.ids], dtype=np.int8)
    return Example(
        library_id,
        group,
        cohort_id,
        cohort_name,
        list(truth),
        retrieval,
        table,
        candidate_features(hierarchy, table),
        labels,
    )


def library_examples(
    con: duckdb.DuckDBPyConnection,
    library: Library,
    dense: object | None,
    progress: ProgressCallback | None = None,
    robust: RobustOptions | None = None,
    query_of: Callable[[str], str] | None = None,
) -> list[Example]:
    """An example per cohort of ``library`` that has resolvable ground truth (others are left out)."""
    progress = progress or no_progress
    hierarchy = get_hierarchy(con)
    group = library_group(library.manifest)
    examples = []
    for position, cohort_id in enumerate(library.cohort_ids):
        progress(position, len(library.cohort_ids), f"{library.library_id} {cohort_id}")
        curated = load_curated_concept_set(con, library, cohort_id)  # opened once: no manifest read per cohort
        if not curated.codes:
            continue
        query = query_of(curated.cohort_name) if query_of is not None else curated.cohort_name
        retrieval = retrieve(con, query, dense, robust=robust)
        examples.append(
            make_example(hierarchy, library.library_id, group, cohort_id, curated.cohort_name, curated.codes, retrieval)
        )
    progress(len(library.cohort_ids), len(library.cohort_ids), f"{library.library_id} done")
    return examples
