"""Evaluate the agent's decompose step, isolated from retrieval quality.

``run_benchmark`` measures retrieval given an already-correct search term; this measures the step
before it. For each test case it compares hybrid search with the cohort's own name (decomposition
skipped: the baseline) against the real pipeline from the free-text description (decompose, then
per-term curated/generated resolution exactly as ``agent.nodes`` does it, minus the human gate:
every generated candidate is accepted), both scored by ``score_cohort`` against the same curated
ground truth. ``gap = baseline - decomposed``: positive means decomposition cost accuracy.

Per case the report says where the curated check landed for every seed term: the target cohort,
another cohort, several (ambiguous), or none (generated retrieval).

The curated check for a case runs against the case's own library (as if the researcher had picked
that library), so near-duplicate cohorts inside one library are what make a term ambiguous.
"""

from __future__ import annotations

import difflib
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from pydantic import BaseModel, Field

from phenoforge.agent import nodes
from phenoforge.config import ProgressCallback, libraries_dir
from phenoforge.engine.curated import Library, list_libraries, load_curated_concept_set, load_library
from phenoforge.engine.hybrid import hybrid_search
from phenoforge.errors import ImportRowError, PhenoforgeError
from phenoforge.eval.decomposition_cases import (  # noqa: F401  (re-exported: the reference API names them here)
    CASE_SETS,
    DEFAULT_TEST_CASES,
    NEW_TEST_CASES,
    OHDSI_TEST_CASES,
    CaseFileError,
    DecompositionTestCase,
    case_rows,
    cases_for_split,
)
from phenoforge.eval.models import DecompositionCaseResult, DecompositionReport, TermResolution
from phenoforge.eval.scoring import score_cohort
from phenoforge.eval.stats import bootstrap_ci

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever


def _libraries_for(library_dir: Path, broken: list[str] | None = None) -> tuple[dict[str, Library], Library | None]:
    """``(libraries by directory name, the single library when library_dir is one)``; a broken library
    in a folder of libraries is skipped and its error appended to ``broken``."""
    library_dir = Path(library_dir)
    if (library_dir / "manifest.json").is_file():
        single = load_library(library_dir)
        return {library_dir.name: single}, single
    errors = broken if broken is not None else []
    return {library.path.name: library for library in list_libraries(library_dir, errors=errors)}, None


def _pick_library(case: DecompositionTestCase, by_name: dict[str, Library], single: Library | None) -> Library | None:
    """The library a case runs against: by folder name, then id prefix; no name: the one holding its cohort."""
    if not case.library_id:
        holding = [lib for lib in by_name.values() if case.cohort_id in lib.cohort_ids]
        return holding[0] if len(holding) == 1 else None
    library = by_name.get(case.library_id)
    if library is None:
        library = next((lib for lib in by_name.values() if lib.library_id.startswith(case.library_id)), None)
    if library is None and single is not None:
        library = single  # a single library given explicitly: run any case whose cohort it holds
    if library is None or case.cohort_id not in library.cohort_ids:
        return None
    return library


def _skip_reason(case: DecompositionTestCase, by_name: dict[str, Library], single: Library | None = None) -> str:
    """Why a case cannot run: which of library and cohort is missing, with the nearest cohort ids."""
    if not case.library_id:
        holding = [lib.path.name for lib in by_name.values() if case.cohort_id in lib.cohort_ids]
        if holding:
            return f"{case.cohort_id}: cohort is in several libraries ({', '.join(holding)}); name one in 'library'"
        return f"{case.cohort_id}: no installed library holds this cohort"
    library = by_name.get(case.library_id) or next(
        (lib for lib in by_name.values() if lib.library_id.startswith(case.library_id)), single
    )
    if library is None:
        return (
            f"{case.cohort_id}: library {case.library_id!r} is not installed "
            f"(installed: {', '.join(sorted(by_name)) or 'none'})"
        )
    near = difflib.get_close_matches(case.cohort_id, list(library.cohort_ids), n=3, cutoff=0.8)
    return f"{case.cohort_id}: cohort {case.cohort_id!r} is not in library {library.path.name!r}" + (
        f" (did you mean {', '.join(near)}?)" if near else ""
    )


class NoCaseRanError(PhenoforgeError):
    """No test case's library and cohort exist where the evaluation looked."""


