"""``run export`` attacked: a saved run's codes must leave with the reason each one is there."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.config import libraries_dir
from tests.test_cli import fixture_vocabulary, run, write_fixture_library  # noqa: F401  # the autouse fixture

pytestmark = pytest.mark.usefixtures("fixture_vocabulary")


def _saved_run_with_bm25(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    write_fixture_library(libraries_dir() / "cli-lib")
    file = tmp_path / "llm.csv"
    file.write_text("cohort_id,code,rank\ndm2,E11.9,1\nhf,I50.9,1\n", encoding="utf-8")
    code, _out, err = run(capsys, "run", "import", str(file), "--library", "cli-lib", "--compare", "bm25", "--quiet")
    assert code == 0, err
    (saved,) = app_state.list_benchmark_runs()
    report = app_state.load_benchmark_run(saved.run_id).report
    assert all(r.provenance for r in report.results if r.method == "bm25")  # the saved report has the reasons
    return saved.run_id


def test_an_exported_run_keeps_every_codes_provenance_in_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The export rebuilt entries from the codes alone: every 'bm25 rank 3' was dropped."""
    run_id = _saved_run_with_bm25(capsys, tmp_path)
    code, out, err = run(capsys, "run", "export", run_id, "--method", "bm25", "--format", "json")
    assert code == 0, err
    entries = [entry for cohort in json.loads(out)["cohorts"].values() for entry in cohort]
    assert entries and all(entry.get("provenance") for entry in entries), entries[:3]
    assert entries[0]["provenance"][0].startswith("bm25 rank")


def test_an_exported_run_keeps_every_codes_provenance_in_csv_and_still_imports(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run_id = _saved_run_with_bm25(capsys, tmp_path)
    code, out, err = run(capsys, "run", "export", run_id, "--method", "bm25")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(row["provenance"].startswith("bm25 rank") for row in rows), rows[:3]
    exported = tmp_path / "again.csv"
    exported.write_text(out, encoding="utf-8")
    code, _out, err = run(capsys, "run", "import", str(exported), "--library", "cli-lib", "--quiet")
    assert code == 0, err
