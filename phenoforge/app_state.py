"""The app-state database: saved benchmark runs that survive restarts.

Kept in SQLite beside (never inside) the read-only vocabulary, so a vocabulary rebuild never
loses a user's runs and the vocabulary never needs a writer. WAL mode lets several dashboard
sessions read while one writes; each write is one transaction, so a crash leaves either the
whole run or nothing. Other modules (the assembly audit) add their own tables to the same file
through ``connect_app_state``; this module only creates and touches ``benchmark_run``.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from phenoforge.config import app_state_db_path
from phenoforge.errors import DiskFullError, PhenoforgeError
from phenoforge.eval.models import BenchmarkReport
from phenoforge.storage import is_disk_full, is_io_error, no_space_left

APP_STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS benchmark_run (
    run_id TEXT PRIMARY KEY,
    label TEXT NOT NULL DEFAULT '',
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    library_id TEXT NOT NULL,
    library_path TEXT NOT NULL,
    vocabulary_release TEXT NOT NULL,
    vocabulary_build_id TEXT NOT NULL,
    parameters TEXT NOT NULL,
    cohort_ids TEXT NOT NULL,
    methods TEXT NOT NULL,
    n_results INTEGER NOT NULL,
    means TEXT NOT NULL,
    report TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_benchmark_run_finished ON benchmark_run (finished_at);
"""


class AppStateError(PhenoforgeError):
    """The app-state database cannot be opened or a saved run is missing."""


class BenchmarkParameters(BaseModel):
    """What a run was asked to do: enough to run it again."""

    methods: list[str]
    k: int
    dense_weight: float
    fanout_threshold: int = 100
    cohort_ids: list[str]


class BenchmarkRunSummary(BaseModel):
    """One saved run as a list shows it (no per-cohort results)."""

    run_id: str
    label: str
    started_at: str
    finished_at: str
    library_id: str
    vocabulary_release: str
    vocabulary_build_id: str
    parameters: BenchmarkParameters
    n_results: int
    means: dict[str, dict[str, float]] = Field(
        description="metric -> method -> mean: 'coverage', 'over_inclusion', 'hierarchical'"
    )


