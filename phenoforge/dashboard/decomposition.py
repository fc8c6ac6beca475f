"""The Decomposition page: score a decomposer on a set of test cases, against curated cohorts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from phenoforge.config import libraries_dir
from phenoforge.engine.curated import list_libraries
from phenoforge.errors import PhenoforgeError
from phenoforge.eval import decomposition
from phenoforge.eval.models import DecompositionReport

if TYPE_CHECKING:
    from phenoforge.engine.dense import DenseRetriever

DECOMPOSERS = ("offline", "claude")


def case_sets() -> dict[str, list[Any]]:
    return dict(decomposition.CASE_SETS)


def runnable_cases(cases: list[Any], root: Path | None = None) -> list[Any]:
    """The cases whose library (by folder name or id prefix) and cohort are installed."""
    libraries = list_libraries(root)
    by_name = {lib.path.name: lib for lib in libraries}
    out = []
    for case in cases:
        library = by_name.get(case.library_id) or next(
            (lib for lib in libraries if lib.library_id.startswith(case.library_id)), None)
        if library is not None and case.cohort_id in library.cohort_ids:
            out.append(case)
    return out


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
    con: duckdb.DuckDBPyConnection, cases: list[Any], decomposer: str,
    dense: DenseRetriever | None = None, k: int = 10,
    progress: Callable[[int, int, str], None] | None = None, root: Path | None = None,
) -> DecompositionReport:
    """Every case against the library its ``library_id`` names under the libraries folder."""
    if not cases:
        raise PhenoforgeError(
            "none of these test cases' libraries and cohorts is installed: build the bundled "
            "libraries on the Home page, or fetch the OHDSI library for the 'ohdsi' set"
        )
    return decomposition.score_decomposition(
        con, Path(root) if root is not None else libraries_dir(), make_decomposer(decomposer),
        dense=dense, k=k, test_cases=cases, progress=progress,
    )
