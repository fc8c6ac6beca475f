"""CLI errors name the real cause: a full disk is a full disk, a corrupt index is corrupt, a device is not a file.

In-process ``phenoforge.cli.main`` on the fixture vocabulary (the helpers of ``tests/test_cli.py``).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections import namedtuple
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.config import dense_index_dir, libraries_dir
from phenoforge.eval import runs
from tests.test_cli import fixture_vocabulary, run, write_fixture_library  # noqa: F401  # the autouse fixture

pytestmark = pytest.mark.usefixtures("fixture_vocabulary")

_Usage = namedtuple("_Usage", "total used free")
RUN_CSV = "cohort_id,code,rank\ndm2,E11.9,1\nhf,I50.9,1\n"


@pytest.fixture()
def library() -> Path:
    return write_fixture_library(libraries_dir() / "cli-lib")


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    run_file = tmp_path / "mine.csv"
    run_file.write_text(RUN_CSV, encoding="utf-8")
    return {
        "run import": ["run", "import", str(run_file), "--library", "cli-lib", "--compare", "bm25", "--quiet"],
        "run export": ["run", "export", "0123456789ab"],
        "assemble": ["assemble", "--resume", "0123456789ab"],
    }


def _sqlite_fails(monkeypatch: pytest.MonkeyPatch, message: str) -> None:
    """Every app-state statement fails as SQLite fails on a full disk (it cannot grow its WAL index)."""

    def fail(con: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(app_state, "_use_wal", fail)


@pytest.mark.parametrize("command", ["run import", "run export", "assemble"])
@pytest.mark.parametrize("message", ["disk I/O error", "database or disk is full"])
def test_a_full_disk_is_reported_as_a_full_disk(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    library: Path,
    tmp_path: Path,
    command: str,
    message: str,
) -> None:
    argv = _commands(tmp_path)[command]
    _sqlite_fails(monkeypatch, message)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: _Usage(10**9, 10**9, 0))
    code, _out, err = run(capsys, *argv)
    assert code != 0
    assert "disk full" in err and "intact" in err, err
    assert "move it aside" not in err and "unreadable" not in err, err


def test_an_io_error_with_space_left_does_not_blame_the_database(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _sqlite_fails(monkeypatch, "disk I/O error")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: _Usage(10**12, 10**9, 10**11))
    code, _out, err = run(capsys, *_commands(tmp_path)["run export"])
    assert code != 0
    assert "I/O error" in err and "move it aside" not in err, err


def test_a_damaged_database_is_still_called_unreadable(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    app_state.app_state_db_path().parent.mkdir(parents=True, exist_ok=True)
    app_state.app_state_db_path().write_bytes(b"this is not a database" * 100)
    code, _out, err = run(capsys, *_commands(tmp_path)["run export"])
    assert code != 0
    assert "unreadable" in err and "move it aside" in err, err


def test_search_dense_on_a_corrupt_index_says_corrupt(capsys: pytest.CaptureFixture[str]) -> None:
    dense_index_dir().mkdir(parents=True)
    (dense_index_dir() / "manifest.json").write_text('{"cut off', encoding="utf-8")
    code, out, err = run(capsys, "search", "heart failure", "--method", "dense")
    assert code == 0
    assert "not built" not in out + err, out + err
    assert "corrupt" in out and "corrupt" in err, out + err


def test_run_import_refuses_a_device(capsys: pytest.CaptureFixture[str], library: Path) -> None:
    code, _out, err = run(capsys, "run", "import", "/dev/zero", "--library", "cli-lib", "--quiet")
    assert code != 0
    assert "not a regular file" in err, err


def test_run_import_refuses_a_file_over_the_size_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, library: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(runs, "MAX_RUN_FILE_BYTES", 64)
    big = tmp_path / "big.csv"
    big.write_text(RUN_CSV + "dm2,E11.21,2\n" * 20, encoding="utf-8")
    code, _out, err = run(capsys, "run", "import", str(big), "--library", "cli-lib", "--quiet")
    assert code != 0
    assert "larger than" in err and "64" in err, err
    assert app_state.list_benchmark_runs() == []
