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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from phenoforge.config import app_state_db_path
from phenoforge.errors import DiskFullError, PhenoforgeError
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult
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
CREATE TABLE IF NOT EXISTS benchmark_result (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    method TEXT NOT NULL,
    cohort_id TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""
_ADDED_COLUMNS = {
    "status": "TEXT NOT NULL DEFAULT 'complete'",
    "layout": "TEXT NOT NULL DEFAULT 'document'",
}
"""Columns later than the first schema, added to an older database when it is opened (its runs keep the
defaults: complete, their report one JSON document)."""

LAYOUT_DOCUMENT = "document"
"""A run saved before reports were streamed: ``report`` is the whole report, results included."""
LAYOUT_ROWS = "rows"
"""``report`` holds everything but the results; each result is a row of ``benchmark_result``, in order."""
STATUS_COMPLETE = "complete"
STATUS_RUNNING = "running"
"""Being written, or its writer stopped before the end (killed, crashed): the rows are a partial run."""


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
    status: str = Field(
        default=STATUS_COMPLETE,
        description="'complete', or 'running': still being written, or stopped before it finished "
        "(``n_results`` results were stored by then)",
    )

    @property
    def complete(self) -> bool:
        return self.status == STATUS_COMPLETE


class SavedBenchmarkRun(BenchmarkRunSummary):
    library_path: str
    report: BenchmarkReport


class UnfinishedRunError(AppStateError):
    """The saved run never finished: its writer stopped partway (or is still writing)."""


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
        _add_columns(con)
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


def _add_columns(con: sqlite3.Connection) -> None:
    """Bring a database written by an older phenoforge up to the current columns (once per database)."""
    present = {row[1] for row in con.execute("PRAGMA table_info(benchmark_run)")}
    missing = [(name, kind) for name, kind in _ADDED_COLUMNS.items() if name not in present]
    if missing:
        with con:
            for name, kind in missing:
                try:
                    con.execute(f"ALTER TABLE benchmark_run ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as error:  # another session added it first
                    if "duplicate column" not in str(error).lower():
                        raise


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
    """Store one finished run, whole, and return its id (one transaction: all of it or nothing)."""
    writer = BenchmarkRunWriter(
        parameters,
        library_id,
        library_path,
        vocabulary_release,
        vocabulary_build_id,
        label=label,
        started_at=started_at,
        path=path,
        begin=False,
    )
    return writer.finish(report, finished_at=finished_at, results=report.results)


_EMPTY_REPORT = BenchmarkReport(
    results=[], mean_coverage_by_method={}, mean_over_inclusion_by_method={}, mean_hierarchical_score_by_method={}
).model_dump_json()
"""What an unfinished run's ``report`` holds until ``finish`` writes the real one."""

RESULTS_PER_TRANSACTION = 512
"""Results a run writer stores per transaction when handed more at once."""


class BenchmarkRunWriter:
    """A run saved while it is scored: the run's row first (``status`` 'running'), then each chunk of
    results as rows of ``benchmark_result`` in their own transaction (``sink``), then the report's
    means, skipped lines and records with ``status`` 'complete' (``finish``). A writer stopped before
    ``finish`` leaves a run marked 'running' with the results stored so far: listed as unfinished, and
    opened only as a partial run (``load_benchmark_run(run_id, partial=True)``), never as a complete one.
    """

    def __init__(
        self,
        parameters: BenchmarkParameters,
        library_id: str,
        library_path: str | Path,
        vocabulary_release: str,
        vocabulary_build_id: str,
        label: str = "",
        started_at: str | None = None,
        path: Path | None = None,
        begin: bool = True,
    ) -> None:
        self.run_id = uuid.uuid4().hex[:12]
        self.path = path
        self.count = 0
        self._row = (
            self.run_id,
            label,
            started_at or now_iso(),
            library_id,
            str(library_path),
            vocabulary_release,
            vocabulary_build_id,
            parameters.model_dump_json(),
            json.dumps(parameters.cohort_ids),
            json.dumps(parameters.methods),
        )
        self._begun = False
        if begin:
            with connect_app_state(path) as con, con:
                self._insert(con, "", 0, "{}", _EMPTY_REPORT, STATUS_RUNNING)
            self._begun = True

    def _insert(
        self, con: sqlite3.Connection, finished_at: str, n_results: int, means: str, report: str, status: str
    ) -> None:
        con.execute(
            "INSERT INTO benchmark_run (run_id, label, started_at, library_id, library_path, vocabulary_release, "
            "vocabulary_build_id, parameters, cohort_ids, methods, finished_at, n_results, means, report, status, "
            "layout) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*self._row, finished_at, n_results, means, report, status, LAYOUT_ROWS),
        )

    def _store(self, con: sqlite3.Connection, results: list[CohortEvalResult]) -> None:
        con.executemany(
            "INSERT INTO benchmark_result (run_id, seq, method, cohort_id, result) VALUES (?, ?, ?, ?, ?)",
            [
                (self.run_id, self.count + position, r.method, r.cohort_id, r.model_dump_json())
                for position, r in enumerate(results)
            ],
        )
        self.count += len(results)

    def add(self, results: list[CohortEvalResult]) -> None:
        """Store ``results`` now (after those stored before), one transaction per ``RESULTS_PER_TRANSACTION``."""
        if not self._begun:
            raise AppStateError("results added to a run writer that was not begun")
        for start in range(0, len(results), RESULTS_PER_TRANSACTION):
            block = results[start : start + RESULTS_PER_TRANSACTION]
            with connect_app_state(self.path) as con, con:
                self._store(con, block)
                con.execute("UPDATE benchmark_run SET n_results = ? WHERE run_id = ?", (self.count, self.run_id))

    def sink(
        self, then: Callable[[list[CohortEvalResult]], None] | None = None
    ) -> Callable[[list[CohortEvalResult]], None]:
        """A harness sink (``run_methods(sink=...)``) storing each chunk, then handing it to ``then``."""

        def store(results: list[CohortEvalResult]) -> None:
            self.add(results)
            if then is not None:
                then(results)

        return store

    def finish(
        self,
        report: BenchmarkReport,
        finished_at: str | None = None,
        results: Sequence[CohortEvalResult] = (),
    ) -> str:
        """Mark the run complete with ``report``'s means, skipped lines and records (its ``results`` are
        those added, plus ``results`` given here); return the run id."""
        summary = report.model_copy(update={"results": []})
        means = json.dumps(report_means(report))
        with connect_app_state(self.path) as con, con:
            if not self._begun:
                self._insert(con, "", 0, "{}", _EMPTY_REPORT, STATUS_RUNNING)
                self._begun = True
            self._store(con, list(results))
            con.execute(
                "UPDATE benchmark_run SET finished_at = ?, n_results = ?, means = ?, report = ?, status = ? "
                "WHERE run_id = ?",
                (finished_at or now_iso(), self.count, means, summary.model_dump_json(), STATUS_COMPLETE, self.run_id),
            )
        return self.run_id


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
        "status": row["status"],
    }


_SUMMARY_COLUMNS = (
    "run_id, label, started_at, finished_at, library_id, vocabulary_release, "
    "vocabulary_build_id, parameters, n_results, means, status"
)


def list_benchmark_runs(limit: int = 100, path: Path | None = None) -> list[BenchmarkRunSummary]:
    """Saved runs, newest first (an unfinished run, ``status`` 'running', by when it started)."""
    with connect_app_state(path) as con:
        rows = con.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM benchmark_run "
            "ORDER BY CASE WHEN finished_at = '' THEN started_at ELSE finished_at END DESC, rowid DESC LIMIT ?",
            [limit],
        ).fetchall()
    return [BenchmarkRunSummary(**_summary(row)) for row in rows]


