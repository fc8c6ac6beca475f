"""Benchmark harness: runs methods, scores their runs against curated sets, aggregates.

A thin composition of the parts kept apart (as in ranx and ir_measures): curated sets
(:mod:`~phenoforge.eval.qrels`), method outputs (:mod:`~phenoforge.eval.runs`, produced by the
methods of :mod:`phenoforge.methods`), and measures (:mod:`~phenoforge.eval.measures`), joined by
the one scoring path :func:`~phenoforge.eval.evaluate.evaluate`. ``run_benchmark``,
``rescore_hybrid`` and ``score_cohort`` keep the reference API's names, parameters and defaults.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, Field, PrivateAttr

from phenoforge.config import ProgressCallback, no_progress
from phenoforge.engine.expansion import Hierarchy, get_hierarchy
from phenoforge.engine.hybrid import fuse, fusion_depth
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.evaluate import Aggregator, TruthIndexes, aggregate, evaluate
from phenoforge.eval.matching import NearestIndex
from phenoforge.eval.measures import Measure
from phenoforge.eval.metrics import DEFAULT_MAX_DISTANCE, distance_weighted_score
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult, MethodRecord
from phenoforge.eval.qrels import CuratedSet, Qrels, load_qrels
from phenoforge.eval.runs import Run, RunEntry, mixed_script, name_key
from phenoforge.eval.scoring import score_cohort as score_cohort  # the reference API names it here
from phenoforge.memory import collections_paused
from phenoforge.methods import CohortTask, Method, MethodContext, MethodError, MethodSetup, SkipMethod, get_method
from phenoforge.methods.guard import DEFAULT_PLUGIN_TIMEOUT, MethodFailed, MethodTimedOut, checked_answer, guarded
from phenoforge.methods.registry import builtin_methods
from phenoforge.methods.retrieval import Retrieval

log = logging.getLogger(__name__)

DEFAULT_METHODS = ["bm25", "hybrid", "expand_descendants"]
ALL_METHODS = ["bm25", "dense", "hybrid", "expand_descendants"]
"""The reference's four methods."""
NEEDS_DENSE = {"dense"}


def registered_methods() -> list[str]:
    """Every built-in method name, the reference's four first."""
    return list(builtin_methods())


def _ids(hierarchy: Hierarchy, codes: Sequence[str]) -> list[int]:
    return [cid for cid in (hierarchy.resolve(code) for code in codes) if cid is not None]


def match_scores(
    con: duckdb.DuckDBPyConnection,
    from_codes: list[str],
    to_codes: list[str],
    max_distance: int = DEFAULT_MAX_DISTANCE,
) -> list[float]:
    """Best distance-weighted score from each of ``from_codes`` to any of ``to_codes``.

    The caller picks the direction: ground truth here (matched against predicted) gives coverage;
    predicted here (matched against ground truth) gives over-inclusion. One score per
    ``from_codes`` entry, in order; 0.0 each if ``to_codes`` is empty, and 0.0 for a code the
    vocabulary does not know.
    """
    hierarchy = get_hierarchy(con)
    index = NearestIndex(hierarchy, _ids(hierarchy, to_codes))
    return [
        distance_weighted_score(index.nearest(hierarchy.resolve(code)).distance, max_distance) for code in from_codes
    ]


def expansion_seed(ground_truth_codes: Sequence[str]) -> str | None:
    """The least specific curated code: where a human would start expanding from."""
    return min(ground_truth_codes, key=lambda code: (len(code.replace(".", "")), code), default=None)


def _check_parameters(k: int, dense_weight: float) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")


def resolve_methods(methods: Sequence[str | Method] | None) -> list[Method]:
    """Methods by name, ``module:function`` or object; the reference's default three when None."""
    chosen: dict[str, Method] = {}  # by name_key: one name asked twice runs once
    for declared in (get_method(spec) for spec in (methods if methods is not None else DEFAULT_METHODS)):
        same = chosen.setdefault(name_key(declared.name), declared)
        if same is not declared and same.predict is not declared.predict:
            raise MethodError(f"two different methods read as one name: {same.name!r} and {declared.name!r}")
    return list(chosen.values())


