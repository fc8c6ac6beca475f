"""Pure result types for the eval harness. No database dependency.

A shared vocabulary of typed results for ``metrics`` and ``harness`` without either depending on
the other's I/O, so ``metrics`` stays a pure, DB-free module that property-based tests can
target cheaply.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class CohortEvalResult(BaseModel):
    """Per-cohort scoring result for one retrieval method against curated ground truth.

    ``coverage`` is the ground-truth -> predicted direction, ``over_inclusion_penalty`` the
    predicted -> ground-truth direction, ``hierarchical_score`` their harmonic combination. The
    ``exact_*`` fields are plain set-overlap scores, so a reader sees what partial credit adds.
    """

    cohort_id: str
    cohort_name: str
    method: str
    predicted_codes: list[str]
    ground_truth_codes: list[str]
    coverage: float
    over_inclusion_penalty: float
    hierarchical_score: float
    unresolvable_ground_truth: list[str] = Field(default_factory=list)
    exact_precision: float = 0.0
    exact_recall: float = 0.0
    exact_f1: float = 0.0
    scores: dict[str, float] = Field(
        default_factory=dict, description="every requested measure by its key (see phenoforge.eval.measures)"
    )
    provenance: dict[str, list[str]] = Field(
        default_factory=dict, description="predicted code -> why the method put it in the list"
    )
    ranks: dict[str, int | None] = Field(
        default_factory=dict,
        description="predicted code -> its rank in the run (None: unranked); empty in reports saved before",
    )
    code_scores: dict[str, float] = Field(
        default_factory=dict, description="predicted code -> the method's own score for it, when it gave one"
    )


class MeasureRecord(BaseModel):
    """How a report was scored: one measure, its label, direction and parameters."""

    name: str
    label: str
    higher_is_better: bool
    parameters: dict[str, int | float] = Field(default_factory=dict)
    description: str = ""


class CopyPair(BaseModel):
    """A scored cohort whose list is a near copy of a bundled cohort's (Jaccard of the code sets)."""

    scored_cohort: str
    scored_name: str = ""
    library_id: str
    cohort_id: str
    jaccard: float
    groups: list[str] = Field(default_factory=list, description="the bundled library's groups")


class CopyHoldout(BaseModel):
    """What the near-copy guard held out of what scores a library outside the curated knowledge.

    Every bundled cohort of ``pairs`` is hidden from the curated knowledge (transfer features,
    curated_transfer) of every scored cohort, and each scored cohort of a pair sees nothing of that bundled
    cohort's group (as the group's own cohorts in the bundled benchmark); a group of ``groups`` (name -> why)
    is held out whole, from the knowledge and from the fits' training, because copying from it is systemic
    (:data:`SYSTEMIC_SHARE`). Each scored cohort of a pair is answered by builders fitted without the groups
    it copies from (``fitted_without``): the full model, kept, was measured to gain on copied cohorts
    (docs/results.md, "The near-copy guard by cohort"); every other scored cohort keeps it."""

    threshold: float
    systemic_share: float
    pairs: list[CopyPair] = Field(default_factory=list)
    groups: dict[str, str] = Field(default_factory=dict)
    scored_cohorts: int = 0
    """how many of the scored library's cohorts were compared"""
    fitted_without: dict[str, list[str]] = Field(default_factory=dict)
    """scored cohort -> the groups the builders answering it were fitted without (those it nearly copies)"""

    @property
    def held_out_cohorts(self) -> list[tuple[str, str]]:
        """The bundled cohorts (library id, cohort id) a near copy hides, each once, in order."""
        return list(dict.fromkeys((p.library_id, p.cohort_id) for p in self.pairs))

    def summary(self) -> str:
        """One sentence: how many cohorts and pairs, which groups whole, and why."""
        if not self.pairs:
            return (
                f"no scored cohort is a near copy of a bundled cohort (Jaccard >= {self.threshold}): nothing held out"
            )
        scored = len({p.scored_cohort for p in self.pairs})
        text = (
            f"{len(self.held_out_cohorts)} bundled cohort(s) held out of the curated knowledge, {len(self.pairs)} "
            f"pair(s): {scored} of the {self.scored_cohorts} scored cohorts list nearly the codes of a bundled "
            f"cohort (Jaccard >= {self.threshold}), see nothing of that cohort's group and are answered by "
            "builders fitted without it"
        )
        if self.groups:
            text += "; held out whole, knowledge and training: " + "; ".join(
                f"group {group} ({why})" for group, why in sorted(self.groups.items())
            )
        else:
            text += "; every group kept (the trained models stay)"
        return text


SYSTEMIC_SHARE = 0.5
"""A group is held out whole (knowledge and training) when more than this share of one of its libraries'
cohorts, or of the scored library's cohorts, are near copies between the two: a copy of a bundled library
then, not independent lists that happen to agree. Fixed before any score was looked at: a copy of a whole
library copies nearly all of it, an independent classification a few percent; a majority sits far from both."""