def _resolutions(con: duckdb.DuckDBPyConnection, state, target: str) -> list[TermResolution]:
    out: list[TermResolution] = []
    for term in state.terms:
        if term.status == "curated" and term.curated is not None:
            match = term.curated
            out.append(
                TermResolution(
                    term=term.term,
                    landed="target" if match.cohort_id == target else "other",
                    matched_cohort_ids=[match.cohort_id],
                    matched_cohort_names=[match.cohort_name],
                    tier="curated",
                    codes=nodes.cohort_codes(con, match.library_path, match.cohort_id),
                    retrieval_overlap=match.retrieval_overlap,
                    name_overlap=match.name_overlap,
                    note=term.note,
                )
            )
        elif term.status == "ambiguous":
            out.append(
                TermResolution(
                    term=term.term,
                    landed="ambiguous",
                    tier="generated",
                    codes=term.candidate_codes,
                    matched_cohort_ids=[m.cohort_id for m in term.ambiguous],
                    matched_cohort_names=[m.cohort_name for m in term.ambiguous],
                    note=term.note,
                )
            )
        else:
            out.append(
                TermResolution(
                    term=term.term,
                    landed="none",
                    tier="generated",
                    codes=term.candidate_codes,
                    note=term.search_reason,
                )
            )
    return out


def retrieval_label(dense: DenseRetriever | None) -> str:
    return "hybrid (BM25 + dense, RRF)" if dense is not None else "hybrid, BM25 only (no dense index)"


def score_decomposition(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    decompose_fn: Callable[[str], list[str]],
    dense: DenseRetriever | None = None,
    k: int = 10,
    fanout_threshold: int = 100,
    test_cases: list[DecompositionTestCase] | None = None,
    progress: ProgressCallback | None = None,
) -> DecompositionReport:
    """Score ``decompose_fn`` against each test case's curated ground truth.

    ``library_dir`` is one library (every case whose cohort it holds runs) or a folder of
    libraries (each case runs against the library named by its ``library_id``). Cases whose
    library or cohort is missing are listed in ``skipped``; a decomposer failure is recorded on
    the case (``error``) and left out of the means.
    """
    cases = test_cases if test_cases is not None else DEFAULT_TEST_CASES
    broken: list[str] = []
    by_name, single = _libraries_for(Path(library_dir), broken)
    results: list[DecompositionCaseResult] = []
    skipped: list[str] = [f"broken library skipped: {problem}" for problem in broken]
    landed: Counter[str] = Counter()
    for index, case in enumerate(cases):
        if progress is not None:
            progress(index, len(cases), f"{case.cohort_id}: {case.population_description[:60]}")
        library = _pick_library(case, by_name, single)
        if library is None:
            skipped.append(_skip_reason(case, by_name, single))
            continue
        truth = load_curated_concept_set(con, library, case.cohort_id, fanout_threshold)
        baseline_codes = hybrid_search(con, truth.cohort_name, k=k, dense=dense).codes
        baseline = score_cohort(con, case.cohort_id, truth.cohort_name, truth.codes, baseline_codes, "baseline")
        common = {
            "cohort_id": case.cohort_id,
            "cohort_name": truth.cohort_name,
            "population_description": case.population_description,
            "library_id": library.library_id,
            "source": case.source,
            "baseline_hierarchical_score": baseline.hierarchical_score,
            "baseline_coverage": baseline.coverage,
            "baseline_over_inclusion": baseline.over_inclusion_penalty,
            "n_ground_truth": len(truth.codes),
        }
        try:
            state = nodes.run_ungated(
                con,
                case.population_description,
                decompose_fn,
                [library],
                dense=dense,
                k=k,
                fanout_threshold=fanout_threshold,
            )
        except PhenoforgeError as error:
            results.append(
                DecompositionCaseResult(
                    **common,
                    seed_terms=[],
                    decomposed_hierarchical_score=0.0,
                    gap=0.0,
                    error=str(error),
                    error_type=type(error).__name__,
                )
            )
            continue
        predicted = state.concept_set.codes if state.concept_set else []
        scored = score_cohort(con, case.cohort_id, truth.cohort_name, truth.codes, predicted, "decomposed")
        resolutions = _resolutions(con, state, case.cohort_id)
        landed.update(resolution.landed for resolution in resolutions)
        results.append(
            DecompositionCaseResult(
                **common,
                seed_terms=[term.term for term in state.terms],
                decomposed_hierarchical_score=scored.hierarchical_score,
                decomposed_coverage=scored.coverage,
                decomposed_over_inclusion=scored.over_inclusion_penalty,
                gap=baseline.hierarchical_score - scored.hierarchical_score,
                term_resolutions=resolutions,
                predicted_codes=predicted,
            )
        )
    if progress is not None:
        progress(len(cases), len(cases), "done")
    if cases and not results:
        wanted = sorted({case.library_id or "(any)" for case in cases})
        raise NoCaseRanError(
            f"none of the {len(cases)} test cases can run against {library_dir}: "
            f"{len(skipped)} skipped ({'; '.join(skipped[:3])}{'; ...' if len(skipped) > 3 else ''}). "
            f"Cases name the libraries {', '.join(wanted)}; found here: "
            f"{', '.join(sorted(by_name)) or 'no library'}. Pass the folder holding those libraries "
            "(default: the data directory's libraries folder) or install them"
        )
    ok = [result for result in results if result.error is None]

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return DecompositionReport(
        results=results,
        mean_gap=mean([r.gap for r in ok]),
        mean_baseline_hierarchical_score=mean([r.baseline_hierarchical_score for r in ok]),
        mean_decomposed_hierarchical_score=mean([r.decomposed_hierarchical_score for r in ok]),
        n_scored=len(ok),
        decomposer=getattr(decompose_fn, "__name__", None) or repr(decompose_fn),
        retrieval=retrieval_label(dense),
        k=k,
        landed_counts=dict(landed),
        skipped=skipped,
    )


