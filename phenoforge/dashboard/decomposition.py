"""The Decomposition page's logic: which cases, which decomposer, one run or repeats, and how it went.

The page only lays these out. A run where every case failed is reported as a failure with its
typed error, a partial run says how many cases ran and that the means are over those only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb
from pydantic import BaseModel

from phenoforge.agent.claude import default_decomposer
from phenoforge.agent.offline import offline_decomposer
from phenoforge.config import libraries_dir
from phenoforge.dashboard.wording import direction_text
from phenoforge.engine.curated import list_libraries
from phenoforge.errors import PhenoforgeError
from phenoforge.eval import decomposition
from phenoforge.eval.decomposition import DecompositionTestCase, RepeatReport
from phenoforge.eval.models import DecompositionReport

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

DECOMPOSERS = ("offline", "claude")
UPLOADED = "uploaded file"
SPLITS = {"all": "all cases", "dev": "development half", "test": "test half"}


def case_sets() -> dict[str, list[DecompositionTestCase]]:
    """The built-in case sets: ``default`` (with its dev/test split), ``new`` (held out), ``ohdsi``."""
    return dict(decomposition.CASE_SETS)


def cases_of(cases: list[DecompositionTestCase], split: str) -> list[DecompositionTestCase]:
    """One half of a set (``dev``/``test``), or all of it."""
    return list(cases) if split == "all" else [case for case in cases if case.split == split]


def split_options(cases: list[DecompositionTestCase]) -> list[str]:
    """``all``, plus ``dev``/``test`` when the set declares a split."""
    return list(SPLITS) if any(case.split == "dev" for case in cases) else ["all"]


def runnable_cases(cases: list[DecompositionTestCase], root: Path | None = None) -> list[DecompositionTestCase]:
    """The cases whose library (by folder name or id prefix; none named: the one holding the cohort) is installed."""
    libraries = list_libraries(root, errors=[])  # a broken library's cases are simply not runnable
    by_name = {lib.path.name: lib for lib in libraries}
    out = []
    for case in cases:
        if not case.library_id:
            holding = [lib for lib in libraries if case.cohort_id in lib.cohort_ids]
            if len(holding) == 1:
                out.append(case)
            continue
        library = by_name.get(case.library_id) or next(
            (lib for lib in libraries if lib.library_id.startswith(case.library_id)), None
        )
        if library is not None and case.cohort_id in library.cohort_ids:
            out.append(case)
    return out


def uploaded_cases(data: bytes, name: str, root: Path | None = None) -> list[DecompositionTestCase]:
    """A user's case CSV, checked against the installed libraries; errors name the line."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise PhenoforgeError(f"{name}: not UTF-8 text; save the CSV as UTF-8") from None
    return decomposition.parse_cases_csv(text, name=name, libraries_root=root)


def make_decomposer(
    name: str,
    con: duckdb.DuckDBPyConnection,
    repeat: int = 1,
    budget: float | None = 600.0,
    dense: DenseRetriever | None = None,
) -> Callable[[str], list[str]]:
    """The offline decomposer (its spans graded by ``dense`` when ready, as on the CLI), or Claude
    (uncached when repeating; raises a PhenoforgeError saying what to set)."""
    if name == "offline":
        return offline_decomposer(con, dense=dense)
    if name == "claude":
        return default_decomposer(use_cache=repeat <= 1, budget=budget)
    raise PhenoforgeError(f"unknown decomposer {name!r}; choose one of {', '.join(DECOMPOSERS)}")


