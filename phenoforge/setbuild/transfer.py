"""Cross-library curated evidence as features, and ``curated_transfer``'s rule.

For a query such as Elixhauser's "Congestive heart failure", the CMS-HCC heart-failure cohort is a
curated list of the same condition. The best matches in a :class:`~phenoforge.setbuild.knowledge.KnowledgeView`
(other library groups' cohorts only: :mod:`~phenoforge.setbuild.knowledge`; built and stored by
:mod:`~phenoforge.setbuild.knowledge_store`) become candidate features for the learned builder and
provenance ("in curated cohort <library>/<cohort>"); ``tune_transfer`` and ``build_transfer`` are the
rule the ``curated_transfer`` builder fits and applies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

import duckdb
import numpy as np
from pydantic import BaseModel, Field

from phenoforge.engine.expansion import Hierarchy
from phenoforge.setbuild.assemble import SetAssembler, mean_objective
from phenoforge.setbuild.candidates import CandidateTable
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.features import FEATURE_NAMES
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.knowledge import (
    MATCH_DEPTH,
    MATCH_FLOOR,
    POLARITY_PENALTY,
    POLARITY_WORDS,
    QUERY_CACHE_SIZE,
    RECENT_QUERIES,
    TRANSFER_VERSION,
    CuratedKnowledge,
    EmbedFn,
    KnowledgeLeakError,
    KnowledgeView,
    KnownCohort,
    Match,
    dice,
    library_groups,
    name_words,
    polarity,
)
from phenoforge.setbuild.knowledge_store import (
    COPY_JACCARD,
    KNOWLEDGE_FORMAT,
    KnowledgeFileError,
    copied_groups,
    copy_holdout,
    curated_knowledge,
    embed_fn_of,
    embed_identity_of,
    knowledge_digest,
    knowledge_path,
    load_knowledge,
    near_copy_pairs,
    save_knowledge,
)
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.nodes import hierarchy_stats

TRANSFER_FEATURES = ["tr_top_sim", "tr_in_top", "tr_best_sim", "tr_n_match", "tr_cat_in_top"]
"""Per candidate: the best-matching other-group cohort's name similarity, whether that cohort lists
the candidate, the best similarity among cohorts listing it, how many cohorts matching at
``MATCH_FLOOR`` list it, and the share of its category the best-matching cohort lists.
Query-level extras (second-best margin, retrieval agreement, list size, coverage) were measured on
the development libraries and dropped: out of sample they cost 0.01 hierarchical on CMS-HCC."""


def transfer_features(hierarchy: Hierarchy, table: CandidateTable, view: KnowledgeView | None) -> np.ndarray:
    """One row of ``TRANSFER_FEATURES`` per candidate (zeros without a view or a match)."""
    rows = np.zeros((len(table), len(TRANSFER_FEATURES)), dtype=np.float64)
    if view is None or not len(table):
        return rows
    found = view.matches(table.query)
    if not found:
        return rows
    ids = np.asarray(table.ids, dtype=np.int64)
    member = np.stack([np.isin(ids, m.cohort.ids, assume_unique=False) for m in found])
    sims = np.array([m.similarity for m in found])
    top = found[0]
    col = {name: i for i, name in enumerate(TRANSFER_FEATURES)}
    rows[:, col["tr_top_sim"]] = sims[0]
    rows[:, col["tr_in_top"]] = member[0]
    rows[:, col["tr_best_sim"]] = np.where(member.any(0), (member * sims[:, None]).max(0), 0.0)
    rows[:, col["tr_n_match"]] = (member & (sims[:, None] >= MATCH_FLOOR)).sum(0)
    stats = hierarchy_stats(hierarchy)
    nodes = stats.node_table()
    # each candidate's nearest category at or above it (-1: none), from the node table's rows
    own = nodes.own_category[nodes.rows(table.ids)]
    present, where = np.unique(own, return_inverse=True)
    share = [
        0.0 if row < 0 else top.cohort.categories.get(cat, 0) / max(stats.billable_count(cat), 1)
        for row, cat in zip(present.tolist(), nodes.ids[present].tolist(), strict=True)
    ]
    rows[:, col["tr_cat_in_top"]] = np.asarray(share, dtype=np.float64)[where.reshape(-1)]
    return rows


def top_match_note(table: CandidateTable, view: KnowledgeView | None) -> tuple[Match | None, np.ndarray]:
    """The best-matching other-group cohort of ``table``'s query and which candidates it lists."""
    if view is None or not len(table):
        return None, np.zeros(len(table), dtype=bool)
    found = view.matches(table.query, depth=1)
    if not found:
        return None, np.zeros(len(table), dtype=bool)
    return found[0], np.isin(np.asarray(table.ids, dtype=np.int64), found[0].cohort.ids)


# -- building the knowledge from installed libraries ------------------------------------------


def excluded_for(library_id: str, group: str, held_out: Iterable[str | None] = ()) -> set[str]:
    """Groups a cohort of ``library_id`` may not see: its own (declared and by id) and the held-out ones."""
    return {g for g in (group, library_group({"library_id": library_id}), *held_out) if g}


def with_transfer_features(
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    knowledge: CuratedKnowledge | None,
    held_out: Iterable[str | None] = (),
) -> list[Example]:
    """Copies of ``examples`` whose feature matrix gains the transfer columns.

    Each example sees the knowledge minus its own group and minus ``held_out`` (the group the fitted
    model will score): a training cohort never sees its own list, its near-duplicate library's list,
    or the held-out group's.
    """
    held = [g for g in held_out if g]
    if knowledge is not None:
        knowledge.warm([ex.table.query for ex in examples])
    out = []
    for ex in examples:
        if ex.features.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"{ex.key}: transfer features are added once, to the base candidate features")
        view = None
        if knowledge is not None:
            excluded = excluded_for(ex.library_id, ex.group, held)
            view = knowledge.view(excluded)
            view.check_excludes(excluded)
        extra = transfer_features(hierarchy, ex.table, view)
        out.append(replace(ex, features=np.hstack([ex.features, extra])))
    return out