class CaseSpread(BaseModel):
    cohort_id: str
    population_description: str
    gaps: list[float]
    mean_gap: float
    min_gap: float
    max_gap: float
    stdev_gap: float
    distinct_term_sets: list[list[str]]
    n_errors: int = 0


class RepeatReport(BaseModel):
    """``n`` runs of the same cases: how much an LLM decomposer's answers (and scores) vary."""

    n: int
    mean_gap_per_run: list[float]
    mean_gap: float
    stdev_mean_gap: float
    cases: list[CaseSpread]
    runs: list[DecompositionReport] = Field(default_factory=list)
    mean_gap_ci_low: float = Field(default=0.0, description="95% bootstrap interval over cases of the per-case mean")
    mean_gap_ci_high: float = 0.0
    n_runs_scored: int = Field(default=0, description="runs in which at least one case ran")


def repeat_decomposition(
    con: duckdb.DuckDBPyConnection,
    library_dir: Path,
    decompose_fn: Callable[[str], list[str]],
    n: int,
    dense: DenseRetriever | None = None,
    k: int = 10,
    fanout_threshold: int = 100,
    test_cases: list[DecompositionTestCase] | None = None,
    progress: ProgressCallback | None = None,
) -> RepeatReport:
    """Run ``score_decomposition`` ``n`` times; pass an uncached decomposer or every run is equal."""
    if n < 1:
        raise ValueError("n must be at least 1")
    runs: list[DecompositionReport] = []
    for run in range(n):
        inner: ProgressCallback | None = None
        if progress is not None:

            def inner(done: int, total: int, message: str, run: int = run) -> None:
                progress(run * total + done, n * total, f"run {run + 1}/{n}: {message}")

        runs.append(
            score_decomposition(
                con,
                library_dir,
                decompose_fn,
                dense=dense,
                k=k,
                fanout_threshold=fanout_threshold,
                test_cases=test_cases,
                progress=inner,
            )
        )
    cases: list[CaseSpread] = []
    for index, first in enumerate(runs[0].results):
        per_run = [run.results[index] for run in runs]
        gaps = [r.gap for r in per_run if r.error is None]
        sets: list[list[str]] = []
        for r in per_run:
            if r.error is None and r.seed_terms not in sets:
                sets.append(r.seed_terms)
        cases.append(
            CaseSpread(
                cohort_id=first.cohort_id,
                population_description=first.population_description,
                gaps=gaps,
                mean_gap=statistics.fmean(gaps) if gaps else 0.0,
                min_gap=min(gaps, default=0.0),
                max_gap=max(gaps, default=0.0),
                stdev_gap=statistics.pstdev(gaps) if len(gaps) > 1 else 0.0,
                distinct_term_sets=sets,
                n_errors=sum(1 for r in per_run if r.error is not None),
            )
        )
    per_run_means = [run.mean_gap for run in runs if run.n_scored]  # a run where nothing ran has no mean
    case_means = [case.mean_gap for case in cases if case.gaps]
    interval = bootstrap_ci(case_means) if case_means else None
    return RepeatReport(
        n=n,
        mean_gap_per_run=per_run_means,
        mean_gap=statistics.fmean(case_means) if case_means else 0.0,
        stdev_mean_gap=statistics.stdev(per_run_means) if len(per_run_means) > 1 else 0.0,
        cases=cases,
        runs=runs,
        mean_gap_ci_low=interval.low if interval else 0.0,
        mean_gap_ci_high=interval.high if interval else 0.0,
        n_runs_scored=len(per_run_means),
    )