def run_decomposition(
    con: duckdb.DuckDBPyConnection,
    cases: list[DecompositionTestCase],
    decomposer: str,
    dense: DenseRetriever | None = None,
    k: int = 10,
    progress: Callable[[int, int, str], None] | None = None,
    root: Path | None = None,
    repeat: int = 1,
) -> DecompositionReport | RepeatReport:
    """Every case against the library its ``library_id`` names under the libraries folder."""
    if not cases:
        raise PhenoforgeError(
            "none of these test cases' libraries and cohorts is installed: build the bundled "
            "libraries on the Home page, or fetch the OHDSI library for the 'ohdsi' set"
        )
    library_dir = Path(root) if root is not None else libraries_dir()
    decompose_fn = make_decomposer(decomposer, con, repeat=repeat, dense=dense)
    if repeat > 1:
        return decomposition.repeat_decomposition(
            con, library_dir, decompose_fn, repeat, dense=dense, k=k, test_cases=cases, progress=progress
        )
    return decomposition.score_decomposition(
        con, library_dir, decompose_fn, dense=dense, k=k, test_cases=cases, progress=progress
    )


class RunStatus(BaseModel):
    """How a run went, for the page's banner: ``error`` when nothing ran, ``warning`` when some failed."""

    level: Literal["ok", "warning", "error"]
    message: str


def run_status(report: DecompositionReport) -> RunStatus:
    failed = sum(1 for result in report.results if result.error is not None)
    level: Literal["ok", "warning", "error"] = "error" if report.n_scored == 0 else "warning" if failed else "ok"
    return RunStatus(level=level, message=decomposition.ran_summary(report))


def landing_share(report: DecompositionReport) -> float:
    return decomposition.landing_rate(report)


def case_rows(report: DecompositionReport) -> list[dict[str, Any]]:
    """One row per case; the difference signed so that above zero means decomposition scored higher."""
    return [
        {
            "cohort": r.cohort_id,
            "description": r.population_description,
            "seed terms": "; ".join(r.seed_terms),
            "baseline": r.baseline_hierarchical_score,
            "decomposed": None if r.error else r.decomposed_hierarchical_score,
            "difference": None if r.error else -r.gap,  # decomposed − baseline: above zero, decomposition helped
            "error": f"{r.error_type}: {r.error}" if r.error else "",
        }
        for r in report.results
    ]


def spread_rows(report: RepeatReport) -> list[dict[str, Any]]:
    """Per case over the repeats: the mean difference (decomposed − baseline, above zero is better), its
    range, standard deviation, how many distinct answers."""
    return [
        {
            "cohort": case.cohort_id,
            "description": case.population_description,
            "runs scored": len(case.gaps),
            "mean difference": -case.mean_gap if case.gaps else None,  # decomposed − baseline: above zero helped
            "lowest": -case.max_gap if case.gaps else None,
            "highest": -case.min_gap if case.gaps else None,
            "sd": case.stdev_gap if case.gaps else None,
            "distinct term sets": len(case.distinct_term_sets),
            "errors": case.n_errors,
        }
        for case in report.cases
    ]


def gap_sentence(gap: float) -> str:
    """A gap (baseline − decomposed, so negative is good) in words with its direction spelled out."""
    if round(gap, 3) == 0:
        return "Decomposition scores the same as searching the cohort name (to 3 decimals)"
    return f"Decomposition scores {abs(gap):.3f} {'higher' if gap < 0 else 'lower'} than searching the cohort name"


def missing_cases_hint(set_name: str, cases: list[DecompositionTestCase]) -> str:
    """What to load so a case set runs here: the libraries its cases name, and how to get them."""
    needed = sorted({case.library_id for case in cases if case.library_id})
    how = (
        "fetch it with `python -m phenoforge library fetch-ohdsi`"
        if any(name.startswith("ohdsi") for name in needed) or set_name == "ohdsi"
        else "build the bundled libraries on the Home page"
    )
    names = f"the {', '.join(needed)} librar{'y' if len(needed) == 1 else 'ies'}" if needed else "their libraries"
    return f"The '{set_name}' cases need {names}, not installed here: {how}, then reload this page."


def case_label(cohort_id: str, description: str, gap: float) -> str:
    """A case's expander title: the difference in words, not a gap whose minus sign is the good news."""
    return f"{cohort_id} · {description} · decomposition {direction_text(-gap)}"
