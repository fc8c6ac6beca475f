"""Which fit made a set builder's figures: named in the report, the CLI's table and the Benchmark page."""

from __future__ import annotations

import functools

import duckdb
import pytest

import phenoforge.setbuild.builders.learned as learned_builder
from phenoforge.cli.benchmark import _benchmark_table
from phenoforge.config import libraries_dir
from phenoforge.dashboard.benchmark import method_flags
from phenoforge.engine.curated import load_library
from phenoforge.eval.harness import run_benchmark
from phenoforge.methods import set_building
from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS


@pytest.fixture(autouse=True)
def _fresh_process_cache() -> None:
    set_building.clear_fitted()


def test_the_report_names_the_fit_its_set_builders_came_from(
    fixture_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = {"min_cohorts": 3, "min_positives": 5}
    monkeypatch.setattr(learned_builder, "ensure_model", functools.partial(learned_builder.ensure_model, **small))
    root = libraries_dir()
    write_icd_library(root / "hcc", TRAIN_COHORTS, library_id="cms-hcc-v28-fixture", group="cms-hcc")
    scored = write_icd_library(root / "elix", OTHER_COHORTS, library_id="elixhauser-2026-fixture", group="elixhauser")
    report = run_benchmark(
        fixture_con, scored, load_library(scored).cohort_ids, methods=["bm25", "learned", "adaptive_cutoff"]
    )
    fits = report.methods["learned"].fits
    assert fits.startswith("local fit ") and len(fits) > len("local fit ")
    assert report.methods["adaptive_cutoff"].fits == fits  # one fit made every builder
    assert report.methods["bm25"].fits == ""  # fits nothing
    assert f"learned fits: {fits}" in _benchmark_table(report)
    assert fits in method_flags(report)["learned"]
    # read back from data/models by another run, it is still named
    set_building.clear_fitted()
    again = run_benchmark(fixture_con, scored, load_library(scored).cohort_ids, methods=["learned"])
    assert again.methods["learned"].fits == fits