def ran_summary(report: DecompositionReport) -> str:
    """ "N of M cases ran" plus, when some failed, the first typed error: failure is never a 0.0 mean."""
    attempted = len(report.results)
    failed = [result for result in report.results if result.error is not None]
    if not failed:
        return f"{report.n_scored} of {attempted} cases ran"
    kinds = Counter(result.error_type or "error" for result in failed)
    first = failed[0]
    which = ", ".join(f"{count} {kind}" for kind, count in kinds.most_common())
    if report.n_scored == 0:
        return f"0 of {attempted} cases ran: {first.error_type or 'error'}: {first.error}"
    return (
        f"{report.n_scored} of {attempted} cases ran ({len(failed)} failed: {which}; first: {first.error}); "
        f"means are over the {report.n_scored} that ran"
    )


def landing_rate(report: DecompositionReport) -> float:
    """Share of the cases that ran in which at least one seed term's curated check landed on the target."""
    ran = [result for result in report.results if result.error is None]
    if not ran:
        return 0.0
    return sum(1 for result in ran if any(t.landed == "target" for t in result.term_resolutions)) / len(ran)


CSV_COLUMNS = ("population_description", "cohort_id", "library", "source")


def load_cases_csv(path: Path | str, libraries_root: Path | None = None) -> list[DecompositionTestCase]:
    """A user's case file (``population_description, cohort_id[, library, source]``), checked line by line.

    Each case is checked against ``libraries_root`` (one library or a folder of them, as
    :func:`score_decomposition` takes; default the data directory's libraries): the named library
    exists and holds the cohort; without a library exactly one holds it. Every problem is reported
    with its line number, and nothing is returned unless all lines pass.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ImportRowError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ImportRowError(f"{path}: not UTF-8 text; save the CSV as UTF-8") from None
    return parse_cases_csv(text, name=str(path), libraries_root=libraries_root)


def parse_cases_csv(
    text: str, name: str = "cases.csv", libraries_root: Path | None = None
) -> list[DecompositionTestCase]:
    """:func:`load_cases_csv` on text already read (the dashboard upload)."""
    try:
        rows = list(case_rows(text, name))
    except CaseFileError as error:
        raise ImportRowError(str(error)) from None
    by_name, single = _libraries_for(Path(libraries_root) if libraries_root is not None else libraries_dir())
    problems: list[str] = []
    cases: list[DecompositionTestCase] = []
    for line, row in rows:
        description = row.get("population_description", "")
        cohort_id = row.get("cohort_id", "")
        library_name = row.get("library", "")
        if not description and not cohort_id:
            continue  # a row of other columns only
        if not description:
            problems.append(f"line {line}: population_description is empty")
            continue
        if not cohort_id:
            problems.append(f"line {line}: cohort_id is empty")
            continue
        case = DecompositionTestCase(
            population_description=description,
            cohort_id=cohort_id,
            source=row.get("source") or f"{name} line {line}",
            library_id=library_name,
            pattern="user",
            split="test",
        )
        if _pick_library(case, by_name, single) is None:
            problems.append(f"line {line}: {_skip_reason(case, by_name, single).split(': ', 1)[1]}")
            continue
        cases.append(case)
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise ImportRowError(f"{name}: {len(problems)} bad line(s): {shown}")
    if not cases:
        raise ImportRowError(f"{name}: no cases (the file has a header but no rows)")
    return cases