def build_run(
    declared: Method,
    context: MethodContext,
    qrels: Qrels,
    skipped: list[str],
    progress: ProgressCallback | None = None,
    method_timeout: float | None = DEFAULT_PLUGIN_TIMEOUT,
) -> tuple[Run | None, MethodRecord]:
    """One method over every cohort of ``qrels``: its run (None if skipped or failed) and its record.

    A built-in is called directly, without a time limit, and its errors propagate (they are bugs). A
    plug-in is called through :func:`~phenoforge.methods.guard.guarded` with ``method_timeout`` seconds
    per cohort (None: no limit): its exception, ``SystemExit``, wrong answer type or time-out costs
    only that cohort's answer (a failing ``setup``: every cohort's), listed in ``skipped`` and in
    ``record.status``; it is given its own copy of each task.
    """
    running = _MethodRun.start(declared, context, qrels, skipped, method_timeout)
    if running.run is None:
        return None, running.record
    running.answer(context, list(qrels.cohorts.values()), progress or no_progress)
    running.finish(context, skipped)
    return running.run, running.record


class _MethodRun:
    """One method's run over a run's cohorts, answered chunk by chunk (:func:`run_methods`)."""

    def __init__(self, declared: Method, record: MethodRecord, limit: float | None, total: int) -> None:
        self.declared = declared
        self.record = record
        self.limit = limit
        self.total = total
        self.run: Run | None = None
        self.failed: list[str] = []
        self.timed_out = False

    @classmethod
    def start(
        cls,
        declared: Method,
        context: MethodContext,
        qrels: Qrels,
        skipped: list[str],
        method_timeout: float | None,
    ) -> _MethodRun:
        """Its record and setup; ``run`` stays None when the method is skipped or its setup failed (the
        lines for every cohort are in ``skipped`` then)."""
        record = MethodRecord(
            name=declared.name,
            label=declared.label or declared.name,
            source=declared.source,
            needs=sorted(declared.needs | declared.uses),
        )
        plugin = declared.source != "built-in"
        running = cls(declared, record, method_timeout if plugin else None, len(qrels.cohorts))
        problem = declared.unmet(context)
        if problem is None and declared.setup is not None:
            try:
                setup = _setup(declared, context, plugin, running.limit)
            except SkipMethod as error:
                problem = str(error)
            except MethodFailed as error:
                skipped += [f"{cohort_id}/{declared.name}: {error}" for cohort_id in qrels.cohorts]
                record.status = f"failed: {error}"
                record.notes.append(record.status)
                log.warning("method %s failed: %s", declared.name, error)
                return running
            else:
                record.trained_on, record.notes = list(setup.trained_on), list(setup.notes)
                record.fits = setup.fits
                record.degraded = setup.degraded
                record.held_out = setup.held_out
                context.setups[declared.name] = setup.state
        if problem is not None:
            skipped += [f"{cohort_id}/{declared.name}: {problem}" for cohort_id in qrels.cohorts]
            record.notes.append(f"skipped: {problem}")
            record.status = f"skipped: {problem}"
            return running
        degradation = declared.degradation(context)
        if degradation:
            record.degraded = "; ".join(filter(None, [record.degraded, degradation]))
        if record.degraded:  # it answers, less well than it would: never 'ok' (a failure later overrides this)
            record.status = f"degraded: {record.degraded}"
        running.run = Run(name=declared.name, source=declared.source)
        return running

    def answer(
        self, context: MethodContext, cohorts: Sequence[CuratedSet], progress: ProgressCallback, offset: int = 0
    ) -> None:
        """Answer ``cohorts`` (the run's cohorts from position ``offset``) into ``run.cohorts``."""
        declared, run, limit = self.declared, self.run, self.limit
        assert run is not None
        plugin = declared.source != "built-in"
        tasks = [
            CohortTask(cohort_id=cohort.cohort_id, query=cohort.cohort_name, seed_code=expansion_seed(cohort.codes))
            for cohort in cohorts
        ]
        if self.timed_out:  # its batch ran past its time limit once: asking again would hang as long again
            self.failed += [f"{task.cohort_id}: {self.timed_out}" for task in tasks]
            return
        try:
            answers = _batch_answers(declared, context, tasks, self.record, progress, limit, offset, self.total)
        except MethodTimedOut as error:  # asking one cohort at a time would hang as long again, per cohort
            answers, self.timed_out = None, error  # type: ignore[assignment]
            self.failed += [f"{task.cohort_id}: {error}" for task in tasks]
            tasks = []
        for position, task in enumerate(tasks):
            if answers is not None:
                run.cohorts[task.cohort_id] = _run_entries(declared, answers[position])
                continue
            progress(offset + position, self.total, f"{declared.name}: {task.cohort_id}")
            if not plugin:
                run.cohorts[task.cohort_id] = _run_entries(declared, declared.predict(context, task))
                continue
            try:
                run.cohorts[task.cohort_id] = guarded(partial(_plugin_answer, declared, context, task), limit)
            except MethodFailed as error:
                self.failed.append(f"{task.cohort_id}: {error}")
                log.warning("method %s failed on cohort %s: %s", declared.name, task.cohort_id, error)

    def take(self) -> Run:
        """The chunk's answers, handed over; the run starts the next chunk empty."""
        assert self.run is not None
        answered, self.run = self.run, Run(name=self.run.name, source=self.run.source)
        return answered

    def finish(self, context: MethodContext, skipped: list[str]) -> None:
        """Its failures into ``skipped`` and its record, and the notes it made per cohort."""
        record, failed = self.record, self.failed
        if failed:
            name = self.declared.name
            skipped += [f"{line.split(': ', 1)[0]}/{name}: {line.split(': ', 1)[1]}" for line in failed]
            record.notes += [f"failed on cohort {line}" for line in failed]
            record.status = f"failed on {len(failed)} of {self.total} cohorts ({failed[0]})"
        record.notes += context.notes_of(self.declared.name)


