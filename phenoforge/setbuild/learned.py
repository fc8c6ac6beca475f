"""The learned set builder: a membership model over candidates, trained from curated libraries.

Gradient boosting over :mod:`~phenoforge.setbuild.features` gives each candidate a probability of
belonging to the curated list; codes at or above a threshold are kept. The threshold is chosen on
out-of-fold predictions over the training libraries (never on the libraries the model will score).
This module trains and predicts; :mod:`~phenoforge.setbuild.model_store` keeps models on disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import duckdb
import numpy as np
from pydantic import BaseModel, Field, field_validator
from threadpoolctl import ThreadpoolController, threadpool_limits

from phenoforge.engine.expansion import Hierarchy
from phenoforge.errors import PhenoforgeError
from phenoforge.setbuild.assemble import SetAssembler, mean_objective
from phenoforge.setbuild.binning import use_fast_binning
from phenoforge.setbuild.candidates import CandidateTable
from phenoforge.setbuild.context import CONTEXT_FEATURES
from phenoforge.setbuild.corpus import Example
from phenoforge.setbuild.features import FEATURE_NAMES, candidate_features
from phenoforge.setbuild.groups import library_group
from phenoforge.setbuild.models import BuiltSet
from phenoforge.setbuild.transfer import TRANSFER_FEATURES, KnowledgeView, top_match_note, transfer_features
from phenoforge.setbuild.trees import TreeEnsemble

if TYPE_CHECKING:  # scikit-learn (with scipy and pandas, a second to import) loads only when a model is fitted
    from sklearn.ensemble import HistGradientBoostingClassifier

METHOD = "learned"
FORMAT_VERSION = 2
"""2: the fitted trees are stored as ONNX (:mod:`~phenoforge.setbuild.trees`), no longer pickled."""
MODEL_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
MIN_TRAINING_COHORTS = 8
MIN_TRAINING_POSITIVES = 40
THRESHOLDS = (0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6)
SIZE_FACTORS = (0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0)
"""``expected_size`` keeps the top round(factor * sum of probabilities): probabilities of codes in
long curated lists come out low, so the best factor is often above 1 (chosen out of fold)."""
RULES = ("threshold", "expected_size", "expected_f1")
"""How a model's probabilities become a list (chosen out of fold, recorded in the manifest)."""


def known_rule(rule: str) -> str:
    """``rule`` itself, or ``ValueError``: a misspelt rule would otherwise be read as a threshold."""
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}: one of {', '.join(RULES)}")
    return rule


VARIANTS = ("free", "monotone")
"""The membership model's trees: unconstrained, or monotone in ``MONOTONE_EVIDENCE`` (chosen out of
fold with the rule, recorded in the manifest)."""


def known_variant(variant: str) -> str:
    """``variant`` itself, or ``ValueError`` naming the variants there are."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown model variant {variant!r}: one of {', '.join(VARIANTS)}")
    return variant


def requested_variant(rule: tuple[str, float] | None, variant: str | None) -> str | None:
    """The variant a call asks for: the given one; ``free`` for a given rule without one (the rule skips
    the out-of-fold choice); ``None`` when both are to be chosen out of fold."""
    return variant if variant is not None or rule is None else "free"


F1_FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""``expected_f1`` keeps the top k that maximises the expected F1 ``2 * sum(p[:k]) / (k + factor * sum(p))``:
the size follows how the probabilities fall off, not only their sum (factor chosen out of fold)."""
ALL_FEATURE_NAMES: list[str] = [*FEATURE_NAMES, *TRANSFER_FEATURES]
"""Candidate features (query, rankings, hierarchy) then the cross-library curated evidence
(:mod:`~phenoforge.setbuild.transfer`), in the column order of an example's feature matrix."""
MATRIX_COLUMNS: list[str] = [*ALL_FEATURE_NAMES, *CONTEXT_FEATURES]
"""Every column a feature matrix may hold: ``ALL_FEATURE_NAMES``, then the library context
(:mod:`~phenoforge.setbuild.context`) when the query is built with its library's other names. A model
fitted without the context reads a prefix, so it answers either matrix."""
RECIPE = "5"
"""Bumped whenever training changes (estimator, rule grid, stacking): a stored model of an older
recipe is then retrained instead of reused."""


class ModelError(PhenoforgeError):
    """A stored membership model cannot be used (missing, corrupt, stale); the message says why."""


class TrainingDataTooSmall(ModelError):
    """Too few curated cohorts or listed codes to fit a model on."""


class LeakageError(PhenoforgeError):
    """A model was asked to score a library (or a library of a group) it was trained on."""


