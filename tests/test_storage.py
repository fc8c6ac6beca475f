"""Full disks and killed writers (issue 12, items 10 and 14): clear errors, old files kept, leftovers removed."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from phenoforge import app_state
from phenoforge.app_state import AppStateError, BenchmarkParameters, list_benchmark_runs, save_benchmark_run
from phenoforge.cli import main
from phenoforge.config import app_state_db_path, libraries_dir, vocab_db_path
from phenoforge.engine import vocab_build
from phenoforge.engine.curated import load_library
from phenoforge.errors import DiskFullError
from phenoforge.eval.models import BenchmarkReport, CohortEvalResult
from phenoforge.libraries import import_library_csv
from phenoforge.storage import is_disk_full, remove_stale_temporaries, write_atomically
from tests.fixture_vocab import fixture_rows

GOOD_CSV = "cohort_id,cohort_name,code\nhf,Heart failure,I50.9\n"


def dead_pid() -> int:
    """The id of a process that has exited (and was reaped), so nothing runs under it now."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def no_space(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


# --- item 10: a full disk ------------------------------------------------------------------------------


def test_import_on_a_full_disk_says_disk_full_and_keeps_the_old_library(
    fixture_con: duckdb.DuckDBPyConnection,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "mine.csv"
    source.write_text(GOOD_CSV, encoding="utf-8")
    dest = libraries_dir() / "mine"
    import_library_csv(fixture_con, source, dest, library_id="mine")
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    source.write_text(GOOD_CSV + "asthma,Asthma,J45.909\n", encoding="utf-8")
    monkeypatch.setattr(Path, "write_text", no_space)
    with pytest.raises(DiskFullError, match=r"disk full while writing a cohort library .* is kept as it was"):
        import_library_csv(fixture_con, source, dest, library_id="mine", overwrite=True)
    assert {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in dest.parent.iterdir() if not p.name.startswith(".libraries")) == ["mine"]
    # the command line says it in one line
    import phenoforge.engine.db as db

    monkeypatch.setattr(db, "connect", lambda *a, **k: fixture_con.cursor())
    code = main(["library", "import", str(source), "--dest", str(dest), "--id", "mine", "--force"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: disk full") and "Traceback" not in err
    assert load_library(dest).cohort_ids == ["hf"]


def test_vocabulary_build_on_a_full_disk_keeps_the_old_database(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = fixture_rows()
    vocab_build.write_vocabulary(vocab_db_path(), rows)
    before = vocab_db_path().read_bytes()

    def full(*_args: object) -> None:
        raise duckdb.IOException('Could not write file "x": No space left on device')

    monkeypatch.setattr(vocab_build, "_insert", full)
    with pytest.raises(DiskFullError, match="disk full while writing the vocabulary database.*previous vocabulary"):
        vocab_build.write_vocabulary(vocab_db_path(), rows)
    assert vocab_db_path().read_bytes() == before
    assert [p.name for p in vocab_db_path().parent.iterdir() if ".tmp" in p.name] == []


def _report() -> BenchmarkReport:
    result = CohortEvalResult(
        cohort_id="hf",
        cohort_name="Heart failure " * 4000,
        method="bm25",
        predicted_codes=["I50.9"],
        ground_truth_codes=["I50.9"],
        coverage=1.0,
        over_inclusion_penalty=0.0,
        hierarchical_score=1.0,
    )
    return BenchmarkReport(
        results=[result],
        mean_coverage_by_method={"bm25": 1.0},
        mean_over_inclusion_by_method={"bm25": 0.0},
        mean_hierarchical_score_by_method={"bm25": 1.0},
    )


def test_app_state_on_a_full_disk_does_not_blame_the_database(monkeypatch: pytest.MonkeyPatch) -> None:
    parameters = BenchmarkParameters(methods=["bm25"], k=5, dense_weight=0.5, cohort_ids=["hf"])
    save_benchmark_run(_report(), parameters, "lib", "/x", "r", "b", started_at="t0")
    real_connect = sqlite3.connect

    def nearly_full(*args: object, **kwargs: object) -> sqlite3.Connection:
        con = real_connect(*args, **kwargs)  # type: ignore[arg-type]
        pages = con.execute("PRAGMA page_count").fetchall()[0][0]
        con.execute(f"PRAGMA max_page_count = {pages + 1}")  # SQLite's own SQLITE_FULL, as on a full disk
        return con

    monkeypatch.setattr(app_state.sqlite3, "connect", nearly_full)
    with pytest.raises(AppStateError) as caught:
        save_benchmark_run(_report(), parameters, "lib", "/x", "r", "b", started_at="t1")
    message = str(caught.value)
    assert message.startswith("disk full") and "intact" in message and "move it aside" not in message
    monkeypatch.setattr(app_state.sqlite3, "connect", real_connect)
    assert len(list_benchmark_runs()) == 1 and app_state_db_path().exists()


@pytest.mark.parametrize(
    ("error", "full"),
    [
        (OSError(errno.ENOSPC, "x"), True),
        (OSError(errno.EDQUOT, "x"), True),
        (OSError(errno.EACCES, "x"), False),
        (sqlite3.OperationalError("database or disk is full"), True),
        (sqlite3.DatabaseError("malformed"), False),
    ],
)
def test_is_disk_full(error: BaseException, full: bool) -> None:
    assert is_disk_full(error) is full


# --- item 14: what killed writers leave behind ---------------------------------------------------------


def test_import_removes_temporaries_of_dead_processes_only(
    fixture_con: duckdb.DuckDBPyConnection, tmp_path: Path
) -> None:
    root = libraries_dir()
    stale_dir = root / f".other.{dead_pid()}.0123abcd.tmp"
    (stale_dir / "cohorts").mkdir(parents=True)
    (stale_dir / "cohorts" / "big.json").write_bytes(b"x" * 100_000)
    stale_old = root / f".mine.{dead_pid()}.89abcdef.old"
    stale_old.mkdir()
    live = root / f".other.{os.getpid()}.fedcba98.tmp"  # a write in progress in a running process
    live.mkdir()
    unrelated = root / ".notes.tmp"
    unrelated.write_text("not ours")
    source = tmp_path / "mine.csv"
    source.write_text(GOOD_CSV, encoding="utf-8")
    import_library_csv(fixture_con, source, library_id="mine")
    assert not stale_dir.exists() and not stale_old.exists()
    assert live.exists() and unrelated.exists() and (root / "mine" / "manifest.json").is_file()


def test_vocabulary_build_removes_a_dead_builds_temporary_database() -> None:
    folder = vocab_db_path().parent
    pid = dead_pid()
    leftovers = [folder / f".vocab.duckdb.{pid}.0a1b2c3d.tmp", folder / f".vocab.duckdb.{pid}.0a1b2c3d.tmp.wal"]
    for leftover in leftovers:
        leftover.write_bytes(b"\x00" * 50_000)
    vocab_build.write_vocabulary(vocab_db_path(), fixture_rows())
    assert [leftover.exists() for leftover in leftovers] == [False, False]
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".vocab.duckdb")) == []


def test_remove_stale_temporaries_on_a_missing_folder(tmp_path: Path) -> None:
    assert remove_stale_temporaries(tmp_path / "nope") == []


def test_write_atomically_keeps_the_old_file_when_the_writer_fails_and_clears_dead_writers(tmp_path: Path) -> None:
    target = tmp_path / "models" / "table.npz"
    write_atomically(target, lambda handle: handle.write(b"old"))
    left_by_a_dead_writer = target.with_name(f".{target.name}.{dead_pid()}.0123abcd.tmp")
    left_by_a_dead_writer.write_bytes(b"half")

    def fails_halfway(handle) -> None:  # noqa: ANN001
        handle.write(b"ne")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        write_atomically(target, fails_halfway)
    assert target.read_bytes() == b"old"
    assert sorted(path.name for path in target.parent.iterdir()) == ["table.npz"]  # no temporary of ours or theirs
    write_atomically(target, lambda handle: handle.write(b"new"))
    assert target.read_bytes() == b"new"
