"""Bring your own run: ``run import`` / ``run export`` and the ``methods`` listing, on the fixture vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phenoforge import app_state
from phenoforge.config import libraries_dir
from tests.test_cli import fixture_vocabulary, run, write_fixture_library  # noqa: F401  # the autouse fixture

pytestmark = pytest.mark.usefixtures("fixture_vocabulary")


@pytest.fixture()
def library() -> Path:
    return write_fixture_library(libraries_dir() / "cli-lib")


def test_run_import_scores_saves_and_compares(
    capsys: pytest.CaptureFixture[str], library: Path, tmp_path: Path
) -> None:
    file = tmp_path / "llm.csv"
    file.write_text("cohort_id,code,rank\ndm2,E11.9,1\ndm2,e1121,2\nhf,I50.9,1\n", encoding="utf-8")
    code, out, err = run(capsys, "run", "import", str(file), "--library", "cli-lib", "--compare", "bm25", "--quiet")
    assert code == 0, err
    assert "imported run 'llm' (" in out and "2 of 3 cohorts of cli-lib" in out
    # the cohort without rows is left out, not scored as an empty list (the note said it was)
    assert "note: 1 cohort(s) of the library have no rows in this run: it is scored, and compared, on the 2" in out
    assert "bm25 vs llm: mean diff" in out  # the paired test against the built-in
    (saved,) = app_state.list_benchmark_runs()
    assert saved.label == "imported run llm" and saved.parameters.methods == ["bm25", "llm"]
    report = app_state.load_benchmark_run(saved.run_id).report
    mine = {r.cohort_id: r for r in report.results if r.method == "llm"}
    assert mine["dm2"].predicted_codes == ["E11.9", "E11.21"]
    assert set(mine) == {"dm2", "hf"}
    assert report.methods["llm"].source == str(file)
    # export in the same format, and re-import it unchanged
    code, exported, _ = run(capsys, "run", "export", saved.run_id, "--method", "llm")
    assert code == 0
    assert exported.splitlines()[:3] == [
        "cohort_id,code,rank,score,provenance",
        "dm2,E11.9,1,,imported: llm",
        "dm2,E11.21,2,,imported: llm",
    ]


@pytest.mark.parametrize(
    ("file_name", "extra"),
    [("hybrid.csv", []), ("mine.csv", ["--name", "bm25", "--compare", "bm25"])],
    ids=["file-named-like-the-default-comparison", "name-given"],
)
def test_a_run_named_like_a_compared_method_is_refused(
    capsys: pytest.CaptureFixture[str], library: Path, tmp_path: Path, file_name: str, extra: list[str]
) -> None:
    """``hybrid.csv`` compared with ``hybrid`` (the default) was scored as one method: both lists merged."""
    file = tmp_path / file_name
    file.write_text("cohort_id,code\ndm2,E11.9\n", encoding="utf-8")
    code, out, err = run(capsys, "run", "import", str(file), "--library", "cli-lib", "--quiet", *extra)
    assert code == 2, out
    name = "bm25" if extra else "hybrid"
    assert f"the run is named {name!r}, like a method it is compared with; give it another name" in err
    assert app_state.list_benchmark_runs() == []
    code, out, err = run(
        capsys, "run", "import", str(file), "--library", "cli-lib", "--quiet", *extra, "--name", "mine"
    )
    assert code == 0, err
    (saved,) = app_state.list_benchmark_runs()
    report = app_state.load_benchmark_run(saved.run_id).report
    assert [r.method for r in report.results].count("mine") == 1 and len(report.results) == 2


def test_run_import_reports_every_problem_with_its_line_and_saves_nothing(
    capsys: pytest.CaptureFixture[str], library: Path, tmp_path: Path
) -> None:
    file = tmp_path / "bad.csv"
    file.write_text(
        "cohort_id,code,rank\ndm2,E11.9,1\nnope,E11.9,1\ndm2,XX99,2\ndm2,E11.21,first\n,E11.9,1\n", encoding="utf-8"
    )
    code, _out, err = run(capsys, "run", "import", str(file), "--library", "cli-lib", "--quiet")
    assert code == 2
    assert "4 problem(s), nothing imported" in err
    assert "line 3: cohort 'nope' is not a scorable cohort of library 'cli-lib'" in err
    assert "line 4: code 'XX99' is not in the loaded vocabulary" in err
    assert "line 5: rank 'first' is not a whole number" in err
    assert "line 6: empty cohort_id" in err
    assert app_state.list_benchmark_runs() == []


def test_run_import_json_and_missing_columns(capsys: pytest.CaptureFixture[str], library: Path, tmp_path: Path) -> None:
    good = tmp_path / "run.json"
    good.write_text(json.dumps({"name": "colleague", "cohorts": {"asthma": ["J45.909", {"code": "J45.20"}]}}))
    code, out, err = run(capsys, "run", "import", str(good), "--library", "cli-lib", "--compare", "--quiet")
    assert code == 0, err
    assert "imported run 'colleague'" in out
    bad = tmp_path / "bad.csv"
    bad.write_text("cohort,icd\ndm2,E11.9\n")
    code, _out, err = run(capsys, "run", "import", str(bad), "--library", "cli-lib", "--quiet")
    assert code == 2 and "missing column(s) cohort_id, code" in err
    code, _out, err = run(capsys, "run", "import", str(tmp_path / "none.csv"), "--library", "cli-lib")
    assert code == 2 and "no such file" in err


def test_cohort_ids_with_colons_are_valid_run_ids(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, library: Path
) -> None:
    from tests.fixture_library import write_icd_library

    write_icd_library(libraries_dir() / "phe", {"phecode:250.2": ("Type 2 diabetes", ["E11"], True)}, "phe")
    file = tmp_path / "run.csv"
    file.write_text("cohort_id,code\nphecode:250.2,E11.9\n")
    code, out, err = run(capsys, "run", "import", str(file), "--library", "phe", "--compare", "--quiet")
    assert code == 0, err
    assert "1 of 1 cohorts of phe" in out


def test_methods_lists_builtins_with_their_needs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "methods")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("bm25") and any(line.startswith("dense") and "needs: dense" in line for line in lines)


def test_benchmark_rejects_an_unknown_method_before_any_work(capsys: pytest.CaptureFixture[str], library: Path) -> None:
    code, _out, err = run(capsys, "benchmark", "--methods", "bm25", "tfidf", "--quiet")
    assert code == 2 and "unknown method 'tfidf'" in err


def test_benchmark_defaults_to_bundled_libraries(capsys: pytest.CaptureFixture[str], library: Path) -> None:
    # only an imported-style fixture library is installed: nothing bundled to run
    code, _out, err = run(capsys, "benchmark", "--methods", "bm25", "--quiet")
    assert code == 2 and "no bundled library is built" in err and "--library: cli-lib" in err
    code, out, err = run(capsys, "benchmark", "--library", "cli-lib", "--methods", "bm25", "hybrid", "--quiet")
    assert code == 0, err
    assert "Hierarchical score ↑" in out and "Over-inclusion ↓" in out
    assert "! hybrid is degraded" in out


def test_exported_runs_neutralise_formula_cells() -> None:
    from phenoforge.eval.runs import Run, RunEntry, run_to_csv

    text = run_to_csv(Run(name="x", cohorts={"=HYPERLINK(1)": [RunEntry(code="E11.9")]}))
    assert text.splitlines()[1] == "'=HYPERLINK(1),E11.9,,,[]"  # unranked stays unranked, no provenance is []


def test_run_export_to_a_folder_or_a_missing_folder_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], library: Path, tmp_path: Path
) -> None:
    file = tmp_path / "llm.csv"
    file.write_text("cohort_id,code\ndm2,E11.9\n", encoding="utf-8")
    assert run(capsys, "run", "import", str(file), "--library", "cli-lib", "--compare", "bm25", "--quiet")[0] == 0
    (saved,) = app_state.list_benchmark_runs()
    export = ["run", "export", saved.run_id, "--method", "llm"]
    code, _out, err = run(capsys, *export, "-o", str(tmp_path))  # was: IsADirectoryError, a traceback
    assert (
        code == 2 and err == f"error: --output {tmp_path} is a folder; give a file name, e.g. {tmp_path / 'llm.csv'}\n"
    )
    missing = tmp_path / "nowhere" / "llm.csv"
    code, _out, err = run(capsys, *export, "-o", str(missing))  # was: FileNotFoundError, a traceback
    assert code == 2 and f"the folder {missing.parent} does not exist" in err
    code, out, err = run(capsys, *export, "-o", str(tmp_path / "llm-out.csv"))
    assert code == 0 and (tmp_path / "llm-out.csv").read_text(encoding="utf-8").startswith("cohort_id,code,rank")