def latest_benchmark_run(path: Path | None = None) -> BenchmarkRunSummary | None:
    runs = list_benchmark_runs(limit=1, path=path)
    return runs[0] if runs else None


def _unfinished(row: sqlite3.Row) -> UnfinishedRunError:
    return UnfinishedRunError(
        f"saved run {row['run_id']!r} did not finish: {row['n_results']} result(s) were stored before it stopped "
        "(or it is still running); it is not opened as a report. Run the benchmark again, or delete this run"
    )


def load_benchmark_run(run_id: str, path: Path | None = None, partial: bool = False) -> SavedBenchmarkRun:
    """One saved run with its full report; ``AppStateError`` if there is none by that id.

    Reads both forms: a run saved as one report document (before reports were streamed) and one saved
    as rows. A run that never finished raises :class:`UnfinishedRunError`, unless ``partial``: then it
    comes back with the results stored so far, ``status`` 'running' and no means."""
    with connect_app_state(path) as con:
        rows = con.execute(
            f"SELECT {_SUMMARY_COLUMNS}, library_path, report, layout FROM benchmark_run WHERE run_id = ?",
            [run_id],
        ).fetchall()
        if not rows:
            raise AppStateError(f"no saved benchmark run with id {run_id!r}: pick one from the list")
        row = rows[0]
        if row["status"] != STATUS_COMPLETE and not partial:
            raise _unfinished(row)
        report = _read_report(row["report"], run_id)
        if row["layout"] == LAYOUT_ROWS:
            results = [
                _read_result(text, run_id)
                for (text,) in con.execute(
                    "SELECT result FROM benchmark_result WHERE run_id = ? ORDER BY seq", [run_id]
                )
            ]
            report = report.model_copy(update={"results": results})
    summary = _summary(row)
    summary["n_results"] = len(report.results) if row["status"] != STATUS_COMPLETE else summary["n_results"]
    return SavedBenchmarkRun(**summary, library_path=row["library_path"], report=report)


