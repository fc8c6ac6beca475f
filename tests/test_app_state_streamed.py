"""Saved runs stored as rows while they are scored: both saved forms open, an unfinished run says so.

Runs saved before the rows form (one report document in ``benchmark_run.report``, in a database without
the newer columns) must still open and export; a writer killed halfway must leave a run that is listed
as unfinished and refused as a report, never one that reads as complete with results missing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.app_state import AppStateError, BenchmarkParameters, BenchmarkRunWriter, UnfinishedRunError
from phenoforge.config import app_state_db_path
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult

REPO = Path(__file__).resolve().parents[1]

OLD_SCHEMA = """
CREATE TABLE benchmark_run (
    run_id TEXT PRIMARY KEY, label TEXT NOT NULL DEFAULT '', started_at TEXT NOT NULL, finished_at TEXT NOT NULL,
    library_id TEXT NOT NULL, library_path TEXT NOT NULL, vocabulary_release TEXT NOT NULL,
    vocabulary_build_id TEXT NOT NULL, parameters TEXT NOT NULL, cohort_ids TEXT NOT NULL, methods TEXT NOT NULL,
    n_results INTEGER NOT NULL, means TEXT NOT NULL, report TEXT NOT NULL
);
CREATE INDEX idx_benchmark_run_finished ON benchmark_run (finished_at);
"""
"""The schema of phenoforge before runs were streamed (no status, no layout, no result rows)."""


def _result(cohort: str, method: str, score: float) -> CohortEvalResult:
    return CohortEvalResult(
        cohort_id=cohort,
        cohort_name=cohort.upper(),
        method=method,
        predicted_codes=["E11.9", "E11.21"],
        ground_truth_codes=["E11.9"],
        coverage=score,
        over_inclusion_penalty=1 - score,
        hierarchical_score=score,
        provenance={"E11.9": [f"{method} rank 1"], "E11.21": [f"{method} rank 2"]},
        ranks={"E11.9": 1, "E11.21": 2},
        code_scores={"E11.9": 0.9},
    )


def _report(n_cohorts: int = 5) -> BenchmarkReport:
    results = [_result(f"c{i}", m, 0.1 * (i % 10)) for i in range(n_cohorts) for m in ("bm25", "hybrid")]
    return BenchmarkReport(
        results=results,
        mean_coverage_by_method={"bm25": 0.2, "hybrid": 0.2},
        mean_over_inclusion_by_method={"bm25": 0.8, "hybrid": 0.8},
        mean_hierarchical_score_by_method={"bm25": 0.2, "hybrid": 0.2},
        skipped=["c9/*: no codes"],
    )


def _params(n_cohorts: int = 5) -> BenchmarkParameters:
    return BenchmarkParameters(
        methods=["bm25", "hybrid"], k=25, dense_weight=0.5, cohort_ids=[f"c{i}" for i in range(n_cohorts)]
    )


def _save_the_old_way(report: BenchmarkReport, run_id: str = "old0123456789") -> str:
    """A run as phenoforge saved it before: the whole report as one JSON document, in the old schema."""
    path = app_state_db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as con:
        con.executescript(OLD_SCHEMA)
        con.execute(
            "INSERT INTO benchmark_run VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                "from before",
                "2026-01-01T00:00:00+00:00",
                "2026-01-01T00:01:00+00:00",
                "lib",
                "/x/lib",
                "rel",
                "b1",
                _params().model_dump_json(),
                '["c0"]',
                '["bm25", "hybrid"]',
                len(report.results),
                '{"coverage": {}, "over_inclusion": {}, "hierarchical": {"bm25": 0.2, "hybrid": 0.2}}',
                report.model_dump_json(),
            ),
        )
    con.close()
    return run_id


def test_a_run_saved_before_the_rows_form_still_opens_lists_and_exports() -> None:
    report = _report()
    run_id = _save_the_old_way(report)
    (listed,) = app_state.list_benchmark_runs()
    assert listed.run_id == run_id and listed.complete and listed.n_results == len(report.results)
    assert app_state.load_benchmark_run(run_id).report == report
    assert app_state.saved_methods(run_id) == ["bm25", "hybrid"]
    assert list(app_state.iter_saved_results(run_id, "hybrid")) == [r for r in report.results if r.method == "hybrid"]


def test_a_new_run_in_an_old_database_is_stored_as_rows_beside_the_old_one() -> None:
    old_id = _save_the_old_way(_report(2))
    report = _report(7)
    new_id = app_state.save_benchmark_run(report, _params(7), "lib", "/x/lib", "rel", "b1", "2026-02-01T00:00:00+00:00")
    assert {run.run_id for run in app_state.list_benchmark_runs()} == {old_id, new_id}
    assert app_state.load_benchmark_run(new_id).report == report  # results in order, every field
    assert app_state.load_benchmark_run(old_id).report == _report(2)
    with sqlite3.connect(app_state_db_path()) as con:
        stored = con.execute("SELECT report FROM benchmark_run WHERE run_id = ?", [new_id]).fetchone()[0]
        rows = con.execute("SELECT COUNT(*) FROM benchmark_result WHERE run_id = ?", [new_id]).fetchone()[0]
    con.close()
    assert BenchmarkReport.model_validate_json(stored).results == [] and rows == len(report.results)
    app_state.delete_benchmark_run(new_id)
    with sqlite3.connect(app_state_db_path()) as con:
        assert con.execute("SELECT COUNT(*) FROM benchmark_result").fetchone()[0] == 0  # its rows went with it
    con.close()


def test_a_streamed_run_reads_back_as_the_report_and_exports_one_method_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_state, "RESULTS_PER_TRANSACTION", 3)
    report = _report(6)
    writer = BenchmarkRunWriter(_params(6), "lib", "/x/lib", "rel", "b1", label="streamed")
    sink = writer.sink()
    for start in range(0, len(report.results), 4):
        sink(report.results[start : start + 4])
    assert app_state.list_benchmark_runs()[0].status == "running"
    run_id = writer.finish(report.model_copy(update={"results": []}))
    saved = app_state.load_benchmark_run(run_id)
    assert saved.complete and saved.report == report and saved.n_results == len(report.results)
    assert saved.means["hierarchical"] == report.mean_hierarchical_score_by_method
    assert app_state.saved_methods(run_id) == ["bm25", "hybrid"]
    assert list(app_state.iter_saved_results(run_id, "bm25")) == [r for r in report.results if r.method == "bm25"]


def _kill_a_writer_halfway(chunks_before_kill: int) -> str:
    """A real process stores ``chunks_before_kill`` chunks of a run and is killed (SIGKILL: no clean-up)."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.test_app_state_streamed import _params, _report
        from phenoforge.app_state import BenchmarkRunWriter
        report = _report(6)
        writer = BenchmarkRunWriter(_params(6), "lib", "/x/lib", "rel", "b1", label="killed")
        print(writer.run_id, flush=True)
        for start in range(0, 2 * {chunks_before_kill}, 2):
            writer.add(report.results[start : start + 2])
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.strip()


