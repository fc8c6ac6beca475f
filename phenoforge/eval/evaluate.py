"""The one scoring path: ``evaluate(hierarchy, qrels, run, measures)``, pure and database-free.

Every number the project shows comes from here: the benchmark, the hybrid-weight slider, the
decomposition evaluation, imported runs and the drilldown (which renders the same matches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from phenoforge.eval.matching import CohortMatches, NearestIndex, match_cohort
from phenoforge.eval.measures import Coverage, Hierarchical, Measure, OverInclusion, parse_measures
from phenoforge.eval.measures.exact import ExactF1, ExactPrecision, ExactRecall
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult, MeasureRecord, MethodRecord
from phenoforge.eval.qrels import CuratedSet, Qrels
from phenoforge.eval.runs import Run

if TYPE_CHECKING:
    from phenoforge.engine.expansion import Hierarchy

_FIELD_MEASURES: tuple[Measure, ...] = (
    Coverage(),
    OverInclusion(),
    Hierarchical(),
    ExactPrecision(),
    ExactRecall(),
    ExactF1(),
)


class TruthIndexes:
    """Ancestor tables of ground truth, built once per cohort and reused by every run scored."""

    def __init__(self, hierarchy: Hierarchy) -> None:
        self.hierarchy = hierarchy
        self._indexes: dict[tuple[str, tuple[str, ...]], NearestIndex] = {}
        self._last: dict[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], CohortMatches]] = {}
        """per cohort, the latest predicted codes matched and their matches: a run answering a cohort with
        the codes the run before gave (curated_transfer falling back to the learned set) reuses them"""

    def get(self, cohort: CuratedSet) -> NearestIndex:
        key = (cohort.cohort_id, tuple(cohort.codes))
        index = self._indexes.get(key)
        if index is None:
            ids = [cid for cid in (self.hierarchy.resolve(code) for code in cohort.codes) if cid is not None]
            index = self._indexes[key] = NearestIndex(self.hierarchy, ids)
        return index

    def matches(self, cohort: CuratedSet, predicted_codes: Sequence[str]) -> CohortMatches:
        """``match_cohort`` of the cohort's truth and ``predicted_codes`` (the same object as last time
        when this cohort was last matched against the same codes: matching is a function of the two lists)."""
        key = (tuple(cohort.codes), tuple(predicted_codes))
        last = self._last.get(cohort.cohort_id)
        if last is not None and last[0] == key:
            return last[1]
        found = match_cohort(self.hierarchy, cohort.codes, predicted_codes, self.get(cohort))
        self._last[cohort.cohort_id] = (key, found)
        return found


def score_matches(
    matches: CohortMatches,
    cohort_id: str,
    cohort_name: str,
    method: str,
    measures: Sequence[Measure] | None = None,
    unresolvable: Sequence[str] = (),
    provenance: dict[str, list[str]] | None = None,
) -> CohortEvalResult:
    """One cohort's result from its matches: the reference fields plus every requested measure."""
    computed: dict[Measure, float] = {}  # a measure asked for twice (a field and a score) is computed once

    def value(measure: Measure) -> float:
        if measure not in computed:
            computed[measure] = measure.compute(matches)
        return computed[measure]

    fields: dict[str, Any] = {
        m.result_field: value(m) for m in _FIELD_MEASURES if m.result_field
    }  # measure fields: floats
    scores = {m.key: value(m) for m in parse_measures(measures)}
    return CohortEvalResult(
        cohort_id=cohort_id,
        cohort_name=cohort_name,
        method=method,
        predicted_codes=matches.predicted_codes,
        ground_truth_codes=matches.truth_codes,
        unresolvable_ground_truth=list(dict.fromkeys([*matches.unresolvable_truth, *unresolvable])),
        scores=scores,
        provenance=provenance or {},
        **fields,
    )


def evaluate(
    hierarchy: Hierarchy,
    qrels: Qrels,
    run: Run,
    measures: Sequence[Measure | str] | None = None,
    truth_indexes: TruthIndexes | None = None,
) -> list[CohortEvalResult]:
    """Score ``run`` against every cohort of ``qrels`` (a cohort the run lacks scores as empty).

    Pure: the hierarchy is in memory, so this is what property tests and the slider call.
    """
    chosen = parse_measures(measures)
    truth_indexes = truth_indexes or TruthIndexes(hierarchy)
    results = []
    for cohort in qrels.cohorts.values():
        entries = run.cohorts.get(cohort.cohort_id, [])
        matches = truth_indexes.matches(cohort, [e.code for e in entries])
        provenance = {e.code: e.provenance for e in entries if e.provenance}
        result = score_matches(
            matches, cohort.cohort_id, cohort.cohort_name, run.name, chosen, cohort.unresolvable, provenance
        )
        # what a run export needs to give the run back (the result's own fields, set once here)
        result.ranks = {e.code: e.rank for e in entries}
        result.code_scores = {e.code: e.score for e in entries if e.score is not None}
        results.append(result)
    return results


_MEAN_FIELDS = ("coverage", "over_inclusion_penalty", "hierarchical_score", "exact_f1")


class Aggregator:
    """The report's means over results added chunk by chunk: each measure's values kept per method in the
    order added (a float each), so the means are those :func:`aggregate` computes over the whole list,
    to the last bit, without the results being kept."""

    def __init__(self, measures: Sequence[Measure | str] | None = None) -> None:
        self.chosen = parse_measures(measures)
        self._reads = list(dict.fromkeys([*_MEAN_FIELDS, *(m.key for m in self.chosen)]))
        self._values: dict[str, dict[str, list[float]]] = {read: {} for read in self._reads}
        self.count = 0

    def add(self, results: Sequence[CohortEvalResult]) -> None:
        for result in results:
            self.count += 1
            for read in self._reads:
                value = result.scores.get(read) if read in result.scores else getattr(result, read, None)
                if value is not None:
                    self._values[read].setdefault(result.method, []).append(float(value))

    def means(self, read: str) -> dict[str, float]:
        return {method: sum(values) / len(values) for method, values in self._values[read].items()}

    def report(
        self,
        results: list[CohortEvalResult],
        skipped: list[str] | None = None,
        methods: dict[str, MethodRecord] | None = None,
    ) -> BenchmarkReport:
        """The report of everything added; ``results`` is what it lists (``[]`` when they went elsewhere)."""
        return BenchmarkReport(
            results=results,
            mean_coverage_by_method=self.means("coverage"),
            mean_over_inclusion_by_method=self.means("over_inclusion_penalty"),
            mean_hierarchical_score_by_method=self.means("hierarchical_score"),
            mean_exact_f1_by_method=self.means("exact_f1"),
            skipped=skipped or [],
            measures=[MeasureRecord(**m.info().model_dump()) for m in self.chosen],
            methods=methods or {},
            means={m.key: self.means(m.key) for m in self.chosen},
        )


def aggregate(
    results: list[CohortEvalResult],
    skipped: list[str] | None = None,
    measures: Sequence[Measure | str] | None = None,
    methods: dict[str, MethodRecord] | None = None,
) -> BenchmarkReport:
    """Means per method over the scored cohorts, with the measures and methods recorded."""
    aggregator = Aggregator(measures)
    aggregator.add(results)
    return aggregator.report(results, skipped, methods)