class ModelManifest(BaseModel):
    format_version: int = FORMAT_VERSION
    recipe: str = Field(default="", description="training recipe (RECIPE) the model was fitted with")
    model_file: str = MODEL_FILE
    sha256: str = ""
    vocabulary_build_id: str
    with_dense: bool
    training_libraries: list[str]
    training_groups: list[str]
    training_cohorts: list[str] = Field(description="library_id/cohort_id of every training cohort")
    training_digest: str = Field(
        default="", description="sha1 of what the model was fitted on (see training_digest); empty before it existed"
    )
    features: list[str]
    rule: str = Field(
        description="'threshold' (p >= threshold), 'expected_size' (top round(sum p)) or 'expected_f1' "
        "(the top k of most expected F1)"
    )
    threshold: float
    threshold_chosen_on: str
    variant: str = Field(
        default="free",
        description="'free' (unconstrained trees) or 'monotone' (MONOTONE_EVIDENCE never lowers a probability), "
        "chosen out of fold with the rule",
    )
    variants_compared: list[str] = Field(
        default_factory=list,
        description="the variants whose out-of-fold objectives were compared (empty: the caller gave the rule)",
    )
    n_rows: int
    n_positive: int
    estimator: str
    sklearn_version: str
    trained_at: str

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, rule: str) -> str:
        return known_rule(rule)  # a hand-edited manifest's misspelt rule makes the model unusable

    @field_validator("variant")
    @classmethod
    def _known_variant(cls, variant: str) -> str:
        return known_variant(variant)


class MembershipModel:
    """Fitted trees with their manifest; ``probabilities`` reads the manifest's feature columns."""

    def __init__(self, manifest: ModelManifest, trees: TreeEnsemble) -> None:
        self.manifest = manifest
        self.trees = trees
        self._columns = [MATRIX_COLUMNS.index(name) for name in manifest.features]

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        if not len(features):
            return np.zeros(0)
        return self.trees.probabilities(features[:, self._columns])

    def check_may_score(self, library_id: str | None, group: str | None) -> None:
        """Raise ``LeakageError`` when the library or its group was part of this model's training."""
        if library_id is not None and library_id in self.manifest.training_libraries:
            raise LeakageError(
                f"the learned model was trained on library {library_id!r}; score it with a model trained "
                "without it (leave-one-library-group-out)"
            )
        if group is not None and group in self.manifest.training_groups:
            raise LeakageError(
                f"the learned model was trained on library group {group!r}; score it with a model trained "
                "without that group"
            )


MONOTONE_EVIDENCE: dict[str, int] = {
    "bm25_rel": 1,
    "dense_rel": 1,
    "fused_rel": 1,
    "dense_cos": 1,
    "is_hit": 1,
    "lex_self": 1,
    "bm25_rank": -1,
    "dense_rank": -1,
    "fused_rank": -1,
    "tr_in_top": 1,
    "tr_best_sim": 1,
    "tr_n_match": 1,
}
"""Evidence that never lowers a code's probability when it grows (ranks: when they fall), for the
``monotone`` variant; fixed before any score was seen."""


def monotone_constraints(features: Sequence[str], variant: str) -> list[int] | None:
    """Per column +1/-1/0 for the ``monotone`` variant; ``None`` (unconstrained) for ``free``."""
    if known_variant(variant) == "free":
        return None
    return [MONOTONE_EVIDENCE.get(name, 0) for name in features]


def _estimator(monotonic_cst: list[int] | None = None) -> HistGradientBoostingClassifier:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(
        monotonic_cst=monotonic_cst,
        max_iter=250,
        learning_rate=0.06,
        max_leaf_nodes=31,
        min_samples_leaf=40,
        l2_regularization=1.0,
        random_state=0,
    )


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)


def _fit(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, monotonic_cst: list[int] | None = None
) -> HistGradientBoostingClassifier:
    use_fast_binning()  # scikit-learn's thresholds from one sort per column (checked to be the same)
    # one thread: OpenMP workers spin against each other on a shared, busy machine (measured 100x slower)
    with threadpool_limits(limits=1):
        return _estimator(monotonic_cst).fit(x, y, sample_weight=w)


_CONTROLLER: list[ThreadpoolController] = []


def _predict(estimator: HistGradientBoostingClassifier, rows: np.ndarray) -> np.ndarray:
    """scikit-learn's own prediction, for the out-of-fold fits only (a stored model predicts as trees)."""
    # one controller for the process (made once the estimator, hence OpenMP, is loaded): building one
    # per call scans every loaded library, which cost more than many cohorts' predictions
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    with _CONTROLLER[0].limit(limits=1):
        return estimator.predict_proba(rows)[:, 1]