class SavedBenchmarkRun(BenchmarkRunSummary):
    library_path: str
    report: BenchmarkReport


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextmanager
def connect_app_state(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    """A short-lived connection in WAL mode with the benchmark schema present.

    One connection per operation keeps it safe across threads and sessions; ``with con:``
    inside makes each write atomic.
    """
    path = Path(path) if path is not None else app_state_db_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(str(path), timeout=BUSY_SECONDS)
    except (OSError, sqlite3.Error) as error:
        if _out_of_space(error, path):
            raise _disk_full(path) from None
        raise AppStateError(
            f"cannot open the app-state database at {path} ({error}); check that the data "
            "directory (PHENOFORGE_DATA_DIR) is writable"
        ) from error
    try:
        con.row_factory = sqlite3.Row
        con.execute(f"PRAGMA busy_timeout={int(BUSY_SECONDS * 1000)}")
        _use_wal(con)
        con.executescript(APP_STATE_SCHEMA)
        yield con
    except (sqlite3.DatabaseError, OSError) as error:
        if _out_of_space(error, path):  # the database is intact: blaming it would send users to delete it
            raise _disk_full(path) from None
        if isinstance(error, OSError):
            raise
        if is_io_error(error):  # the disk failed a read or write: the file itself may well be intact
            raise AppStateError(
                f"I/O error on the app-state database at {path} ({error}): the disk or mount failed a read or "
                "write (full, over quota, read-only or gone); your saved runs are most likely intact, so do not "
                "move the database aside: check the disk and try again"
            ) from error
        if _is_locked(error):  # intact, only busy: moving it aside would lose every saved run
            raise AppStateError(
                f"the app-state database at {path} stayed busy for {BUSY_SECONDS:.0f} s ({error}): another "
                "dashboard session or command is writing it; try again (your runs are intact)"
            ) from error
        raise AppStateError(
            f"the app-state database at {path} is unreadable ({error}); move it aside and the "
            "dashboard starts a fresh one"
        ) from error
    finally:
        con.close()


BUSY_SECONDS = 30.0
"""How long an operation waits for another writer before it gives up with an error saying so."""


def _out_of_space(error: BaseException, path: Path) -> bool:
    """ENOSPC/EDQUOT or SQLite's "disk is full", or its bare "disk I/O error" on a file system with no space
    left (what SQLite says when it cannot grow the WAL index of a database it only reads)."""
    return is_disk_full(error) or (is_io_error(error) and no_space_left(path.parent))


def _is_locked(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "locked" in str(error).lower()


def _use_wal(con: sqlite3.Connection) -> None:
    """Switch the database to WAL (persistent in the file, so once per database), retrying while locked.

    The switch needs the database to itself, and SQLite answers "database is locked" at once, without
    waiting, when another connection holds it: eight sessions opening a new database together lost a
    save about once in twenty tries.
    """
    deadline = time.monotonic() + BUSY_SECONDS
    pause = 0.01
    while True:
        try:
            if str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if not _is_locked(error) or time.monotonic() + pause > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


class AppStateDiskFullError(AppStateError, DiskFullError):
    """The app-state database could not be written for lack of space; it is intact."""


def _disk_full(path: Path) -> AppStateDiskFullError:
    return AppStateDiskFullError(
        f"disk full while writing the app-state database ({path}): the last change was not saved and "
        "everything saved before is intact (do not move the database aside); free some space and try again"
    )


def report_means(report: BenchmarkReport) -> dict[str, dict[str, float]]:
    """Means per measure key and method (every measure the report carries, plus the legacy three)."""
    return {
        **report.means,
        "coverage": dict(report.mean_coverage_by_method),
        "over_inclusion": dict(report.mean_over_inclusion_by_method),
        "hierarchical": dict(report.mean_hierarchical_score_by_method),
    }


def save_benchmark_run(
    report: BenchmarkReport,
    parameters: BenchmarkParameters,
    library_id: str,
    library_path: str | Path,
    vocabulary_release: str,
    vocabulary_build_id: str,
    started_at: str,
    finished_at: str | None = None,
    label: str = "",
    path: Path | None = None,
) -> str:
    """Store one finished run, whole, and return its id."""
    run_id = uuid.uuid4().hex[:12]
    row = (
        run_id,
        label,
        started_at,
        finished_at or now_iso(),
        library_id,
        str(library_path),
        vocabulary_release,
        vocabulary_build_id,
        parameters.model_dump_json(),
        json.dumps(parameters.cohort_ids),
        json.dumps(parameters.methods),
        len(report.results),
        json.dumps(report_means(report)),
        report.model_dump_json(),
    )
    with connect_app_state(path) as con, con:
        con.execute(
            "INSERT INTO benchmark_run (run_id, label, started_at, finished_at, library_id, "
            "library_path, vocabulary_release, vocabulary_build_id, parameters, cohort_ids, "
            "methods, n_results, means, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )
    return run_id


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "run_id": row["run_id"],
        "label": row["label"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "library_id": row["library_id"],
        "vocabulary_release": row["vocabulary_release"],
        "vocabulary_build_id": row["vocabulary_build_id"],
        "parameters": BenchmarkParameters.model_validate_json(row["parameters"]),
        "n_results": row["n_results"],
        "means": json.loads(row["means"]),
    }


_SUMMARY_COLUMNS = (
    "run_id, label, started_at, finished_at, library_id, vocabulary_release, "
    "vocabulary_build_id, parameters, n_results, means"
)


def list_benchmark_runs(limit: int = 100, path: Path | None = None) -> list[BenchmarkRunSummary]:
    """Saved runs, newest first."""
    with connect_app_state(path) as con:
        rows = con.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM benchmark_run ORDER BY finished_at DESC, rowid DESC LIMIT ?",
            [limit],
        ).fetchall()
    return [BenchmarkRunSummary(**_summary(row)) for row in rows]


def latest_benchmark_run(path: Path | None = None) -> BenchmarkRunSummary | None:
    runs = list_benchmark_runs(limit=1, path=path)
    return runs[0] if runs else None


def load_benchmark_run(run_id: str, path: Path | None = None) -> SavedBenchmarkRun:
    """One saved run with its full report; ``AppStateError`` if there is none by that id."""
    with connect_app_state(path) as con:
        rows = con.execute(
            f"SELECT {_SUMMARY_COLUMNS}, library_path, report FROM benchmark_run WHERE run_id = ?",
            [run_id],
        ).fetchall()
    if not rows:
        raise AppStateError(f"no saved benchmark run with id {run_id!r}: pick one from the list")
    row = rows[0]
    return SavedBenchmarkRun(
        **_summary(row),
        library_path=row["library_path"],
        report=BenchmarkReport.model_validate_json(row["report"]),
    )


def rename_benchmark_run(run_id: str, label: str, path: Path | None = None) -> None:
    with connect_app_state(path) as con, con:
        changed = con.execute("UPDATE benchmark_run SET label = ? WHERE run_id = ?", [label, run_id]).rowcount
    if not changed:
        raise AppStateError(f"no saved benchmark run with id {run_id!r}")


def delete_benchmark_run(run_id: str, path: Path | None = None) -> None:
    with connect_app_state(path) as con, con:
        con.execute("DELETE FROM benchmark_run WHERE run_id = ?", [run_id])


class RunComparisonRow(BaseModel):
    run_id: str
    label: str
    finished_at: str
    library_id: str
    vocabulary_release: str
    method: str
    k: int
    dense_weight: float
    n_cohorts: int
    mean_coverage: float | None
    mean_over_inclusion: float | None
    mean_hierarchical: float | None


def compare_benchmark_runs(run_ids: list[str], path: Path | None = None) -> list[RunComparisonRow]:
    """Per run and method, the means side by side: the long form a table or chart takes."""
    rows: list[RunComparisonRow] = []
    for run_id in run_ids:
        run = load_benchmark_run(run_id, path=path)
        for method in run.parameters.methods:
            n_cohorts = len({r.cohort_id for r in run.report.results if r.method == method})
            rows.append(
                RunComparisonRow(
                    run_id=run.run_id,
                    label=run.label,
                    finished_at=run.finished_at,
                    library_id=run.library_id,
                    vocabulary_release=run.vocabulary_release,
                    method=method,
                    k=run.parameters.k,
                    dense_weight=run.parameters.dense_weight,
                    n_cohorts=n_cohorts,
                    mean_coverage=run.means["coverage"].get(method),
                    mean_over_inclusion=run.means["over_inclusion"].get(method),
                    mean_hierarchical=run.means["hierarchical"].get(method),
                )
            )
    return rows
