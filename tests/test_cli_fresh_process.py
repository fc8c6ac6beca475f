"""Every CLI command in a fresh process, as a user types it: help, a real small run, and one-line errors.

In-process CLI tests share imports and caches with every other test; a lazy import that was never
made on a path (cold start) only fails in a new interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_library import write_icd_library
from tests.setbuild.conftest import OTHER_COHORTS, TRAIN_COHORTS

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [
    ["build"],
    ["search"],
    ["lookup"],
    ["benchmark"],
    ["sweep"],
    ["methods"],
    ["run"],
    ["run", "import"],
    ["run", "export"],
    ["library"],
    ["library", "import"],
    ["library", "list"],
    ["library", "fetch-ohdsi"],
    ["assemble"],
    ["decompose-eval"],
    ["agreement"],
]
ELIX_ID = "elixhauser-2026-fixture"


@pytest.fixture(scope="module")
def data(fixture_db_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with the fixture vocabulary and two development libraries (no dense index)."""
    root = tmp_path_factory.mktemp("cold") / "data"
    root.mkdir()
    shutil.copyfile(fixture_db_path, root / "vocab.duckdb")
    write_icd_library(root / "libraries" / "hcc", TRAIN_COHORTS, library_id="cms-hcc-v28-fixture", group="cms-hcc")
    elix = {**OTHER_COHORTS, "dm2": TRAIN_COHORTS["dm2"]}
    write_icd_library(root / "libraries" / "elix", elix, library_id=ELIX_ID, group="elixhauser")
    return root


def _cli(data: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PHENOFORGE_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "phenoforge", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )


def _message_lines(stderr: str) -> list[str]:
    """What stderr says, less progress bars (they redraw with carriage returns) and notes."""
    lines = [line.split("\r")[-1].strip() for line in stderr.splitlines()]
    return [line for line in lines if line and "it/s]" not in line and not line.startswith("note:")]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_prints_its_help_in_a_fresh_process(data: Path, command: list[str]) -> None:
    result = _cli(data, *command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m phenoforge " + " ".join(command))
    assert "Traceback" not in result.stderr


def test_a_set_builder_search_runs_cold_and_names_the_list_it_transferred(data: Path) -> None:
    result = _cli(data, "search", "heart failure", "--method", "curated_transfer")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("== curated_transfer:")
    assert "listed by curated cohort" in result.stdout and "Traceback" not in result.stderr


def test_a_one_cohort_benchmark_runs_cold(data: Path) -> None:
    result = _cli(
        data, "benchmark", "--library", ELIX_ID, "--cohorts", "x-hf", "--methods", "curated_transfer", "bm25",
        "--no-dense", "--json", "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)[ELIX_ID]
    assert {r["method"] for r in report["results"]} == {"curated_transfer", "bm25"}
    assert {r["cohort_id"] for r in report["results"]} == {"x-hf"}
    assert report["methods"]["curated_transfer"]["trained_on"] == ["cms-hcc-v28-fixture"]


def test_assemble_with_a_set_builder_generator_runs_cold(data: Path) -> None:
    result = _cli(
        data,
        "assemble",
        "adults with heart failure",
        "--generator",
        "curated_transfer",
        "--no-dense",
        "--yes",
        "--reviewer",
        "ann",
    )
    assert result.returncode == 0, result.stderr
    assert "concept set:" in result.stdout and "saved" in result.stdout


def test_a_library_without_cohorts_benchmarks_to_an_empty_table_not_a_traceback(data: Path) -> None:
    """The table's column width was ``max(20, *widths)``: with no method scored, ``max(20)`` raised."""
    write_icd_library(data / "libraries" / "empty", {}, library_id="empty-lib")
    try:
        result = _cli(data, "benchmark", "--library", "empty-lib", "--methods", "bm25", "--no-dense")
    finally:
        shutil.rmtree(data / "libraries" / "empty")
    assert result.returncode == 0, result.stderr
    assert "(empty-lib): 0 cohorts" in result.stdout and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["benchmark", "--library", "nope", "--no-dense"], "no library 'nope'"),
        (["benchmark", "--library", ELIX_ID, "--cohorts", "nope", "--no-dense"], "cohort(s) 'nope'"),
        (["benchmark", "--library", ELIX_ID, "--methods", "nomodule:fn", "--no-dense"], "cannot import module"),
        (["assemble", "--resume", "nosuch"], "no assembly session 'nosuch'"),
        (["assemble", "", "--yes", "--no-dense"], "give a description"),
        (["lookup", "Q99.999"], "is not an ICD-10-CM code"),
        (["run", "export", "nosuch"], "no saved benchmark run"),
        (["library", "import", "/nonexistent/lib.csv"], "no such file"),
    ],
)
def test_a_user_error_is_one_line_without_a_traceback(data: Path, argv: list[str], words: str) -> None:
    result = _cli(data, *argv)
    assert result.returncode != 0
    lines = _message_lines(result.stderr)
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert "Traceback" not in result.stderr