class MethodRecord(BaseModel):
    """What produced one method's results, and anything that makes them less than what was asked."""

    name: str
    label: str = ""
    source: str = Field(
        default="built-in", description="'built-in', 'module:function', 'entry point: X', or a run file"
    )
    needs: list[str] = Field(default_factory=list)
    degraded: str | None = Field(default=None, description="why the results are not what the method would give")
    trained_on: list[str] = Field(default_factory=list, description="libraries a fitted model or parameter came from")
    fits: str = Field(
        default="",
        description="which fit made the results: 'shipped fit <content signature>' (the same on every machine) or "
        "'local fit <signature>' (made on this machine); empty for a method that fits nothing",
    )
    notes: list[str] = Field(default_factory=list)
    held_out: CopyHoldout | None = Field(
        default=None, description="the bundled cohorts and groups held out as near copies of the scored lists"
    )
    status: str = Field(
        default="ok",
        description="'ok', 'degraded: why' (answered every cohort, less well than it would: untrained, on "
        "defaults, BM25 alone), 'skipped: why', 'failed: why' (no cohort answered: a plug-in's setup or import "
        "failed) or 'failed on N of M cohorts (first cohort: why)' (a plug-in raised, answered the wrong "
        "type or ran past its time limit there)",
    )

    @model_validator(mode="after")
    def _degraded_is_not_ok(self) -> MethodRecord:
        """A record that says why it is degraded never says 'ok' (a run saved before says so when read)."""
        if self.degraded and self.status == "ok":
            self.status = f"degraded: {self.degraded}"
        return self


class BenchmarkReport(BaseModel):
    """Aggregate report across all cohorts and methods."""

    results: list[CohortEvalResult]
    mean_coverage_by_method: dict[str, float]
    mean_over_inclusion_by_method: dict[str, float]
    mean_hierarchical_score_by_method: dict[str, float]
    mean_exact_f1_by_method: dict[str, float] = Field(default_factory=dict)
    skipped: list[str] = Field(
        default_factory=list,
        description="'cohort_id/method: reason' for every requested pair that was not scored",
    )
    measures: list[MeasureRecord] = Field(default_factory=list, description="how every score was computed")
    methods: dict[str, MethodRecord] = Field(default_factory=dict)
    means: dict[str, dict[str, float]] = Field(default_factory=dict, description="measure key -> method -> mean")


class TermResolution(BaseModel):
    """Where one extracted seed term landed in the curated check, and what it contributed."""

    term: str
    landed: str = Field(
        description="'target', 'other', 'ambiguous' (several cohorts matched: reported, not guessed; "
        "fell through to generation) or 'none' (fell through to generation)"
    )
    matched_cohort_ids: list[str] = Field(default_factory=list)
    matched_cohort_names: list[str] = Field(default_factory=list)
    tier: str = Field(description="'curated' or 'generated'")
    codes: list[str] = Field(default_factory=list)
    retrieval_overlap: float | None = Field(default=None, description="of the matched cohort, when curated")
    name_overlap: float | None = Field(default=None, description="of the matched cohort, when curated")
    note: str | None = None


class DecompositionCaseResult(BaseModel):
    """One test case's scores: retrieval alone vs. decomposition + retrieval.

    ``gap`` is ``baseline_hierarchical_score - decomposed_hierarchical_score``: positive means
    decomposition cost accuracy relative to querying with the right term directly.
    """

    cohort_id: str
    cohort_name: str
    population_description: str
    seed_terms: list[str]
    baseline_hierarchical_score: float
    decomposed_hierarchical_score: float
    gap: float
    term_resolutions: list[TermResolution] = Field(default_factory=list)
    predicted_codes: list[str] = Field(default_factory=list)
    error: str | None = None
    error_type: str | None = Field(default=None, description="the typed error's class, e.g. ClaudeTimeoutError")
    library_id: str = ""
    source: str = ""
    baseline_coverage: float = 0.0
    baseline_over_inclusion: float = 0.0
    decomposed_coverage: float = 0.0
    decomposed_over_inclusion: float = 0.0
    n_ground_truth: int = 0


class DecompositionReport(BaseModel):
    """Aggregate report across every decomposition test case."""

    results: list[DecompositionCaseResult]
    mean_gap: float
    mean_baseline_hierarchical_score: float = 0.0
    mean_decomposed_hierarchical_score: float = 0.0
    n_scored: int = 0
    decomposer: str = ""
    retrieval: str = Field(default="", description="e.g. 'hybrid, BM25 only (no dense index)'")
    k: int = 10
    landed_counts: dict[str, int] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list, description="'cohort_id: reason' for cases not run")