def _setup(declared: Method, context: MethodContext, plugin: bool, limit: float | None) -> MethodSetup:
    """The method's setup; a plug-in's guarded, and checked to answer a MethodSetup."""
    assert declared.setup is not None
    if not plugin:
        return declared.setup(context)
    found = guarded(partial(declared.setup, copy.copy(context)), limit, what="setup", passes=(SkipMethod,))
    if not isinstance(found, MethodSetup):
        raise MethodFailed(f"setup answered {type(found).__name__}, not a MethodSetup")
    return found


def _plugin_answer(declared: Method, context: MethodContext, task: CohortTask) -> list[RunEntry]:
    """A plug-in's checked answer, given its own copies of ``context`` and ``task``: setting ``context.k``
    or ``task.cohort_id`` changes neither the methods after it nor where its answer is filed. (The objects
    they hold, the connection, retrieval cache, setups and shared state, are shared.)"""
    return checked_answer(declared.predict(copy.copy(context), task.model_copy()), declared.name)


def _run_entries(declared: Method, produced: Sequence[RunEntry | str]) -> list[RunEntry]:
    return [
        entry if isinstance(entry, RunEntry) else RunEntry(code=str(entry), rank=rank, provenance=[declared.name])
        for rank, entry in enumerate(produced, start=1)
    ]