# -- curated_transfer: take a strongly matching other-group cohort's list, else the learned set ----

TRANSFER_METHOD = "curated_transfer"
TRANSFER_THRESHOLDS = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
NEVER = 1.01
"""A similarity no match reaches: the tuned rule when transferring never beat the fallback."""


class TransferParams(BaseModel):
    """When ``curated_transfer`` takes a matched cohort's list instead of the learned set."""

    min_similarity: float = NEVER
    trained_on: list[str] = Field(default_factory=list, description="libraries the threshold was tuned on")
    chosen_on: str = "default (untuned): never transfer"


def tune_transfer(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    knowledge: CuratedKnowledge | None,
    held_out: Iterable[str | None],
    fallback: Callable[[Example], list[str]],
    thresholds: Sequence[float] = TRANSFER_THRESHOLDS,
) -> TransferParams:
    """The name-similarity threshold above which transferring a matched list beats ``fallback``.

    Chosen on ``examples`` (training cohorts of groups other than the scored one), each matched
    against the knowledge without its own group and without ``held_out``: the threshold with the
    largest summed gain of (hierarchical + exact F1) / 2 over the fallback, or never when none gains.
    """
    trained_on = sorted({ex.library_id for ex in examples})
    if knowledge is None or not examples:
        return TransferParams(trained_on=trained_on)
    held = [g for g in held_out if g]
    knowledge.warm([ex.table.query for ex in examples])
    gains: list[tuple[float, float]] = []
    for ex in examples:
        excluded = excluded_for(ex.library_id, ex.group, held)
        view = knowledge.view(excluded)
        view.check_excludes(excluded)
        found = view.matches(ex.table.query, depth=1)
        if not found:
            continue
        moved = _objective(con, ex, [hierarchy.code[i] for i in found[0].cohort.ids.tolist()])
        gains.append((found[0].similarity, moved - _objective(con, ex, fallback(ex))))
    best_gain, best = 0.0, NEVER
    for threshold in thresholds:
        gain = sum(g for sim, g in gains if sim >= threshold)
        if gain > best_gain:
            best_gain, best = gain, threshold
    n_matched = sum(1 for sim, _g in gains if sim >= best)
    return TransferParams(
        min_similarity=best,
        trained_on=trained_on,
        chosen_on=f"largest gain over the fallback on {len(examples)} training cohorts ({n_matched} transferred)",
    )


def _objective(con: duckdb.DuckDBPyConnection, ex: Example, codes: list[str]) -> float:
    hierarchical, exact = mean_objective(con, [(ex.cohort_id, ex.cohort_name, ex.truth)], lambda _i: codes)
    return (hierarchical + exact) / 2


def build_transfer(
    hierarchy: Hierarchy, query: str, view: KnowledgeView | None, params: TransferParams, fallback: BuiltSet
) -> BuiltSet:
    """The best-matching other-group cohort's codes when its name matches at ``params.min_similarity``
    or more, each code naming that library and cohort; else ``fallback`` (the learned set) as is."""
    found = view.matches(query, depth=1) if view is not None else []
    if not found or found[0].similarity < params.min_similarity:
        best = f"best match '{found[0].cohort.cohort_name}' at {found[0].similarity:.2f}" if found else "no cohort"
        note = f"no other group's curated cohort matches at {params.min_similarity:.2f} ({best}): the learned set"
        # a shallow copy with its own notes: the fallback's codes are shared, never changed
        return fallback.model_copy(update={"method": TRANSFER_METHOD, "notes": [*fallback.notes, note]})
    match = found[0]
    out = SetAssembler(hierarchy, TRANSFER_METHOD, query)
    out.result.trained_on = list(params.trained_on)
    rule = (
        f"listed by curated cohort {match.cohort.library_id}/{match.cohort.cohort_id} '{match.cohort.cohort_name}' "
        f"(name similarity {match.similarity:.2f} >= {params.min_similarity:.2f}, tuned on "
        f"{', '.join(params.trained_on) or 'nothing'})"
    )
    for node in match.cohort.ids.tolist():
        out.add_node(int(node), "curated", match.similarity, rule)
    return out.finish()


__all__ = [  # what other modules read here (the knowledge and its store are re-exported)
    "TRANSFER_FEATURES",
    "CuratedKnowledge",
    "KnowledgeLeakError",
    "KnowledgeView",
    "copied_groups",
    "copy_holdout",
    "near_copy_pairs",
    "curated_knowledge",
    "embed_fn_of",
    "embed_identity_of",
    "load_knowledge",
    "save_knowledge",
    "knowledge_path",
    "KnowledgeFileError",
    "transfer_features",
    "TransferParams",
    "build_transfer",
    "tune_transfer",
    "with_transfer_features",
    "TRANSFER_VERSION",
    "MATCH_DEPTH",
    "MATCH_FLOOR",
    "POLARITY_WORDS",
    "POLARITY_PENALTY",
    "EmbedFn",
    "KnownCohort",
    "name_words",
    "polarity",
    "dice",
    "library_groups",
    "RECENT_QUERIES",
    "QUERY_CACHE_SIZE",
    "Match",
    "knowledge_digest",
    "KNOWLEDGE_FORMAT",
    "COPY_JACCARD",
]