def test_a_run_killed_halfway_is_listed_unfinished_and_never_opens_as_a_complete_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_id = _kill_a_writer_halfway(chunks_before_kill=2)
    (listed,) = app_state.list_benchmark_runs()
    assert listed.run_id == run_id and listed.status == "running" and not listed.complete and listed.n_results == 4
    with pytest.raises(UnfinishedRunError, match=r"did not finish: 4 result\(s\) were stored"):
        app_state.load_benchmark_run(run_id)
    partial = app_state.load_benchmark_run(run_id, partial=True)
    assert not partial.complete and partial.report.results == _report(6).results[:4]
    assert partial.report.mean_hierarchical_score_by_method == {}  # no means pretend to be the run's
    with pytest.raises(UnfinishedRunError):
        app_state.saved_methods(run_id)
    with pytest.raises(UnfinishedRunError):
        list(app_state.iter_saved_results(run_id))
    from phenoforge.cli import main

    assert main(["run", "export", run_id, "--method", "bm25"]) == 2
    err = capsys.readouterr().err
    assert "did not finish" in err and "Traceback" not in err


def test_an_unknown_run_is_still_a_clear_error() -> None:
    with pytest.raises(AppStateError, match="no saved benchmark run"):
        app_state.saved_methods("nope")
    with pytest.raises(AppStateError, match="no saved benchmark run"):
        list(app_state.iter_saved_results("nope"))