def _batch_answers(
    declared: Method,
    context: MethodContext,
    tasks: list[CohortTask],
    record: MethodRecord,
    progress: ProgressCallback,
    limit: float | None = None,
    offset: int = 0,
    total: int | None = None,
) -> list[Sequence[RunEntry | str]] | None:
    """Every task's answer from the method's ``predict_batch``, or None to ask one task at a time.

    A built-in's error propagates (a bug); another method whose batch raises or answers the wrong
    number of tasks, or a wrong type, is asked one task at a time instead, so one bad cohort costs only
    its own answer. A plug-in's batch has ``limit`` seconds per task; past it, MethodTimedOut.
    """
    if declared.predict_batch is None or not tasks:
        return None
    total = len(tasks) if total is None else total
    shown = f"{len(tasks)} cohorts" if total == len(tasks) else f"cohorts {offset + 1}-{offset + len(tasks)} of {total}"
    progress(offset, total, f"{declared.name}: {shown}")
    batch = declared.predict_batch
    if declared.source == "built-in":
        answers = list(batch(context, tasks))
        if len(answers) != len(tasks):
            raise ValueError(f"predict_batch answered {len(answers)} of {len(tasks)} tasks")
        return answers

    def checked() -> list[Sequence[RunEntry | str]]:
        produced = list(batch(copy.copy(context), [task.model_copy() for task in tasks]))
        if len(produced) != len(tasks):
            raise ValueError(f"predict_batch answered {len(produced)} of {len(tasks)} tasks")
        return [checked_answer(answer, declared.name) for answer in produced]

    try:
        return guarded(checked, None if limit is None else limit * len(tasks), what="predict_batch")
    except MethodTimedOut:
        raise
    except MethodFailed as error:
        if f"{error}; asked one cohort at a time" not in record.notes:  # once, not once per chunk
            record.notes.append(f"{error}; asked one cohort at a time")
        log.warning("method %s: %s; one cohort at a time", declared.name, error)
        return None


def score_runs(
    hierarchy: Hierarchy,
    qrels: Qrels,
    runs: Sequence[Run],
    measures: Sequence[Measure | str] | None = None,
    methods: dict[str, MethodRecord] | None = None,
    skipped: Sequence[str] = (),
) -> BenchmarkReport:
    """Score several runs against one ``qrels`` (ground-truth tables built once) and aggregate.

    A run scores only the cohorts it answered; the rest of ``qrels`` is listed as skipped.
    """
    indexes = TruthIndexes(hierarchy)
    results: list[CohortEvalResult] = []
    skipped = [*qrels.skipped_lines(), *skipped]
    for run in runs:
        answered = qrels.model_copy(update={"cohorts": {c: s for c, s in qrels.cohorts.items() if c in run.cohorts}})
        results += evaluate(hierarchy, answered, run, measures, indexes)
        already = {line.split(":", 1)[0] for line in skipped}
        skipped += [
            f"{cohort_id}/{run.name}: no rows in the run"
            for cohort_id in qrels.cohorts
            if cohort_id not in run.cohorts and f"{cohort_id}/{run.name}" not in already
        ]
    by_cohort = {cohort_id: position for position, cohort_id in enumerate(qrels.cohorts)}
    results.sort(key=lambda r: by_cohort.get(r.cohort_id, len(by_cohort)))
    return aggregate(results, skipped, measures, methods)


RESULT_CHUNK = 256
"""Cohorts answered and scored together by :func:`run_methods`: every method answers a chunk, the chunk
is scored, its results are handed to the sink (or kept), and its runs are dropped before the next one,
so a large library never holds every method's answers at once. A multiple of the dense scan's query
block (64) and of the set builders' block (32), so the blocks, and every score, are those of one pass."""

ResultSink = Callable[[list[CohortEvalResult]], None]
"""Receives each chunk's results, in report order (cohort by cohort, each cohort's methods in order)."""


