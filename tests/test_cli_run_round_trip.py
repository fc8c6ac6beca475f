"""``run export`` then ``run import``: the same run, codes, ranks, scores and provenance, in CSV and JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.config import libraries_dir
from phenoforge.engine.curated import load_library
from phenoforge.engine.db import connect
from phenoforge.engine.expansion import get_hierarchy
from phenoforge.eval.qrels import load_qrels
from phenoforge.eval.runs import Run, read_run
from tests.test_cli import fixture_vocabulary, run, write_fixture_library

__all__ = ["fixture_vocabulary"]  # the autouse fixture: the fixture vocabulary where the CLI looks

ORIGINAL = (
    "cohort_id,code,rank,score,provenance\n"
    "dm2,E11.9,2,0.30000000000000004,from my model; second\n"
    "dm2,E11.65,5,-1.25,\n"
    "hf,I50.9,,,\n"
)


def _read(path: Path, name: str) -> Run:
    library = load_library(libraries_dir() / "cli-lib")
    con = connect()
    try:
        return read_run(path, load_qrels(con, library.path), get_hierarchy(con), name=name)
    finally:
        con.close()


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_run_export_gives_back_the_imported_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str) -> None:
    write_fixture_library(libraries_dir() / "cli-lib")
    file = tmp_path / "mine.csv"
    file.write_text(ORIGINAL, encoding="utf-8")
    code, _out, err = run(capsys, "run", "import", str(file), "--library", "cli-lib", "--compare", "bm25", "--quiet")
    assert code == 0, err
    (saved,) = app_state.list_benchmark_runs()
    exported = tmp_path / f"again.{fmt}"
    code, _out, err = run(
        capsys, "run", "export", saved.run_id, "--method", "mine", "--format", fmt, "-o", str(exported)
    )
    assert code == 0, err
    original = _read(file, "mine")
    assert _read(exported, "mine").cohorts == original.cohorts
    assert [(e.rank, e.score) for e in original.cohorts["dm2"]] == [(2, 0.30000000000000004), (5, -1.25)]
