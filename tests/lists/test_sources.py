"""List references: files and uploads, versions, saved runs; unknown and non-billable codes named."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from phenoforge import app_state
from phenoforge.errors import PhenoforgeError
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult
from phenoforge.lists import sources, store
from tests.lists.conftest import draft


def _saved_run() -> str:
    result = CohortEvalResult(
        cohort_id="519",
        cohort_name="Heart failure",
        method="hybrid",
        predicted_codes=["I50.9", "I50.21", "I11.0"],
        ground_truth_codes=["I50.9"],
        coverage=1.0,
        over_inclusion_penalty=0.5,
        hierarchical_score=0.6,
    )
    report = BenchmarkReport(
        results=[result],
        mean_coverage_by_method={"hybrid": 1.0},
        mean_over_inclusion_by_method={"hybrid": 0.5},
        mean_hierarchical_score_by_method={"hybrid": 0.6},
    )
    parameters = app_state.BenchmarkParameters(methods=["hybrid"], k=25, dense_weight=0.5, cohort_ids=["519"])
    return app_state.save_benchmark_run(report, parameters, "ohdsi-fixture", "/x", "r", "b", "2026-01-01T00:00:00")


def test_a_saved_runs_method_output_for_one_cohort() -> None:
    run_id = _saved_run()
    found = sources.read_reference(None, f"run:{run_id}/hybrid/519")  # type: ignore[arg-type]
    assert found.codes == ["I50.9", "I50.21", "I11.0"] and found.kind == "run"
    assert found.name == f"run:{run_id}/hybrid/519"
    with pytest.raises(PhenoforgeError, match="has no method 'bm25'; it has hybrid"):
        sources.run_list(f"{run_id}/bm25/519")
    with pytest.raises(PhenoforgeError, match="has no cohort '1' for hybrid; it has 519"):
        sources.run_list(f"{run_id}/hybrid/1")
    with pytest.raises(PhenoforgeError, match="write run:RUN_ID/METHOD/COHORT"):
        sources.run_list(run_id)
    with pytest.raises(PhenoforgeError, match="no saved benchmark run"):
        sources.run_list("nope/hybrid/519")
    (choice,) = sources.saved_run_choices()
    assert choice.run_id == run_id and choice.methods == ["hybrid"] and choice.cohorts == ["519"]


def test_a_version_reference(fixture_con: duckdb.DuckDBPyConnection) -> None:
    store.save_version(draft(fixture_con, ["I50.9"]))
    store.save_version(draft(fixture_con, ["I50.9", "I50.21"], based_on=1))
    assert sources.read_reference(fixture_con, "version:hf-adults@1").codes == ["I50.9"]
    latest = sources.read_reference(fixture_con, "version:hf-adults")
    assert latest.codes == ["I50.9", "I50.21"] and latest.name == "version:hf-adults@2"
    with pytest.raises(PhenoforgeError, match="has no version 3"):
        sources.read_reference(fixture_con, "version:hf-adults@3")


def test_an_upload_keeps_unknown_and_non_billable_codes_and_names_them(fixture_con: duckdb.DuckDBPyConnection) -> None:
    upload = sources.read_upload("mine.csv", "\ufeffcode,name\nI50.9,a\nI50,b\nZZ9.99,c\n".encode())
    assert upload.codes == ["I50.9", "I50", "ZZ9.99"]  # nothing dropped
    check = sources.check_codes(fixture_con, upload.codes)
    assert check.unknown == ["ZZ9.99"] and check.not_billable == ["I50"]
    text = "\n".join(check.messages("mine.csv"))
    assert "not in this vocabulary (1): ZZ9.99" in text and "not billable (1; a category" in text
    with pytest.raises(PhenoforgeError, match="not UTF-8"):
        sources.read_upload("bad.csv", b"\xff\xfe\x00code")
    with pytest.raises(PhenoforgeError, match="named 'code'"):
        sources.read_upload("wide.csv", b"a,b\nI50.9,x\n")
    assert sources.read_upload("empty.csv", b"").codes == []


def test_a_reference_that_names_nothing_says_what_to_write(tmp_path: Path) -> None:
    with pytest.raises(PhenoforgeError, match="version:LIST@N or run:RUN_ID/METHOD/COHORT"):
        sources.read_reference(None, "no-such-thing")  # type: ignore[arg-type]