@collections_paused()
def run_methods(
    con: duckdb.DuckDBPyConnection,
    qrels: Qrels,
    methods: Sequence[str | Method] | None = None,
    dense: Any | None = None,
    k: int = 25,
    dense_weight: float = 0.5,
    measures: Sequence[Measure | str] | None = None,
    progress: ProgressCallback | None = None,
    dense_problem: str | None = None,
    extra_runs: Sequence[Run] = (),
    method_timeout: float | None = DEFAULT_PLUGIN_TIMEOUT,
    sink: ResultSink | None = None,
) -> BenchmarkReport:
    """Run ``methods`` over ``qrels`` and score them (plus any ``extra_runs``, e.g. imported).

    A run named like one of the methods would be scored as that method (their results merged):
    refused before any work, as is a second run of one name. A plug-in may take ``method_timeout``
    seconds per cohort (None: no limit; built-ins have none); see :func:`build_run`.

    The cohorts are answered and scored ``RESULT_CHUNK`` at a time. With a ``sink``, each chunk's
    results go to it as soon as they are scored and the report returned lists none (``results == []``;
    its means, skipped lines and method records are the whole run's); without one the report holds them
    all. Either way the results, their order and every mean are the same.
    """
    _check_parameters(k, dense_weight)
    if method_timeout is not None and not (isinstance(method_timeout, int | float) and 0 < method_timeout < math.inf):
        raise ValueError(f"method_timeout must be a positive number of seconds or None, got {method_timeout!r}")
    chosen = resolve_methods(methods)
    names = {name_key(m.name): m.name for m in chosen}  # how each row's name reads: case, blanks, invisibles
    for extra in extra_runs:
        if mixed_script(extra.name):
            raise PhenoforgeError(
                f"the run is named {extra.name!r}, mixing Latin, Cyrillic or Greek letters: a look-alike"
            )
        same = names.get(name_key(extra.name))
        if same is not None:
            kind = "a method it is compared with" if same in (m.name for m in chosen) else "a second run"
            kind += f" ({same!r})" if same != extra.name else ""
            raise PhenoforgeError(
                f"the run is named {extra.name!r}, like {kind}; give it another name "
                "(run import --name, or the Benchmark page's run name)"
            )
        names[name_key(extra.name)] = extra.name
    hierarchy = get_hierarchy(con)
    retrieval = Retrieval(con, dense, fusion_depth(k))
    cohorts = list(qrels.cohorts.values())
    queries = [cohort.cohort_name for cohort in cohorts]
    context = MethodContext(
        con=con,
        hierarchy=hierarchy,
        retrieval=retrieval,
        k=k,
        dense_weight=dense_weight,
        library_id=qrels.library_id,
        library_group=qrels.group,
        library_path=qrels.library_path,
        dense_problem=dense_problem if dense is None else None,
        progress=progress,
        methods=tuple(m.name for m in chosen),
        queries=tuple(queries) if len(cohorts) > RESULT_CHUNK else (),
    )
    if any(m.retrieves for m in chosen):
        deepest = max((m.depth or 0 for m in chosen if m.retrieves), default=0)
        retrieval.prefetch(
            queries, dense=any(m.retrieves_dense for m in chosen), depth=deepest or None, progress=progress
        )
    method_lines: dict[str, list[str]] = {}  # per method, its skipped lines (kept in method order, as one pass)
    running: list[_MethodRun] = []
    records: dict[str, MethodRecord] = {}
    for declared in chosen:
        lines = method_lines.setdefault(declared.name, [])
        started = _MethodRun.start(declared, context, qrels, lines, method_timeout)
        records[declared.name] = started.record
        if started.run is not None:
            running.append(started)
    for run in extra_runs:
        records[run.name] = MethodRecord(name=run.name, label=run.name, source=run.source, notes=list(run.notes))
    aggregator = Aggregator(measures)
    kept: list[CohortEvalResult] = []
    unanswered: dict[str, list[str]] = {}  # per run, the cohorts it has no rows for (its "no rows" lines)
    chunk_progress = progress or no_progress
    for offset in range(0, len(cohorts), RESULT_CHUNK):
        chunk = cohorts[offset : offset + RESULT_CHUNK]
        chunk_ids = [cohort.cohort_id for cohort in chunk]
        runs: list[Run] = []
        for method in running:
            method.answer(context, chunk, chunk_progress, offset)
            runs.append(method.take())
        for extra in extra_runs:
            runs.append(
                Run(
                    name=extra.name,
                    source=extra.source,
                    cohorts={cid: extra.cohorts[cid] for cid in chunk_ids if cid in extra.cohorts},
                )
            )
        part = qrels.model_copy(update={"cohorts": {cohort.cohort_id: cohort for cohort in chunk}})
        results = _score_chunk(hierarchy, part, runs, measures)
        for run in runs:
            unanswered.setdefault(run.name, []).extend(cid for cid in chunk_ids if cid not in run.cohorts)
        del runs
        aggregator.add(results)
        if sink is not None:
            sink(results)
        else:
            kept += results
        del results
        context.shared.end_chunk()
    for method in running:
        method.finish(context, method_lines[method.declared.name])
    skipped = [*qrels.skipped_lines(), *(line for lines in method_lines.values() for line in lines)]
    for name in [*(m.declared.name for m in running), *(run.name for run in extra_runs)]:
        already = {line.split(":", 1)[0] for line in skipped}
        skipped += [
            f"{cohort_id}/{name}: no rows in the run"
            for cohort_id in unanswered.get(name, [])
            if f"{cohort_id}/{name}" not in already
        ]
    report = aggregator.report(kept, skipped, records)
    chunk_progress(len(qrels.cohorts), len(qrels.cohorts), "done")
    return report


