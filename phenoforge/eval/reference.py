"""A benchmark's figures in a few numbers per library and method, to tell whether two machines agree.

``scripts/ship_fits.py`` writes the bundled benchmark's figures beside the shipped fits
(``reference_benchmark.json``); a fresh build on another CPU that installs those fits must give the same
figures (``tests/setbuild/test_shipped_fits_other_cpu.py``), and ``python -m phenoforge benchmark --json``
output can be checked against them with :func:`differences`. Each method's figures carry a digest of every
list it answered, so "the same to three decimals" and "the very same lists" are both visible.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class MethodFigures(BaseModel):
    cohorts: int
    mean_hierarchical: float
    mean_exact_f1: float
    lists_sha256: str
    """SHA-256 of every cohort's predicted codes, by cohort id, in order"""
    fits: str = ""
    """which fit made them (``shipped fit <signature>``), for a method that is fitted"""


class ReferenceFigures(BaseModel):
    """Per library, per method: what a benchmark gave."""

    libraries: dict[str, dict[str, MethodFigures]] = Field(default_factory=dict)
    made_with: str = ""


def figures_of(document: Mapping[str, Any], made_with: str = "") -> ReferenceFigures:
    """The figures of a ``benchmark --json`` document (``{library_id: report}``, reports as dumped)."""
    out = ReferenceFigures(made_with=made_with)
    for library_id, report in document.items():
        by_method: dict[str, list[dict[str, Any]]] = {}
        for result in report.get("results", []):
            by_method.setdefault(result["method"], []).append(result)
        records = report.get("methods", {})
        figures: dict[str, MethodFigures] = {}
        for method, results in sorted(by_method.items()):
            results.sort(key=lambda result: result["cohort_id"])
            lists = json.dumps([[r["cohort_id"], r["predicted_codes"]] for r in results])
            figures[method] = MethodFigures(
                cohorts=len(results),
                mean_hierarchical=sum(r["hierarchical_score"] for r in results) / len(results),
                mean_exact_f1=sum(r.get("exact_f1", 0.0) for r in results) / len(results),
                lists_sha256=hashlib.sha256(lists.encode()).hexdigest(),
                fits=str(records.get(method, {}).get("fits", "")),
            )
        out.libraries[library_id] = figures
    return out


def differences(expected: ReferenceFigures, found: ReferenceFigures, decimals: int = 3) -> list[str]:
    """Every library and method whose rounded means (or cohort count) differ, or that one side lacks; [] when
    the two agree to ``decimals`` decimals."""
    problems: list[str] = []
    for library_id in sorted(set(expected.libraries) | set(found.libraries)):
        a, b = expected.libraries.get(library_id), found.libraries.get(library_id)
        if a is None or b is None:
            problems.append(f"{library_id}: only in {'the found' if a is None else 'the expected'} figures")
            continue
        for method in sorted(set(a) | set(b)):
            x, y = a.get(method), b.get(method)
            if x is None or y is None:
                problems.append(f"{library_id}/{method}: only in {'the found' if x is None else 'the expected'}")
                continue
            pairs = [("hierarchical", x.mean_hierarchical, y.mean_hierarchical)]
            pairs.append(("exact F1", x.mean_exact_f1, y.mean_exact_f1))
            for name, one, other in pairs:
                if round(one, decimals) != round(other, decimals):
                    problems.append(f"{library_id}/{method}: {name} {one:.{decimals}f} expected, {other:.{decimals}f}")
            if x.cohorts != y.cohorts:
                problems.append(f"{library_id}/{method}: {x.cohorts} cohorts expected, {y.cohorts}")
    return problems


def same_lists(expected: ReferenceFigures, found: ReferenceFigures) -> tuple[int, int]:
    """(library-method pairs whose lists are the very same, pairs compared)."""
    same = total = 0
    for library_id, methods in expected.libraries.items():
        for method, figures in methods.items():
            other = found.libraries.get(library_id, {}).get(method)
            if other is not None:
                total += 1
                same += other.lists_sha256 == figures.lists_sha256
    return same, total


def read_figures(path: Path) -> ReferenceFigures:
    return ReferenceFigures.model_validate_json(path.read_text(encoding="utf-8"))
