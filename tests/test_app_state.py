"""Saved benchmark runs: round trip, ordering, comparison, concurrency, and errors."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.app_state import AppStateError, BenchmarkParameters
from phenoforge.config import app_state_db_path
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult


def _report(score: float) -> BenchmarkReport:
    results = [
        CohortEvalResult(
            cohort_id=c,
            cohort_name=c.upper(),
            method=m,
            predicted_codes=["E11.9"],
            ground_truth_codes=["E11.9", "E11.21"],
            coverage=score,
            over_inclusion_penalty=1 - score,
            hierarchical_score=score,
        )
        for c in ("c1", "c2")
        for m in ("bm25", "hybrid")
    ]
    means = {"bm25": score, "hybrid": score}
    return BenchmarkReport(
        results=results,
        mean_coverage_by_method=means,
        mean_over_inclusion_by_method={m: 1 - score for m in means},
        mean_hierarchical_score_by_method=means,
    )


def _params() -> BenchmarkParameters:
    return BenchmarkParameters(methods=["bm25", "hybrid"], k=25, dense_weight=0.5, cohort_ids=["c1", "c2"])


def _save(score: float, finished: str, label: str = "") -> str:
    return app_state.save_benchmark_run(
        _report(score),
        _params(),
        library_id="lib",
        library_path="/x/lib",
        vocabulary_release="rel",
        vocabulary_build_id="b1",
        started_at=finished,
        finished_at=finished,
        label=label,
    )


def test_round_trip_keeps_everything() -> None:
    run_id = _save(0.4, "2026-01-01T00:00:00+00:00", label="first")
    run = app_state.load_benchmark_run(run_id)
    assert run.report == _report(0.4)
    assert run.parameters == _params()
    assert run.label == "first" and run.library_path == "/x/lib"
    assert run.means["hierarchical"] == {"bm25": 0.4, "hybrid": 0.4}
    assert app_state_db_path().exists()


def test_list_is_newest_first_and_latest() -> None:
    old = _save(0.1, "2026-01-01T00:00:00+00:00")
    new = _save(0.2, "2026-02-01T00:00:00+00:00")
    assert [r.run_id for r in app_state.list_benchmark_runs()] == [new, old]
    latest = app_state.latest_benchmark_run()
    assert latest is not None and latest.run_id == new


def test_empty_database_has_no_latest() -> None:
    assert app_state.latest_benchmark_run() is None


def test_compare_runs_side_by_side() -> None:
    a = _save(0.1, "2026-01-01T00:00:00+00:00")
    b = _save(0.3, "2026-01-02T00:00:00+00:00")
    rows = app_state.compare_benchmark_runs([a, b])
    assert [(r.run_id, r.method, r.mean_hierarchical) for r in rows] == [
        (a, "bm25", 0.1),
        (a, "hybrid", 0.1),
        (b, "bm25", 0.3),
        (b, "hybrid", 0.3),
    ]
    assert all(r.n_cohorts == 2 for r in rows)


def test_rename_and_delete() -> None:
    run_id = _save(0.1, "2026-01-01T00:00:00+00:00")
    app_state.rename_benchmark_run(run_id, "renamed")
    assert app_state.load_benchmark_run(run_id).label == "renamed"
    app_state.delete_benchmark_run(run_id)
    with pytest.raises(AppStateError, match="no saved benchmark run"):
        app_state.load_benchmark_run(run_id)
    with pytest.raises(AppStateError):
        app_state.rename_benchmark_run(run_id, "x")


def test_wal_mode_and_foreign_tables_left_alone() -> None:
    _save(0.1, "2026-01-01T00:00:00+00:00")
    with app_state.connect_app_state() as con, con:
        con.execute("CREATE TABLE IF NOT EXISTS assembly_other (x INTEGER)")
        con.execute("INSERT INTO assembly_other VALUES (1)")
        assert con.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    _save(0.2, "2026-01-02T00:00:00+00:00")
    raw = sqlite3.connect(str(app_state_db_path()))
    assert raw.execute("SELECT x FROM assembly_other").fetchall() == [(1,)]
    raw.close()


def test_concurrent_writers_all_land() -> None:
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            _save(i / 10, f"2026-01-01T00:00:0{i}+00:00")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(app_state.list_benchmark_runs()) == 8


def test_unreadable_file_says_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(AppStateError, match="move it aside"):
        app_state.list_benchmark_runs(path=bad)


def _wal_switch_locked(monkeypatch: pytest.MonkeyPatch, times: float) -> list[int]:
    """Connections whose switch to WAL answers "database is locked" ``times`` times (SQLite does so at
    once, without its busy wait, when two new connections race for the switch)."""
    failures: list[int] = []
    real_connect = sqlite3.connect

    class Racing(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
            if sql.strip().upper() == "PRAGMA JOURNAL_MODE=WAL" and len(failures) < times:
                failures.append(1)
                raise sqlite3.OperationalError("database is locked")
            return super().execute(sql, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real_connect(*a, **k, factory=Racing))
    return failures


def test_a_save_that_races_another_for_the_wal_switch_waits_and_lands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight sessions saving into a new database lost one save in about twenty tries ("unreadable")."""
    failures = _wal_switch_locked(monkeypatch, times=3)
    run_id = _save(0.5, "2026-01-01T00:00:01+00:00")
    assert len(failures) == 3
    assert [run.run_id for run in app_state.list_benchmark_runs()] == [run_id]
    with app_state.connect_app_state() as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_database_busy_for_too_long_is_called_busy_not_unreadable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moving a busy database aside, as the unreadable-database message says, would lose every saved run."""
    monkeypatch.setattr(app_state, "BUSY_SECONDS", 0.3)
    _wal_switch_locked(monkeypatch, times=float("inf"))
    with pytest.raises(AppStateError, match="stayed busy") as caught:
        _save(0.5, "2026-01-01T00:00:01+00:00")
    assert "move it aside" not in str(caught.value) and "intact" in str(caught.value)