def _score_chunk(
    hierarchy: Hierarchy, qrels: Qrels, runs: Sequence[Run], measures: Sequence[Measure | str] | None
) -> list[CohortEvalResult]:
    """``score_runs``' results for one chunk: every run against the chunk's cohorts it answered, in
    report order (ground-truth tables built once for the chunk)."""
    indexes = TruthIndexes(hierarchy)
    results: list[CohortEvalResult] = []
    for run in runs:
        answered = qrels.model_copy(update={"cohorts": {c: s for c, s in qrels.cohorts.items() if c in run.cohorts}})
        results += evaluate(hierarchy, answered, run, measures, indexes)
    by_cohort = {cohort_id: position for position, cohort_id in enumerate(qrels.cohorts)}
    results.sort(key=lambda r: by_cohort.get(r.cohort_id, len(by_cohort)))
    return results


def run_benchmark(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    cohort_ids: list[str],
    methods: list[str] | None = None,
    dense: object | None = None,
    k: int = 25,
    fanout_threshold: int = 100,
    dense_weight: float = 0.5,
    progress: ProgressCallback | None = None,
    measures: Sequence[Measure | str] | None = None,
    dense_problem: str | None = None,
    method_timeout: float | None = DEFAULT_PLUGIN_TIMEOUT,
    sink: ResultSink | None = None,
) -> BenchmarkReport:
    """Run every requested method against every cohort and aggregate the results.

    The cohort's own display name is the query for the retrieval methods;
    ``expand_descendants`` seeds from the shortest curated code, a deliberately weak baseline.
    A method whose needs are missing (``dense`` without a dense retriever) is skipped and listed
    in ``skipped``; ``hybrid`` without one runs on BM25 alone and the report marks it degraded
    (``methods["hybrid"].degraded``, with ``dense_problem`` when the caller knows why). A plug-in
    that fails or runs past ``method_timeout`` seconds on a cohort costs only its own answers
    (``methods[name].status``); built-ins have no time limit. With a ``sink``, the results go to it chunk
    by chunk as they are scored and the report lists none (see :func:`run_methods`).
    """
    _check_parameters(k, dense_weight)
    qrels = load_qrels(con, library_dir, cohort_ids, fanout_threshold, progress)
    return run_methods(
        con,
        qrels,
        methods,
        dense,
        k,
        dense_weight,
        measures,
        progress,
        dense_problem,
        method_timeout=method_timeout,
        sink=sink,
    )


class CohortRankings(BaseModel):
    cohort_id: str
    cohort_name: str
    ground_truth_codes: list[str]
    unresolvable_ground_truth: list[str] = Field(default_factory=list)
    bm25: list[str]
    dense: list[str] | None = None


