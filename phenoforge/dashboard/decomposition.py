"""The Decomposition page: score a decomposer on the test cases whose cohorts a library holds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from phenoforge.engine.curated import Library
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.models import DecompositionReport

DECOMPOSERS = ("offline", "claude")


def test_cases_for(library: Library) -> list[Any]:
    """The default test cases whose ground-truth cohort is in ``library``."""
    try:
        from phenoforge.eval.decomposition import DEFAULT_TEST_CASES
    except ImportError as error:
        raise PhenoforgeError(
            f"the decomposition evaluation is not available in this install ({error}); "
            "update phenoforge"
        ) from error
    ids = set(library.cohort_ids)
    return [case for case in DEFAULT_TEST_CASES if case.cohort_id in ids]


def make_decomposer(name: str) -> Callable[[str], list[str]]:
    """The offline decomposer, or Claude (raises a PhenoforgeError saying what to set)."""
    if name == "offline":
        from phenoforge.agent.offline import offline_decomposer

        return offline_decomposer()
    if name == "claude":
        from phenoforge.agent.claude import default_decomposer

        return default_decomposer()
    raise PhenoforgeError(f"unknown decomposer {name!r}; choose one of {', '.join(DECOMPOSERS)}")


def run_decomposition(
    con: duckdb.DuckDBPyConnection, library: Library, decomposer: str,
    dense: object | None = None, k: int = 10, cases: list[Any] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> DecompositionReport:
    """Score the decomposer case by case (so the page can show progress) and aggregate."""
    from phenoforge.eval.decomposition import score_decomposition

    cases = cases if cases is not None else test_cases_for(library)
    if not cases:
        raise PhenoforgeError(
            f"library {library.library_id!r} holds none of the decomposition test cases' cohorts: "
            "choose the OHDSI library"
        )
    decompose = make_decomposer(decomposer)
    results = []
    for position, case in enumerate(cases):
        if progress is not None:
            progress(position, len(cases), case.population_description)
        one = score_decomposition(con, Path(library.path), decompose, dense=dense, k=k,
                                  test_cases=[case])
        results.extend(one.results)
    if progress is not None:
        progress(len(cases), len(cases), "done")
    gaps = [r.gap for r in results if r.error is None]
    return DecompositionReport(results=results, mean_gap=sum(gaps) / len(gaps) if gaps else 0.0)
