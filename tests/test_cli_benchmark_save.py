"""``benchmark --save``: each library's run stored while it is scored, then opened and exported like any
saved run; ``benchmark --json`` is still one JSON document over several libraries."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.config import libraries_dir
from phenoforge.eval import harness
from tests.test_cli import fixture_vocabulary, run, write_fixture_library  # noqa: F401  # the autouse fixture

pytestmark = pytest.mark.usefixtures("fixture_vocabulary")


def test_a_saved_benchmark_opens_as_the_report_printed_and_exports(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    write_fixture_library(libraries_dir() / "cli-two", "cli-two")
    monkeypatch.setattr(harness, "RESULT_CHUNK", 1)  # several chunks, several transactions
    argv = ["benchmark", "--library", "cli-lib", "--library", "cli-two", "--methods", "bm25", "expand_descendants"]
    code, out, err = run(capsys, *argv, "--no-dense", "--json", "--save", "--label", "mine")
    assert code == 0, err
    printed = json.loads(out)  # the saved runs are named on standard error: standard output is only the JSON
    assert list(printed) == ["cli-lib", "cli-two"] and err.count("saved as run ") == 2
    runs = {saved.library_id: saved for saved in app_state.list_benchmark_runs()}
    assert set(runs) == {"cli-lib", "cli-two"} and all(r.complete and r.label == "mine" for r in runs.values())
    saved = app_state.load_benchmark_run(runs["cli-lib"].run_id)
    assert saved.report.model_dump() == printed["cli-lib"]  # the saved run is the report printed
    assert saved.n_results == len(printed["cli-lib"]["results"]) > 2
    code, out, err = run(capsys, "run", "export", saved.run_id, "--method", "bm25")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    bm25 = [r for r in printed["cli-lib"]["results"] if r["method"] == "bm25"]
    assert len(rows) == sum(len(r["predicted_codes"]) for r in bm25) > 0
    assert all(row["provenance"].startswith("bm25 rank") for row in rows)


def test_the_text_table_from_streamed_results_matches_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, out, err = run(capsys, "benchmark", "--library", "cli-lib", "--methods", "bm25", "--no-dense", "--save")
    assert code == 0, err
    (saved,) = app_state.list_benchmark_runs()
    report = app_state.load_benchmark_run(saved.run_id).report
    line = next(line for line in out.splitlines() if line.startswith("bm25"))
    n = sum(1 for r in report.results if r.method == "bm25")
    assert line.split()[1] == str(n)
    assert line.split()[4] == f"{report.mean_hierarchical_score_by_method['bm25']:.3f}"  # the hierarchical column
    assert f"saved as run {saved.run_id}" in out


def test_json_without_libraries_results_is_still_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    code, out, err = run(capsys, "benchmark", "--library", "cli-lib", "--methods", "dense", "--no-dense", "--json")
    assert code == 0, err
    report = json.loads(out)["cli-lib"]
    assert report["results"] == [] and report["skipped"]