def default_features(examples: Sequence[Example]) -> list[str]:
    """Every feature the examples' matrices hold: with the transfer (and context) columns when they were added."""
    widths = {ex.features.shape[1] for ex in examples}
    for columns in (MATRIX_COLUMNS, ALL_FEATURE_NAMES):
        if widths == {len(columns)}:
            return list(columns)
    return list(FEATURE_NAMES)


def training_digest(examples: Sequence[Example], features: Sequence[str]) -> str:
    """What a model learns from, down to the numbers: each usable cohort's key, group, curated codes,
    candidate codes, feature columns and labels.

    The same cohorts can yield other rows (a changed retriever, candidate rule or dense index build), a
    curated list can change outside the candidates (the out-of-fold rule choice scores it) and a library
    can change group (the leakage guard reads the groups): a stored model is reused only when all of
    these match, never on cohort keys alone. Each cohort's part is framed by its lengths, so rows cannot
    move between cohorts unseen.
    """
    columns = [MATRIX_COLUMNS.index(name) for name in features]
    digest = hashlib.sha1()
    for ex in sorted((ex for ex in examples if len(ex.table)), key=lambda ex: ex.key):
        head = json.dumps([ex.key, ex.group, sorted(ex.truth), len(ex.table), len(columns)]).encode()
        digest.update(len(head).to_bytes(8, "little"))
        digest.update(head)
        digest.update(np.asarray(ex.table.ids, dtype=np.int64).tobytes())
        digest.update(np.ascontiguousarray(ex.features[:, columns], dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(ex.labels, dtype=np.int8).tobytes())
    return digest.hexdigest()


def _stack(examples: Sequence[Example], columns: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, labels and weights; each cohort weighs the same whatever its candidate count."""
    parts = [ex for ex in examples if len(ex.table)]
    x = np.vstack([ex.features[:, columns] for ex in parts])
    y = np.concatenate([ex.labels for ex in parts])
    w = np.concatenate([np.full(len(ex.table), 1000.0 / len(ex.table)) for ex in parts])
    return x, y, w


def select(probabilities: np.ndarray, rule: str, threshold: float) -> np.ndarray:
    """Indices of kept candidates, most probable first; never empty when there are candidates.

    A NaN probability ranks last and counts as 0 in a list size, as a value outside [0, 1] counts as the
    nearest bound: one bad value does not change which of the others are kept.
    """
    known_rule(rule)
    if not len(probabilities):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-probabilities, kind="stable")
    if rule == "threshold":
        kept = order[probabilities[order] >= threshold]
        return kept if len(kept) else order[:1]
    ranked = np.clip(np.nan_to_num(probabilities[order], nan=0.0), 0.0, 1.0)
    if rule == "expected_size":
        size = float(ranked.sum()) * threshold
        return order[: max(1, round(size))] if np.isfinite(size) else order[:1]
    expected_f1 = 2 * np.cumsum(ranked) / (np.arange(1, len(ranked) + 1) + threshold * float(ranked.sum()))
    return order[: int(np.argmax(expected_f1)) + 1]


def _choose_rule(
    con: duckdb.DuckDBPyConnection, hierarchy: Hierarchy, examples: Sequence[Example], oof: list[np.ndarray]
) -> tuple[float, str, float]:
    """The (objective, rule, value) of the best rule on out-of-fold probabilities; objective = mean of
    hierarchical score and exact F1."""
    cases = [(ex.cohort_id, ex.cohort_name, ex.truth) for ex in examples]
    best: tuple[float, str, float] | None = None
    options = [("threshold", t) for t in THRESHOLDS] + [("expected_size", f) for f in SIZE_FACTORS]
    options += [("expected_f1", f) for f in F1_FACTORS]
    for rule, value in options:
        hier, f1 = mean_objective(
            con,
            cases,
            lambda i, r=rule, v=value: [hierarchy.code[examples[i].table.ids[j]] for j in select(oof[i], r, v)],
        )
        if best is None or (hier + f1) / 2 > best[0]:
            best = ((hier + f1) / 2, rule, value)
    assert best is not None
    return best


def _out_of_fold(
    usable: Sequence[Example], folds: list[list[int]], columns: list[int], monotonic_cst: list[int] | None
) -> list[np.ndarray]:
    """Each cohort's probabilities from trees fitted without its fold (zeros when that fit has one class)."""
    oof: list[np.ndarray] = [np.zeros(0)] * len(usable)
    for fold in folds:
        held = set(fold)
        x, y, w = _stack([ex for i, ex in enumerate(usable) if i not in held], columns)
        estimator = _fit(x, y, w, monotonic_cst) if y.any() and not y.all() else None
        for i in fold:
            rows = usable[i].features[:, columns]
            oof[i] = _predict(estimator, rows) if estimator is not None else np.zeros(len(rows))
    return oof


def train_membership_model(
    con: duckdb.DuckDBPyConnection,
    hierarchy: Hierarchy,
    examples: Sequence[Example],
    features: Sequence[str] | None = None,
    with_dense: bool = True,
    min_cohorts: int = MIN_TRAINING_COHORTS,
    min_positives: int = MIN_TRAINING_POSITIVES,
    rule: tuple[str, float] | None = None,
    variant: str | None = None,
    given_by: str | None = None,
) -> MembershipModel:
    """Fit on ``examples`` (other libraries than the ones to score); choose the rule and variant out of fold.

    The variant (unconstrained trees, or monotone in the retrieval and curated evidence) and the rule
    are chosen together, by the same out-of-fold objective. A given ``rule`` (e.g. the full model's,
    for an ablation) skips the out-of-fold fits and uses ``variant`` (``free`` when not given); a given
    ``variant`` alone restricts the choice to it.
    ``features`` defaults to every column the examples carry (see :func:`default_features`). ``given_by`` says
    where a given rule and variant were chosen (the manifest's ``threshold_chosen_on``).
    """
    if rule is not None:
        known_rule(rule[0])
    if variant is not None:
        known_variant(variant)
    features = default_features(examples) if features is None else features
    usable = [ex for ex in examples if len(ex.table)]
    n_positive = int(sum(ex.labels.sum() for ex in usable))
    if len(usable) < min_cohorts or n_positive < min_positives:
        raise TrainingDataTooSmall(
            f"{len(usable)} usable cohorts with {n_positive} retrieved curated codes: a membership model "
            f"needs at least {min_cohorts} cohorts and {min_positives} codes; add libraries "
            "(`python -m phenoforge build`) or use the adaptive cut-off"
        )
    n_rows = sum(len(ex.table) for ex in usable)
    if n_positive == n_rows:
        raise TrainingDataTooSmall(
            f"all {n_rows} candidates of the {len(usable)} usable cohorts are curated codes: a membership model "
            "needs candidates outside the curated lists to learn what to leave out; use the adaptive cut-off"
        )
    columns = [MATRIX_COLUMNS.index(name) for name in features]
    groups = sorted({ex.group for ex in usable})
    # out-of-fold probabilities: by library group when there are several, else by cohort folds
    if rule is not None:
        folds = []
        chosen_on = given_by or "given by the caller"
    elif len(groups) >= 2:
        folds = [[i for i, ex in enumerate(usable) if ex.group == g] for g in groups]
        chosen_on = f"out-of-fold predictions, one fold per training group ({', '.join(groups)})"
    else:
        folds = [list(range(len(usable)))[k::4] for k in range(4)]
        chosen_on = "out-of-fold predictions, 4 cohort folds of the one training group"
    scores: dict[str, float] = {}  # out-of-fold objective of each variant compared (none: the rule is given)
    if rule is None:
        best: tuple[float, str, str, float] | None = None
        for candidate in VARIANTS if variant is None else (variant,):
            oof = _out_of_fold(usable, folds, columns, monotone_constraints(features, candidate))
            objective, rule_found, value = _choose_rule(con, hierarchy, usable, oof)
            scores[candidate] = objective
            if best is None or objective > best[0]:
                best = (objective, candidate, rule_found, value)
        assert best is not None
        _, variant, rule_name, threshold = best
        objectives = ", ".join(f"{v} {o:.4f}" for v, o in scores.items())
        chosen_on += f"; model variant {variant} (out-of-fold objective {objectives})"
    else:
        rule_name, threshold = rule
        variant = requested_variant(rule, variant)
    assert variant is not None
    x, y, w = _stack(usable, columns)
    estimator = _fit(x, y, w, monotone_constraints(features, variant))
    libraries = sorted({ex.library_id for ex in usable})
    manifest = ModelManifest(
        recipe=RECIPE,
        vocabulary_build_id=hierarchy.build_id,
        with_dense=with_dense,
        training_libraries=libraries,
        training_groups=groups,
        training_cohorts=[ex.key for ex in usable],
        training_digest=training_digest(usable, features),
        features=list(features),
        rule=rule_name,
        threshold=threshold,
        threshold_chosen_on=chosen_on,
        variant=variant,
        variants_compared=list(scores),
        n_rows=int(len(y)),
        n_positive=int(y.sum()),
        estimator="HistGradientBoostingClassifier",
        sklearn_version=_sklearn_version(),
        trained_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    return MembershipModel(manifest, TreeEnsemble.from_estimator(estimator))


def build_learned(
    hierarchy: Hierarchy,
    table: CandidateTable,
    model: MembershipModel,
    scored_library_id: str | None = None,
    scored_group: str | None = None,
    features: np.ndarray | None = None,
    knowledge: KnowledgeView | None = None,
    probabilities: np.ndarray | None = None,
) -> BuiltSet:
    """Codes the model keeps for one query. Refuses (``LeakageError``) to score its own training data.

    ``knowledge`` (curated cohorts of other library groups) feeds the transfer features and names the
    best-matching cohort in each kept code's provenance; it refuses to include the scored group.
    ``probabilities`` (the model's answer for this table's features, from one call for many
    queries: ``predict_many``) spares the model call per query.
    """
    model.check_may_score(scored_library_id, scored_group)
    if knowledge is not None:
        family = library_group({"library_id": scored_library_id}) if scored_library_id else None
        knowledge.check_excludes([scored_group, family])
    out = SetAssembler(hierarchy, METHOD, table.query)
    out.result.trained_on = list(model.manifest.training_libraries)
    if not len(table):
        out.result.notes.append("no candidates: " + ("; ".join(table.notes) or "the retrievers found nothing"))
        return out.finish()
    if probabilities is None:
        matrix = features if features is not None else learned_features(hierarchy, table, knowledge)
        probabilities = model.probabilities(matrix)
    elif len(probabilities) != len(table):
        raise ValueError(f"{len(probabilities)} probabilities for {len(table)} candidates")
    match, in_match = top_match_note(table, knowledge)
    kept = select(probabilities, model.manifest.rule, model.manifest.threshold)
    rule = model.manifest.rule
    passed = probabilities[kept] >= model.manifest.threshold if rule == "threshold" else np.ones(len(kept), bool)
    if rule == "threshold" and not passed.any():
        out.result.fallback = (
            f"no candidate reached probability {model.manifest.threshold:.2f}: the most probable one is kept"
        )
    trained = ", ".join(model.manifest.training_libraries)
    if set(CONTEXT_FEATURES) & set(model.manifest.features):
        trained += "; the library's other cohort names as context"
    for j, ok in zip(kept.tolist(), passed.tolist(), strict=True):
        p = float(probabilities[j])
        origin = table.origin[j]
        if rule == "threshold" and ok:
            why = f"membership probability {p:.2f} >= {model.manifest.threshold:.2f}"
        elif rule == "threshold":
            why = f"membership probability {p:.2f}, below {model.manifest.threshold:.2f}: kept as the most probable"
        elif rule == "expected_f1":
            why = f"membership probability {p:.2f}, within the top {len(kept)} (the cut of most expected F1)"
        else:
            why = f"membership probability {p:.2f}, within the expected list size"
        if match is not None and in_match[j]:
            why += (
                f"; listed by curated cohort {match.cohort.library_id}/{match.cohort.cohort_id} "
                f"'{match.cohort.cohort_name}' (name similarity {match.similarity:.2f})"
            )
        out.add_node(
            table.ids[j],
            "model" if ok else "fallback",
            p,
            f"{why} (model trained on {trained})",
            via=origin,
            via_rank=table.hit_rank.get(origin),
        )
    return out.finish()


def learned_features(hierarchy: Hierarchy, table: CandidateTable, knowledge: KnowledgeView | None) -> np.ndarray:
    """The feature matrix the membership model reads for one candidate table (``ALL_FEATURE_NAMES`` columns)."""
    return np.hstack([candidate_features(hierarchy, table), transfer_features(hierarchy, table, knowledge)])


def predict_many(model: MembershipModel, matrices: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``[model.probabilities(m) for m in matrices]`` in one model call: a prediction costs mostly per
    call, not per row, and each row's probability does not depend on the rows predicted with it."""
    sizes = [len(matrix) for matrix in matrices]
    if not sum(sizes):
        return [np.zeros(0) for _size in sizes]
    stacked = model.probabilities(np.vstack([matrix for matrix in matrices if len(matrix)]))
    return np.split(stacked, np.cumsum(sizes)[:-1])


# -- storage -------------------------------------------------------------------------------------