def _read_report(text: str, run_id: str) -> BenchmarkReport:
    try:
        return BenchmarkReport.model_validate_json(text)
    except ValueError as error:
        raise AppStateError(f"saved run {run_id!r} has an unreadable report ({str(error).splitlines()[0]})") from None


def _read_result(text: str, run_id: str) -> CohortEvalResult:
    try:
        return CohortEvalResult.model_validate_json(text)
    except ValueError as error:
        raise AppStateError(f"saved run {run_id!r} has an unreadable result ({str(error).splitlines()[0]})") from None


def _complete_layout(con: sqlite3.Connection, run_id: str) -> str:
    """How a saved run is stored (``LAYOUT_ROWS`` or one document); ``AppStateError`` when there is no such run,
    ``UnfinishedRunError`` when it never finished."""
    rows = con.execute(
        "SELECT layout, status, n_results, run_id FROM benchmark_run WHERE run_id = ?", [run_id]
    ).fetchall()
    if not rows:
        raise AppStateError(f"no saved benchmark run with id {run_id!r}: pick one from the list")
    if rows[0]["status"] != STATUS_COMPLETE:
        raise _unfinished(rows[0])
    return str(rows[0]["layout"])


def saved_methods(run_id: str, path: Path | None = None) -> list[str]:
    """The methods with results in a saved (complete) run, in report order, without reading the results."""
    with connect_app_state(path) as con:
        if _complete_layout(con, run_id) == LAYOUT_ROWS:
            found = con.execute(
                "SELECT method FROM benchmark_result WHERE run_id = ? GROUP BY method ORDER BY MIN(seq)", [run_id]
            ).fetchall()
            return [method for (method,) in found]
    return list(dict.fromkeys(r.method for r in load_benchmark_run(run_id, path).report.results))


def iter_saved_results(run_id: str, method: str | None = None, path: Path | None = None) -> Iterator[CohortEvalResult]:
    """A saved (complete) run's results in report order, ``method``'s only when given: read row by row
    from a run saved as rows (never all at once), from the document of one saved before."""
    with connect_app_state(path) as con:
        layout = _complete_layout(con, run_id)
    if layout != LAYOUT_ROWS:
        for result in load_benchmark_run(run_id, path).report.results:
            if method is None or result.method == method:
                yield result
        return
    query = "SELECT result FROM benchmark_result WHERE run_id = ?" + (" AND method = ?" if method is not None else "")
    with connect_app_state(path) as con:
        cursor = con.execute(query + " ORDER BY seq", [run_id, *([method] if method is not None else [])])
        while True:
            batch = cursor.fetchmany(256)
            if not batch:
                return
            for (text,) in batch:
                yield _read_result(text, run_id)


def rename_benchmark_run(run_id: str, label: str, path: Path | None = None) -> None:
    with connect_app_state(path) as con, con:
        changed = con.execute("UPDATE benchmark_run SET label = ? WHERE run_id = ?", [label, run_id]).rowcount
    if not changed:
        raise AppStateError(f"no saved benchmark run with id {run_id!r}")


def delete_benchmark_run(run_id: str, path: Path | None = None) -> None:
    with connect_app_state(path) as con, con:
        con.execute("DELETE FROM benchmark_result WHERE run_id = ?", [run_id])
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