class RankingCache(BaseModel):
    """Per-retriever rankings of every cohort, queried once: the hybrid-weight slider's input."""

    library_dir: str
    depth: int
    cohorts: list[CohortRankings]
    skipped: dict[str, str] = Field(
        default_factory=dict, description="cohort id -> why it cannot be scored (as in Qrels.skipped)"
    )
    _truth: dict[str, TruthIndexes] = PrivateAttr(default_factory=dict)

    def truth_indexes(self, hierarchy: Hierarchy) -> TruthIndexes:
        """Ground-truth ancestor tables, fixed for the cache's lifetime (one set per vocabulary build)."""
        if hierarchy.build_id not in self._truth:
            self._truth = {hierarchy.build_id: TruthIndexes(hierarchy)}
        return self._truth[hierarchy.build_id]

    def qrels(self) -> Qrels:
        return Qrels(
            library_id="",
            library_path=self.library_dir,
            cohorts={
                c.cohort_id: CuratedSet(
                    cohort_id=c.cohort_id,
                    cohort_name=c.cohort_name,
                    codes=c.ground_truth_codes,
                    unresolvable=c.unresolvable_ground_truth,
                )
                for c in self.cohorts
                if c.ground_truth_codes
            },
            skipped=self.skipped,
        )

    @property
    def has_dense(self) -> bool:
        return any(cohort.dense is not None for cohort in self.cohorts)


def collect_rankings(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    cohort_ids: list[str],
    dense: object | None = None,
    depth: int = 200,
    fanout_threshold: int = 100,
    progress: ProgressCallback | None = None,
) -> RankingCache:
    """Query BM25 (and dense, when given) once per cohort, deep enough to re-fuse at any weight."""
    qrels = load_qrels(con, library_dir, cohort_ids, fanout_threshold, progress)
    retrieval = Retrieval(con, dense, depth)
    retrieval.prefetch([cohort.cohort_name for cohort in qrels.cohorts.values()], progress=progress)
    cohorts = [
        CohortRankings(
            cohort_id=cohort.cohort_id,
            cohort_name=cohort.cohort_name,
            ground_truth_codes=cohort.codes,
            unresolvable_ground_truth=cohort.unresolvable,
            bm25=[code for code, _ in retrieval.bm25(cohort.cohort_name)],
            dense=[code for code, _ in dense_ranked]
            if (dense_ranked := retrieval.dense_ranking(cohort.cohort_name)) is not None
            else None,
        )
        for cohort in qrels.cohorts.values()
    ]
    return RankingCache(library_dir=str(library_dir), depth=depth, cohorts=cohorts, skipped=dict(qrels.skipped))


def rescore_hybrid(
    con: duckdb.DuckDBPyConnection, cache: RankingCache, dense_weight: float, k: int = 25
) -> BenchmarkReport:
    """Re-fuse cached rankings at ``dense_weight`` and re-score every cohort: no retrieval at all.

    Produces exactly what ``run_benchmark(methods=["hybrid"])`` would for the same weight and
    ``k`` (provided ``cache.depth >= fusion_depth(k)``), through the same fusion and scoring.
    """
    _check_parameters(k, dense_weight)
    if cache.depth < fusion_depth(k):
        raise ValueError(f"rankings are {cache.depth} deep; k={k} needs {fusion_depth(k)}")
    hierarchy = get_hierarchy(con)
    depth = fusion_depth(k)
    run = Run(name="hybrid")
    for cohort in cache.cohorts:
        dense = cohort.dense[:depth] if cohort.dense is not None else None
        fused = fuse(cohort.bm25[:depth], dense, dense_weight)[:k]
        run.cohorts[cohort.cohort_id] = [
            RunEntry(code=code, rank=rank, score=score) for rank, (code, score) in enumerate(fused, start=1)
        ]
    qrels = cache.qrels()
    results = evaluate(hierarchy, qrels, run, truth_indexes=cache.truth_indexes(hierarchy))
    degraded = None if cache.has_dense else "no dense rankings in the cache: BM25 alone"
    return aggregate(
        results,
        qrels.skipped_lines(),
        methods={"hybrid": MethodRecord(name="hybrid", label="Hybrid (RRF)", degraded=degraded)},
    )
