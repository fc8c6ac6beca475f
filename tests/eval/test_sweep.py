"""Sweeping a set builder's fusion weight on the fixture vocabulary (a deterministic fake dense retriever)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge.eval.harness import run_benchmark
from phenoforge.eval.qrels import load_qrels
from phenoforge.eval.sweep import SweepError, check_sweepable, sweep_label, sweep_set_builder, sweepable
from phenoforge.setbuild.builders import builder_names
from tests.eval.test_harness import COHORTS, SCORED, FakeDense
from tests.fixture_library import write_icd_library


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return write_icd_library(tmp_path / "sweep-lib", COHORTS, "sweep-lib")


@pytest.mark.parametrize("builder", builder_names())
def test_at_the_fitted_weight_the_sweep_builds_the_benchmarks_sets(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, builder: str
) -> None:
    dense = FakeDense()
    qrels = load_qrels(fixture_con, library, SCORED)
    swept = sweep_set_builder(fixture_con, qrels, builder, [0.0, 0.5, 1.0], dense)
    benchmark = run_benchmark(fixture_con, library, SCORED, methods=[builder], dense=dense)
    at_fitted = {r.cohort_id: r.predicted_codes for r in swept.report.results if r.method == sweep_label(builder, 0.5)}
    assert at_fitted == {r.cohort_id: r.predicted_codes for r in benchmark.results}
    assert swept.per_cohort(0.5) == {r.cohort_id: r.hierarchical_score for r in benchmark.results}
    assert sorted(swept.per_cohort(0.0)) == sorted(SCORED)


def test_the_swept_weight_reaches_the_builder(fixture_con: duckdb.DuckDBPyConnection, library: Path) -> None:
    """BM25 alone (0.0) and dense alone (1.0) rank differently, so some cohort's set must change."""
    qrels = load_qrels(fixture_con, library, SCORED)
    swept = sweep_set_builder(fixture_con, qrels, "adaptive_cutoff", [0.0, 1.0], FakeDense())
    by_weight = {
        weight: {
            r.cohort_id: r.predicted_codes
            for r in swept.report.results
            if r.method == sweep_label("adaptive_cutoff", weight)
        }
        for weight in (0.0, 1.0)
    }
    assert by_weight[0.0] != by_weight[1.0]


def test_only_sweepable_methods_pass_the_check() -> None:
    for method in ["hybrid", *builder_names()]:
        check_sweepable(method)
    for method in ["bm25", "dense", "expand_descendants", "nope"]:
        with pytest.raises(SweepError, match=f"cannot sweep '{method}'") as raised:
            check_sweepable(method)
        assert all(name in str(raised.value) for name in sweepable())
        assert "\n" not in str(raised.value)


def test_a_library_the_builders_were_fitted_on_is_refused(
    fixture_con: duckdb.DuckDBPyConnection, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep goes through the builders' own leakage check, not around it."""
    from phenoforge.methods import SkipMethod

    def refuse(builder: str):  # noqa: ANN202
        def setup(context):  # noqa: ANN001, ANN202
            raise SkipMethod(f"builders fitted on {context.library_id} may not score it")

        return setup

    monkeypatch.setattr("phenoforge.eval.sweep.make_setup", refuse)
    qrels = load_qrels(fixture_con, library, SCORED)
    with pytest.raises(SweepError, match="may not score"):
        sweep_set_builder(fixture_con, qrels, "learned", [0.5], FakeDense())
